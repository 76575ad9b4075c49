// The convolution algorithms of the GPU executor, named once: the netdef's `algo:`, the CLI's
// --conv-algo and RunOptions::conv_algo all parse and print through here.
#pragma once

#include <optional>
#include <string>

namespace cnnrun {

enum class ConvAlgo {
  kAuto,         // the executor's choice (auto: timed on the first block)
  kImplicit,     // our fused implicit-GEMM kernel (engine/gpu/implicit/)
  kIm2col,       // column matrix + cuBLASLt GEMM
  kCudnn,        // cuDNN's own search
  kDepthwise,    // our depthwise kernel (groups == channels)
  kCutlass,      // CUTLASS's implicit GEMM, 3xTF32 (FP32 channels last; engine/gpu/conv2d_cutlass.h)
  kStem,         // our tensor-core kernel for 1 to 4 input channels (16-bit channels last; conv2d_stem.h)
  kGemm,         // a 1x1 conv as one cuBLASLt GEMM, channels last (engine/gpu/conv2d_gemm.h)
  kCudnn3xTf32,  // cuDNN's TF32 tensor cores on split FP32 operands (engine/gpu/conv2d_cudnn_3xtf32.h)
  kConv1x1,      // our tensor-core kernel for 1x1 convs of few channels (16-bit NHWC; conv2d_1x1.h)
};

// The algorithms auto times, in the order it tries them.
constexpr ConvAlgo kConvAlgoCandidates[] = {ConvAlgo::kImplicit,  ConvAlgo::kIm2col,      ConvAlgo::kCudnn,
                                            ConvAlgo::kDepthwise, ConvAlgo::kCutlass,     ConvAlgo::kStem,
                                            ConvAlgo::kGemm,      ConvAlgo::kCudnn3xTf32, ConvAlgo::kConv1x1};

// "auto", "implicit", "im2col", "cudnn", "depthwise", "cutlass", "stem", "gemm", "cudnn-3xtf32", "conv1x1".
const char* conv_algo_name(ConvAlgo a);
// The algorithm a name means, or nothing (the caller words the error with kConvAlgoExpected).
std::optional<ConvAlgo> parse_conv_algo(const std::string& s);
// What a name must be, for error messages.
constexpr const char* kConvAlgoExpected =
    "auto, im2col, implicit, cudnn, cudnn-3xtf32, depthwise, cutlass, stem, gemm or conv1x1";

}  // namespace cnnrun
