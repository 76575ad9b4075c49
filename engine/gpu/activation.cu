// The elementwise activation pass and the bias+activation epilogue pass: memory-bound, one
// thread per value in a grid-stride loop (the grid is capped, so any block size launches), four
// values per thread through float4 when the count allows, since these passes run over the
// largest tensors of the modern networks (every expanded MobileNet block).
#include <algorithm>

#include "engine/gpu/activation.cuh"
#include "engine/gpu/check.h"
#include "engine/gpu/grid_stride.h"

namespace cnnrun::gpu {

namespace {

__global__ void act_kernel(const float* in, float* out, int64_t count, ActFn a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = act_eval(a, in[i]);
}

__global__ void act4_kernel(const float4* in, float4* out, int64_t count4, ActFn a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count4;
       i += int64_t(gridDim.x) * blockDim.x) {
    float4 v = in[i];
    v.x = act_eval(a, v.x), v.y = act_eval(a, v.y), v.z = act_eval(a, v.z), v.w = act_eval(a, v.w);
    out[i] = v;
  }
}

// One (image, channel) plane per blockIdx.y row of planes: the bias is read once per plane.
__global__ void bias_act_kernel(float* y, const float* __restrict__ bias, int64_t planes, int channels,
                                int64_t plane, ActFn a) {
  for (int64_t pc = blockIdx.y; pc < planes; pc += gridDim.y) {
    const float b = bias ? bias[pc % channels] : 0.f;
    float* row = y + pc * plane;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < plane;
         i += int64_t(gridDim.x) * blockDim.x)
      row[i] = act_eval(a, bias ? __fadd_rn(row[i], b) : row[i]);
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

ActFn act_fn(const ActivationParams& p) {
  switch (p.kind) {
    case ActKind::kNone:
      return {Act::kIdentity};
    case ActKind::kRelu:
      return {Act::kRelu};
    case ActKind::kTanh:
      return {Act::kTanh};
    case ActKind::kSigmoid:
      return {Act::kSigmoid};
    case ActKind::kRelu6:
      return {Act::kRelu6};
    case ActKind::kLeakyRelu:
      return {Act::kLeakyRelu, p.slope};
    case ActKind::kHardswish:
      return {Act::kHardswish};
    case ActKind::kHardsigmoid:
      return {Act::kHardsigmoid};
    case ActKind::kSilu:
      return {Act::kSilu};
    case ActKind::kGelu:
      return {Act::kGelu};
    case ActKind::kGeluTanh:
      return {Act::kGeluTanh};
  }
  throw Error("activation kind " + std::to_string(static_cast<int>(p.kind)) + " has no GPU form");
}

std::string act_fn_name(const ActFn& a) {
  switch (a.kind) {
    case Act::kIdentity:
      return "identity";
    case Act::kRelu:
      return "relu";
    case Act::kRelu6:
      return "relu6";
    case Act::kLeakyRelu:
      return "leaky_relu(" + std::to_string(a.slope) + ")";
    case Act::kHardswish:
      return "hardswish";
    case Act::kHardsigmoid:
      return "hardsigmoid";
    case Act::kSilu:
      return "silu";
    case Act::kGelu:
      return "gelu";
    case Act::kGeluTanh:
      return "gelu(tanh)";
    case Act::kTanh:
      return "tanh";
    case Act::kSigmoid:
      return "sigmoid";
  }
  return "?";
}

void launch_act(const float* in, float* out, int64_t count, ActFn act, cudaStream_t s) {
  if (count <= 0) return;
  if (count % 4 == 0 && aligned16(in) && aligned16(out)) {
    act4_kernel<<<grid_stride_blocks(count / 4), kGridStrideThreads, 0, s>>>(
        reinterpret_cast<const float4*>(in), reinterpret_cast<float4*>(out), count / 4, act);
    CUDA_CHECK_LAUNCH("act4_kernel");
  } else {
    act_kernel<<<grid_stride_blocks(count), kGridStrideThreads, 0, s>>>(in, out, count, act);
    CUDA_CHECK_LAUNCH("act_kernel");
  }
}

void launch_bias_act(float* y, const float* bias, int64_t n, int channels, int64_t plane, ActFn act,
                     cudaStream_t s) {
  const int64_t planes = n * channels;
  if (planes <= 0 || plane <= 0) return;
  if (!bias && act.kind == Act::kIdentity) return;
  const int64_t bx = std::min<int64_t>((plane + kGridStrideThreads - 1) / kGridStrideThreads, 64);
  const dim3 grid(static_cast<unsigned>(bx), static_cast<unsigned>(std::min<int64_t>(planes, 65535)));
  bias_act_kernel<<<grid, kGridStrideThreads, 0, s>>>(y, bias, planes, channels, plane, act);
  CUDA_CHECK_LAUNCH("bias_act_kernel");
}

}  // namespace cnnrun::gpu
