#include "engine/layers/conv.h"

namespace cnnrun {

void ConvLayer::parse(ParamReader& r) {
  p.filters = r.get_int("filters");
  auto k = r.get_pair("kernel");
  p.kernel_h = k.first;
  p.kernel_w = k.second;
  auto s = r.get_pair("stride", {1, 1}, 1);
  p.stride_h = s.first;
  p.stride_w = s.second;
  auto pd = r.get_pair("pad", {0, 0}, 0);
  p.pad_h = pd.first;
  p.pad_w = pd.second;
  p.bias = r.get_bool("bias", true);
}

Shape ConvLayer::infer_shape(const std::vector<Shape>& in) const {
  return {p.filters, window_out(in[0].h, p.kernel_h, p.stride_h, p.pad_h, "height"),
          window_out(in[0].w, p.kernel_w, p.stride_w, p.pad_w, "width")};
}

void ConvLayer::bind(const std::vector<Shape>& ins) {
  const Shape& in = ins[0];
  p.in_c = in.c;
  p.in_h = in.h;
  p.in_w = in.w;
  Shape o = infer_shape({in});
  p.out_h = o.h;
  p.out_w = o.w;
}

std::vector<WeightSpec> ConvLayer::weight_specs(const std::vector<Shape>& in) const {
  std::vector<WeightSpec> w{{"weight", {p.filters, in[0].c, p.kernel_h, p.kernel_w}}};
  if (p.bias) w.push_back({"bias", {p.filters}});
  return w;
}

}  // namespace cnnrun
