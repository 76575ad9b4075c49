// flatten and dropout (identity at inference: a copy) and softmax over the channels at each
// spatial position, made numerically stable by subtracting the position's maximum first.
#include "engine/layers/simple.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "reference/cpu_layers.h"

namespace cnnrun::ref {

void forward_copy(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out, Workspace&) {
  if (out != in[0]) std::memcpy(out, in[0], static_cast<size_t>(n * l.out_shape.size()) * sizeof(float));
}

void forward_softmax(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out, Workspace&) {
  const Shape& s = l.out_shape;
  const int64_t plane = s.h * s.w;
  for (int64_t i = 0; i < n; ++i) {
    const float* x = in[0] + i * s.size();
    float* y = out + i * s.size();
    for (int64_t pos = 0; pos < plane; ++pos) {
      float mx = x[pos];
      for (int64_t c = 1; c < s.c; ++c) mx = std::max(mx, x[c * plane + pos]);
      float sum = 0.f;
      for (int64_t c = 0; c < s.c; ++c) {
        y[c * plane + pos] = std::exp(x[c * plane + pos] - mx);
        sum += y[c * plane + pos];
      }
      for (int64_t c = 0; c < s.c; ++c) y[c * plane + pos] /= sum;
    }
  }
}

}  // namespace cnnrun::ref
