// The conv1x1 kernel (conv2d_1x1.h). A thread block of 8 warps keeps all N filters in shared
// memory (rows of the K channels padded to a multiple of 16 with zeros, plus 8 values of pitch so
// that ldmatrix's eight rows fall in distinct banks) and walks tiles of 128 pixels, gridDim.x
// apart (a grid of the blocks that fit at once): the next tile's copies are in flight while this
// one is computed. A warp multiplies its 16 pixels by 32 filters at a time on m16n8k16 (A and B
// by ldmatrix, the sums starting at the bias), applies the activation to the fragments in
// registers and parks the rounded values in its own stage, then copies each pixel's 32 outputs
// out as 16-byte vectors, a row's 64 bytes by 4 lanes. With a residual the stage holds the FP32
// sums instead, and the copy adds the residual and applies the activation before the one rounding
// (measurements: docs/performance.md, Session 34).
#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <type_traits>

#include "engine/core/error.h"
#include "engine/gpu/activation.cuh"
#include "engine/gpu/check.h"
#include "engine/gpu/conv2d_1x1.h"
#include "engine/gpu/cp_async.cuh"
#include "engine/gpu/implicit/mma.cuh"
#include "engine/gpu/storage.cuh"

namespace cnnrun::gpu {

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kTilePixels = 16 * kWarps;  // a warp's 16 rows of the m16 products
// Filters a warp multiplies at a time: 4 n8 tiles, 16 accumulators a thread, so that 4 blocks
// fit an SM (64 filters: 77-80 registers, 3 blocks, the ncu run in docs/performance.md)
constexpr int kChunk = 32;
constexpr int kStagePitch = kChunk + 8;  // stage rows (values): the fragments' stores conflict-free

// The block's shared memory, in this order: the warps' stages (FP32), the bias (FP32, np values),
// the filters (np rows of pitch values), two A buffers (kTilePixels rows of pitch values); sizes in
// bytes. The launch sizes the allocation with it, the kernel finds its parts with it.
struct Geometry {
  int kp, pitch, np;  // K padded to 16, staged row pitch (values), N padded to 16
  size_t stage, bias, w, a;
};

__host__ __device__ inline Geometry geometry(int K, int N) {
  Geometry g;
  g.kp = (K + 15) / 16 * 16;
  g.pitch = g.kp + 8;
  g.np = (N + 15) / 16 * 16;
  g.stage = sizeof(float) * kWarps * 16 * kStagePitch;
  g.bias = sizeof(float) * static_cast<size_t>(g.np);
  g.w = 2 * static_cast<size_t>(g.np) * static_cast<size_t>(g.pitch);
  g.a = 2 * 2 * static_cast<size_t>(kTilePixels) * static_cast<size_t>(g.pitch);  // two buffers
  return g;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

using implicit::ldmatrix_x4;

// RES: a residual z is added before the activation (FP32 sums staged); else the activation is
// applied in the fragments' registers and the stage holds the rounded values.
template <typename T, int PREC, bool RES>
__global__ void __launch_bounds__(kThreads, 4)
    conv1x1_kernel(const T* __restrict__ x, const T* __restrict__ w, const float* __restrict__ bias,
                   const T* __restrict__ z, T* __restrict__ y, int64_t pixels, int K, int N, int64_t y_ld,
                   ActFn act) {
  extern __shared__ __align__(16) unsigned char c1_smem[];
  const Geometry gm = geometry(K, N);
  const int kp = gm.kp, pitch = gm.pitch, np = gm.np;
  float* stage = reinterpret_cast<float*>(c1_smem);
  float* bsm = reinterpret_cast<float*>(c1_smem + gm.stage);
  T* wsm = reinterpret_cast<T*>(c1_smem + gm.stage + gm.bias);
  T* abuf = reinterpret_cast<T*>(c1_smem + gm.stage + gm.bias + gm.w);  // two buffers of kTilePixels rows
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int kc = K / 8, kcp = kp / 8;  // 16-byte pieces of a row: real, staged
  const int64_t tiles = (pixels + kTilePixels - 1) / kTilePixels;

  // The filters (zeros past N and K) and the bias, once.
  for (int i = tid; i < np * kcp; i += kThreads) {
    const int r = i / kcp, c = i - r * kcp;
    const bool ok = r < N && c < kc;
    cp_async16(wsm + r * pitch + c * 8, ok ? w + int64_t(r) * K + c * 8 : w, ok);
  }
  for (int i = tid; i < np; i += kThreads) bsm[i] = bias && i < N ? bias[i] : 0.f;
  auto stage_tile = [&](int64_t tile, T* buf) {
    const int64_t p0 = tile * kTilePixels;
    for (int i = tid; i < kTilePixels * kcp; i += kThreads) {
      const int r = i / kcp, c = i - r * kcp;
      const bool ok = p0 + r < pixels && c < kc;
      cp_async16(buf + r * pitch + c * 8, ok ? x + (p0 + r) * K + c * 8 : x, ok);
    }
  };

  // ldmatrix row addresses. A (pixels x K, row-major): matrices (rows 0-7, k 0-7), (rows 8-15,
  // k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15) are a0..a3 of m16n8k16's A. B (filters x K):
  // (filters 0-7, k 0-7), (0-7, k 8-15), (8-15, k 0-7), (8-15, k 8-15) are b0, b1 of two n8 tiles.
  const int a_row = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 8;
  const int b_row = (lane >> 4) * 8 + (lane & 7), b_col = ((lane >> 3) & 1) * 8;
  const uint32_t b_base = smem_addr(wsm + b_row * pitch + b_col);
  const int64_t ldy = y_ld > 0 ? y_ld : N;
  float* st = stage + warp * 16 * kStagePitch;
  const int g = lane >> 2, tq = lane & 3;

  int64_t tile = blockIdx.x;
  if (tile < tiles) stage_tile(tile, abuf);
  cp_async_commit();
  for (int it = 0; tile < tiles; tile += gridDim.x, ++it) {
    const T* cur = abuf + (it & 1) * kTilePixels * pitch;
    if (tile + gridDim.x < tiles) stage_tile(tile + gridDim.x, abuf + ((it + 1) & 1) * kTilePixels * pitch);
    cp_async_commit();
    cp_async_wait_prior();
    __syncthreads();
    const int64_t p0 = tile * kTilePixels + warp * 16;
    const uint32_t a_base = smem_addr(cur + a_row * pitch + a_col);
    for (int n0 = 0; p0 < pixels && n0 < N; n0 += kChunk) {
      const int nt = min(kChunk / 8, (N - n0) / 8);
      // The sums start at the bias: thread (g, tq) holds columns 2 tq, 2 tq + 1 of each n8 tile.
      float acc[kChunk / 8][4];
#pragma unroll
      for (int j = 0; j < kChunk / 8; ++j) {
        const float2 b = j < nt ? *reinterpret_cast<const float2*>(bsm + n0 + j * 8 + 2 * tq) : float2{};
        acc[j][0] = acc[j][2] = b.x, acc[j][1] = acc[j][3] = b.y;
      }
      for (int k0 = 0; k0 < kp; k0 += 16) {
        uint32_t a[4];
        ldmatrix_x4(a, a_base + k0 * 2);
#pragma unroll
        for (int j = 0; j < kChunk / 8; j += 2) {
          if (j < nt) {
            uint32_t b[4];
            ldmatrix_x4(b, b_base + static_cast<uint32_t>(((n0 + j * 8) * pitch + k0) * 2));
            implicit::mma_16<PREC>(acc[j], a, b[0], b[1]);
            if (j + 1 < nt) implicit::mma_16<PREC>(acc[j + 1], a, b[2], b[3]);
          }
        }
      }
      if constexpr (RES) {  // FP32 sums to the stage; the residual is added as they are stored
#pragma unroll
        for (int j = 0; j < kChunk / 8; ++j) {
          if (j < nt) {
            *reinterpret_cast<float2*>(st + g * kStagePitch + j * 8 + 2 * tq) =
                make_float2(acc[j][0], acc[j][1]);
            *reinterpret_cast<float2*>(st + (g + 8) * kStagePitch + j * 8 + 2 * tq) =
                make_float2(acc[j][2], acc[j][3]);
          }
        }
      } else {  // the activation in registers, the rounded values to the stage
        T* st16 = reinterpret_cast<T*>(st);
        with_act_stored<T>(act, [&](auto fn) {
#pragma unroll
          for (int j = 0; j < kChunk / 8; ++j) {
            if (j < nt) {
              *reinterpret_cast<Vec<T, 2>*>(st16 + g * kStagePitch + j * 8 + 2 * tq) =
                  Vec<T, 2>{{to<T>(fn(acc[j][0])), to<T>(fn(acc[j][1]))}};
              *reinterpret_cast<Vec<T, 2>*>(st16 + (g + 8) * kStagePitch + j * 8 + 2 * tq) =
                  Vec<T, 2>{{to<T>(fn(acc[j][2])), to<T>(fn(acc[j][3]))}};
            }
          }
        });
      }
      __syncwarp();
      // The warp's 16 pixels x nt pieces of 8 outputs, a row's pieces on consecutive lanes.
      for (int i = lane; i < 16 * nt; i += 32) {
        const int r = nt == kChunk / 8 ? i / (kChunk / 8) : i / nt, pc = i - r * nt;
        const int64_t px = p0 + r;
        if (px >= pixels) continue;
        const int col = n0 + pc * 8;
        if constexpr (RES) {
          // The two float4 halves in an order that puts a quarter warp's 8 reads (two rows of 4
          // pieces) in distinct banks.
          const int h = r & 1;
          const float* sv = st + r * kStagePitch + pc * 8;
          const float4 q0 = *reinterpret_cast<const float4*>(sv + 4 * h);
          const float4 q1 = *reinterpret_cast<const float4*>(sv + 4 * (1 - h));
          const float4 lo = h ? q1 : q0,
                       hi = h ? q0 : q1;  // columns 0-3, 4-7 (selects, not an indexed array)
          float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
          const Vec<T, 8> zv = *reinterpret_cast<const Vec<T, 8>*>(z + px * N + col);
          Vec<T, 8> o;
          with_act_stored<T>(act, [&](auto fn) {
#pragma unroll
            for (int e = 0; e < 8; ++e) o.v[e] = to<T>(fn(__fadd_rn(v[e], ld(zv.v[e]))));
          });
          *reinterpret_cast<Vec<T, 8>*>(y + px * ldy + col) = o;
        } else {  // a copy: 16 bytes of the stage to y
          const T* st16 = reinterpret_cast<const T*>(st);
          *reinterpret_cast<Vec<T, 8>*>(y + px * ldy + col) =
              *reinterpret_cast<const Vec<T, 8>*>(st16 + r * kStagePitch + pc * 8);
        }
      }
      __syncwarp();
    }
    __syncthreads();  // every warp is done with `cur` before the next stage refills it
  }
}

// Blocks of the kernel resident on an SM with `smem` bytes each (cached).
template <typename T, int PREC, bool RES>
int blocks_per_sm(size_t smem) {
  static std::mutex mu;
  static std::map<size_t, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (const auto it = cache.find(smem); it != cache.end()) return it->second;
  auto kernel = conv1x1_kernel<T, PREC, RES>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(kConv1x1MaxSmem)));
  int blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, smem));
  if (blocks < 1)
    throw Error("conv1x1: the kernel does not fit on an SM with " + std::to_string(smem) +
                " bytes of shared memory");
  return cache[smem] = blocks;
}

}  // namespace

size_t conv1x1_smem(const ConvParams& p) {
  if (p.in_c < 1 || p.filters < 1) return 0;
  const Geometry g = geometry(static_cast<int>(p.in_c), static_cast<int>(p.filters));
  return g.stage + g.bias + g.w + g.a;
}

std::string conv1x1_cannot_run(const ConvParams& p, Precision prec, bool channels_last) {
  if (!channels_last) return "the conv1x1 kernel runs channels last (--layout nhwc) only";
  if (prec != Precision::kFp16 && prec != Precision::kBf16)
    return "the conv1x1 kernel runs 16-bit storage (--precision fp16 or bf16) only";
  if (p.kernel_h != 1 || p.kernel_w != 1) return "the conv1x1 kernel runs 1x1 windows only";
  if (p.stride_h != 1 || p.stride_w != 1) return "the conv1x1 kernel runs stride 1 only";
  if (p.pad_h != 0 || p.pad_w != 0) return "the conv1x1 kernel runs unpadded convolutions only";
  if (p.dilated()) return "the conv1x1 kernel runs undilated convolutions only";
  if (p.groups != 1) return "the conv1x1 kernel runs groups 1 only";
  if (p.in_c % 8 != 0 || p.filters % 8 != 0)
    return "the conv1x1 kernel needs input channels and filters in multiples of 8 (here " +
           std::to_string(p.in_c) + " and " + std::to_string(p.filters) + ")";
  if (const size_t smem = conv1x1_smem(p); smem > kConv1x1MaxSmem)
    return "the conv1x1 kernel's filters and stages (" + std::to_string(p.filters) + " filters of " +
           std::to_string(p.in_c) + " channels) need " + std::to_string(smem) +
           " bytes of shared memory, more than " + std::to_string(kConv1x1MaxSmem);
  return "";
}

void launch_conv1x1(const ConvParams& p, Precision prec, const Conv1x1Io& io, int64_t n, ActFn act,
                    cudaStream_t s) {
  if (const std::string why = conv1x1_cannot_run(p, prec, true); !why.empty()) throw Error("conv1x1: " + why);
  const int K = static_cast<int>(p.in_c), N = static_cast<int>(p.filters);
  if (io.y_ld > 0 &&
      (io.y_ld < N || io.y_ld % 8 != 0 || io.z != nullptr || reinterpret_cast<uintptr_t>(io.y) % 16 != 0))
    throw Error("conv1x1: an output slice of " + std::to_string(N) + " channels in pixels of " +
                std::to_string(io.y_ld) + " values, misaligned or with a residual");
  const int64_t pixels = n * p.out_h * p.out_w;
  if (pixels <= 0) return;
  const size_t smem = conv1x1_smem(p);
  const int64_t tiles = (pixels + kTilePixels - 1) / kTilePixels;
  auto run = [&](auto* tag, auto prec_tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    constexpr int P = decltype(prec_tag)::value;
    auto go = [&](auto kernel, int per_sm) {
      const int64_t grid = std::min<int64_t>(tiles, int64_t{per_sm} * sm_count());
      kernel<<<static_cast<unsigned>(grid), kThreads, smem, s>>>(
          static_cast<const T*>(io.x), static_cast<const T*>(io.w), io.bias, static_cast<const T*>(io.z),
          static_cast<T*>(io.y), pixels, K, N, io.y_ld, act);
    };
    if (io.z)
      go(conv1x1_kernel<T, P, true>, blocks_per_sm<T, P, true>(smem));
    else
      go(conv1x1_kernel<T, P, false>, blocks_per_sm<T, P, false>(smem));
  };
  if (prec == Precision::kFp16)
    run(static_cast<__half*>(nullptr), std::integral_constant<int, implicit::kTcFp16>{});
  else
    run(static_cast<__nv_bfloat16*>(nullptr), std::integral_constant<int, implicit::kTcBf16>{});
  CUDA_CHECK_LAUNCH("conv1x1_kernel");
}

}  // namespace cnnrun::gpu
