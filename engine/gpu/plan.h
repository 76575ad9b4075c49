// The GPU planner: which step each layer becomes, which layers fuse into their producer's kernel
// and which buffers alias, decided once from the Network (no GPU work, no CUDA types). The graph
// half of the fusions comes from engine/passes.h; the planner keeps what the kernels accept.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/conv_algo.h"
#include "engine/executor.h"
#include "engine/layers/activation.h"
#include "engine/layers/conv.h"
#include "engine/network.h"

namespace cnnrun::gpu {

// What a step launches; the GpuOp column of CNNRUN_LAYER_TYPES (engine/layer_types.h) names one
// for every layer type. kFused: computed in its producer's epilogue.
enum class Op {
  kConv,
  kFc,
  kAct,
  kPool,
  kIdentity,
  kAffine,
  kAdd,
  kConcat,
  kSoftmax,
  kMul,
  kUpsample,
  kFused
};

struct Step {
  Op op = Op::kIdentity;
  int layer = 0;
  int out = 0;           // buffer index
  std::vector<int> ins;  // buffer indices
  Shape in_shape, out_shape;
  // kAct: the activation; kConv/kFc: the one fused into the epilogue (kind kNone: none)
  ActivationParams act{ActKind::kNone};
  int fused_consumer = -1;  // kConv/kFc: the activation layer computed in this epilogue
  int fused_producer = -1;  // kFused: the layer whose epilogue computes this one
  // kConv: the 2x2/2 max-pool after the fused ReLU that the implicit kernel can compute too
  // (then neither the conv's nor the ReLU's output exists); kPool: that conv.
  int pool_layer = -1;
  int pool_conv = -1;
  // kConv: the only reader of the network input, and the implicit kernel can read the bytes
  // (with and without its pool fused)
  bool u8_input = false, u8_input_pool = false;
  ConvParams conv;  // kConv
};

struct Plan {
  std::vector<Step> steps;          // one per layer, in execution order
  std::vector<int64_t> buf_floats;  // per image, by buffer index; buffer 0 = the network input
};

Plan make_plan(const Network& net);

// Whether conv step `st` run with `algo` computes its pool / reads the uint8 input.
bool fuses_pool(const Step& st, ConvAlgo algo, const GpuTuning& t);
bool fuses_u8(const Step& st, ConvAlgo algo, const GpuTuning& t);

}  // namespace cnnrun::gpu
