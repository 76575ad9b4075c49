// Device-side helpers for activations in a Storage format (nhwc.h): loads to FP32, the one
// rounding when a value is stored, 16-byte vectors of one pixel's channels, their max, and
// dispatch on the format. Shared by the channels-last passes (nhwc.cu) and the channels-last depthwise
// kernel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "engine/gpu/nhwc.h"

namespace cnnrun::gpu {

__device__ __forceinline__ float ld(float x) { return x; }
__device__ __forceinline__ float ld(__half x) { return __half2float(x); }
__device__ __forceinline__ float ld(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T to(float v);
template <>
__device__ __forceinline__ float to<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half to<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 to<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// V values of one pixel's channels, moved as one 16-byte (or smaller) access.
template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

// acc = max(acc, v) for each value, a NaN in v never taken (nhwc.cu's pool_nhwc_kernel's `acc < v ? v :
// acc`; acc starts at -inf, so it is never NaN): FP32 through fmaxf, 16-bit values two an
// instruction (__hmax2 returns the other input where one is NaN).
template <typename T, int V>
__device__ __forceinline__ void max_into(Vec<T, V>& acc, const Vec<T, V>& v) {
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int k = 0; k < V; ++k) acc.v[k] = fmaxf(acc.v[k], v.v[k]);
  } else if constexpr (V % 2 == 0) {
    using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
    T2* a = reinterpret_cast<T2*>(acc.v);
    const T2* b = reinterpret_cast<const T2*>(v.v);
#pragma unroll
    for (int k = 0; k < V / 2; ++k) a[k] = __hmax2(a[k], b[k]);
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) acc.v[k] = __hmax(acc.v[k], v.v[k]);
  }
}

// fn(T*) with T the storage type.
template <typename Fn>
void with_storage(Storage t, Fn fn) {
  switch (t) {
    case Storage::kF32:
      return fn(static_cast<float*>(nullptr));
    case Storage::kF16:
      return fn(static_cast<__half*>(nullptr));
    case Storage::kBf16:
      return fn(static_cast<__nv_bfloat16*>(nullptr));
  }
}

// Values of T in 16 bytes.
template <typename T>
constexpr int kVec = 16 / static_cast<int>(sizeof(T));

}  // namespace cnnrun::gpu
