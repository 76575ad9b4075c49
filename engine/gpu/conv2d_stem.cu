#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "engine/core/error.h"
#include "engine/gpu/activation.cuh"
#include "engine/gpu/check.h"
#include "engine/gpu/conv2d_stem.h"
#include "engine/gpu/pool_window.cuh"
#include "engine/gpu/storage.cuh"

namespace cnnrun::gpu {

namespace {

// A tile of output pixels: kTileH rows of kTileW; four warps, each 32 pixels (two m16 tiles).
constexpr int kTileH = 8, kTileW = 16, kThreads = 128;
constexpr int kMaxTaps = 256;  // kernel_h x kernel_w x channels (1 counted as 2, 3 as 4), rounded up to 16
constexpr size_t kMaxSmem = size_t{96} << 10;  // shared memory a block may ask for

struct Geom {
  int in_h, in_w, c, out_h, out_w, filters;
  int kh, kw, sh, sw, pad_h, pad_w, dh, dw;
  int cp;                // channels a pixel in the patch and the taps: c rounded up to 2 or 4
  int kc;                // the weights' taps a filter (kh * kw * c)
  int k, kp, ks;         // taps (kh * kw * cp), rounded up to 16, and a weight row's stride
  int patch_h, patch_w;  // the input under one tile
  int patch;             // its values (patch_h * patch_w * cp)
  int tiles_x, tiles;    // tiles a row and an image
  int64_t total;         // tiles of all the images
  // The max-pool in the epilogue (StemPool; pooled false: none): its window, stride, padding
  // and output, and the pooled outputs a tile (tph x tpw): windows that tile its 8 x 16 outputs.
  bool pooled;
  int pkh, pkw, psh, psw, pph, ppw, pout_h, pout_w, tph, tpw;
};

Geom geom(const ConvParams& p, int64_t n, const StemPool& pool = StemPool{}) {
  auto i32 = [](int64_t v) { return static_cast<int>(v); };
  Geom g{};
  g.in_h = i32(p.in_h), g.in_w = i32(p.in_w), g.c = i32(p.in_c), g.out_h = i32(p.out_h),
  g.out_w = i32(p.out_w);
  g.filters = i32(p.filters), g.kh = i32(p.kernel_h), g.kw = i32(p.kernel_w);
  g.sh = i32(p.stride_h), g.sw = i32(p.stride_w), g.pad_h = i32(p.pad_h), g.pad_w = i32(p.pad_w);
  g.dh = i32(p.dilation_h), g.dw = i32(p.dilation_w);
  g.cp = g.c == 1 ? 2 : g.c == 3 ? 4 : g.c;
  g.kc = g.kh * g.kw * g.c;
  g.k = g.kh * g.kw * g.cp;
  g.kp = (g.k + 15) / 16 * 16;
  g.ks = g.kp + 8;  // a row's 32-bit words = 4 mod 8: the eight filters of a B fragment hit distinct banks
  g.patch_h = (kTileH - 1) * g.sh + (g.kh - 1) * g.dh + 1;
  g.patch_w = (kTileW - 1) * g.sw + (g.kw - 1) * g.dw + 1;
  g.patch = g.patch_h * g.patch_w * g.cp;
  g.pooled = pool.kernel_h > 0;
  if (g.pooled) {
    g.pkh = pool.kernel_h, g.pkw = pool.kernel_w, g.psh = pool.stride_h, g.psw = pool.stride_w;
    g.pph = pool.pad_h, g.ppw = pool.pad_w, g.pout_h = pool.out_h, g.pout_w = pool.out_w;
    g.tph = kTileH / g.pkh;
    g.tpw = kTileW / g.pkw;
    g.tiles_x = (g.pout_w + g.tpw - 1) / g.tpw;
    g.tiles = g.tiles_x * ((g.pout_h + g.tph - 1) / g.tph);
  } else {
    g.tiles_x = (g.out_w + kTileW - 1) / kTileW;
    g.tiles = g.tiles_x * ((g.out_h + kTileH - 1) / kTileH);
  }
  g.total = n * g.tiles;
  return g;
}

int n_tiles(const Geom& g) { return g.filters <= 32 ? 4 : 8; }  // 8-filter tiles a block

// A staged output row: the block's filters and 8 more values (16 bytes), so that the eight
// pixels a warp's stores hit start in distinct bank groups and rows stay 16-byte aligned.
constexpr int out_stride(int nt) { return nt * 8 + 8; }

size_t smem_bytes(const Geom& g, int nt) {
  return static_cast<size_t>(nt * 8 * g.ks) * 2 + static_cast<size_t>(kTileH * kTileW * out_stride(nt)) * 2 +
         static_cast<size_t>(g.kp / 2) * 4 + static_cast<size_t>(g.patch) * 2;
}

template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                 uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

// The GEMM: rows the tile's pixels, columns the block's NT x 8 filters, depth the taps (window
// row, column, channel: the weights' own order, each pixel's channels padded with zeros to an even
// count, 2 or 4). A's values come from the staged patch through two tables (a pixel's first value,
// a pair of taps' offset from it), two channels in one aligned 4-byte load, so no im2col matrix is
// written. Taps past k (offset -1) are zeros, against zero weights.
template <typename T, int NT>
__global__ void __launch_bounds__(kThreads, 4)
    stem_kernel(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w,
                const float* __restrict__ bias, T* __restrict__ y, Geom g, ActFn act) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int NB = NT * 8;
  constexpr int OS = out_stride(NT);
  uint16_t* ws = reinterpret_cast<uint16_t*>(smem);                // [NB][ks]
  T* out = reinterpret_cast<T*>(ws + NB * g.ks);                   // [tile pixels][OS]
  int* koff = reinterpret_cast<int*>(out + kTileH * kTileW * OS);  // [kp / 2]: a pair of taps'
  uint32_t* patch = reinterpret_cast<uint32_t*>(koff + g.kp / 2);  // [patch / 2]: pairs of values
  const int f0 = blockIdx.y * NB;
  for (int i = threadIdx.x; i < NB * g.kp; i += kThreads) {
    const int nn = i / g.kp, k = i - nn * g.kp, f = f0 + nn, rs = k / g.cp, ch = k - rs * g.cp;
    ws[nn * g.ks + k] = f < g.filters && k < g.k && ch < g.c
                            ? w[static_cast<int64_t>(f) * g.kc + rs * g.c + ch]
                            : uint16_t{0};
  }
  for (int p = threadIdx.x; p < g.kp / 2; p += kThreads) {
    int off = -1;
    if (2 * p < g.k) {
      const int ch = 2 * p % g.cp, rs = 2 * p / g.cp, r = rs / g.kw, q = rs - r * g.kw;
      off = (r * g.dh * g.patch_w + q * g.dw) * g.cp + ch;  // even
    }
    koff[p] = off;
  }

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
  // ldmatrix.x4 of B: lane l gives the row address of matrix l / 8 (two filter tiles x two
  // halves of the 16 taps), row l % 8.
  const uint32_t b_row = static_cast<uint32_t>(
      __cvta_generic_to_shared(ws + ((lane >> 4) * 8 + (lane & 7)) * g.ks + ((lane >> 3) & 1) * 8));
  int base[2][2];  // [m16 tile][row gr, gr + 8]: the pixel's first value in the patch
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = warp * 32 + mt * 16 + h * 8 + gr;
      base[mt][h] = ((m / kTileW) * g.sh * g.patch_w + (m % kTileW) * g.sw) * g.cp;  // even
    }
  float bv[NT][2];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int f = f0 + nt * 8 + tq * 2 + j;
      bv[nt][j] = bias && f < g.filters ? bias[f] : 0.f;
    }

  for (int64_t t = blockIdx.x; t < g.total; t += gridDim.x) {
    const int img = static_cast<int>(t / g.tiles), tt = static_cast<int>(t - int64_t{img} * g.tiles);
    // The tile's first output (pooled: its first pooled output, and the first row and column of
    // its windows).
    const int ty = tt / g.tiles_x, tx = tt - ty * g.tiles_x;
    const int py0 = ty * g.tph, px0 = tx * g.tpw;
    const int oy0 = g.pooled ? py0 * g.psh - g.pph : ty * kTileH;
    const int ox0 = g.pooled ? px0 * g.psw - g.ppw : tx * kTileW;
    const int iy0 = oy0 * g.sh - g.pad_h, ix0 = ox0 * g.sw - g.pad_w;
    const uint16_t* xi = x + static_cast<int64_t>(img) * g.in_h * g.in_w * g.c;
    __syncthreads();  // the previous tile's reads of the patch are done (the first: the tables)
    // A warp a patch row, a lane a pair of a pixel's channels (zeros outside the image and for
    // the padding channels).
    const int hp = g.cp / 2, pairs = g.patch_w * hp;
    for (int py = warp; py < g.patch_h; py += kThreads / 32) {
      const int iy = iy0 + py;
      const bool inside = iy >= 0 && iy < g.in_h;
      for (int j = lane; j < pairs; j += 32) {
        const int px = hp == 2 ? j >> 1 : j, ch = (j & (hp - 1)) * 2, ix = ix0 + px;
        uint16_t v0 = 0, v1 = 0;
        if (inside && ix >= 0 && ix < g.in_w) {
          const uint16_t* src = xi + (static_cast<int64_t>(iy) * g.in_w + ix) * g.c;
          if (ch < g.c) v0 = src[ch];
          if (ch + 1 < g.c) v1 = src[ch + 1];
        }
        patch[py * pairs + j] = pack(v0, v1);
      }
    }
    __syncthreads();

    float acc[2][NT][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[mt][nt][j] = 0.f;
    for (int kb = 0; kb < g.kp; kb += 16) {
      const int p0 = koff[kb / 2 + tq], p1 = koff[kb / 2 + 4 + tq];  // taps 2tq, 2tq + 1 and 8 on
      auto at = [&](int r, int p) { return p < 0 ? 0u : patch[(r + p) >> 1]; };
      uint32_t a[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const int r0 = base[mt][0], r1 = base[mt][1];
        a[mt][0] = at(r0, p0);
        a[mt][1] = at(r1, p0);
        a[mt][2] = at(r0, p1);
        a[mt][3] = at(r1, p1);
      }
#pragma unroll
      for (int nt = 0; nt < NT; nt += 2) {
        uint32_t b[4];
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                     : "r"(b_row + static_cast<uint32_t>((nt * 8 * g.ks + kb) * 2)));
        mma16816<T>(acc[0][nt], a[0], b[0], b[1]);
        mma16816<T>(acc[1][nt], a[1], b[0], b[1]);
        mma16816<T>(acc[0][nt + 1], a[0], b[2], b[3]);
        mma16816<T>(acc[1][nt + 1], a[1], b[2], b[3]);
      }
    }

    // The tile's outputs into shared memory, then out in 16-byte stores: a pixel's filters are
    // one run, and a tile row's pixels follow each other when the block holds every filter.
    auto store = [&](auto fn) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          T* row = out + (warp * 32 + mt * 16 + h * 8 + gr) * OS;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            Vec<T, 2> v;
            v.v[0] = to<T>(fn(acc[mt][nt][h * 2] + bv[nt][0]));
            v.v[1] = to<T>(fn(acc[mt][nt][h * 2 + 1] + bv[nt][1]));
            *reinterpret_cast<Vec<T, 2>*>(row + nt * 8 + tq * 2) = v;
          }
        }
    };
    // The stems' usual activations without act_eval's switch per value.
    if (act.kind == Act::kRelu)
      store([](float v) { return fmaxf(v, 0.f); });
    else if (act.kind == Act::kIdentity)
      store([](float v) { return v; });
    else
      store([kind = act.kind, slope = act.slope](float v) { return act_eval(kind, slope, v); });
    __syncthreads();
    constexpr int VP = NB / 8;  // 16-byte vectors a pixel
    if (g.pooled) {
      // Each pooled output's window over the staged outputs, with the separate pool's arithmetic
      // (engine/gpu/nhwc.cu: rows then columns, `<` on the rounded values), 8 filters a thread.
      for (int v = threadIdx.x; v < g.tph * g.tpw * VP; v += kThreads) {
        const int m = v / VP, j = v - m * VP, py = py0 + m / g.tpw, px = px0 + m % g.tpw, f = f0 + j * 8;
        if (py >= g.pout_h || px >= g.pout_w || f >= g.filters) continue;
        const PoolWindow wy = fixed_window(py, g.pkh, g.psh, g.pph, g.out_h);
        const PoolWindow wx = fixed_window(px, g.pkw, g.psw, g.ppw, g.out_w);
        float r[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) r[k] = -INFINITY;
        for (int yy = wy.start; yy < wy.end; ++yy)
          for (int xx = wx.start; xx < wx.end; ++xx) {
            const Vec<T, 8> in =
                *reinterpret_cast<const Vec<T, 8>*>(out + ((yy - oy0) * kTileW + xx - ox0) * OS + j * 8);
#pragma unroll
            for (int k = 0; k < 8; ++k) {
              const float fv = ld(in.v[k]);
              r[k] = r[k] < fv ? fv : r[k];
            }
          }
        Vec<T, 8> o;
#pragma unroll
        for (int k = 0; k < 8; ++k) o.v[k] = to<T>(r[k]);
        *reinterpret_cast<Vec<T, 8>*>(
            y + ((static_cast<int64_t>(img) * g.pout_h + py) * g.pout_w + px) * g.filters + f) = o;
      }
      continue;
    }
    for (int v = threadIdx.x; v < kTileH * kTileW * VP; v += kThreads) {
      const int m = v / VP, j = v - m * VP, oy = oy0 + m / kTileW, ox = ox0 + m % kTileW, f = f0 + j * 8;
      if (oy < g.out_h && ox < g.out_w && f < g.filters)
        *reinterpret_cast<uint4*>(
            y + ((static_cast<int64_t>(img) * g.out_h + oy) * g.out_w + ox) * g.filters + f) =
            *reinterpret_cast<const uint4*>(out + m * OS + j * 8);
    }
  }
}

template <typename T, int NT>
void launch(const Geom& g, const void* x, const void* w, const float* bias, void* y, ActFn act,
            cudaStream_t s) {
  const size_t smem = smem_bytes(g, NT);
  auto kernel = stem_kernel<T, NT>;
  if (smem > (size_t{48} << 10))
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  // Enough blocks to fill every SM several times over; each stages its weights once and loops
  // over tiles.
  const int64_t blocks = std::min<int64_t>(g.total, int64_t{sm_count()} * 16);
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>((g.filters + NT * 8 - 1) / (NT * 8)));
  kernel<<<grid, kThreads, smem, s>>>(static_cast<const uint16_t*>(x), static_cast<const uint16_t*>(w), bias,
                                      static_cast<T*>(y), g, act);
}

}  // namespace

namespace {

// The conditions on the convolution itself, whatever the storage.
std::string shape_cannot_run(const ConvParams& p) {
  if (p.groups != 1) return "groups (" + std::to_string(p.groups) + ") > 1";
  if (p.in_c < 1 || p.in_c > 4) return "input channels (" + std::to_string(p.in_c) + ") are not 1 to 4";
  if (p.filters % 8 != 0) return "filters (" + std::to_string(p.filters) + ") are not a multiple of 8";
  const Geom g = geom(p, 1);
  if (g.kp > kMaxTaps)
    return "kernel " + std::to_string(p.kernel_h) + "x" + std::to_string(p.kernel_w) + " x " +
           std::to_string(p.in_c) + " channels is over " + std::to_string(kMaxTaps) + " taps";
  if (smem_bytes(g, n_tiles(g)) > kMaxSmem)
    return "the input under a tile of " + std::to_string(kTileH) + "x" + std::to_string(kTileW) +
           " outputs (stride and dilation) is over its shared memory";
  return "";
}

}  // namespace

std::string stem_pool_cannot_run(const ConvParams& p, const StemPool& pool) {
  if (const std::string why = shape_cannot_run(p); !why.empty()) return why;
  if (pool.kernel_h < 1 || pool.kernel_w < 1) return "the pool has no window";
  // Windows that overlap (ResNet's 3x3/2) or straddle two tiles would have the outputs two tiles
  // share computed by both: 1.5x the tiles for ResNet-18's stem, slower than the separate pool
  // (measured: docs/performance.md, Session 16).
  if (pool.stride_h != pool.kernel_h || pool.stride_w != pool.kernel_w || pool.pad_h != 0 ||
      pool.pad_w != 0 || kTileH % pool.kernel_h != 0 || kTileW % pool.kernel_w != 0)
    return "the pool's windows (" + std::to_string(pool.kernel_h) + "x" + std::to_string(pool.kernel_w) +
           ", stride " + std::to_string(pool.stride_h) + "x" + std::to_string(pool.stride_w) +
           ") overlap, are padded or do not tile its " + std::to_string(kTileH) + "x" +
           std::to_string(kTileW) + " outputs";
  if (pool.out_h < 1 || pool.out_w < 1) return "the pool has no output";
  return "";
}

std::string stem_cannot_run(const ConvParams& p, Precision prec, bool channels_last) {
  const Storage t = storage_of(prec);
  if (!channels_last || (t != Storage::kF16 && t != Storage::kBf16))
    return "the stem kernel runs 16-bit storage channels last (--precision fp16 or bf16 --layout nhwc)";
  return shape_cannot_run(p);
}

void launch_conv_stem(const ConvParams& p, const void* x, Storage t, const void* w, const float* bias,
                      void* y, int64_t n, ActFn act, cudaStream_t s, const StemPool& pool) {
  if (t != Storage::kF16 && t != Storage::kBf16) throw Error("stem convolution: storage is not 16-bit");
  const std::string why = pool.kernel_h > 0 ? stem_pool_cannot_run(p, pool) : shape_cannot_run(p);
  if (!why.empty()) throw Error("stem convolution: " + why);
  if (n <= 0) return;
  const Geom g = geom(p, n, pool);
  const bool wide = n_tiles(g) == 8;
  with_storage(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if constexpr (sizeof(T) == 2) {
      if (wide)
        launch<T, 8>(g, x, w, bias, y, act, s);
      else
        launch<T, 4>(g, x, w, bias, y, act, s);
    }
  });
  CUDA_CHECK_LAUNCH("stem_kernel");
}

}  // namespace cnnrun::gpu
