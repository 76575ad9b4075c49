// add (elementwise sum of inputs of one shape, summed in input order) and concat (each image's
// inputs stacked along the channels in input order; in NCHW an image's channels are one
// contiguous run, so this is one copy per input per image).
#include "engine/layers/merge.h"

#include <cstring>

#include "reference/cpu_layers.h"

namespace cnnrun::ref {

void forward_add(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out, Workspace&) {
  const int64_t count = n * l.out_shape.size();
  for (int64_t i = 0; i < count; ++i) {
    float s = in[0][i];
    for (size_t k = 1; k < in.size(); ++k) s += in[k][i];
    out[i] = s;
  }
}

void forward_concat(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out, Workspace&) {
  for (int64_t i = 0; i < n; ++i) {
    float* dst = out + i * l.out_shape.size();
    for (size_t k = 0; k < in.size(); ++k) {
      const int64_t size = l.in_shapes[k].size();
      std::memcpy(dst, in[k] + i * size, static_cast<size_t>(size) * sizeof(float));
      dst += size;
    }
  }
}

}  // namespace cnnrun::ref
