// maxpool and avgpool: one parameter struct and one layer class with a mode, because the two
// differ only in the reduction (every executor implements both with one kernel).
// Max pooling pads with -inf; average pooling divides by the full window (PyTorch's
// count_include_pad=True) unless `count_pad: false`, then by the in-bounds element count.
// `global: true` pools the whole plane (size = input height x width).
#pragma once

#include "engine/layer.h"

namespace cnnrun {

enum class PoolMode { kMax, kAvg };

struct PoolParams {
  PoolMode mode = PoolMode::kMax;
  int64_t size_h = 0, size_w = 0;
  int64_t stride_h = 0, stride_w = 0;
  int64_t pad_h = 0, pad_w = 0;
  bool count_pad = true;
  bool global = false;
};

class PoolLayer : public Layer {
 public:
  explicit PoolLayer(PoolMode m) { p.mode = m; }
  PoolParams p;
  void parse(ParamReader& r) override;
  Shape infer_shape(const std::vector<Shape>& in) const override;
  // Resolves a global pool's window to the input plane.
  void bind(const std::vector<Shape>& in) override;
};

}  // namespace cnnrun
