// The device definition of every ActFn, included by each kernel that applies an activation in
// its epilogue. The formulas and the order of their operations are PyTorch's (ATen's CPU and CUDA
// kernels): hardswish is x * clamp(x + 3, 0, 6) / 6 with the multiply before the divide, SiLU
// x / (1 + exp(-x)). The rounded intrinsics keep nvcc from contracting a multiply and an add into
// an FMA that the CPU reference does not do; the transcendental functions are CUDA's accurate
// ones (a few ulp), never the fast approximations, except where the value is stored in 16 bits
// right after (act_eval_stored), the run is at tf32 (ActFn::fast: SiLU and sigmoid) or the kernel
// runs at TF32, FP16 or BF16 (tanh_approx).
#pragma once

#include "engine/gpu/activation.h"

namespace cnnrun::gpu {

__device__ __forceinline__ float clamp06(float x) { return fminf(fmaxf(x, 0.f), 6.f); }

// The hardware's 2^x and 1/x with subnormal results flushed to zero (ex2.approx.ftz.f32,
// rcp.approx.ftz.f32): one MUFU instruction each. __expf and __fdividef are the same MUFU
// operations wrapped in the subnormal handling of their non-ftz forms (about 15 instructions a
// SiLU in the PTX of the conv1x1 kernel's epilogue, against 5 here).
__device__ __forceinline__ float ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rcp_ftz(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// SiLU and sigmoid through them: x / (1 + 2^(-x log2 e)) and 1 / (1 + 2^(-x log2 e)).
__device__ __forceinline__ float silu_fast(float x) {
  return __fmul_rn(x, rcp_ftz(__fadd_rn(1.f, ex2_ftz(__fmul_rn(x, -1.4426950408889634f)))));
}
__device__ __forceinline__ float sigmoid_fast(float x) {
  return rcp_ftz(__fadd_rn(1.f, ex2_ftz(__fmul_rn(x, -1.4426950408889634f))));
}

// act_eval with `fast`: SiLU and sigmoid through silu_fast and sigmoid_fast (as act_eval_fast), a
// branch inside those two cases only, so that an FP32-storage epilogue that takes `fast` at run time
// (ActFn::fast) holds one copy of the switch: two copies (the accurate one and the fast one) doubled
// the FP32 stem kernel's code to 430 KB and ran it 2.2x slower (docs/performance.md, Session 41).
__device__ __forceinline__ float act_eval_any(Act kind, float slope, bool fast, float x) {
  switch (kind) {
    case Act::kIdentity:
      return x;
    case Act::kRelu:
      return x > 0.f ? x : 0.f;
    case Act::kRelu6:
      return x > 0.f ? fminf(x, 6.f) : 0.f;
    case Act::kLeakyRelu:
      return x > 0.f ? x : __fmul_rn(x, slope);
    case Act::kHardswish:
      return __fdiv_rn(__fmul_rn(x, clamp06(__fadd_rn(x, 3.f))), 6.f);
    case Act::kHardsigmoid:
      return __fdiv_rn(clamp06(__fadd_rn(x, 3.f)), 6.f);
    case Act::kSilu:
      if (fast) return silu_fast(x);
      return __fdiv_rn(x, __fadd_rn(1.f, expf(-x)));
    case Act::kGelu:
      return __fmul_rn(__fmul_rn(x, 0.5f), __fadd_rn(1.f, erff(__fmul_rn(x, 0.70710678118654752f))));
    case Act::kGeluTanh: {
      const float inner =
          __fmul_rn(0.79788456080286536f, __fadd_rn(x, __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, x), x), x)));
      return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.f, tanhf(inner)));
    }
    case Act::kTanh:
      return tanhf(x);
    case Act::kSigmoid:
      if (fast) return sigmoid_fast(x);
      return __fdiv_rn(1.f, __fadd_rn(1.f, expf(-x)));
  }
  return x;
}

__device__ __forceinline__ float act_eval(Act kind, float slope, float x) {
  return act_eval_any(kind, slope, false, x);
}

__device__ __forceinline__ float act_eval(const ActFn& a, float x) { return act_eval(a.kind, a.slope, x); }

// The hardware's tanh (tanh.approx.f32, sm_75 on): one instruction, relative error about 2^-11
// (PTX ISA), the size of one rounding to TF32 or FP16 (BF16: 2^-8). Only in kernels run at
// those precisions (kernel_tc.cuh's tanh_avg4); act_eval keeps tanhf.
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The activation of a value stored as T right after: FP32 storage the accurate act_eval; 16-bit
// storage (FP16, BF16) SiLU and sigmoid through the hardware's approximate exponential and
// reciprocal (a few FP32 ulp, against the 2^-11 or 2^-8 of the rounding that follows; a fraction
// of act_eval's instructions, which the depthwise, stem and conv1x1 kernels spent most of theirs
// on, docs/performance.md, Sessions 23 and 34), the rest as act_eval. Both reach the same limits:
// SiLU of -inf is NaN, of a large negative value -0 (from about -87: where 1 / (1 + e^-x) is
// subnormal; act_eval gives a value under 1e-36 there), sigmoid 0 and 1 at the ends.
// FAST: the approximate SiLU and sigmoid (16-bit storage, or a kernel whose products are TF32).
template <bool FAST>
__device__ __forceinline__ float act_eval_fast(Act kind, float slope, float x) {
  if constexpr (FAST) {  // (tested before the switch: the 16-bit kernels' code as measured)
    if (kind == Act::kSilu) return silu_fast(x);
    if (kind == Act::kSigmoid) return sigmoid_fast(x);
  }
  return act_eval(kind, slope, x);
}
// act_eval_stored: the activation a of a value stored as T right after, as act_eval_fast does
// in 16-bit storage; in FP32 storage the approximate SiLU and sigmoid where ActFn::fast says so.
template <typename T>
__device__ __forceinline__ float act_eval_stored(const ActFn& a, float x) {
  if constexpr (sizeof(T) == 2) {
    return act_eval_fast<true>(a.kind, a.slope, x);
  } else {
    return act_eval_any(a.kind, a.slope, a.fast, x);
  }
}

// with_act_const<FAST>: ReLU, identity, ReLU6, SiLU and hardswish with the kind a constant in any
// storage, FAST as act_eval_fast (a kernel whose copies of its epilogue fit its registers: the
// conv1x1 kernel's FP32-storage instances, FAST at tf32, accurate at fp32).
template <bool FAST, typename Body>
__device__ __forceinline__ void with_act_const(const ActFn& act, Body body) {
  if (act.kind == Act::kRelu) return body([](float v) { return fmaxf(v, 0.f); });
  if (act.kind == Act::kIdentity) return body([](float v) { return v; });
  if (act.kind == Act::kRelu6) return body([](float v) { return act_eval_fast<FAST>(Act::kRelu6, 0.f, v); });
  if (act.kind == Act::kSilu) return body([](float v) { return act_eval_fast<FAST>(Act::kSilu, 0.f, v); });
  if (act.kind == Act::kHardswish)
    return body([](float v) { return act_eval_fast<FAST>(Act::kHardswish, 0.f, v); });
  body([kind = act.kind, slope = act.slope](float v) { return act_eval_fast<FAST>(kind, slope, v); });
}

// body(fn) with fn the activation `act` as a float -> float callable, for an epilogue that applies
// it to many values before storing them as T: ReLU and identity, and in 16-bit storage ReLU6
// (MobileNetV2), SiLU (EfficientNet) and hardswish (MobileNetV3), with the kind a constant, so no
// value passes through act_eval's switch (in the PTX a chain of compares and branches per value:
// 296 compares in the fp16 3x3/2 stem kernel); the others through it. In FP32 storage ReLU,
// identity and SiLU (fast or accurate as ActFn::fast says): copies of the epilogue for every kind
// with act_eval's accurate functions made ptxas spill (the stem's and the depthwise kernel's;
// with_act_const where they fit). The same formulas either way (act_eval_stored).
template <typename T, typename Body>
__device__ __forceinline__ void with_act_stored(const ActFn& act, Body body) {
  if constexpr (sizeof(T) == 2) {
    with_act_const<true>(act, body);
  } else {
    if (act.kind == Act::kRelu) return body([](float v) { return fmaxf(v, 0.f); });
    if (act.kind == Act::kIdentity) return body([](float v) { return v; });
    // SiLU (EfficientNet's) chosen outside the values' loop: through the switch, each value held
    // every activation's code and the FP32 stem ran twice as long (docs/performance.md, Session 42)
    if (act.fast && act.kind == Act::kSilu) return body([](float v) { return silu_fast(v); });
    if (act.kind == Act::kSilu) return body([](float v) { return act_eval(Act::kSilu, 0.f, v); });
    body([act](float v) { return act_eval_stored<T>(act, v); });
  }
}

}  // namespace cnnrun::gpu
