#include "engine/validate.h"

#include <algorithm>
#include <cmath>

#include "engine/core/memory.h"

namespace cnnrun {

namespace {

// forward_layers hands out every layer's output for a chunk of images; `copies` such sets are
// alive at once (plus the CPU reference's own buffers, about one more). The chunk is cut so
// that they take at most half of the host memory available: a network whose layers are huge per
// image is validated a few images at a time instead of being killed.
int64_t chunk_to_fit(const Network& net, int64_t chunk, int copies) {
  int64_t per = 0;
  for (const auto& l : net.layers) per += l->out_shape.size() * 4;
  per *= copies + 1;
  const int64_t fit = host_memory().available / 2 / std::max<int64_t>(per, 1);
  return std::max<int64_t>(1, std::min(chunk, fit));
}

}  // namespace

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
  chunk = chunk_to_fit(net, chunk, 2);
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
        c.nonfinite += !std::isfinite(a[i].data[k]) || !std::isfinite(b[i].data[k]);
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
  judge(v, tolerance);
  return v;
}

void judge(Validation& v, double tolerance) {
  v.tolerance = tolerance;
  v.pass = true;
  v.nonfinite = false;
  v.first_failure.clear();
  for (auto& c : v.layers) {
    if (!c.fused_into.empty()) continue;
    c.max_rel = c.max_abs / std::max(c.max_ref, 1e-30);
    c.pass = c.max_rel <= tolerance && c.nonfinite == 0;
    if (c.nonfinite && !v.nonfinite) {
      v.nonfinite = true;
      v.first_failure = c.name;
    }
    if (!c.pass && v.pass) {
      v.pass = false;
      if (!v.nonfinite) v.first_failure = c.name;
    }
  }
}

std::string first_nonfinite_layer(Executor& ex, const Network& net, const Dataset& data, int64_t n,
                                  const RunOptions& opt, int64_t chunk) {
  n = std::min(n, data.count);
  const size_t L = net.layers.size();
  chunk = chunk_to_fit(net, chunk, 1);
  for (int64_t first = 0; first < n; first += chunk) {
    const int64_t m = std::min(chunk, n - first);
    std::vector<Tensor> outs = ex.forward_layers(data, first, m, opt);
    for (size_t i = 0; i < L && i < outs.size(); ++i)
      for (float x : outs[i].data)
        if (!std::isfinite(x)) return net.layers[i]->name;
  }
  return "";
}

}  // namespace cnnrun
