// upsample: resizes each plane, PyTorch's nn.Upsample / F.interpolate (mode nearest or bilinear)
// with scale_factor (`scale`, integer or fractional, one or per axis) or size (`size`, the
// output height and width). Per axis, out = size, or floor(in * scale) computed in double.
// Source coordinates, with PyTorch's float `ratio` per axis (area_pixel_compute_scale):
//   align_corners: ratio = (in - 1) / (out - 1) (0 when out is 1);
//   otherwise: ratio = float(1.0 / scale) with `scale`, float(in) / out with `size`.
// mode nearest: output o copies input o / factor when out = in * factor for a whole factor given
//   as `scale` or `size`, or when out is in or 2 * in whatever the scale (PyTorch's CPU special
//   cases; elsewhere its float formula agrees wherever its ratio is not below 1/factor), and
//   otherwise min(floor(float(o) * ratio), in - 1), PyTorch's nearest.
// mode bilinear: the four inputs around the source position
//   align_corners false: src = max(ratio * (o + 0.5) - 0.5, 0) (half-pixel centres)
//   align_corners true:  src = ratio * o
//   i0 = min(int(src), in - 1), i1 = min(i0 + 1, in - 1), weight of i1 = src - i0, in float;
//   an axis whose length does not change is copied, whatever the scale (as PyTorch does).
#pragma once

#include "engine/layer.h"

namespace cnnrun {

enum class UpsampleMode { kNearest, kBilinear };

// One axis: its sizes, the whole factor when out = in * factor (0 otherwise), and the ratio.
struct UpsampleAxis {
  int64_t in = 0, out = 0;
  int64_t factor = 0;
  float ratio = 0;
};

struct UpsampleParams {
  double scale_h = 0, scale_w = 0;  // `scale` as written (0: `size` was given)
  int64_t size_h = 0, size_w = 0;   // `size` as written (0: `scale` was given)
  UpsampleMode mode = UpsampleMode::kNearest;
  bool align_corners = false;  // bilinear only
  UpsampleAxis y, x;           // derived (bind)
};

// The axis for input length `in`: scale > 0, or size > 0.
UpsampleAxis upsample_axis(int64_t in, double scale, int64_t size, bool align_corners);

// Nearest: the input index output `o` copies.
int64_t upsample_nearest(int64_t o, const UpsampleAxis& a);

// Bilinear source index along one axis for output index `o`: the two input indices and the
// weight of the second.
struct LerpTap {
  int64_t i0, i1;
  float w1;
};
LerpTap upsample_tap(int64_t o, const UpsampleAxis& a, bool align_corners);

class UpsampleLayer : public Layer {
 public:
  UpsampleParams p;
  void parse(ParamReader& r) override;
  Shape infer_shape(const std::vector<Shape>& in) const override;
  void bind(const std::vector<Shape>& in) override;
};

}  // namespace cnnrun
