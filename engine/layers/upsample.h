// upsample: enlarges each plane by integer factors, PyTorch's nn.Upsample(scale_factor=...).
// mode nearest: output (y, x) copies input (floor(y / scale_h), floor(x / scale_w)).
// mode bilinear: output (y, x) interpolates the four inputs around the source position
//   align_corners false: src = (dst + 0.5) / scale - 0.5, clamped below at 0 (PyTorch's
//                        half-pixel rule; the last row/column repeats at the far edge)
//   align_corners true:  src = dst * (in - 1) / (out - 1) (0 when out is 1)
#pragma once

#include "engine/layer.h"

namespace cnnrun {

enum class UpsampleMode { kNearest, kBilinear };

struct UpsampleParams {
  int64_t scale_h = 1, scale_w = 1;
  UpsampleMode mode = UpsampleMode::kNearest;
  bool align_corners = false;  // bilinear only
  int64_t in_h = 0, in_w = 0;  // derived
};

// Bilinear source index along one axis for output index `o`: the two input indices and the
// weight of the second.
struct LerpTap {
  int64_t i0, i1;
  float w1;
};
LerpTap upsample_tap(int64_t o, int64_t in, int64_t scale, bool align_corners);

class UpsampleLayer : public Layer {
 public:
  UpsampleParams p;
  void parse(ParamReader& r) override;
  Shape infer_shape(const std::vector<Shape>& in) const override;
  void bind(const std::vector<Shape>& in) override;
};

}  // namespace cnnrun
