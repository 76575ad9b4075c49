// relu, tanh, sigmoid: elementwise activations, one class with a kind because every executor
// applies them with one kernel (and fuses them into the producing conv/fc epilogue).
#pragma once

#include <cmath>

#include "engine/layer.h"

namespace cnnrun {

enum class ActKind { kNone, kRelu, kTanh, kSigmoid };

struct ActivationParams {
  ActKind kind = ActKind::kRelu;
};

// The scalar definition, shared by the CPU reference and host-side checks.
inline float activate(ActKind k, float x) {
  switch (k) {
    case ActKind::kRelu:
      return x > 0.f ? x : 0.f;
    case ActKind::kTanh:
      return std::tanh(x);
    case ActKind::kSigmoid:
      return 1.f / (1.f + std::exp(-x));
    case ActKind::kNone:
      break;
  }
  return x;
}

const char* act_name(ActKind k);

class ActivationLayer : public Layer {
 public:
  explicit ActivationLayer(ActKind k) { p.kind = k; }
  ActivationParams p;
  void parse(ParamReader&) override {}
  Shape infer_shape(const std::vector<Shape>& in) const override { return in[0]; }
};

}  // namespace cnnrun
