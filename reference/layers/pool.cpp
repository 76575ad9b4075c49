// Max and average pooling as plain loops over each output's window. Max pooling treats the
// padding as -inf (it never wins); average pooling divides by the whole window (count_pad, as
// PyTorch's count_include_pad=True) or by the in-bounds elements only. A global pool is the
// same loop with the window set to the plane at bind time.
#include "engine/layers/pool.h"

#include <algorithm>
#include <limits>

#include "reference/cpu_layers.h"

namespace cnnrun::ref {

void forward_pool(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out, Workspace&) {
  const PoolParams& p = layer_as<PoolLayer>(l).p;
  const Shape& is = l.in_shapes[0];
  const Shape& os = l.out_shape;
  for (int64_t plane = 0; plane < n * is.c; ++plane) {
    const float* src = in[0] + plane * is.h * is.w;
    float* dst = out + plane * os.h * os.w;
    for (int64_t oy = 0; oy < os.h; ++oy)
      for (int64_t ox = 0; ox < os.w; ++ox) {
        const int64_t y0 = oy * p.stride_h - p.pad_h, x0 = ox * p.stride_w - p.pad_w;
        const int64_t ya = std::max<int64_t>(y0, 0), yb = std::min(y0 + p.size_h, is.h);
        const int64_t xa = std::max<int64_t>(x0, 0), xb = std::min(x0 + p.size_w, is.w);
        float r;
        if (p.mode == PoolMode::kMax) {
          r = -std::numeric_limits<float>::infinity();
          for (int64_t y = ya; y < yb; ++y)
            for (int64_t x = xa; x < xb; ++x) r = std::max(r, src[y * is.w + x]);
        } else {
          float sum = 0.f;
          for (int64_t y = ya; y < yb; ++y)
            for (int64_t x = xa; x < xb; ++x) sum += src[y * is.w + x];
          const int64_t count = p.count_pad ? p.size_h * p.size_w : (yb - ya) * (xb - xa);
          r = sum / static_cast<float>(count);
        }
        dst[oy * os.w + ox] = r;
      }
  }
}

}  // namespace cnnrun::ref
