// The netdef parser's door to the layer types: CNNRUN_LAYER_TYPES (layer_types.h) expanded
// into name -> kind -> factory. Nothing here needs editing when a type is added.
#include <algorithm>

#include "engine/layer.h"
#include "engine/layer_types.h"
#include "engine/layers/activation.h"
#include "engine/layers/batchnorm.h"
#include "engine/layers/conv.h"
#include "engine/layers/fc.h"
#include "engine/layers/merge.h"
#include "engine/layers/pool.h"
#include "engine/layers/simple.h"
#include "engine/layers/upsample.h"

namespace cnnrun {

const std::vector<LayerType>& layer_types() {
#define CNNRUN_LAYER_ENTRY(kind_, name_, Class, args, cpu, gpu)       \
  LayerType{LayerKind::kind_, name_, []() -> std::unique_ptr<Layer> { \
              auto l = std::make_unique<Class> args;                  \
              l->kind = LayerKind::kind_;                             \
              l->type = name_;                                        \
              return l;                                               \
            }},
  static const std::vector<LayerType> types = {CNNRUN_LAYER_TYPES(CNNRUN_LAYER_ENTRY)};
#undef CNNRUN_LAYER_ENTRY
  return types;
}

const LayerType* find_layer_type(const std::string& name) {
  const auto& t = layer_types();
  auto it = std::find_if(t.begin(), t.end(), [&](const LayerType& x) { return name == x.name; });
  return it == t.end() ? nullptr : &*it;
}

const char* layer_type_name(LayerKind k) { return layer_types()[static_cast<size_t>(index_of(k))].name; }

}  // namespace cnnrun
