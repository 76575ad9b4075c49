#include "engine/layers/upsample.h"

#include <algorithm>

namespace cnnrun {

void UpsampleLayer::parse(ParamReader& r) {
  r.also_known({"scale", "mode", "align_corners"});
  if (r.has("size"))
    r.fail("size", "upsampling to a given output size is not supported; give the integer factor 'scale'");
  auto s = r.get_pair("scale");
  p.scale_h = s.first;
  p.scale_w = s.second;
  const std::string m = r.get_string("mode", "nearest");
  if (m == "nearest")
    p.mode = UpsampleMode::kNearest;
  else if (m == "bilinear")
    p.mode = UpsampleMode::kBilinear;
  else if (m == "bicubic" || m == "nearest-exact" || m == "area" || m == "linear" || m == "trilinear")
    r.fail("mode", "mode '" + m + "' is not supported; expected nearest or bilinear");
  else
    r.fail("mode", "expected nearest or bilinear, found '" + m + "'");
  if (r.has("align_corners") && p.mode != UpsampleMode::kBilinear)
    r.fail("align_corners", "only bilinear upsampling takes 'align_corners'");
  p.align_corners = r.get_bool("align_corners", false);
}

Shape UpsampleLayer::infer_shape(const std::vector<Shape>& in) const {
  return {in[0].c, checked_mul(in[0].h, p.scale_h, "upsampled height"),
          checked_mul(in[0].w, p.scale_w, "upsampled width")};
}

void UpsampleLayer::bind(const std::vector<Shape>& in) {
  p.in_h = in[0].h;
  p.in_w = in[0].w;
}

LerpTap upsample_tap(int64_t o, int64_t in, int64_t scale, bool align_corners) {
  const int64_t out = in * scale;
  float src;
  if (align_corners) {
    // PyTorch computes the ratio in float: (in - 1) / (out - 1), then ratio * dst.
    const float ratio = out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.f;
    src = ratio * static_cast<float>(o);
  } else {
    const float ratio = 1.f / static_cast<float>(scale);
    src = std::max(ratio * (static_cast<float>(o) + 0.5f) - 0.5f, 0.f);
  }
  const int64_t i0 = std::min(static_cast<int64_t>(src), in - 1);
  const int64_t i1 = std::min(i0 + 1, in - 1);
  return {i0, i1, src - static_cast<float>(i0)};
}

}  // namespace cnnrun
