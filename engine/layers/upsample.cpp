#include "engine/layers/upsample.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace cnnrun {

namespace {

// Output lengths beyond this are refused (an int index on the GPU, and no plausible network).
constexpr double kMaxOut = 1 << 30;

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

}  // namespace

void UpsampleLayer::parse(ParamReader& r) {
  r.also_known({"scale", "size", "mode", "align_corners"});
  const bool has_size = r.has("size");
  if (has_size && r.has("scale")) r.fail("size", "give 'scale' or 'size', not both");
  if (has_size) {
    auto s = r.get_pair("size");
    p.size_h = s.first;
    p.size_w = s.second;
  } else {
    auto s = r.get_number_pair("scale");
    for (double v : {s.first, s.second})
      if (!(v > 0) || !std::isfinite(v) || v > kMaxOut)
        r.fail("scale", "expected a positive factor (or [height, width] factors), found " + num(v));
    p.scale_h = s.first;
    p.scale_w = s.second;
  }
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

UpsampleAxis upsample_axis(int64_t in, double scale, int64_t size, bool align_corners) {
  UpsampleAxis a;
  a.in = in;
  if (size > 0) {
    a.out = size;
  } else {
    const double out = std::floor(static_cast<double>(in) * scale);  // PyTorch: floor(in * scale)
    if (out > kMaxOut)
      throw Error("upsampled length " + std::to_string(in) + " x " + num(scale) + " is too large");
    a.out = static_cast<int64_t>(out);
  }
  if (a.out < 1)
    throw Error("upsampling a length of " + std::to_string(in) + " by " + num(scale) +
                " gives no output (floor(in * scale) = 0)");
  // Whole factors take integer division: the factors of `scale`, a `size` that is a multiple,
  // and (as PyTorch's CPU nearest does, whatever the scale) out = in and out = 2 * in.
  if (a.out == in || a.out == 2 * in || (a.out % in == 0 && (size > 0 || scale == std::floor(scale))))
    a.factor = a.out / in;
  if (align_corners)
    a.ratio = a.out > 1 ? static_cast<float>(in - 1) / static_cast<float>(a.out - 1) : 0.f;
  else
    a.ratio = size > 0 ? static_cast<float>(in) / static_cast<float>(a.out) : static_cast<float>(1.0 / scale);
  return a;
}

Shape UpsampleLayer::infer_shape(const std::vector<Shape>& in) const {
  const UpsampleAxis y = upsample_axis(in[0].h, p.scale_h, p.size_h, p.align_corners);
  const UpsampleAxis x = upsample_axis(in[0].w, p.scale_w, p.size_w, p.align_corners);
  return {in[0].c, y.out, x.out};
}

void UpsampleLayer::bind(const std::vector<Shape>& in) {
  p.y = upsample_axis(in[0].h, p.scale_h, p.size_h, p.align_corners);
  p.x = upsample_axis(in[0].w, p.scale_w, p.size_w, p.align_corners);
}

int64_t upsample_nearest(int64_t o, const UpsampleAxis& a) {
  if (a.factor > 0) return o / a.factor;
  return std::min(static_cast<int64_t>(std::floor(static_cast<float>(o) * a.ratio)), a.in - 1);
}

LerpTap upsample_tap(int64_t o, const UpsampleAxis& a, bool align_corners) {
  if (a.out == a.in) return {o, o, 0.f};  // PyTorch: an axis that keeps its length is copied
  const float src = align_corners ? a.ratio * static_cast<float>(o)
                                  : std::max(a.ratio * (static_cast<float>(o) + 0.5f) - 0.5f, 0.f);
  const int64_t i0 = std::min(static_cast<int64_t>(src), a.in - 1);
  const int64_t i1 = std::min(i0 + 1, a.in - 1);
  return {i0, i1, src - static_cast<float>(i0)};
}

}  // namespace cnnrun
