// batchnorm at inference: the per-channel affine y = x * scale[c] + shift[c] that
// BatchnormLayer::affine() derives from weight, bias, running mean and variance. A batchnorm
// the loader folded into its producer runs as identity (the executor aliases it; this copies).
#include "engine/layers/batchnorm.h"

#include "reference/cpu_layers.h"

namespace cnnrun::ref {

void forward_batchnorm(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out,
                       Workspace& ws) {
  const BatchnormLayer& bn = layer_as<BatchnormLayer>(l);
  if (bn.folded) return forward_copy(l, in, n, out, ws);
  bn.affine(ws.scale, ws.shift);
  const Shape& s = l.out_shape;
  const int64_t plane = s.h * s.w;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < s.c; ++c) {
      const float a = ws.scale[static_cast<size_t>(c)], b = ws.shift[static_cast<size_t>(c)];
      const float* x = in[0] + (i * s.c + c) * plane;
      float* y = out + (i * s.c + c) * plane;
      for (int64_t k = 0; k < plane; ++k) y[k] = x[k] * a + b;
    }
}

}  // namespace cnnrun::ref
