#include "engine/layers/pool.h"

namespace cnnrun {

int64_t pool_out(int64_t in, int64_t size, int64_t stride, int64_t pad, bool ceil_mode, const char* dim) {
  const int64_t floor_out = window_out(in, size, stride, pad, dim);
  if (!ceil_mode) return floor_out;
  const int64_t padded = in + 2 * pad;
  int64_t out = (padded - size + stride - 1) / stride + 1;
  // PyTorch: the last window must start inside the input or its left/top padding.
  if ((out - 1) * stride >= in + pad) --out;
  return out;
}

void PoolLayer::parse(ParamReader& r) {
  r.also_known({"size", "stride", "pad", "ceil_mode", "global", "output"});
  r.unsupported("dilation", "dilated pooling is not supported (only conv takes 'dilation')");
  r.unsupported("return_indices", "pooling indices are not supported (cnnrun runs inference only)");
  if (p.mode == PoolMode::kAvg)
    r.unsupported("divisor_override", "a divisor override is not supported; use count_pad");
  p.global = r.get_bool("global", false);
  const bool adaptive = r.has("output");
  if (p.global || adaptive) {
    const char* why = p.global ? "not allowed with 'global: true' (the window is the whole plane)"
                               : "not allowed with 'output' (adaptive windows follow from the output size)";
    for (const char* k : {"size", "stride", "pad", "ceil_mode"})
      if (r.has(k)) r.fail(k, why);
    if (p.global && adaptive) r.fail("output", "give either 'global: true' or 'output: [h, w]', not both");
  }
  if (adaptive) {
    auto o = r.get_pair("output");
    p.adaptive = true;
    p.out_h = o.first;
    p.out_w = o.second;
    if (p.mode == PoolMode::kAvg && r.has("count_pad"))
      r.fail("count_pad", "not allowed with 'output' (adaptive windows have no padding)");
  } else if (!p.global) {
    auto s = r.get_pair("size");
    p.size_h = s.first;
    p.size_w = s.second;
    auto st = r.get_pair("stride", s, 1);  // default: non-overlapping windows
    p.stride_h = st.first;
    p.stride_w = st.second;
    auto pd = r.get_pair("pad", {0, 0}, 0);
    p.pad_h = pd.first;
    p.pad_w = pd.second;
    p.ceil_mode = r.get_bool("ceil_mode", false);
    if (p.pad_h * 2 > p.size_h || p.pad_w * 2 > p.size_w)
      r.fail("pad", "must be at most half the window size " + std::to_string(p.size_h) + "x" +
                        std::to_string(p.size_w) + ", found " + std::to_string(p.pad_h) + "x" +
                        std::to_string(p.pad_w));
  }
  if (p.mode == PoolMode::kAvg && !p.adaptive) p.count_pad = r.get_bool("count_pad", true);
  if (p.mode == PoolMode::kAvg) r.also_known({"count_pad"});
}

Shape PoolLayer::infer_shape(const std::vector<Shape>& in) const {
  if (p.global) return {in[0].c, 1, 1};
  if (p.adaptive) return {in[0].c, p.out_h, p.out_w};
  return {in[0].c, pool_out(in[0].h, p.size_h, p.stride_h, p.pad_h, p.ceil_mode, "height"),
          pool_out(in[0].w, p.size_w, p.stride_w, p.pad_w, p.ceil_mode, "width")};
}

void PoolLayer::bind(const std::vector<Shape>& ins) {
  const Shape& in = ins[0];
  p.in_h = in.h;
  p.in_w = in.w;
  if (p.global) {
    p.size_h = p.stride_h = in.h;
    p.size_w = p.stride_w = in.w;
    p.pad_h = p.pad_w = 0;
  }
  const Shape o = infer_shape(ins);
  p.out_h = o.h;
  p.out_w = o.w;
}

}  // namespace cnnrun
