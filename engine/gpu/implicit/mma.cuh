// The tensor-core wrappers: mma.sync products in TF32, FP16 and BF16, the operands' rounding
// and packing (pack2 is also the host's packing of the FP16 / BF16 weights).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

#include "engine/gpu/implicit/tiling.h"

namespace cnnrun::gpu::implicit {

// The big part by truncation, one AND (cvt.rna.tf32 is ~4 instructions on sm_90, measured in
// the SASS); x - hi is exact, and passed as plain FP32 bits: the tensor cores use its top 19
// bits, so lo loses at most 2^-10 of itself, ~2^-20 of x.
__device__ __forceinline__ unsigned tf32_hi(float x) { return __float_as_uint(x) & 0xffffe000u; }
// Not volatile: the compiler may interleave independent products (three into one accumulator
// in a row would wait on each other; volatile kept that order and halved the tensor rate).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The same product with a zero accumulator: it starts a k-step's partial sum.
__device__ __forceinline__ void mma_tf32_first(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                               unsigned b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.f));
}

// Operands rounded to tf32 to nearest (ties away), two integer ops: what cvt.rna does.
__device__ __forceinline__ unsigned tf32_rn(float x) { return (__float_as_uint(x) + 0x1000u) & 0xffffe000u; }

// Two floats as one register of two 16-bit values, lo in the low half (the lower k-slot),
// rounded to nearest even: the kernel's A operands and, on the host, the packed weights.
template <int PREC>
__host__ __device__ __forceinline__ unsigned pack2(float lo, float hi) {
  unsigned v;
  if constexpr (PREC == kTcFp16) {
    const __half2 h = __floats2half2_rn(lo, hi);
    memcpy(&v, &h, 4);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    memcpy(&v, &h, 4);
  }
  return v;
}

// The m16n8k16 A fragment from two k-steps' A values x[j][i] (rows g / g + 8 at taps k0: i = 0 / 1,
// at k1: i = 2 / 3): its k-slots 2t, 2t+1, 2t+8, 2t+9 are k0, k1 of k-step 0 and of k-step 1.
template <int PREC>
__device__ __forceinline__ void a_frag16(const float (&x)[2][4], unsigned (&af)[4]) {
  af[0] = pack2<PREC>(x[0][0], x[0][2]), af[1] = pack2<PREC>(x[0][1], x[0][3]);
  af[2] = pack2<PREC>(x[1][0], x[1][2]), af[3] = pack2<PREC>(x[1][1], x[1][3]);
}

// d += a * b, m16n8k16, FP16 or BF16 operands, FP32 accumulator.
template <int PREC>
__device__ __forceinline__ void mma_16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (PREC == kTcFp16)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The FP16 product with a zero accumulator: it starts a partial sum (kTcX16).
__device__ __forceinline__ void mma_f16_first(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                              unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.f));
}

// Four 8x8 16-bit matrices from shared memory (each lane gives one row's address: lane l row l % 8
// of matrix l / 8); thread t receives of each matrix row t / 4's 32-bit word t % 4.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

}  // namespace cnnrun::gpu::implicit
