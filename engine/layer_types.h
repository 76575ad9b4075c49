// The one list of layer types. Every executor indexes it; nothing else names the types.
//
// Each line of CNNRUN_LAYER_TYPES is one type:
//
//   X(Kind, "netdef name", LayerClass, (constructor arguments), cpu_forward_function, GpuOp)
//
// - Kind: the LayerKind enumerator (kConv, ...); Layer::kind holds it once the netdef is parsed.
// - "netdef name": the `type:` a netdef writes.
// - LayerClass (constructor arguments): engine/layers/, the parameter struct and shape rules.
// - cpu_forward_function: reference/layers/, a ref::ForwardFn (reference/cpu_layers.h).
// - GpuOp: the GPU planner's step kind for the layer (enum class gpu::Op, engine/gpu/).
//
// Adding a layer type: its file pair under engine/layers/, its forward function under
// reference/layers/ (and its kernels under engine/gpu/ with a GpuOp), and one line here.
// Each consumer expands the list with the columns it needs, in this order, so every table
// indexed by LayerKind has one entry per type by construction:
//
//   engine/layer_registry.cpp   name -> LayerKind -> factory (the netdef parser's door)
//   reference/cpu_executor.cpp  LayerKind -> CPU forward function
//   engine/gpu/ (the planner)   LayerKind -> gpu::Op
//
// Executors ask a layer's kind or its capability flags (layer.h), never its type name.
#pragma once

#include <memory>
#include <string>
#include <vector>

// clang-format off
#define CNNRUN_LAYER_TYPES(X)                                                                          \
  X(kConv,       "conv",       ConvLayer,        (),                   forward_conv,        kConv)     \
  X(kRelu,       "relu",       ActivationLayer,  (ActKind::kRelu),     forward_activation,  kAct)      \
  X(kTanh,       "tanh",       ActivationLayer,  (ActKind::kTanh),     forward_activation,  kAct)      \
  X(kSigmoid,    "sigmoid",    ActivationLayer,  (ActKind::kSigmoid),  forward_activation,  kAct)      \
  X(kRelu6,      "relu6",      ActivationLayer,  (ActKind::kRelu6),    forward_activation,  kAct)      \
  X(kLeakyRelu,  "leaky_relu", ActivationLayer,  (ActKind::kLeakyRelu), forward_activation, kAct)      \
  X(kHardswish,  "hardswish",  ActivationLayer,  (ActKind::kHardswish), forward_activation, kAct)      \
  X(kHardsigmoid, "hardsigmoid", ActivationLayer, (ActKind::kHardsigmoid), forward_activation, kAct)   \
  X(kSilu,       "silu",       ActivationLayer,  (ActKind::kSilu),     forward_activation,  kAct)      \
  X(kGelu,       "gelu",       ActivationLayer,  (ActKind::kGelu),     forward_activation,  kAct)      \
  X(kMaxpool,    "maxpool",    PoolLayer,        (PoolMode::kMax),     forward_pool,        kPool)     \
  X(kAvgpool,    "avgpool",    PoolLayer,        (PoolMode::kAvg),     forward_pool,        kPool)     \
  X(kFc,         "fc",         FcLayer,          (),                   forward_fc,          kFc)       \
  X(kFlatten,    "flatten",    FlattenLayer,     (),                   forward_copy,        kIdentity) \
  X(kSoftmax,    "softmax",    SoftmaxLayer,     (),                   forward_softmax,     kSoftmax)  \
  X(kDropout,    "dropout",    DropoutLayer,     (),                   forward_copy,        kIdentity) \
  X(kBatchnorm,  "batchnorm",  BatchnormLayer,   (),                   forward_batchnorm,   kAffine)   \
  X(kAdd,        "add",        AddLayer,         (),                   forward_add,         kAdd)      \
  X(kConcat,     "concat",     ConcatLayer,      (),                   forward_concat,      kConcat)   \
  X(kMul,        "mul",        MulLayer,         (),                   forward_mul,         kMul)      \
  X(kUpsample,   "upsample",   UpsampleLayer,    (),                   forward_upsample,    kUpsample)
// clang-format on

namespace cnnrun {

class Layer;

enum class LayerKind : int {
#define CNNRUN_LAYER_KIND(kind, ...) kind,
  CNNRUN_LAYER_TYPES(CNNRUN_LAYER_KIND)
#undef CNNRUN_LAYER_KIND
};

// The number of layer types: the size of every table indexed by LayerKind.
constexpr int kLayerKinds = 0
#define CNNRUN_LAYER_COUNT(...) +1
    CNNRUN_LAYER_TYPES(CNNRUN_LAYER_COUNT)
#undef CNNRUN_LAYER_COUNT
    ;

inline int index_of(LayerKind k) { return static_cast<int>(k); }

struct LayerType {
  LayerKind kind;
  const char* name;                  // the netdef's `type:`
  std::unique_ptr<Layer> (*make)();  // a new layer of this type, with kind and type set
};

// Every type, in list order (index = LayerKind).
const std::vector<LayerType>& layer_types();
// The type a netdef names, or nullptr.
const LayerType* find_layer_type(const std::string& name);
// The netdef name of a kind ("conv").
const char* layer_type_name(LayerKind k);

}  // namespace cnnrun
