// fc: fully connected, weight [outputs, inputs] with the inputs in the CHW order of the
// incoming tensor (PyTorch's nn.Linear after flatten), optional bias [outputs].
#pragma once

#include "engine/layer.h"

namespace cnnrun {

struct FcParams {
  int64_t outputs = 0;
  bool bias = true;
  int64_t inputs = 0;  // derived: C*H*W of the input
};

class FcLayer : public Layer {
 public:
  FcParams p;
  void parse(ParamReader& r) override;
  Shape infer_shape(const std::vector<Shape>& in) const override;
  std::vector<WeightSpec> weight_specs(const std::vector<Shape>& in) const override;
  unsigned caps() const override { return kCapWeights | kCapFoldTarget; }
  void bind(const std::vector<Shape>& in) override { p.inputs = in[0].size(); }
};

}  // namespace cnnrun
