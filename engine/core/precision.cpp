#include "engine/core/precision.h"

namespace cnnrun {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kTf32:
      return "tf32";
    case Precision::kFp16:
      return "fp16";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp32:
      break;
  }
  return "fp32";
}

std::optional<Precision> parse_precision(const std::string& s) {
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16})
    if (s == precision_name(p)) return p;
  return std::nullopt;
}

double unit_roundoff(Precision p) {
  switch (p) {
    case Precision::kTf32:
    case Precision::kFp16:
      return 1.0 / 2048;  // 10 stored mantissa bits
    case Precision::kBf16:
      return 1.0 / 256;  // 7 stored mantissa bits
    case Precision::kFp32:
      break;
  }
  return 1.0 / 16777216;
}

double validation_tolerance(Precision p) {
  return p == Precision::kFp32 ? kFp32Tolerance : 16 * unit_roundoff(p);
}

}  // namespace cnnrun
