// add (elementwise sum of inputs of one shape, summed in input order), concat (each image's
// inputs stacked along the channels in input order; in NCHW an image's channels are one
// contiguous run, so this is one copy per input per image) and mul (elementwise product in
// input order, a C x 1 x 1 input contributing its channel's value at every position).
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

void forward_mul(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out, Workspace&) {
  const MulParams& p = layer_as<MulLayer>(l).p;
  const Shape& s = l.out_shape;
  const int64_t plane = s.h * s.w;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < s.c; ++c) {
      float* y = out + (i * s.c + c) * plane;
      for (size_t k = 0; k < in.size(); ++k) {
        if (p.broadcast[k]) {
          const float v = in[k][i * s.c + c];
          for (int64_t j = 0; j < plane; ++j) y[j] = k == 0 ? v : y[j] * v;
        } else {
          const float* x = in[k] + (i * s.c + c) * plane;
          for (int64_t j = 0; j < plane; ++j) y[j] = k == 0 ? x[j] : y[j] * x[j];
        }
      }
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
