// maxpool and avgpool: one parameter struct and one layer class with a mode, because the two
// differ only in the reduction (every executor implements both with one kernel). PyTorch's
// MaxPool2d / AvgPool2d / AdaptiveMaxPool2d / AdaptiveAvgPool2d:
//  - sliding windows: `size`, `stride` (= size), `pad`; `ceil_mode: true` rounds the output size
//    up instead of down, but a last window that would start in the right/bottom padding is
//    dropped (PyTorch's rule), so every window holds at least one input element;
//  - `global: true` pools the whole plane;
//  - adaptive (`output: [h, w]`): output row i pools input rows floor(i*H/h) .. ceil((i+1)*H/h)-1.
// Max pooling pads with -inf. Average pooling divides by the window clipped to the padded input
// (PyTorch's count_include_pad=True; with ceil_mode a last window may reach past the padding and
// that part is not counted), or with `count_pad: false` by the in-bounds elements only.
#pragma once

#include <algorithm>

#include "engine/layer.h"

namespace cnnrun {

enum class PoolMode { kMax, kAvg };

struct PoolParams {
  PoolMode mode = PoolMode::kMax;
  int64_t size_h = 0, size_w = 0;
  int64_t stride_h = 0, stride_w = 0;
  int64_t pad_h = 0, pad_w = 0;
  bool count_pad = true;
  bool ceil_mode = false;
  bool global = false;
  bool adaptive = false;  // windows from `output` (size/stride/pad unused)
  // Adaptive: the requested output; derived for every pool at bind time with the input size.
  int64_t out_h = 0, out_w = 0;
  int64_t in_h = 0, in_w = 0;  // derived
};

// One output position's window along one axis: input indices [begin, end) (clipped to the
// input, never empty), and `span`, the window's length clipped to the padded input only, which
// is what count_pad divides by.
struct PoolWindow {
  int64_t begin, end, span;
};

inline PoolWindow pool_window(int64_t o, int64_t in, int64_t out, int64_t size, int64_t stride, int64_t pad,
                              bool adaptive) {
  if (adaptive) {
    const int64_t b = o * in / out, e = ((o + 1) * in + out - 1) / out;
    return {b, e, e - b};
  }
  const int64_t start = o * stride - pad;
  const int64_t stop = std::min(start + size, in + pad);
  return {std::max<int64_t>(start, 0), std::min(stop, in), stop - start};
}
inline PoolWindow pool_window_h(const PoolParams& p, int64_t oy) {
  return pool_window(oy, p.in_h, p.out_h, p.size_h, p.stride_h, p.pad_h, p.adaptive);
}
inline PoolWindow pool_window_w(const PoolParams& p, int64_t ox) {
  return pool_window(ox, p.in_w, p.out_w, p.size_w, p.stride_w, p.pad_w, p.adaptive);
}

// Output size of a pooling window along one axis, with PyTorch's ceil_mode rule.
int64_t pool_out(int64_t in, int64_t size, int64_t stride, int64_t pad, bool ceil_mode, const char* dim);

class PoolLayer : public Layer {
 public:
  explicit PoolLayer(PoolMode m) { p.mode = m; }
  PoolParams p;
  void parse(ParamReader& r) override;
  Shape infer_shape(const std::vector<Shape>& in) const override;
  // Resolves a global pool's window to the input plane and records the sizes.
  void bind(const std::vector<Shape>& in) override;
};

}  // namespace cnnrun
