// Max and average pooling as plain loops over each output's window, the window along each axis
// given by pool_window() (engine/layers/pool.h: sliding, ceil_mode, global and adaptive windows
// in one definition). Max pooling never sees the padding (it would be -inf and never win);
// average pooling divides by the window clipped to the padded input (count_pad, PyTorch's
// count_include_pad=True) or by the in-bounds elements only. A wide window's rows are summed with
// Eigen's vectorised sum (several partial sums, combined at the end): a float sum in one
// sequential chain waits on every add, and the global average pools of EfficientNet's
// squeeze-and-excitation blocks took a tenth of its CPU time that way (docs/performance.md).
#include "engine/layers/pool.h"

#include <Eigen/Core>
#include <algorithm>
#include <limits>

#include "reference/cpu_layers.h"

namespace cnnrun::ref {

namespace {
constexpr int64_t kVectorRow = 16;  // window rows at least this wide are summed vectorised
}  // namespace

void forward_pool(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out, Workspace&) {
  const PoolParams& p = layer_as<PoolLayer>(l).p;
  const Shape& is = l.in_shapes[0];
  const Shape& os = l.out_shape;
  for (int64_t plane = 0; plane < n * is.c; ++plane) {
    const float* src = in[0] + plane * is.h * is.w;
    float* dst = out + plane * os.h * os.w;
    for (int64_t oy = 0; oy < os.h; ++oy) {
      const PoolWindow wy = pool_window_h(p, oy);
      for (int64_t ox = 0; ox < os.w; ++ox) {
        const PoolWindow wx = pool_window_w(p, ox);
        float r;
        if (p.mode == PoolMode::kMax) {
          r = -std::numeric_limits<float>::infinity();
          for (int64_t y = wy.begin; y < wy.end; ++y)
            for (int64_t x = wx.begin; x < wx.end; ++x) r = std::max(r, src[y * is.w + x]);
        } else {
          float sum = 0.f;
          const int64_t width = wx.end - wx.begin;
          for (int64_t y = wy.begin; y < wy.end; ++y) {
            const float* row = src + y * is.w + wx.begin;
            if (width >= kVectorRow)
              sum += Eigen::Map<const Eigen::ArrayXf>(row, width).sum();
            else
              for (int64_t x = 0; x < width; ++x) sum += row[x];
          }
          const int64_t count = p.count_pad ? wy.span * wx.span : (wy.end - wy.begin) * (wx.end - wx.begin);
          r = sum / static_cast<float>(count);
        }
        dst[oy * os.w + ox] = r;
      }
    }
  }
}

}  // namespace cnnrun::ref
