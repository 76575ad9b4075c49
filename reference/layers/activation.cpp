// The elementwise activations: the scalar definitions of engine/layers/activation.h (activate(),
// shared with every executor) applied to every element. The ones built on exp and tanh (sigmoid,
// SiLU, tanh, GELU's tanh form) go through Eigen's vectorised exp and tanh on the same formulas
// instead: std::exp and std::tanh do not vectorise, and SiLU alone took more CPU time than all of
// EfficientNet-B0's convolutions (docs/performance.md). Eigen's are within a few units in the
// last place of the scalar ones, and saturate rather than overflow (exp clamps its argument).
#include "engine/layers/activation.h"

#include <Eigen/Core>

#include "reference/cpu_layers.h"

namespace cnnrun::ref {

void forward_activation(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out,
                        Workspace&) {
  const ActivationParams& p = layer_as<ActivationLayer>(l).p;
  const int64_t count = n * l.out_shape.size();
  const float* x = in[0];
  // One loop per kind, so the compiler sees a loop without a branch and vectorises it.
  auto apply = [&](auto kind) {
    const float slope = p.slope;
    for (int64_t i = 0; i < count; ++i) out[i] = activate(decltype(kind)::value, x[i], slope);
  };
  Eigen::Map<const Eigen::ArrayXf> xa(x, count);
  Eigen::Map<Eigen::ArrayXf> ya(out, count);
  switch (p.kind) {
    case ActKind::kRelu:
      return apply(std::integral_constant<ActKind, ActKind::kRelu>{});
    case ActKind::kTanh:
      ya = xa.tanh();
      return;
    case ActKind::kSigmoid:
      ya = 1.f / (1.f + (-xa).exp());
      return;
    case ActKind::kRelu6:
      return apply(std::integral_constant<ActKind, ActKind::kRelu6>{});
    case ActKind::kLeakyRelu:
      return apply(std::integral_constant<ActKind, ActKind::kLeakyRelu>{});
    case ActKind::kHardswish:
      return apply(std::integral_constant<ActKind, ActKind::kHardswish>{});
    case ActKind::kHardsigmoid:
      return apply(std::integral_constant<ActKind, ActKind::kHardsigmoid>{});
    case ActKind::kSilu:
      ya = xa / (1.f + (-xa).exp());
      return;
    case ActKind::kGelu:
      return apply(std::integral_constant<ActKind, ActKind::kGelu>{});
    case ActKind::kGeluTanh:
      ya = 0.5f * xa * (1.f + (0.79788456080286536f * (xa + 0.044715f * xa * xa * xa)).tanh());
      return;
    case ActKind::kNone:
      return apply(std::integral_constant<ActKind, ActKind::kNone>{});
  }
}

}  // namespace cnnrun::ref
