// Elementwise activations, one class with a kind because every executor applies them with one
// kernel (and fuses them into the producing conv/fc epilogue where it can). PyTorch's names and
// definitions: relu, relu6, leaky_relu (`slope`, default 0.01), hardswish, hardsigmoid, silu,
// gelu (`approximate: none|tanh`), tanh, sigmoid.
#pragma once

#include <algorithm>
#include <cmath>

#include "engine/layer.h"

namespace cnnrun {

enum class ActKind {
  kNone,
  kRelu,
  kTanh,
  kSigmoid,
  kRelu6,
  kLeakyRelu,
  kHardswish,
  kHardsigmoid,
  kSilu,
  kGelu,
  kGeluTanh
};

struct ActivationParams {
  ActKind kind = ActKind::kRelu;
  float slope = 0.01f;  // leaky_relu: the slope for x < 0
};

// The scalar definitions, written as PyTorch's CPU kernels compute them, shared by the CPU
// reference and host-side checks.
inline float activate(ActKind k, float x, float slope = 0.01f) {
  switch (k) {
    case ActKind::kRelu:
      return x > 0.f ? x : 0.f;
    case ActKind::kTanh:
      return std::tanh(x);
    case ActKind::kSigmoid:
      return 1.f / (1.f + std::exp(-x));
    case ActKind::kRelu6:
      return std::min(std::max(x, 0.f), 6.f);
    case ActKind::kLeakyRelu:
      return x > 0.f ? x : x * slope;
    case ActKind::kHardswish:
      return x * std::min(std::max(x + 3.f, 0.f), 6.f) / 6.f;
    case ActKind::kHardsigmoid:
      return std::min(std::max(x + 3.f, 0.f), 6.f) / 6.f;
    case ActKind::kSilu:
      return x / (1.f + std::exp(-x));
    case ActKind::kGelu:  // 0.5 x (1 + erf(x / sqrt 2))
      return 0.5f * x * (1.f + std::erf(x * 0.70710678118654752f));
    case ActKind::kGeluTanh:  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
      return 0.5f * x * (1.f + std::tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
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
  // leaky_relu reads `slope`, gelu `approximate`; the others take no keys.
  void parse(ParamReader& r) override;
  Shape infer_shape(const std::vector<Shape>& in) const override { return in[0]; }
};

}  // namespace cnnrun
