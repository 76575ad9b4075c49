#include "engine/layers/fc.h"

namespace cnnrun {

void FcLayer::parse(ParamReader& r) {
  p.outputs = r.get_int("outputs");
  p.bias = r.get_bool("bias", true);
}

Shape FcLayer::infer_shape(const std::vector<Shape>&) const { return {p.outputs, 1, 1}; }

std::vector<WeightSpec> FcLayer::weight_specs(const std::vector<Shape>& in) const {
  std::vector<WeightSpec> w{
      {"weight", {p.outputs, checked_mul(checked_mul(in[0].c, in[0].h, "fc inputs"), in[0].w, "fc inputs")}}};
  if (p.bias) w.push_back({"bias", {p.outputs}});
  return w;
}

}  // namespace cnnrun
