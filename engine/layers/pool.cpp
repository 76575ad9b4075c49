#include "engine/layers/pool.h"

namespace cnnrun {

void PoolLayer::parse(ParamReader& r) {
  p.global = r.get_bool("global", false);
  if (p.global) {
    for (const char* k : {"size", "stride", "pad"})
      if (r.has(k)) r.fail(k, "not allowed with 'global: true' (the window is the whole plane)");
  } else {
    auto s = r.get_pair("size");
    p.size_h = s.first;
    p.size_w = s.second;
    auto st = r.get_pair("stride", s, 1);  // default: non-overlapping windows
    p.stride_h = st.first;
    p.stride_w = st.second;
    auto pd = r.get_pair("pad", {0, 0}, 0);
    p.pad_h = pd.first;
    p.pad_w = pd.second;
    if (p.pad_h * 2 > p.size_h || p.pad_w * 2 > p.size_w)
      r.fail("pad", "must be at most half the window size " + std::to_string(p.size_h) + "x" +
                        std::to_string(p.size_w) + ", found " + std::to_string(p.pad_h) + "x" +
                        std::to_string(p.pad_w));
  }
  if (p.mode == PoolMode::kAvg) p.count_pad = r.get_bool("count_pad", true);
}

Shape PoolLayer::infer_shape(const std::vector<Shape>& in) const {
  if (p.global) return {in[0].c, 1, 1};
  return {in[0].c, window_out(in[0].h, p.size_h, p.stride_h, p.pad_h, "height"),
          window_out(in[0].w, p.size_w, p.stride_w, p.pad_w, "width")};
}

void PoolLayer::bind(const std::vector<Shape>& ins) {
  const Shape& in = ins[0];
  if (!p.global) return;
  p.size_h = p.stride_h = in.h;
  p.size_w = p.stride_w = in.w;
  p.pad_h = p.pad_w = 0;
}

}  // namespace cnnrun
