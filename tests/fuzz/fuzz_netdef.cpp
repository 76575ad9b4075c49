// The netdef parser on arbitrary text. Beyond "no crash, only cnnrun::Error", an accepted netdef
// must be one the executors can run without further checks: layers in topological order, inputs
// resolved, shapes positive, consistent with infer_shape and under the per-image limit, window
// parameters that cannot divide by zero, one scale/shift per input channel, and as many classes
// as the output gives values.
#include <cmath>

#include "engine/layers/batchnorm.h"
#include "engine/layers/conv.h"
#include "engine/layers/fc.h"
#include "engine/layers/pool.h"
#include "engine/layers/simple.h"
#include "engine/network.h"
#include "tests/fuzz/fuzz_util.h"

using namespace cnnrun;

namespace {

bool positive(const Shape& s) { return s.c >= 1 && s.h >= 1 && s.w >= 1 && s.size() <= (int64_t{1} << 28); }

void check(const Network& net) {
  FUZZ_CHECK(positive(net.input));
  FUZZ_CHECK(net.pre.scale.size() == static_cast<size_t>(net.input.c));
  FUZZ_CHECK(net.pre.shift.size() == static_cast<size_t>(net.input.c));
  for (size_t c = 0; c < net.pre.scale.size(); ++c)
    FUZZ_CHECK(std::isfinite(net.pre.scale[c]) && std::isfinite(net.pre.shift[c]));
  FUZZ_CHECK(!net.layers.empty());
  FUZZ_CHECK(net.output >= 0 && net.output < static_cast<int>(net.layers.size()));
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const Layer& l = *net.layers[i];
    int n_in = static_cast<int>(l.inputs.size());
    FUZZ_CHECK(n_in >= l.min_inputs() && n_in <= l.max_inputs());
    FUZZ_CHECK(l.in_shapes.size() == l.inputs.size());
    for (size_t k = 0; k < l.inputs.size(); ++k) {
      FUZZ_CHECK(l.inputs[k] >= -1 && l.inputs[k] < static_cast<int>(i));
      FUZZ_CHECK(l.in_shapes[k] == net.shape_of(l.inputs[k]));
    }
    FUZZ_CHECK(positive(l.out_shape));
    FUZZ_CHECK(l.infer_shape(l.in_shapes) == l.out_shape);
    for (const auto& ws : l.weight_specs(l.in_shapes))
      for (int64_t d : ws.dims) FUZZ_CHECK(d >= 1);
    if (auto* c = dynamic_cast<const ConvLayer*>(&l)) {
      const ConvParams& p = c->p;
      FUZZ_CHECK(p.filters >= 1 && p.kernel_h >= 1 && p.kernel_w >= 1 && p.stride_h >= 1 && p.stride_w >= 1);
      FUZZ_CHECK(p.pad_h >= 0 && p.pad_w >= 0 && p.out_h == l.out_shape.h && p.out_w == l.out_shape.w);
      FUZZ_CHECK(p.in_c == l.in_shapes[0].c && p.in_h == l.in_shapes[0].h && p.in_w == l.in_shapes[0].w);
    } else if (auto* pl = dynamic_cast<const PoolLayer*>(&l)) {
      const PoolParams& p = pl->p;
      FUZZ_CHECK(p.size_h >= 1 && p.size_w >= 1 && p.stride_h >= 1 && p.stride_w >= 1);
      FUZZ_CHECK(p.pad_h >= 0 && p.pad_w >= 0 && 2 * p.pad_h <= p.size_h && 2 * p.pad_w <= p.size_w);
    } else if (auto* f = dynamic_cast<const FcLayer*>(&l)) {
      FUZZ_CHECK(f->p.outputs >= 1 && f->p.inputs == l.in_shapes[0].size());
    } else if (auto* b = dynamic_cast<const BatchnormLayer*>(&l)) {
      FUZZ_CHECK(b->p.eps > 0 && std::isfinite(b->p.eps));
    } else if (auto* d = dynamic_cast<const DropoutLayer*>(&l)) {
      FUZZ_CHECK(d->p.rate >= 0 && d->p.rate < 1);
    }
  }
  FUZZ_CHECK(net.num_classes() >= 1 && net.num_classes() <= (int64_t{1} << 20));
  FUZZ_CHECK(net.layers[static_cast<size_t>(net.output)]->out_shape.size() == net.num_classes());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    Network net = parse_netdef_string(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
    check(net);
  } catch (const Error& e) {
    fuzz::check_message(e);
  }
  return 0;
}
