#include <cstdint>
#include <type_traits>

#include "engine/core/error.h"
#include "engine/gpu/conv2d_cudnn_3xtf32.h"
#include "engine/gpu/grid_stride.h"

namespace cnnrun::gpu {

namespace {

// v rounded to the nearest TF32 value (ties away from zero), as the tensor cores' own
// conversion: 10 mantissa bits, the low 13 bits zero.
__device__ __forceinline__ float to_tf32(float v) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
  return __uint_as_float(r);
}

struct Parts {
  float hi, lo;
};
__device__ __forceinline__ Parts split(float v) {
  const float hi = to_tf32(v);
  return {hi, isfinite(v) ? to_tf32(v - hi) : 0.f};
}

// One thread per V consecutive values of a row (V divides c): reads them once, writes the three
// copies of the row's stacked layout.
template <int V>
__global__ void split_kernel(const float* __restrict__ in, float* __restrict__ out, int64_t rows, int64_t c,
                             bool filters) {
  using Vec = typename std::conditional<V == 4, float4, float>::type;
  const int64_t per_row = c / V, total = rows * per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / per_row, col = (i - row * per_row) * V;
    const Vec v = *reinterpret_cast<const Vec*>(in + row * c + col);
    Vec hi, lo;
    const float* pv = reinterpret_cast<const float*>(&v);
    float* ph = reinterpret_cast<float*>(&hi);
    float* pl = reinterpret_cast<float*>(&lo);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const Parts p = split(pv[k]);
      ph[k] = p.hi;
      pl[k] = p.lo;
    }
    float* o = out + row * 3 * c + col;
    *reinterpret_cast<Vec*>(o) = filters ? lo : hi;
    *reinterpret_cast<Vec*>(o + c) = filters ? hi : lo;
    *reinterpret_cast<Vec*>(o + 2 * c) = hi;
  }
}

}  // namespace

std::string cudnn_3xtf32_cannot_run(const ConvParams& p, Precision prec, bool channels_last) {
  if (prec != Precision::kFp32)
    return std::string("it is FP32 arithmetic (--precision fp32); at ") + precision_name(prec) +
           " the cudnn convolution runs the precision's own";
  if (!channels_last) return "it runs channels last (--layout nhwc)";
  if (p.groups != 1)
    return "it runs ungrouped convolutions (groups 1), not " + std::to_string(p.groups) + " groups";
  return "";
}

void launch_split_tf32(const float* in, float* out, int64_t rows, int64_t c, bool filters, cudaStream_t s) {
  if (rows <= 0 || c <= 0) return;
  const bool vec4 =
      c % 4 == 0 && reinterpret_cast<uintptr_t>(in) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  if (vec4)
    split_kernel<4>
        <<<grid_stride_blocks(rows * c / 4), kGridStrideThreads, 0, s>>>(in, out, rows, c, filters);
  else
    split_kernel<1><<<grid_stride_blocks(rows * c), kGridStrideThreads, 0, s>>>(in, out, rows, c, filters);
  CUDA_CHECK_LAUNCH("split_kernel");
}

ConvParams Cudnn3xTf32Conv::stacked(const ConvParams& p) {
  ConvParams q = p;
  q.in_c = 3 * p.in_c;
  return q;
}

Cudnn3xTf32Conv::Cudnn3xTf32Conv(const ConvParams& p, ActFn act, bool residual)
    : p_(p), conv_(stacked(p), act, residual, true) {
  // TF32 tensor cores on FP32 channels-last tensors (CudnnConv::set_format).
  conv_.set_format(Precision::kTf32, true);
}

void Cudnn3xTf32Conv::forward(const CudnnHandle& h, cudaStream_t s, int64_t n, const float* x, float* x3,
                              const float* w, const float* bias, const float* z, float* y, void* ws,
                              size_t ws_bytes, const CudnnConv::OutSlice* slice) {
  const int64_t C = p_.in_c;
  if (!w3_.get()) {
    w3_.alloc(static_cast<size_t>(p_.filters * p_.kernel_h * p_.kernel_w * 3 * C) * sizeof(float));
    launch_split_tf32(w, w3_.as<float>(), p_.filters * p_.kernel_h * p_.kernel_w, C, true, s);
  }
  launch_split_tf32(x, x3, n * p_.in_h * p_.in_w, C, false, s);
  if (!conv_.found()) conv_.find(h, s, n, x3, w3_.get(), bias, bias, z, y, ws, ws_bytes, slice);
  conv_.forward(h, s, n, x3, w3_.get(), bias, bias, z, conv_.writes_slice() ? slice->y : y, ws, ws_bytes);
}

std::string Cudnn3xTf32Conv::algo_name() const {
  return "cudnn-3xtf32(" + conv_.algo_name() + ", TF32 parts [x_hi, x_lo, x_hi] x [w_lo, w_hi, w_hi])";
}

}  // namespace cnnrun::gpu
