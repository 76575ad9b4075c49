// The arithmetic a run may use for its convolutions and fully-connected layers (--precision).
// FP32 is the default and the reference's; the others let the GPU round the operands of each
// product to a shorter format (TF32: 10 mantissa bits, FP16: 10 bits and a narrow range,
// BF16: 7 bits) and accumulate in FP32, for speed. It is a permission, not an order: a layer
// without a kernel for the asked format computes in FP32 and the report says so.
#pragma once

#include <optional>
#include <string>

namespace cnnrun {

enum class Precision { kFp32, kTf32, kFp16, kBf16 };

// "fp32", "tf32", "fp16", "bf16".
const char* precision_name(Precision p);
// The name's precision, or nothing for anything else (the caller reports the error).
std::optional<Precision> parse_precision(const std::string& s);
// Unit roundoff of the operands' format: 2^-24 for FP32, 2^-11 for TF32 and FP16, 2^-8 for BF16.
double unit_roundoff(Precision p);
// The tolerance fitting FP32 arithmetic: relative to the layer's largest magnitude, summing a
// few thousand products in a different order moves results by ~1e-6; 1e-4 leaves room and
// still catches any indexing error (those are O(1)).
constexpr double kFp32Tolerance = 1e-4;
// The layer-by-layer validation tolerance (error relative to the layer's largest magnitude) that
// fits the format: kFp32Tolerance for FP32, 16 unit roundoffs otherwise.
double validation_tolerance(Precision p);

}  // namespace cnnrun
