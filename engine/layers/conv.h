// conv: 2-D convolution, weight [filters, channels / groups, kh, kw], optional bias [filters],
// PyTorch's nn.Conv2d. ConvParams is the one definition of a convolution that the CPU reference
// and every GPU algorithm (im2col, implicit, cudnn, depthwise) read.
//
// groups g splits the channels and the filters into g groups of channels/g and filters/g, and
// filter f sees only the channels of its group f / (filters/g); groups = channels = filters is
// a depthwise convolution. dilation d spreads the kernel's taps d apart, so a kernel k covers
// d*(k-1)+1 input positions.
#pragma once

#include "engine/layer.h"

namespace cnnrun {

struct ConvParams {
  int64_t filters = 0;
  int64_t kernel_h = 0, kernel_w = 0;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
  bool bias = true;
  // Derived at shape inference.
  int64_t in_c = 0, in_h = 0, in_w = 0, out_h = 0, out_w = 0;

  // Channels each filter sees, and filters per group.
  int64_t group_channels() const { return in_c / groups; }
  int64_t group_filters() const { return filters / groups; }
  bool depthwise() const { return groups > 1 && groups == in_c && groups == filters; }
  bool dilated() const { return dilation_h != 1 || dilation_w != 1; }
  // The input extent one window covers: dilation * (kernel - 1) + 1.
  int64_t extent_h() const { return dilation_h * (kernel_h - 1) + 1; }
  int64_t extent_w() const { return dilation_w * (kernel_w - 1) + 1; }
};

class ConvLayer : public Layer {
 public:
  ConvParams p;
  void parse(ParamReader& r) override;
  Shape infer_shape(const std::vector<Shape>& in) const override;
  std::vector<WeightSpec> weight_specs(const std::vector<Shape>& in) const override;
  unsigned caps() const override { return kCapWeights | kCapFoldTarget; }
  void bind(const std::vector<Shape>& in) override;
};

}  // namespace cnnrun
