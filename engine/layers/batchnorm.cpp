#include "engine/layers/batchnorm.h"

#include <cmath>

namespace cnnrun {

void BatchnormLayer::parse(ParamReader& r) {
  p.eps = r.get_double("eps", 1e-5);
  if (!(p.eps > 0.0 && std::isfinite(p.eps))) r.fail("eps", "expected a positive number");
}

std::vector<WeightSpec> BatchnormLayer::weight_specs(const std::vector<Shape>& in) const {
  return {
      {"weight", {in[0].c}}, {"bias", {in[0].c}}, {"running_mean", {in[0].c}}, {"running_var", {in[0].c}}};
}

void BatchnormLayer::affine(std::vector<float>& scale, std::vector<float>& shift) const {
  const Tensor& g = weight("weight");
  const Tensor& b = weight("bias");
  const Tensor& m = weight("running_mean");
  const Tensor& v = weight("running_var");
  size_t c = g.data.size();
  scale.resize(c);
  shift.resize(c);
  for (size_t i = 0; i < c; ++i) {
    double s = g.data[i] / std::sqrt(static_cast<double>(v.data[i]) + p.eps);
    scale[i] = static_cast<float>(s);
    shift[i] = static_cast<float>(b.data[i] - m.data[i] * s);
  }
}

}  // namespace cnnrun
