// relu, tanh, sigmoid: activate() applied to every element (the scalar definition in
// engine/layers/activation.h, shared with every executor).
#include "engine/layers/activation.h"

#include "reference/cpu_layers.h"

namespace cnnrun::ref {

void forward_activation(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out,
                        Workspace&) {
  const ActKind kind = layer_as<ActivationLayer>(l).p.kind;
  const int64_t count = n * l.out_shape.size();
  const float* x = in[0];
  // One loop per kind, so the compiler sees a loop without a branch and vectorises it.
  auto apply = [&](auto f) {
    for (int64_t i = 0; i < count; ++i) out[i] = f(x[i]);
  };
  switch (kind) {
    case ActKind::kRelu:
      return apply([](float v) { return activate(ActKind::kRelu, v); });
    case ActKind::kTanh:
      return apply([](float v) { return activate(ActKind::kTanh, v); });
    case ActKind::kSigmoid:
      return apply([](float v) { return activate(ActKind::kSigmoid, v); });
    case ActKind::kNone:
      return apply([](float v) { return v; });
  }
}

}  // namespace cnnrun::ref
