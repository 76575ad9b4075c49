#include "engine/layers/conv.h"

namespace cnnrun {

void ConvLayer::parse(ParamReader& r) {
  r.also_known({"algo"});
  if (r.has("padding_mode")) {
    const std::string m = r.get_string("padding_mode", "zeros");
    r.fail("padding_mode", m == "zeros" ? "not a cnnrun key: conv always pads with zeros; remove it"
                                        : "padding mode '" + m + "' is not supported; conv pads with zeros");
  }
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
  auto d = r.get_pair("dilation", {1, 1}, 1);
  p.dilation_h = d.first;
  p.dilation_w = d.second;
  p.groups = r.get_int("groups", 1, 1);
  p.bias = r.get_bool("bias", true);
  if (p.filters % p.groups != 0)
    r.fail("groups", std::to_string(p.groups) + " groups do not divide the " + std::to_string(p.filters) +
                         " filters evenly (each group needs filters / groups of them)");
}

Shape ConvLayer::infer_shape(const std::vector<Shape>& in) const {
  if (in[0].c % p.groups != 0)
    throw Error(std::to_string(p.groups) + " groups do not divide the " + std::to_string(in[0].c) +
                " input channels evenly (each group needs channels / groups of them)");
  return {p.filters,
          window_out(
              in[0].h,
              checked_add(checked_mul(p.dilation_h, p.kernel_h - 1, "dilated kernel"), 1, "dilated kernel"),
              p.stride_h, p.pad_h, "height"),
          window_out(
              in[0].w,
              checked_add(checked_mul(p.dilation_w, p.kernel_w - 1, "dilated kernel"), 1, "dilated kernel"),
              p.stride_w, p.pad_w, "width")};
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
  std::vector<WeightSpec> w{{"weight", {p.filters, in[0].c / p.groups, p.kernel_h, p.kernel_w}}};
  if (p.bias) w.push_back({"bias", {p.filters}});
  return w;
}

}  // namespace cnnrun
