#include "engine/validate.h"

#include <algorithm>
#include <cmath>

namespace cnnrun {

Validation validate(Executor& test, Executor& ref, const Network& net, const Dataset& data, int64_t n,
                    const RunOptions& opt, int64_t chunk) {
  const double tolerance = validation_tolerance(opt.precision);
  const RunOptions fp32;  // the reference computes in FP32 and takes no GPU options
  if (n > data.count) n = data.count;
  Validation v;
  v.images = n;
  v.tolerance = tolerance;
  const size_t L = net.layers.size();
  v.layers.resize(L);
  for (size_t i = 0; i < L; ++i) {
    v.layers[i].name = net.layers[i]->name;
    v.layers[i].type = net.layers[i]->type;
  }
  for (int64_t first = 0; first < n; first += chunk) {
    int64_t m = std::min(chunk, n - first);
    std::vector<Tensor> a = test.forward_layers(data, first, m, opt);
    std::vector<Tensor> b = ref.forward_layers(data, first, m, fp32);
    if (a.size() != L || b.size() != L)
      throw Error("validate: an executor returned the wrong number of layers");
    if (first == 0)  // after the first forward_layers: auto's pick, which fusions hang on, is made
      for (size_t i = 0; i < L; ++i) v.layers[i].fused_into = test.fused_into(static_cast<int>(i), opt);
    for (size_t i = 0; i < L; ++i) {
      LayerCheck& c = v.layers[i];
      if (!c.fused_into.empty()) continue;
      if (a[i].data.size() != b[i].data.size())
        throw Error("validate: layer '" + c.name + "' gives " + a[i].dims_str() + " on one executor and " +
                    b[i].dims_str() + " on the other");
      for (size_t k = 0; k < a[i].data.size(); ++k) {
        double d = std::fabs(static_cast<double>(a[i].data[k]) - b[i].data[k]);
        if (std::isnan(d)) d = INFINITY;
        c.max_abs = std::max(c.max_abs, d);
        c.max_ref = std::max(c.max_ref, std::fabs(static_cast<double>(b[i].data[k])));
      }
    }
    const int64_t classes = net.layers[static_cast<size_t>(net.output)]->out_shape.size();
    const Tensor& ta = a[static_cast<size_t>(net.output)];
    const Tensor& tb = b[static_cast<size_t>(net.output)];
    if (!ta.data.empty())
      for (int64_t k = 0; k < m; ++k)
        if (predicted_class(ta.ptr() + k * classes, classes) !=
            predicted_class(tb.ptr() + k * classes, classes))
          ++v.prediction_mismatches;
  }
  for (auto& c : v.layers) {
    if (!c.fused_into.empty()) continue;
    c.max_rel = c.max_abs / std::max(c.max_ref, 1e-30);
    c.pass = c.max_rel <= tolerance;
    if (!c.pass && v.pass) {
      v.pass = false;
      v.first_failure = c.name;
    }
  }
  return v;
}

}  // namespace cnnrun
