#include "engine/conv_algo.h"

namespace cnnrun {

const char* conv_algo_name(ConvAlgo a) {
  switch (a) {
    case ConvAlgo::kImplicit:
      return "implicit";
    case ConvAlgo::kIm2col:
      return "im2col";
    case ConvAlgo::kCudnn:
      return "cudnn";
    case ConvAlgo::kDepthwise:
      return "depthwise";
    case ConvAlgo::kCutlass:
      return "cutlass";
    case ConvAlgo::kStem:
      return "stem";
    case ConvAlgo::kGemm:
      return "gemm";
    case ConvAlgo::kCudnn3xTf32:
      return "cudnn-3xtf32";
    case ConvAlgo::kConv1x1:
      return "conv1x1";
    case ConvAlgo::kAuto:
      break;
  }
  return "auto";
}

std::optional<ConvAlgo> parse_conv_algo(const std::string& s) {
  for (ConvAlgo a :
       {ConvAlgo::kAuto, ConvAlgo::kImplicit, ConvAlgo::kIm2col, ConvAlgo::kCudnn, ConvAlgo::kDepthwise,
        ConvAlgo::kCutlass, ConvAlgo::kStem, ConvAlgo::kGemm, ConvAlgo::kCudnn3xTf32, ConvAlgo::kConv1x1})
    if (s == conv_algo_name(a)) return a;
  return std::nullopt;
}

}  // namespace cnnrun
