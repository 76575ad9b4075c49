// Facts about a parsed network (engine/network.h) that need its layers' own parameter types.
#include "engine/network.h"

#include <algorithm>

#include "engine/layer_types.h"
#include "engine/layers/conv.h"
#include "engine/layers/fc.h"

namespace cnnrun {

int64_t multiply_adds(const Network& net) {
  // In doubles (exact below 2^53): a netdef's outputs are bounded, its windows need not be (a
  // padded 10^6-tap window), and the count is for a report, not worth an overflow; at most 2^62.
  double sum = 0;
  for (const auto& l : net.layers) {
    if (l->kind == LayerKind::kConv) {
      const ConvParams& p = layer_as<ConvLayer>(*l).p;
      sum += double(p.out_h) * double(p.out_w) * double(p.filters) * double(p.group_channels()) *
             double(p.kernel_h) * double(p.kernel_w);
    } else if (l->kind == LayerKind::kFc) {
      const FcParams& p = layer_as<FcLayer>(*l).p;
      sum += double(p.inputs) * double(p.outputs);
    }
  }
  return static_cast<int64_t>(std::min(sum, 4611686018427387904.0));  // 2^62
}

}  // namespace cnnrun
