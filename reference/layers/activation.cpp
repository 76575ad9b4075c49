// The elementwise activations: activate() applied to every element (the scalar definitions in
// engine/layers/activation.h, shared with every executor).
#include "engine/layers/activation.h"

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
  switch (p.kind) {
    case ActKind::kRelu:
      return apply(std::integral_constant<ActKind, ActKind::kRelu>{});
    case ActKind::kTanh:
      return apply(std::integral_constant<ActKind, ActKind::kTanh>{});
    case ActKind::kSigmoid:
      return apply(std::integral_constant<ActKind, ActKind::kSigmoid>{});
    case ActKind::kRelu6:
      return apply(std::integral_constant<ActKind, ActKind::kRelu6>{});
    case ActKind::kLeakyRelu:
      return apply(std::integral_constant<ActKind, ActKind::kLeakyRelu>{});
    case ActKind::kHardswish:
      return apply(std::integral_constant<ActKind, ActKind::kHardswish>{});
    case ActKind::kHardsigmoid:
      return apply(std::integral_constant<ActKind, ActKind::kHardsigmoid>{});
    case ActKind::kSilu:
      return apply(std::integral_constant<ActKind, ActKind::kSilu>{});
    case ActKind::kGelu:
      return apply(std::integral_constant<ActKind, ActKind::kGelu>{});
    case ActKind::kGeluTanh:
      return apply(std::integral_constant<ActKind, ActKind::kGeluTanh>{});
    case ActKind::kNone:
      return apply(std::integral_constant<ActKind, ActKind::kNone>{});
  }
}

}  // namespace cnnrun::ref
