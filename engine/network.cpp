// Facts about a parsed network (engine/network.h) that need its layers' own parameter types.
#include "engine/network.h"

#include "engine/layer_types.h"
#include "engine/layers/conv.h"
#include "engine/layers/fc.h"

namespace cnnrun {

int64_t multiply_adds(const Network& net) {
  int64_t sum = 0;
  for (const auto& l : net.layers) {
    if (l->kind == LayerKind::kConv) {
      const ConvParams& p = layer_as<ConvLayer>(*l).p;
      sum += p.out_h * p.out_w * p.filters * p.group_channels() * p.kernel_h * p.kernel_w;
    } else if (l->kind == LayerKind::kFc) {
      const FcParams& p = layer_as<FcLayer>(*l).p;
      sum += p.inputs * p.outputs;
    }
  }
  return sum;
}

}  // namespace cnnrun
