// The conv1x1 kernel (conv2d_1x1.h). A thread block of 8 warps keeps all N filters in shared
// memory (rows of the K channels padded to a 32-byte multiple with zeros, plus 16 bytes of pitch
// so that ldmatrix's eight rows fall in distinct banks) and walks tiles of 128 pixels, gridDim.x
// apart (a grid of the blocks that fit at once): the next tile's copies are in flight while this
// one is computed. A warp multiplies its 16 pixels by 32 filters at a time (A and B by ldmatrix,
// the sums starting at the bias), applies the activation to the fragments in registers and parks
// the rounded values in its own stage, then copies each pixel's 32 outputs out as 16-byte
// vectors. With a residual the stage holds the FP32 sums instead, and the copy adds the residual
// and applies the activation before the one rounding. 16-bit storage multiplies on m16n8k16; FP32
// storage on m16n8k8 TF32 products, a k-step's 8 values the same 32 bytes as 16-bit's 16, so
// ldmatrix's 16-byte rows give the TF32 fragments with the same addresses in bytes: TF32 rounds
// both operands to nearest, 3xTF32 (fp32) splits each into a high part and the remainder and sums
// three products (measurements: docs/performance.md, Sessions 34 and 38). With the max-pool before
// the conv (PK 2 or 3: its square windows) each warp stages its own 16 rows of A through registers
// into one buffer instead, with no block-wide barrier: each 16-byte piece the maximum over the
// window's taps of the pool's input (the taps unrolled and clamped onto the input), so that the
// pooled tensor never exists (Session 40).
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
#include "engine/gpu/fast_div.cuh"
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
// bytes. es: bytes a stored value (2, or 4 in FP32 storage). The launch sizes the allocation with
// it, the kernel finds its parts with it.
struct Geometry {
  int kp, pitch, np;  // K padded to a k-step (32 bytes), staged row pitch (values), N padded to 16
  size_t stage, bias, w, a;
  size_t smem() const { return stage + bias + w + a; }  // a block's shared memory
};

__host__ __device__ inline Geometry geometry(int K, int N, int es, bool one_a = false) {
  Geometry g;
  const int step = 32 / es;  // values a k-step
  g.kp = (K + step - 1) / step * step;
  g.pitch = g.kp + 16 / es;
  g.np = (N + 15) / 16 * 16;
  g.stage = sizeof(float) * kWarps * 16 * kStagePitch;
  g.bias = sizeof(float) * static_cast<size_t>(g.np);
  g.w = static_cast<size_t>(es) * static_cast<size_t>(g.np) * static_cast<size_t>(g.pitch);
  // two A buffers (one where the pool's maxima are staged through registers: nothing in flight)
  g.a = (one_a ? 1 : 2) * static_cast<size_t>(es) * static_cast<size_t>(kTilePixels) *
        static_cast<size_t>(g.pitch);
  return g;
}

// The products of a k-step: a's fragment by n8 tiles j and j + 1 (b: b0, b1 of each, as one
// ldmatrix_x4 gives them; the second only where `two`). 16-bit: m16n8k16. FP32 storage: m16n8k8,
// TF32 (kTcTf32: a rounded by the caller, the filters rounded when staged) or 3xTF32 (kTcFp32: a
// the high part and al the remainder, split by the caller, B split here; the small products
// first). al is read at kTcFp32 only.
template <int PREC>
__device__ __forceinline__ void products(float (&d0)[4], float (&d1)[4], const uint32_t (&a)[4],
                                         const uint32_t (&al)[4], const uint32_t (&b)[4], bool two) {
  if constexpr (PREC == implicit::kTcFp16 || PREC == implicit::kTcBf16) {
    implicit::mma_16<PREC>(d0, a, b[0], b[1]);
    if (two) implicit::mma_16<PREC>(d1, a, b[2], b[3]);
  } else if constexpr (PREC == implicit::kTcTf32) {
    implicit::mma_tf32(d0, a, b[0], b[1]);
    if (two) implicit::mma_tf32(d1, a, b[2], b[3]);
  } else {
    uint32_t bh[4], bl[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      bh[i] = implicit::tf32_hi(__uint_as_float(b[i]));
      bl[i] = __float_as_uint(__uint_as_float(b[i]) - __uint_as_float(bh[i]));
    }
    implicit::mma_tf32(d0, al, bh[0], bh[1]);
    implicit::mma_tf32(d0, a, bl[0], bl[1]);
    implicit::mma_tf32(d0, a, bh[0], bh[1]);
    if (two) {
      implicit::mma_tf32(d1, al, bh[2], bh[3]);
      implicit::mma_tf32(d1, a, bl[2], bl[3]);
      implicit::mma_tf32(d1, a, bh[2], bh[3]);
    }
  }
}

// Row r's 8 FP32 values at piece pc of a warp's stage (rows of kStagePitch), columns 0-3 in lo
// and 4-7 in hi, read as two float4 halves in an order that puts a quarter warp's 8 reads (two
// rows of 4 pieces) in distinct banks (selects, not an indexed array).
__device__ __forceinline__ void stage_halves(const float* st, int r, int pc, float4& lo, float4& hi) {
  const int h = r & 1;
  const float* sv = st + r * kStagePitch + pc * 8;
  const float4 q0 = *reinterpret_cast<const float4*>(sv + 4 * h);
  const float4 q1 = *reinterpret_cast<const float4*>(sv + 4 * (1 - h));
  lo = h ? q1 : q0, hi = h ? q0 : q1;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

using implicit::ldmatrix_x4;

// The max-pool's window for the kernel (Conv1x1Io::pool): the output pixel's column and row by
// FastDiv (launch pixels below 2^31), the input plane, stride and padding.
struct PoolTaps {
  FastDiv ow, oh;
  int in_h = 0, in_w = 0, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
};

// RES: a residual z is added before the activation (FP32 sums staged); else the activation is
// applied in the fragments' registers and the stage holds the rounded values. T: __half or
// __nv_bfloat16 (PREC kTcFp16 / kTcBf16), or float (PREC kTcTf32 / kTcFp32). PK 2 or 3: x is a
// max-pool's input and A the maxima of its PK x PK windows (`taps`); 0: x is A.
template <typename T, int PREC, bool RES, int PK>
__global__ void __launch_bounds__(kThreads, 4)
    conv1x1_kernel(const T* __restrict__ x, const T* __restrict__ w, const float* __restrict__ bias,
                   const T* __restrict__ z, T* __restrict__ y, int64_t pixels, int K, int N, int64_t y_ld,
                   ActFn act, PoolTaps taps) {
  extern __shared__ __align__(16) unsigned char c1_smem[];
  constexpr int es = static_cast<int>(sizeof(T)), kv = 16 / es;  // bytes a value, values a 16-byte piece
  // The activation's kind a constant at every storage; SiLU and sigmoid approximate where the
  // products are 16-bit or TF32, accurate at fp32 (activation.cuh).
  constexpr bool kFastAct = PREC != implicit::kTcFp32;
  const Geometry gm = geometry(K, N, es, PK > 0);
  const int kp = gm.kp, pitch = gm.pitch, np = gm.np;
  float* stage = reinterpret_cast<float*>(c1_smem);
  float* bsm = reinterpret_cast<float*>(c1_smem + gm.stage);
  T* wsm = reinterpret_cast<T*>(c1_smem + gm.stage + gm.bias);
  T* abuf = reinterpret_cast<T*>(c1_smem + gm.stage + gm.bias + gm.w);  // two buffers of kTilePixels rows
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int kc = K / kv, kcp = kp / kv;  // 16-byte pieces of a row: real, staged
  const int64_t tiles = (pixels + kTilePixels - 1) / kTilePixels;

  // The filters (zeros past N and K) and the bias, once; TF32's rounded to nearest as they are.
  for (int i = tid; i < np * kcp; i += kThreads) {
    const int r = i / kcp, c = i - r * kcp;
    const bool ok = r < N && c < kc;
    if constexpr (PREC == implicit::kTcTf32) {
      float4 v = ok ? *reinterpret_cast<const float4*>(w + int64_t(r) * K + c * kv) : float4{};
      v.x = __uint_as_float(implicit::tf32_rn(v.x)), v.y = __uint_as_float(implicit::tf32_rn(v.y));
      v.z = __uint_as_float(implicit::tf32_rn(v.z)), v.w = __uint_as_float(implicit::tf32_rn(v.w));
      *reinterpret_cast<float4*>(wsm + r * pitch + c * kv) = v;
    } else {
      cp_async16(wsm + r * pitch + c * kv, ok ? w + int64_t(r) * K + c * kv : w, ok);
    }
  }
  for (int i = tid; i < np; i += kThreads) bsm[i] = bias && i < N ? bias[i] : 0.f;
  // The tile's rows first..first + rows - 1 (every thread of the block: cp.async; a warp's own 16
  // rows: the pool's maxima), `threads` apart from `me`.
  auto stage_tile = [&](int64_t tile, T* buf, int first, int rows, int me, int threads) {
    const int64_t p0 = tile * kTilePixels;
    for (int i = me; i < rows * kcp; i += threads) {
      const int r = first + i / kcp, c = i - (i / kcp) * kcp;
      const bool ok = p0 + r < pixels && c < kc;
      if constexpr (PK == 0) {
        cp_async16(buf + r * pitch + c * kv, ok ? x + (p0 + r) * K + c * kv : x, ok);
      } else {  // the window's maximum (zeros past the pixels and K, as cp.async fills them)
        Vec<T, kv> m;
#pragma unroll
        for (int e = 0; e < kv; ++e) m.v[e] = to<T>(ok ? -INFINITY : 0.f);
        if (ok) {
          const int q = static_cast<int>(p0 + r);
          const int q2 = fdiv(q, taps.ow), ox = q - q2 * static_cast<int>(taps.ow.d);
          const int img = fdiv(q2, taps.oh), oy = q2 - img * static_cast<int>(taps.oh.d);
          const int y0 = oy * taps.stride_h - taps.pad_h, x0 = ox * taps.stride_w - taps.pad_w;
          const T* src = x + int64_t(img) * taps.in_h * taps.in_w * K + c * kv;
          // A tap past the input is clamped onto the nearest one inside: every window holds some
          // of the input and is one run of rows and columns, so that tap is in the same window
          // and the maximum is the same. The loads need no predicate and are all in flight at once.
#pragma unroll
          for (int dy = 0; dy < PK; ++dy) {
            const int yy = min(max(y0 + dy, 0), taps.in_h - 1);
#pragma unroll
            for (int dx = 0; dx < PK; ++dx) {
              const int xx = min(max(x0 + dx, 0), taps.in_w - 1);
              max_into(m, *reinterpret_cast<const Vec<T, kv>*>(src + (int64_t(yy) * taps.in_w + xx) * K));
            }
          }
        }
        *reinterpret_cast<Vec<T, kv>*>(buf + r * pitch + c * kv) = m;
      }
    }
  };

  // ldmatrix row addresses, a 16-byte piece of a row each (kv values). A (pixels x K, row-major):
  // matrices (rows 0-7, piece 0), (rows 8-15, piece 0), (rows 0-7, piece 1), (rows 8-15, piece 1)
  // are a0..a3 of m16n8k16's A (16-bit) and of m16n8k8's (TF32). B (filters x K): (filters 0-7,
  // piece 0), (0-7, piece 1), (8-15, piece 0), (8-15, piece 1) are b0, b1 of two n8 tiles.
  const int a_row = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * kv;
  const int b_row = (lane >> 4) * 8 + (lane & 7), b_col = ((lane >> 3) & 1) * kv;
  const uint32_t b_base = smem_addr(wsm + b_row * pitch + b_col);
  const int64_t ldy = y_ld > 0 ? y_ld : N;
  float* st = stage + warp * 16 * kStagePitch;
  const int g = lane >> 2, tq = lane & 3;

  int64_t tile = blockIdx.x;
  if constexpr (PK == 0) {
    if (tile < tiles) stage_tile(tile, abuf, 0, kTilePixels, tid, kThreads);
    cp_async_commit();
  } else {  // the filters and bias in place; from here each warp stages and reads its own rows
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();
  }
  for (int it = 0; tile < tiles; tile += gridDim.x, ++it) {
    const T* cur = abuf;
    if constexpr (PK == 0) {  // the next tile's copies in flight while this one is computed
      cur = abuf + (it & 1) * kTilePixels * pitch;
      if (tile + gridDim.x < tiles)
        stage_tile(tile + gridDim.x, abuf + ((it + 1) & 1) * kTilePixels * pitch, 0, kTilePixels, tid,
                   kThreads);
      cp_async_commit();
      cp_async_wait_prior();
      __syncthreads();
    } else {  // the maxima staged through registers: the warp's other work and other warps fill the wait
      stage_tile(tile, abuf, warp * 16, 16, lane, 32);
      __syncwarp();
    }
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
      for (int k0 = 0; k0 < kp; k0 += 2 * kv) {
        uint32_t a[4], al[4];
        ldmatrix_x4(a, a_base + k0 * es);
        if constexpr (PREC == implicit::kTcTf32) {
#pragma unroll
          for (int i = 0; i < 4; ++i) a[i] = implicit::tf32_rn(__uint_as_float(a[i]));
        } else if constexpr (PREC == implicit::kTcFp32) {  // a the high part, al the remainder
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float v = __uint_as_float(a[i]);
            a[i] = implicit::tf32_hi(v);
            al[i] = __float_as_uint(v - __uint_as_float(a[i]));
          }
        }
#pragma unroll
        for (int j = 0; j < kChunk / 8; j += 2) {
          if (j < nt) {
            uint32_t b[4];
            ldmatrix_x4(b, b_base + static_cast<uint32_t>(((n0 + j * 8) * pitch + k0) * es));
            products<PREC>(acc[j], acc[j + 1], a, al, b, j + 1 < nt);
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
        with_act_const<kFastAct>(act, [&](auto fn) {
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
          float4 lo, hi;
          stage_halves(st, r, pc, lo, hi);
          float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
          const Vec<T, 8> zv = *reinterpret_cast<const Vec<T, 8>*>(z + px * N + col);
          Vec<T, 8> o;
          with_act_const<kFastAct>(act, [&](auto fn) {
#pragma unroll
            for (int e = 0; e < 8; ++e) o.v[e] = to<T>(fn(__fadd_rn(v[e], ld(zv.v[e]))));
          });
          *reinterpret_cast<Vec<T, 8>*>(y + px * ldy + col) = o;
        } else if constexpr (es == 2) {  // a copy: 16 bytes of the stage to y
          const T* st16 = reinterpret_cast<const T*>(st);
          *reinterpret_cast<Vec<T, 8>*>(y + px * ldy + col) =
              *reinterpret_cast<const Vec<T, 8>*>(st16 + r * kStagePitch + pc * 8);
        } else {  // FP32: 32 bytes of the stage to y
          float4 lo, hi;
          stage_halves(st, r, pc, lo, hi);
          float4* yv = reinterpret_cast<float4*>(y + px * ldy + col);
          yv[0] = lo, yv[1] = hi;
        }
      }
      __syncwarp();
    }
    // Every warp is done with `cur` before the next stage refills it (pooled: the warp's own rows).
    if constexpr (PK == 0)
      __syncthreads();
    else
      __syncwarp();
  }
}

// Blocks of the kernel resident on an SM with `smem` bytes each (cached).
template <typename T, int PREC, bool RES, int PK>
int blocks_per_sm(size_t smem) {
  static std::mutex mu;
  static std::map<size_t, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (const auto it = cache.find(smem); it != cache.end()) return it->second;
  auto kernel = conv1x1_kernel<T, PREC, RES, PK>;
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

size_t conv1x1_smem(const ConvParams& p, Precision prec, bool pooled) {
  if (p.in_c < 1 || p.filters < 1) return 0;
  const Geometry g = geometry(static_cast<int>(p.in_c), static_cast<int>(p.filters),
                              static_cast<int>(storage_bytes(storage_of(prec))), pooled);
  return g.smem();
}

std::string conv1x1_cannot_run(const ConvParams& p, Precision prec, bool channels_last, bool pooled) {
  if (!channels_last) return "the conv1x1 kernel runs channels last (--layout nhwc) only";
  if (p.kernel_h != 1 || p.kernel_w != 1) return "the conv1x1 kernel runs 1x1 windows only";
  if (p.stride_h != 1 || p.stride_w != 1) return "the conv1x1 kernel runs stride 1 only";
  if (p.pad_h != 0 || p.pad_w != 0) return "the conv1x1 kernel runs unpadded convolutions only";
  if (p.dilated()) return "the conv1x1 kernel runs undilated convolutions only";
  if (p.groups != 1) return "the conv1x1 kernel runs groups 1 only";
  if (p.in_c % 8 != 0 || p.filters % 8 != 0)
    return "the conv1x1 kernel needs input channels and filters in multiples of 8 (here " +
           std::to_string(p.in_c) + " and " + std::to_string(p.filters) + ")";
  if (const size_t smem = conv1x1_smem(p, prec, pooled); smem > kConv1x1MaxSmem)
    return "the conv1x1 kernel's filters and stages (" + std::to_string(p.filters) + " filters of " +
           std::to_string(p.in_c) + " channels) need " + std::to_string(smem) +
           " bytes of shared memory at " + precision_name(prec) + ", more than " +
           std::to_string(kConv1x1MaxSmem);
  return "";
}

std::string conv1x1_pool_cannot_run(const ConvParams& p, const Pool2dArgs& a, bool residual) {
  if (!a.is_max || a.adaptive) return "the conv1x1 kernel takes a max-pool of fixed windows only";
  if (a.kernel_h != a.kernel_w || (a.kernel_h != 2 && a.kernel_h != 3))
    return "the conv1x1 kernel takes a max-pool of 2x2 or 3x3 windows only (here " +
           std::to_string(a.kernel_h) + "x" + std::to_string(a.kernel_w) + ")";
  if (a.stride_h < 1 || a.stride_w < 1 || a.pad_h < 0 || a.pad_w < 0)
    return "the max-pool's strides must be positive, its pads not negative";
  if (a.channels != p.in_c || a.out_h != p.in_h || a.out_w != p.in_w || a.in_h < 1 || a.in_w < 1)
    return "the max-pool's output is not the conv's input";
  // Every window holds some of the input (the kernel clamps its taps onto it), as a pool layer's
  // own rules make it: pads at most half the window, the last window starting before the input ends.
  if (2 * a.pad_h > a.kernel_h || 2 * a.pad_w > a.kernel_w ||
      int64_t(a.out_h - 1) * a.stride_h - a.pad_h >= a.in_h ||
      int64_t(a.out_w - 1) * a.stride_w - a.pad_w >= a.in_w)
    return "the max-pool has a window outside its input";
  if (residual) return "the conv1x1 kernel takes a max-pool only without a residual add";
  return "";
}

void launch_conv1x1(const ConvParams& p, Precision prec, const Conv1x1Io& io, int64_t n, ActFn act,
                    cudaStream_t s) {
  if (const std::string why = conv1x1_cannot_run(p, prec, true, io.pool != nullptr); !why.empty())
    throw Error("conv1x1: " + why);
  if (io.pool)
    if (const std::string why = conv1x1_pool_cannot_run(p, *io.pool, io.z != nullptr); !why.empty())
      throw Error("conv1x1: " + why);
  const int K = static_cast<int>(p.in_c), N = static_cast<int>(p.filters);
  if (io.y_ld > 0 &&
      (io.y_ld < N || io.y_ld % 8 != 0 || io.z != nullptr || reinterpret_cast<uintptr_t>(io.y) % 16 != 0))
    throw Error("conv1x1: an output slice of " + std::to_string(N) + " channels in pixels of " +
                std::to_string(io.y_ld) + " values, misaligned or with a residual");
  const int64_t pixels = n * p.out_h * p.out_w;
  if (pixels <= 0) return;
  PoolTaps taps;
  if (io.pool) {
    if (pixels >= (int64_t{1} << 31))
      throw Error("conv1x1: " + std::to_string(pixels) + " pooled pixels in one launch, more than 2^31");
    const Pool2dArgs& a = *io.pool;
    taps.ow = make_fastdiv(static_cast<unsigned>(a.out_w)),
    taps.oh = make_fastdiv(static_cast<unsigned>(a.out_h));
    taps.in_h = a.in_h, taps.in_w = a.in_w, taps.stride_h = a.stride_h, taps.stride_w = a.stride_w,
    taps.pad_h = a.pad_h, taps.pad_w = a.pad_w;
  }
  const size_t smem =
      geometry(K, N, static_cast<int>(storage_bytes(storage_of(prec))), io.pool != nullptr).smem();
  const int64_t tiles = (pixels + kTilePixels - 1) / kTilePixels;
  auto run = [&](auto* tag, auto prec_tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    constexpr int P = decltype(prec_tag)::value;
    auto go = [&](auto kernel, int per_sm) {
      const int64_t grid = std::min<int64_t>(tiles, int64_t{per_sm} * sm_count());
      kernel<<<static_cast<unsigned>(grid), kThreads, smem, s>>>(
          static_cast<const T*>(io.x), static_cast<const T*>(io.w), io.bias, static_cast<const T*>(io.z),
          static_cast<T*>(io.y), pixels, K, N, io.y_ld, act, taps);
    };
    if (io.pool && io.pool->kernel_h == 2)
      go(conv1x1_kernel<T, P, false, 2>, blocks_per_sm<T, P, false, 2>(smem));
    else if (io.pool)
      go(conv1x1_kernel<T, P, false, 3>, blocks_per_sm<T, P, false, 3>(smem));
    else if (io.z)
      go(conv1x1_kernel<T, P, true, 0>, blocks_per_sm<T, P, true, 0>(smem));
    else
      go(conv1x1_kernel<T, P, false, 0>, blocks_per_sm<T, P, false, 0>(smem));
  };
  switch (prec) {
    case Precision::kFp16:
      run(static_cast<__half*>(nullptr), std::integral_constant<int, implicit::kTcFp16>{});
      break;
    case Precision::kBf16:
      run(static_cast<__nv_bfloat16*>(nullptr), std::integral_constant<int, implicit::kTcBf16>{});
      break;
    case Precision::kTf32:
      run(static_cast<float*>(nullptr), std::integral_constant<int, implicit::kTcTf32>{});
      break;
    case Precision::kFp32:
      run(static_cast<float*>(nullptr), std::integral_constant<int, implicit::kTcFp32>{});
      break;
  }
  CUDA_CHECK_LAUNCH("conv1x1_kernel");
}

}  // namespace cnnrun::gpu
