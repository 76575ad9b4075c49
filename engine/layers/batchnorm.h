// batchnorm: y = (x - running_mean) / sqrt(running_var + eps) * weight + bias per channel,
// PyTorch's BatchNorm2d/1d at inference with its state_dict names. When it directly follows a
// conv or fc whose output nothing else reads, the loader folds it into that layer's weights
// and marks it `folded` (it then runs as identity); otherwise it runs as its own layer.
#pragma once

#include "engine/layer.h"

namespace cnnrun {

struct BatchnormParams {
  double eps = 1e-5;
};

class BatchnormLayer : public Layer {
 public:
  BatchnormParams p;
  void parse(ParamReader& r) override;
  Shape infer_shape(const std::vector<Shape>& in) const override { return in[0]; }
  std::vector<WeightSpec> weight_specs(const std::vector<Shape>& in) const override;
  unsigned caps() const override { return kCapWeights | kCapFoldable; }
  // Per-channel scale and shift equivalent to the four tensors.
  void affine(std::vector<float>& scale, std::vector<float>& shift) const;
};

}  // namespace cnnrun
