// conv: 2-D convolution, weight [filters, channels, kh, kw], optional bias [filters].
// ConvParams is the one definition of a convolution that the CPU reference and every GPU
// algorithm (im2col, implicit, cudnn) read.
#pragma once

#include "engine/layer.h"

namespace cnnrun {

struct ConvParams {
  int64_t filters = 0;
  int64_t kernel_h = 0, kernel_w = 0;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  bool bias = true;
  // Derived at shape inference.
  int64_t in_c = 0, in_h = 0, in_w = 0, out_h = 0, out_w = 0;
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
