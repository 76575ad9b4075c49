#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "engine/gpu/activation.cuh"
#include "engine/gpu/check.h"
#include "engine/gpu/conv2d_stem.h"
#include "engine/gpu/fast_div.cuh"
#include "engine/gpu/implicit/mma.cuh"
#include "engine/gpu/pool_window.cuh"
#include "engine/gpu/storage.cuh"

namespace cnnrun::gpu {

namespace {

// A tile of output pixels: kTileH rows of kTileW; four warps, each 32 pixels (two m16 tiles).
constexpr int kTileH = 8, kTileW = 16, kThreads = 128;
constexpr int kMaxTaps = 256;  // kernel_h x kernel_w x channels (16-bit: 1 counted as 2, 3 as 4), rounded up
constexpr size_t kMaxSmem = size_t{96} << 10;  // shared memory a block may ask for

struct Geom {
  int in_h, in_w, c, out_h, out_w, filters;
  int kh, kw, sh, sw, pad_h, pad_w, dh, dw;
  int es;                // bytes a stored value: 2 (FP16, BF16), 4 (FP32 storage: TF32 products)
  int cp;                // channels a pixel in the patch and the taps: 16-bit, c rounded up to 2 or 4
  int kc;                // the weights' taps a filter (kh * kw * c)
  int k, kp, ks;         // taps (kh * kw * cp), rounded up to the k-step (16, or 8), a weight row's stride
  int patch_h, patch_w;  // the input under one tile
  int patch;             // its values (patch_h * patch_w * cp)
  int tiles_x, tiles;    // tiles a row and an image
  int64_t total;         // tiles of all the images (below 2^31: geom)
  FastDiv div_tiles, div_tiles_x;  // tile_origin's divisions
  // The max-pool in the epilogue (StemPool; pooled false: none): its window, stride, padding
  // and output, and the pooled outputs a tile (tph x tpw): windows that tile its 8 x 16 outputs.
  bool pooled;
  int pkh, pkw, psh, psw, pph, ppw, pout_h, pout_w, tph, tpw;
  bool pool2;  // 2x2 windows at stride 2 inside the output (VGG's): write_tile's unrolled form
  FastDiv div_tpw;
};

Geom geom(const ConvParams& p, int64_t n, int es, const StemPool& pool = StemPool{}) {
  auto i32 = [](int64_t v) { return static_cast<int>(v); };
  Geom g{};
  g.in_h = i32(p.in_h), g.in_w = i32(p.in_w), g.c = i32(p.in_c), g.out_h = i32(p.out_h),
  g.out_w = i32(p.out_w);
  g.filters = i32(p.filters), g.kh = i32(p.kernel_h), g.kw = i32(p.kernel_w);
  g.sh = i32(p.stride_h), g.sw = i32(p.stride_w), g.pad_h = i32(p.pad_h), g.pad_w = i32(p.pad_w);
  g.dh = i32(p.dilation_h), g.dw = i32(p.dilation_w);
  g.es = es;
  g.cp = es == 4 ? g.c : g.c == 1 ? 2 : g.c == 3 ? 4 : g.c;
  g.kc = g.kh * g.kw * g.c;
  g.k = g.kh * g.kw * g.cp;
  const int step = es == 4 ? 8 : 16;
  g.kp = (g.k + step - 1) / step * step;
  // A row's 32-bit words = 4 mod 8: the eight filters of a B fragment hit distinct banks.
  g.ks = g.kp + (es == 4 ? 4 : 8);
  g.patch_h = (kTileH - 1) * g.sh + (g.kh - 1) * g.dh + 1;
  g.patch_w = (kTileW - 1) * g.sw + (g.kw - 1) * g.dw + 1;
  g.patch = g.patch_h * g.patch_w * g.cp;
  g.pooled = pool.kernel_h > 0;
  if (g.pooled) {
    g.pkh = pool.kernel_h, g.pkw = pool.kernel_w, g.psh = pool.stride_h, g.psw = pool.stride_w;
    g.pph = pool.pad_h, g.ppw = pool.pad_w, g.pout_h = pool.out_h, g.pout_w = pool.out_w;
    g.pool2 = g.pkh == 2 && g.pkw == 2 && g.psh == 2 && g.psw == 2 && g.pph == 0 && g.ppw == 0 &&
              g.pout_h * 2 <= g.out_h && g.pout_w * 2 <= g.out_w;  // no ceil_mode window past the edge
    g.tph = kTileH / g.pkh;
    g.tpw = kTileW / g.pkw;
    g.tiles_x = (g.pout_w + g.tpw - 1) / g.tpw;
    g.tiles = g.tiles_x * ((g.pout_h + g.tph - 1) / g.tph);
  } else {
    g.tiles_x = (g.out_w + kTileW - 1) / kTileW;
    g.tiles = g.tiles_x * ((g.out_h + kTileH - 1) / kTileH);
  }
  g.total = n * g.tiles;
  // The tile arithmetic is 32-bit (FastDiv): 2^31 tiles would be 2^38 outputs of one launch.
  if (g.total >= (int64_t{1} << 31))
    throw Error("stem convolution: " + std::to_string(g.total) +
                " tiles of 8x16 outputs in one launch, over 2^31");
  g.div_tiles = make_fastdiv(static_cast<unsigned>(g.tiles));
  g.div_tiles_x = make_fastdiv(static_cast<unsigned>(g.tiles_x));
  g.div_tpw = make_fastdiv(static_cast<unsigned>(g.pooled ? g.tpw : 1));
  return g;
}

int n_tiles(const Geom& g) { return g.filters <= 32 ? 4 : 8; }  // 8-filter tiles a block

// A staged output row: the block's filters and 16 bytes more, so that the eight pixels a warp's
// stores hit start in distinct bank groups and rows stay 16-byte aligned.
constexpr int out_stride(int nt, int es) { return nt * 8 + 16 / es; }

// Weights, the staged outputs, the tap table (16-bit: a pair of taps an entry) and the patch;
// FP32 storage: the outputs and the patch share their space (a tile reads the patch before it
// stages its outputs), so that more blocks fit an SM.
size_t smem_bytes(const Geom& g, int nt) {
  const size_t es = static_cast<size_t>(g.es);
  const size_t out = static_cast<size_t>(kTileH * kTileW * out_stride(nt, g.es)) * es;
  const size_t patch = static_cast<size_t>(g.patch) * es;
  return static_cast<size_t>(nt * 8 * g.ks) * es + static_cast<size_t>(g.es == 4 ? g.kp : g.kp / 2) * 4 +
         (g.es == 4 ? std::max(out, patch) : out + patch);
}

// What both kernels compute the same way. A thread's two m16 tiles' rows gr and gr + 8: each
// pixel's first value in the patch (g.cp values a pixel: the 16-bit kernel's padded channels,
// FP32's own).
__device__ __forceinline__ void pixel_bases(int (&base)[2][2], const Geom& g, int warp, int gr) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = warp * 32 + mt * 16 + h * 8 + gr;
      base[mt][h] = ((m / kTileW) * g.sh * g.patch_w + (m % kTileW) * g.sw) * g.cp;  // even at 16-bit
    }
}

// The bias of the thread's accumulator columns (zero past the filters or without a bias).
template <int NT>
__device__ __forceinline__ void bias_fragment(float (&bv)[NT][2], const float* __restrict__ bias,
                                              const Geom& g, int f0, int tq) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int f = f0 + nt * 8 + tq * 2 + j;
      bv[nt][j] = bias && f < g.filters ? bias[f] : 0.f;
    }
}

// Tile t's place: its image, its first output (pooled: its first pooled output, py0/px0, and
// the first row and column of its windows) and the first input row and column its patch holds.
struct TileOrigin {
  int img, py0, px0, oy0, ox0, iy0, ix0;
};
__device__ __forceinline__ TileOrigin tile_origin(const Geom& g, int64_t t) {
  TileOrigin o;
  const int t32 = static_cast<int>(t);  // t < g.total < 2^31
  o.img = fdiv(t32, g.div_tiles);
  const int tt = t32 - o.img * g.tiles;
  const int ty = fdiv(tt, g.div_tiles_x), tx = tt - ty * g.tiles_x;
  o.py0 = ty * g.tph, o.px0 = tx * g.tpw;
  o.oy0 = g.pooled ? o.py0 * g.psh - g.pph : ty * kTileH;
  o.ox0 = g.pooled ? o.px0 * g.psw - g.ppw : tx * kTileW;
  o.iy0 = o.oy0 * g.sh - g.pad_h, o.ix0 = o.ox0 * g.sw - g.pad_w;
  return o;
}

// A warp's 32 outputs (its two m16 tiles: rows mt * 16 + h * 8 + gr of out, out_stride(NT) values
// apart) plus the bias, through the activation, rounded once to T, into shared memory.
template <typename T, int NT>
__device__ __forceinline__ void stage_warp(const float (&acc)[2][NT][4], const float (&bv)[NT][2], T* out,
                                           const ActFn& act) {
  constexpr int OS = out_stride(NT, static_cast<int>(sizeof(T)));
  const int lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
  with_act_stored<T>(act, [&](auto fn) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          Vec<T, 2> v;
          v.v[0] = to<T>(fn(acc[mt][nt][h * 2] + bv[nt][0]));
          v.v[1] = to<T>(fn(acc[mt][nt][h * 2 + 1] + bv[nt][1]));
          *reinterpret_cast<Vec<T, 2>*>(out + (mt * 16 + h * 8 + gr) * OS + nt * 8 + tq * 2) = v;
        }
  });
}

// The tile's outputs (bias, activation, one rounding to T) into shared memory, then out in
// 16-byte stores: a pixel's filters are one run, and a tile row's pixels follow each other when
// the block holds every filter. Pooled (Geom::pooled): each pooled output's window over the
// staged outputs, with the separate pool's arithmetic (engine/gpu/nhwc.cu: rows then columns,
// `<` on the rounded values; 2x2/2 windows, Geom::pool2, unrolled with max_into: the same
// maxima, a NaN never taken), a 16-byte vector of filters a thread. Ends the tile: the next
// one's first barrier orders its reuse of shared memory.
template <typename T, int NT>
__device__ __forceinline__ void write_tile(const float (&acc)[2][NT][4], const float (&bv)[NT][2], T* out,
                                           T* __restrict__ y, const Geom& g, ActFn act, int img, int oy0,
                                           int ox0, int py0, int px0, int f0) {
  constexpr int NB = NT * 8, E = 16 / static_cast<int>(sizeof(T)),
                VP = NB / E;  // values a vector, vectors a pixel
  constexpr int OS = out_stride(NT, static_cast<int>(sizeof(T)));
  stage_warp<T, NT>(acc, bv, out + (threadIdx.x >> 5) * 32 * OS, act);
  __syncthreads();
  if (g.pooled && g.pool2) {  // each window inside the tile's outputs and the image's: no bounds
    constexpr int PV = (kTileH / 2) * (kTileW / 2) * VP;  // pooled vectors a tile
    static_assert(PV % kThreads == 0, "a tile's pooled vectors are spread evenly over the threads");
#pragma unroll
    for (int u = 0; u < PV / kThreads; ++u) {
      const int v = threadIdx.x + u * kThreads, m = v / VP, j = v - m * VP, my = m / (kTileW / 2),
                mx = m - my * (kTileW / 2), py = py0 + my, px = px0 + mx, f = f0 + j * E;
      if (py >= g.pout_h || px >= g.pout_w || f >= g.filters) continue;
      const T* s = out + (my * 2 * kTileW + mx * 2) * OS + j * E;
      Vec<T, E> r;
#pragma unroll
      for (int k = 0; k < E; ++k) r.v[k] = to<T>(-INFINITY);
      max_into(r, *reinterpret_cast<const Vec<T, E>*>(s));
      max_into(r, *reinterpret_cast<const Vec<T, E>*>(s + OS));
      max_into(r, *reinterpret_cast<const Vec<T, E>*>(s + kTileW * OS));
      max_into(r, *reinterpret_cast<const Vec<T, E>*>(s + (kTileW + 1) * OS));
      *reinterpret_cast<Vec<T, E>*>(
          y + ((static_cast<int64_t>(img) * g.pout_h + py) * g.pout_w + px) * g.filters + f) = r;
    }
    return;
  }
  if (g.pooled) {
    for (int v = threadIdx.x; v < g.tph * g.tpw * VP; v += kThreads) {
      const int m = v / VP, j = v - m * VP, my = fdiv(m, g.div_tpw), py = py0 + my, px = px0 + m - my * g.tpw,
                f = f0 + j * E;
      if (py >= g.pout_h || px >= g.pout_w || f >= g.filters) continue;
      const PoolWindow wy = fixed_window(py, g.pkh, g.psh, g.pph, g.out_h);
      const PoolWindow wx = fixed_window(px, g.pkw, g.psw, g.ppw, g.out_w);
      float r[E];
#pragma unroll
      for (int k = 0; k < E; ++k) r[k] = -INFINITY;
      for (int yy = wy.start; yy < wy.end; ++yy)
        for (int xx = wx.start; xx < wx.end; ++xx) {
          const Vec<T, E> in =
              *reinterpret_cast<const Vec<T, E>*>(out + ((yy - oy0) * kTileW + xx - ox0) * OS + j * E);
#pragma unroll
          for (int k = 0; k < E; ++k) {
            const float fv = ld(in.v[k]);
            r[k] = r[k] < fv ? fv : r[k];
          }
        }
      Vec<T, E> o;
#pragma unroll
      for (int k = 0; k < E; ++k) o.v[k] = to<T>(r[k]);
      *reinterpret_cast<Vec<T, E>*>(
          y + ((static_cast<int64_t>(img) * g.pout_h + py) * g.pout_w + px) * g.filters + f) = o;
    }
    return;
  }
  for (int v = threadIdx.x; v < kTileH * kTileW * VP; v += kThreads) {
    const int m = v / VP, j = v - m * VP, oy = oy0 + m / kTileW, ox = ox0 + m % kTileW, f = f0 + j * E;
    if (oy < g.out_h && ox < g.out_w && f < g.filters)
      *reinterpret_cast<uint4*>(y + ((static_cast<int64_t>(img) * g.out_h + oy) * g.out_w + ox) * g.filters +
                                f) = *reinterpret_cast<const uint4*>(out + m * OS + j * E);
  }
}

__device__ __forceinline__ uint32_t pack(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

// The 16-bit kernels' tap table: a pair of taps' offset from a pixel's first value in the patch
// (even), -1 past the taps (zeros, against zero weights).
__device__ __forceinline__ void pair_offsets(int* koff, const Geom& g) {
  for (int p = threadIdx.x; p < g.kp / 2; p += kThreads) {
    int off = -1;
    if (2 * p < g.k) {
      const int ch = 2 * p % g.cp, rs = 2 * p / g.cp, r = rs / g.kw, q = rs - r * g.kw;
      off = (r * g.dh * g.patch_w + q * g.dw) * g.cp + ch;
    }
    koff[p] = off;
  }
}

// A's fragments of the 16 taps from kb for the thread's two m16 tiles: pairs of values from the
// staged patch (taps 2tq, 2tq + 1 and 8 on), zeros past the taps.
__device__ __forceinline__ void a_pairs(uint32_t (&af)[2][4], const uint32_t* patch, const int (&base)[2][2],
                                        const int* koff, int kb, int tq) {
  const int p0 = koff[kb / 2 + tq], p1 = koff[kb / 2 + 4 + tq];
  auto at = [&](int r, int p) { return p < 0 ? 0u : patch[(r + p) >> 1]; };
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    const int r0 = base[mt][0], r1 = base[mt][1];
    af[mt][0] = at(r0, p0);
    af[mt][1] = at(r1, p0);
    af[mt][2] = at(r0, p1);
    af[mt][3] = at(r1, p1);
  }
}

using implicit::ldmatrix_x4;  // A's and B's 8x8 16-bit matrices from shared memory

// The lane's row address for ldmatrix.x4 of B from weights w staged as [filter][tap] rows of
// `stride` values: matrix l / 8 for lane l (two filter tiles x the k-step's two halves, 16 bytes
// each: 8 16-bit values, or 4 FP32 words read as 8 16-bit values), row l % 8. Thread t then holds
// of each matrix row t / 4's 32-bit word t % 4: B's (k = 2tq, n = gr) pair, or (k = tq, n = gr) word.
template <typename T>
__device__ __forceinline__ uint32_t b_rows(const T* w, int stride) {
  const int lane = threadIdx.x & 31;
  return static_cast<uint32_t>(__cvta_generic_to_shared(
      w + ((lane >> 4) * 8 + (lane & 7)) * stride + ((lane >> 3) & 1) * (16 / static_cast<int>(sizeof(T)))));
}

template <int NT>
__device__ __forceinline__ void zero_acc(float (&acc)[2][NT][4]) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[mt][nt][j] = 0.f;
}

// acc[mt][nt] and acc[mt][nt + 1] += a[mt] x B for both m16 tiles, m16n8k16 (P: FP16 or BF16),
// b as one ldmatrix.x4 gives it: b0, b1 of filter tile nt, then of nt + 1.
template <int P, int NT>
__device__ __forceinline__ void mma16_tiles(float (&acc)[2][NT][4], const uint32_t (&a)[2][4],
                                            const uint32_t (&b)[4], int nt) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    implicit::mma_16<P>(acc[mt][nt], a[mt], b[0], b[1]);
    implicit::mma_16<P>(acc[mt][nt + 1], a[mt], b[2], b[3]);
  }
}

// The same on m16n8k8 TF32 products: TF32 (THREE false: ah and b rounded already, al unused) or
// 3xTF32 (ah, al: A's high and low parts; b split here), summed as implicit/mma.cuh's.
template <bool THREE, int NT>
__device__ __forceinline__ void mma_tf32_tiles(float (&acc)[2][NT][4], const uint32_t (&ah)[2][4],
                                               const uint32_t (&al)[2][4], const uint32_t (&b)[4], int nt) {
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    if constexpr (THREE) {
      const unsigned bh0 = implicit::tf32_hi(__uint_as_float(b[2 * u]));
      const unsigned bh1 = implicit::tf32_hi(__uint_as_float(b[2 * u + 1]));
      const unsigned bl0 = __float_as_uint(__uint_as_float(b[2 * u]) - __uint_as_float(bh0));
      const unsigned bl1 = __float_as_uint(__uint_as_float(b[2 * u + 1]) - __uint_as_float(bh1));
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        implicit::mma_tf32(acc[mt][nt + u], al[mt], bh0, bh1);
        implicit::mma_tf32(acc[mt][nt + u], ah[mt], bl0, bl1);
        implicit::mma_tf32(acc[mt][nt + u], ah[mt], bh0, bh1);
      }
    } else {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) implicit::mma_tf32(acc[mt][nt + u], ah[mt], b[2 * u], b[2 * u + 1]);
    }
  }
}

// The reading-bytes stems' per-filter values in shared memory, for the block's nb filters from f0:
// the accumulators' scale (osc) and the table's values for the middle output's classes (rmid,
// cmid: those of most outputs), zero past the filters.
__device__ __forceinline__ void stage_scale_table(float* osc, float* tmid, const StemBytesDevice& a,
                                                  int filters, int f0, int nb, int rmid, int cmid) {
  for (int i = threadIdx.x; i < nb; i += kThreads) {
    const int f = f0 + i;
    osc[i] = f < filters ? a.out_scale[f] : 0.f;
    tmid[i] = f < filters ? a.table[(rmid * a.col_classes + cmid) * filters + f] : 0.f;
  }
}

// The reading-bytes stems' epilogue: row[i] is the table's value (bias and r[c] sum) for filter
// f0 + i at output (oy, ox), inside the output: the middle output's classes' from shared memory
// (tmid), the others' from their row of the table.
__device__ __forceinline__ const float* table_row(const StemBytesDevice& a, const float* tmid, int rmid,
                                                  int cmid, int filters, int oy, int ox, int f0) {
  const int rc = a.row_class[oy], cc = a.col_class[ox];
  if (rc == rmid && cc == cmid) return tmid;
  return a.table + static_cast<int64_t>(rc * a.col_classes + cc) * filters + f0;
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
  constexpr int OS = out_stride(NT, 2);
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
  pair_offsets(koff, g);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
  const uint32_t b_row = b_rows(ws, g.ks);
  int base[2][2];  // [m16 tile][row gr, gr + 8]: the pixel's first value in the patch
  pixel_bases(base, g, warp, gr);
  float bv[NT][2];
  bias_fragment<NT>(bv, bias, g, f0, tq);

  for (int64_t t = blockIdx.x; t < g.total; t += gridDim.x) {
    const TileOrigin o = tile_origin(g, t);
    const int img = o.img, py0 = o.py0, px0 = o.px0, oy0 = o.oy0, ox0 = o.ox0, iy0 = o.iy0, ix0 = o.ix0;
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
    zero_acc<NT>(acc);
    for (int kb = 0; kb < g.kp; kb += 16) {
      uint32_t a[2][4];
      a_pairs(a, patch, base, koff, kb, tq);
#pragma unroll
      for (int nt = 0; nt < NT; nt += 2) {
        uint32_t b[4];
        ldmatrix_x4(b, b_row + static_cast<uint32_t>((nt * 8 * g.ks + kb) * 2));
        mma16_tiles<std::is_same_v<T, __half> ? implicit::kTcFp16 : implicit::kTcBf16, NT>(acc, a, b, nt);
      }
    }

    write_tile<T, NT>(acc, bv, out, y, g, act, img, oy0, ox0, py0, px0, f0);
  }
}

// Any of the stem kernels with nt 8-filter tiles a block and `smem` bytes of shared memory: enough
// blocks to fill every SM several times over; each stages its weights once and loops over tiles.
template <typename K, typename... Args>
void launch_tiles(K kernel, const Geom& g, int nt, size_t smem, cudaStream_t s, Args... args) {
  if (smem > (size_t{48} << 10))
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const int64_t blocks = std::min<int64_t>(g.total, int64_t{sm_count()} * 16);
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>((g.filters + nt * 8 - 1) / (nt * 8)));
  kernel<<<grid, kThreads, smem, s>>>(args...);
}

// The stems of three channels (ResNet's and GoogLeNet's 7x7/2, SqueezeNet's, MobileNetV2's and
// EfficientNet's 3x3/2; at 16-bit storage VGG's 3x3/1 too: below), here at 16-bit storage (FP32 storage and
// the bytes: below): A's fragments by ldmatrix from rows of the patch, no tables. Each pixel's channels
// padded to 4 are 8 bytes, so at stride 2 an output pixel's window row starts 16 bytes after its left
// neighbour's, and the window row's taps (its KS pixels, padded to KWP, a multiple of 4, with zero columns,
// against zero weights) are one contiguous run: the taps of k-step (kh, q) for 8 consecutive output pixels
// are 8 aligned 16-byte rows, one 8x8 matrix of A, read without bank conflicts. Depth KS x KWP x 4 (224 for
// 7x7: the gather kernel's 208 rounded to the next k-step). The next tile's patch is loaded into registers
// while this one's products run; a warp stages and writes its own 32 outputs.
namespace rows {

// Stride s (2, or 1: the 16-bit kernel's 3x3): the patch under a tile, its rows even (16-byte
// aligned), and the columns past (kTileW - 1) * s + ks zeros (under the padded taps).
constexpr int kPatchH(int ks, int s = 2) { return (kTileH - 1) * s + ks; }
constexpr int kKwp(int ks) { return (ks + 3) / 4 * 4; }  // a window row's pixels, padded
constexpr int kPatchW(int ks, int s = 2) { return ((kTileW - 1) * s + kKwp(ks) + 1) / 2 * 2; }
constexpr int kDepth(int ks) { return ks * kKwp(ks) * 4; }
constexpr int kWs(int ks) { return kDepth(ks) + 8; }  // a filter's row: 4 words past a multiple of 8
constexpr int kPixels(int ks, int s = 2) { return kPatchH(ks, s) * kPatchW(ks, s); }
constexpr int kPerThread(int ks, int s = 2) { return (kPixels(ks, s) + kThreads - 1) / kThreads; }
// Stride 1: the patch twice, the second copy a pixel to the left (pixel p at p - 1), so that
// every output's window row starts 16-byte aligned in one of them (odd outputs: the second).
constexpr int kPatchSlots(int ks, int s) { return kPixels(ks, s) * (s == 1 ? 2 : 1); }

// A filter's row of weights in the rows kernels: tap k ([kh][kw < KWP][4 channels]) of filter f
// -> its index in w ([filters][KS][KS][3]), or -1 for a zero (past the filters, the window's
// columns or the channels).
template <int KS>
__device__ __forceinline__ int64_t weight_index(int f, int k, int filters) {
  const int ch = k & 3, kw = (k >> 2) % kKwp(KS), kh = (k >> 2) / kKwp(KS);
  return f < filters && kw < KS && ch < 3 ? static_cast<int64_t>(f) * KS * KS * 3 + (kh * KS + kw) * 3 + ch
                                          : -1;
}

// The rows kernels' tile loop: the block's tiles from blockIdx.x, gridDim.x apart. Each tile's
// patch is loaded (load(next, origin)) into registers one tile ahead, so that its loads are in
// flight during the tile before's products; put(i, next[u]) writes the thread's pixels i of the
// patch into shared memory between two barriers (the first: the tile before's reads are done, or
// the weights staged), then body(origin) computes the tile.
template <int KS, int S = 2, typename V, typename Load, typename Put, typename Body>
__device__ __forceinline__ void pipelined_tiles(const Geom& g, V (&next)[kPerThread(KS, S)], Load load,
                                                Put put, Body body) {
  if (blockIdx.x < g.total) load(next, tile_origin(g, blockIdx.x));
  for (int64_t t = blockIdx.x; t < g.total; t += gridDim.x) {
    const TileOrigin o = tile_origin(g, t);
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kPerThread(KS, S); ++u) {
      const int i = static_cast<int>(threadIdx.x) + u * kThreads;
      if (i < kPixels(KS, S)) put(i, next[u]);
    }
    __syncthreads();
    if (t + gridDim.x < g.total) load(next, tile_origin(g, t + gridDim.x));
    body(o);
  }
}

// The FP32-storage rows kernels' outputs from the accumulators: the warp's two m16 tiles are output
// rows 2 warp + mt of tile o, their rows h * 8 + gr its columns; pixel(oy, ox) gives the output's
// value(nt, j, accumulator) of filter f0 + nt * 8 + tq * 2 + j before the activation fn. A quad of
// lanes writes 32 contiguous bytes of a pixel (a whole sector).
template <int NT, typename Pixel, typename Fn>
__device__ __forceinline__ void store_rows_f32(const float (&acc)[2][NT][4], float* __restrict__ y,
                                               const Geom& g, const TileOrigin& o, int f0, Pixel pixel,
                                               Fn fn) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int oy = o.oy0 + warp * 2 + mt, ox = o.ox0 + h * 8 + gr;
      if (oy >= g.out_h || ox >= g.out_w) continue;
      const auto value = pixel(oy, ox);
      float* dst =
          y + ((static_cast<int64_t>(o.img) * g.out_h + oy) * g.out_w + ox) * g.filters + f0 + tq * 2;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        if (f0 + nt * 8 < g.filters)
          *reinterpret_cast<float2*>(dst + nt * 8) =
              make_float2(fn(value(nt, 0, acc[mt][nt][h * 2])), fn(value(nt, 1, acc[mt][nt][h * 2 + 1])));
    }
}

// The 16-bit rows kernels' ldmatrix.x4 of A: lane l gives the row address of matrix l / 8 (pixels
// 0-7 / 8-15 of the m16 tile, its output row's columns; taps 0-7 / 8-15 of the k-step: 2 pixels of
// 4 channels each), row l % 8. The warp's two m16 tiles are output rows 2 warp and 2 warp + 1 of
// the tile; a k-step (kh, q) adds (kh * PW + 4 q) pixels of 8 bytes. Stride 1: an odd output's
// row starts in the second copy (kPatchSlots), a pixel to the left; 8 neighbouring outputs' rows
// are then 4 16-byte rows in each copy, the copies 64 bytes apart modulo 128: no bank conflicts.
template <int KS, int S = 2>
__device__ __forceinline__ void a_rows16(uint32_t (&a_row)[2], const uint2* patch) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    const uint2* row = patch + (warp * 2 + mt) * S * kPatchW(KS, S) + (lane >> 4) * 2;
    a_row[mt] = static_cast<uint32_t>(
        __cvta_generic_to_shared(S == 2 ? row + r * 2 : row + (r & 1) * kPixels(KS, S) + (r - (r & 1))));
  }
}

// The 16-bit rows kernels' GEMM over the whole window into acc: for each k-step (kh, q) A's two
// m16 tiles by ldmatrix from the patch (a_rows16), then B's filter tiles, two at a time, by
// ldmatrix from b_row (rows of kWs(KS) values). TWO (the reading-bytes stem): B's low parts,
// lo_bytes after the high ones, are multiplied first, then the high parts.
template <int P, int KS, int NT, bool TWO, int S = 2>
__device__ __forceinline__ void rows16_products(float (&acc)[2][NT][4], const uint32_t (&a_row)[2],
                                                uint32_t b_row, uint32_t lo_bytes) {
  constexpr int QS = kKwp(KS) / 4;  // k-steps a window row
  zero_acc<NT>(acc);
#pragma unroll
  for (int kh = 0; kh < KS; ++kh)
#pragma unroll
    for (int q = 0; q < QS; ++q) {
      uint32_t a[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) ldmatrix_x4(a[mt], a_row[mt] + (kh * kPatchW(KS, S) + q * 4) * 8);
#pragma unroll
      for (int nt = 0; nt < NT; nt += 2) {
        const uint32_t addr = b_row + static_cast<uint32_t>((nt * 8 * kWs(KS) + (kh * QS + q) * 16) * 2);
        uint32_t bl[4], bh[4];
        if constexpr (TWO) ldmatrix_x4(bl, addr + lo_bytes);
        ldmatrix_x4(bh, addr);
        if constexpr (TWO) mma16_tiles<P, NT>(acc, a, bl, nt);
        mma16_tiles<P, NT>(acc, a, bh, nt);
      }
    }
}

template <int KS, int NT, int S>
constexpr size_t smem_bytes() {
  return (size_t{NT} * 8 * kWs(KS) + size_t{kPatchSlots(KS, S)} * 4 + size_t{4} * 32 * out_stride(NT, 2)) *
             2 +
         size_t{NT} * 8 * 4;
}

// fn(u, p) for each of the thread's pixels u of tile o's patch (pixel threadIdx.x + u * kThreads,
// row-major): p its index in its image plane (iy * in_w + ix), or -1 for a zero (outside the image,
// past the window's last column, past the patch).
template <int KS, int S = 2, typename Fn>
__device__ __forceinline__ void patch_pixels(const Geom& g, const TileOrigin& o, Fn fn) {
#pragma unroll
  for (int u = 0; u < kPerThread(KS, S); ++u) {
    const int i = static_cast<int>(threadIdx.x) + u * kThreads;
    const int py = i / kPatchW(KS, S), px = i - py * kPatchW(KS, S), iy = o.iy0 + py, ix = o.ix0 + px;
    fn(u, i < kPixels(KS, S) && px < (kTileW - 1) * S + KS && iy >= 0 && iy < g.in_h && ix >= 0 && ix < g.in_w
              ? static_cast<int64_t>(iy) * g.in_w + ix
              : int64_t{-1});
  }
}

// The patch's pixels of tile o this thread stages (at stride S): x's three channels (NHWC, 16-bit
// or FP32) as loaded, a register each, zeros outside. They are converted (16-bit: packed with a
// zero fourth channel; TF32: rounded) only as they are put into shared memory: an instruction
// using a loaded value waits for it, and converting here would wait for the loads before the
// tile's products, which they are meant to run under.
template <int KS, int S, typename V, typename X>
__device__ __forceinline__ void load_patch(V (&v)[kPerThread(KS, S)][3], const X* __restrict__ x,
                                           const Geom& g, const TileOrigin& o) {
  const X* xi = x + static_cast<int64_t>(o.img) * g.in_h * g.in_w * 3;
  patch_pixels<KS, S>(g, o, [&](int u, int64_t p) {
    v[u][0] = v[u][1] = v[u][2] = V{0};
    if (p >= 0) v[u][0] = xi[p * 3], v[u][1] = xi[p * 3 + 1], v[u][2] = xi[p * 3 + 2];
  });
}

// The 16-bit kernels reading the uint8 pixels (launch_conv_stem_u8): the bytes of the patch's
// pixels of tile o this thread stages, from the image's three planes, a register a channel as
// loaded (converted only as they are put, as load_patch's); kOutside in the first for a pixel
// outside the image (the padding, zero after the preprocess).
constexpr uint32_t kOutside = 0x100;

template <int KS, int S>
__device__ __forceinline__ void load_patch_bytes(uint32_t (&v)[kPerThread(KS, S)][3],
                                                 const uint8_t* __restrict__ x, const Geom& g,
                                                 const TileOrigin& o) {
  const int64_t plane = static_cast<int64_t>(g.in_h) * g.in_w;
  const uint8_t* xi = x + static_cast<int64_t>(o.img) * 3 * plane;
  patch_pixels<KS, S>(g, o, [&](int u, int64_t p) {
    v[u][0] = kOutside, v[u][1] = v[u][2] = 0;
    if (p >= 0) v[u][0] = xi[p], v[u][1] = xi[p + plane], v[u][2] = xi[p + 2 * plane];
  });
}

// A byte of channel c preprocessed and stored as the preprocess pass stores it
// (preprocess_nhwc_x4_kernel: byte * scale + shift, each step rounded, then to the storage): the
// same bits.
template <typename T>
__device__ __forceinline__ uint32_t pixel_bits(uint32_t byte, float scale, float shift) {
  const T v = to<T>(__fadd_rn(__fmul_rn(static_cast<float>(byte), scale), shift));
  if constexpr (std::is_same_v<T, __half>)
    return __half_as_ushort(v);
  else
    return __bfloat16_as_ushort(v);
}

// POOL (Geom::pooled): the max-pool in the epilogue; its own instance, so that the unpooled
// kernels keep their registers. U8: x is the uint8 pixels, planar [n][3][in_h][in_w], normalised
// by `pre` as staged (launch_conv_stem_u8); else the 16-bit values, channels last.
template <typename T, int KS, int NT, int S, bool POOL, bool U8>
__global__ void __launch_bounds__(kThreads, 4)
    stem_rows_kernel(const void* __restrict__ xv, const uint16_t* __restrict__ w,
                     const float* __restrict__ bias, T* __restrict__ y, Geom g, ActFn act, StemPixels pre) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int NB = NT * 8, OS = out_stride(NT, 2), KWP = kKwp(KS), PW = kPatchW(KS, S), WS = kWs(KS);
  uint16_t* ws = reinterpret_cast<uint16_t*>(smem);       // [NB][WS]: [filter][kh][kw < KWP][4]
  uint2* patch = reinterpret_cast<uint2*>(ws + NB * WS);  // [kPatchH][PW] pixels of 4 values (S 1: twice)
  T* outs = reinterpret_cast<T*>(patch + kPatchSlots(KS, S));  // [warp][32][OS]
  // The bias (zero past the filters) in shared memory, read for the epilogue: 2 NT registers
  // held through the products would spill the NT = 8 instances.
  float* bias_s = reinterpret_cast<float*>(outs + 4 * 32 * OS);  // [NB]
  const int f0 = blockIdx.y * NB;
  for (int i = threadIdx.x; i < NB * kDepth(KS); i += kThreads) {
    const int nn = i / kDepth(KS), k = i - nn * kDepth(KS);
    const int64_t src = weight_index<KS>(f0 + nn, k, g.filters);
    ws[nn * WS + k] = src >= 0 ? w[src] : uint16_t{0};
  }
  for (int i = threadIdx.x; i < NB; i += kThreads)
    bias_s[i] = bias && f0 + i < g.filters ? bias[f0 + i] : 0.f;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tq = lane & 3;
  const uint32_t b_row = b_rows(ws, WS);
  uint32_t a_row[2];
  a_rows16<KS, S>(a_row, patch);
  T* out = outs + warp * 32 * OS;

  uint32_t next[kPerThread(KS, S)][3];
  auto load = [&](auto& regs, const TileOrigin& to) {
    if constexpr (U8)
      load_patch_bytes<KS, S>(regs, static_cast<const uint8_t*>(xv), g, to);
    else
      load_patch<KS, S>(regs, static_cast<const uint16_t*>(xv), g, to);
  };
  auto put = [&](int i, const uint32_t(&c)[3]) {
    uint2 v;
    if constexpr (U8) {
      v = make_uint2(0, 0);
      if (c[0] != kOutside)
        v = make_uint2(pixel_bits<T>(c[0], pre.scale[0], pre.shift[0]) |
                           (pixel_bits<T>(c[1], pre.scale[1], pre.shift[1]) << 16),
                       pixel_bits<T>(c[2], pre.scale[2], pre.shift[2]));
    } else {
      v = make_uint2(c[0] | (c[1] << 16), c[2]);
    }
    patch[i] = v;
    if (S == 1 && i % PW != 0) patch[kPixels(KS, S) + i - 1] = v;  // the copy a pixel to the left
  };
  auto body = [&](const TileOrigin& o) {
    float acc[2][NT][4];
    rows16_products<std::is_same_v<T, __half> ? implicit::kTcFp16 : implicit::kTcBf16, KS, NT, false, S>(
        acc, a_row, b_row, 0);
    float bv[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const float2 b = *reinterpret_cast<const float2*>(bias_s + nt * 8 + tq * 2);
      bv[nt][0] = b.x, bv[nt][1] = b.y;
    }
    if constexpr (POOL) {  // the pool's windows tile the tile: every warp's outputs staged, then pooled
      write_tile<T, NT>(acc, bv, outs, y, g, act, o.img, o.oy0, o.ox0, o.py0, o.px0, f0);
      return;
    }

    // The warp's 32 outputs (bias, activation, one rounding) staged, then out in 16-byte stores:
    // two runs of 16 pixels, each pixel's NB filters contiguous.
    stage_warp<T, NT>(acc, bv, out, act);
    __syncwarp();
    // The warp's first output's address once a tile (64-bit); the vectors' offsets from it 32-bit.
    constexpr int VP = NB / 8;  // 16-byte vectors a pixel
    const int oyw = o.oy0 + warp * 2;
    T* yw = y + ((static_cast<int64_t>(o.img) * g.out_h + oyw) * g.out_w + o.ox0) * g.filters + f0;
#pragma unroll
    for (int u = 0; u < VP; ++u) {
      const int v = lane + u * 32, m = v / VP, j = v - m * VP, r = m / kTileW, c = m % kTileW;
      if (oyw + r < g.out_h && o.ox0 + c < g.out_w && f0 + j * 8 < g.filters)
        *reinterpret_cast<uint4*>(yw + (r * g.out_w + c) * g.filters + j * 8) =
            *reinterpret_cast<const uint4*>(out + m * OS + j * 8);
    }
    __syncwarp();  // the staged outputs are read before the next tile's are written
  };
  pipelined_tiles<KS, S>(g, next, load, put, body);
}

// FP32 storage (tf32, fp32): the same GEMM on m16n8k8 TF32 products, k-steps of 8 taps (2 pixels
// of 4 channels: 32 bytes of the patch, a pixel each half of A's fragment). At stride 2 the
// pixels of 8 neighbouring outputs are 32 bytes apart, so the patch is kept as two planes, its even
// and its odd columns: an 8x8 matrix of A (16-byte rows, one pixel each) is then 8 consecutive
// pixels of one plane, without bank conflicts. TF32: operands rounded to nearest as they are
// staged. FP32 (THREE): 3xTF32, both operands split in the loop (as stem_f32_kernel). The outputs
// go from the accumulators to memory: a quad of lanes writes 32 contiguous bytes of a pixel.
constexpr int kPlaneW(int ks) { return kPatchW(ks) / 2; }

template <int KS, int NT>
constexpr size_t smem_bytes_f32() {
  return (size_t{NT} * 8 * (kDepth(KS) + 4) + size_t{kPixels(KS)} * 4) * 4;
}

template <bool THREE, int KS, int NT>
__global__ void __launch_bounds__(kThreads, 3)
    stem_rows_f32_kernel(const float* __restrict__ x, const float* __restrict__ w,
                         const float* __restrict__ bias, float* __restrict__ y, Geom g, ActFn act) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int NB = NT * 8, KWP = kKwp(KS), PH = kPatchH(KS), PWH = kPlaneW(KS), WS = kDepth(KS) + 4;
  constexpr int QS = KWP / 2;                                // k-steps a window row
  float* ws = reinterpret_cast<float*>(smem);                // [NB][WS]: [filter][kh][kw < KWP][4]
  float4* planes = reinterpret_cast<float4*>(ws + NB * WS);  // [2][PH][PWH]: even, odd columns
  auto operand = [](float v) { return THREE ? v : __uint_as_float(implicit::tf32_rn(v)); };
  const int f0 = blockIdx.y * NB;
  for (int i = threadIdx.x; i < NB * kDepth(KS); i += kThreads) {
    const int nn = i / kDepth(KS), k = i - nn * kDepth(KS);
    const int64_t src = weight_index<KS>(f0 + nn, k, g.filters);
    ws[nn * WS + k] = src >= 0 ? operand(w[src]) : 0.f;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tq = lane & 3;
  const uint32_t b_row = b_rows(ws, WS);
  // A: lane l gives the row address of matrix l / 8: pixels 0-7 / 8-15 of the m16 tile (its
  // output row's columns), the k-step's first pixel (the even plane) / second (the odd one).
  uint32_t a_row[2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
    a_row[mt] = static_cast<uint32_t>(__cvta_generic_to_shared(
        planes + (lane >> 4) * PH * PWH + (warp * 2 + mt) * 2 * PWH + (lane & 7) + ((lane >> 3) & 1) * 8));
  float bv[NT][2];
  bias_fragment<NT>(bv, bias, g, f0, tq);

  float next[kPerThread(KS)][3];
  auto load = [&](auto& regs, const TileOrigin& to) { load_patch<KS, 2>(regs, x, g, to); };
  auto put = [&](int i, const float(&v)[3]) {
    const int py = i / kPatchW(KS), px = i - py * kPatchW(KS);
    planes[(px & 1) * PH * PWH + py * PWH + (px >> 1)] =
        make_float4(operand(v[0]), operand(v[1]), operand(v[2]), 0.f);
  };
  auto body = [&](const TileOrigin& o) {
    float acc[2][NT][4];
    zero_acc<NT>(acc);
#pragma unroll
    for (int kh = 0; kh < KS; ++kh)
#pragma unroll
      for (int q = 0; q < QS; ++q) {
        uint32_t ah[2][4], al[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          ldmatrix_x4(ah[mt], a_row[mt] + (kh * PWH + q) * 16);
          if constexpr (THREE) {  // 3xTF32: A's high part and the remainder
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const float a = __uint_as_float(ah[mt][i]);
              ah[mt][i] = implicit::tf32_hi(a);
              al[mt][i] = __float_as_uint(a - __uint_as_float(ah[mt][i]));
            }
          }
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt += 2) {
          uint32_t b[4];  // b0, b1 of filter tile nt, then of nt + 1
          ldmatrix_x4(b, b_row + static_cast<uint32_t>((nt * 8 * WS + (kh * QS + q) * 8) * 4));
          mma_tf32_tiles<THREE, NT>(acc, ah, al, b, nt);
        }
      }

    auto pixel = [&](int, int) { return [&](int nt, int j, float v) { return v + bv[nt][j]; }; };
    with_act_stored<float>(act, [&](auto fn) { store_rows_f32<NT>(acc, y, g, o, f0, pixel, fn); });
  };
  pipelined_tiles<KS>(g, next, load, put, body);
}

// The reading-bytes stem (StemBytesWeights) on the rows layout: the patch holds byte - o[c] as
// FP16 (exact), 4 channels a pixel as the 16-bit kernel's, and each k-step multiplies A by the
// low and then the high part of the scaled weights; the epilogue is stem_bytes_kernel's (the
// accumulators scaled back, plus the bias and r[c] sum of the output's row and column classes),
// the FP32 outputs from the accumulators to memory. The next tile's bytes (three planes, one
// 32-bit word a pixel: the bytes and an inside flag) are loaded under this tile's products.
template <int KS, int NT>
constexpr size_t smem_u8() {
  return (size_t{2} * NT * 8 * kWs(KS) + size_t{kPixels(KS)} * 4) * 2 + size_t{2} * NT * 8 * 4;
}

// The bytes of tile o's pixels this thread stages, a register a channel as loaded (packed only as
// they are put, as load_patch's), and whether each pixel is inside the image (c[3]).
template <int KS>
__device__ __forceinline__ void load_patch_u8(uint32_t (&v)[kPerThread(KS)][4], const uint8_t* __restrict__ x,
                                              const Geom& g, const TileOrigin& o) {
  const int64_t plane = static_cast<int64_t>(g.in_h) * g.in_w;
  const uint8_t* xi = x + static_cast<int64_t>(o.img) * 3 * plane;
  patch_pixels<KS>(g, o, [&](int u, int64_t p) {
    v[u][0] = v[u][1] = v[u][2] = 0;
    v[u][3] = p >= 0;
    if (p >= 0) v[u][0] = xi[p], v[u][1] = xi[p + plane], v[u][2] = xi[p + 2 * plane];
  });
}

template <int KS, int NT>
__global__ void __launch_bounds__(kThreads, 3)
    stem_rows_bytes_kernel(const uint8_t* __restrict__ x, StemBytesDevice a, float* __restrict__ y, Geom g,
                           ActFn act) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int NB = NT * 8, KWP = kKwp(KS), PW = kPatchW(KS), WS = kWs(KS);
  uint16_t* wh = reinterpret_cast<uint16_t*>(smem);       // [NB][WS]: high parts, [filter][kh][kw < KWP][4]
  uint16_t* wl = wh + NB * WS;                            // [NB][WS]: low parts
  uint2* patch = reinterpret_cast<uint2*>(wl + NB * WS);  // [kPatchH][PW] pixels of 4 FP16 values
  float* osc = reinterpret_cast<float*>(patch + kPixels(KS));  // [NB]: the accumulators' scale
  float* tmid = osc + NB;  // [NB]: the table's values for the middle output's classes
  const int f0 = blockIdx.y * NB;
  for (int i = threadIdx.x; i < NB * kDepth(KS); i += kThreads) {
    const int nn = i / kDepth(KS), k = i - nn * kDepth(KS);
    const int64_t src = weight_index<KS>(f0 + nn, k, g.filters);
    wh[nn * WS + k] = src >= 0 ? a.w_hi[src] : uint16_t{0};
    wl[nn * WS + k] = src >= 0 ? a.w_lo[src] : uint16_t{0};
  }
  const int rmid = a.row_class[g.out_h / 2], cmid = a.col_class[g.out_w / 2];
  stage_scale_table(osc, tmid, a, g.filters, f0, NB, rmid, cmid);
  const float o0 = static_cast<float>(a.offset[0]), o1 = static_cast<float>(a.offset[1]),
              o2 = static_cast<float>(a.offset[2]);
  const int lane = threadIdx.x & 31, tq = lane & 3;
  const uint32_t b_row = b_rows(wh, WS);
  constexpr uint32_t kLoBytes = NB * WS * 2;
  uint32_t a_row[2];
  a_rows16<KS>(a_row, patch);

  uint32_t next[kPerThread(KS)][4];
  auto load = [&](auto& regs, const TileOrigin& to) { load_patch_u8<KS>(regs, x, g, to); };
  auto put = [&](int i, const uint32_t(&b)[4]) {
    uint2 v = make_uint2(0, 0);
    if (b[3])  // inside the image: byte - o[c], exact in FP16 (the padding stays zero)
      v = make_uint2(pack(__half_as_ushort(__float2half_rn(static_cast<float>(b[0]) - o0)),
                          __half_as_ushort(__float2half_rn(static_cast<float>(b[1]) - o1))),
                     __half_as_ushort(__float2half_rn(static_cast<float>(b[2]) - o2)));
    patch[i] = v;
  };
  auto body = [&](const TileOrigin& o) {
    float acc[2][NT][4];
    rows16_products<implicit::kTcFp16, KS, NT, true>(acc, a_row, b_row, kLoBytes);

    // Scaled back, plus the bias and the r[c] sum of the output's classes.
    auto pixel = [&](int oy, int ox) {
      const float* row = table_row(a, tmid, rmid, cmid, g.filters, oy, ox, f0);
      return
          [=](int nt, int j, float v) { return fmaf(v, osc[nt * 8 + tq * 2 + j], row[nt * 8 + tq * 2 + j]); };
    };
    with_act_stored<float>(act, [&](auto fn) { store_rows_f32<NT>(acc, y, g, o, f0, pixel, fn); });
  };
  pipelined_tiles<KS>(g, next, load, put, body);
}

// Whether a rows kernel computes p (the caller checked the stem's own conditions, and those of a
// pool in the epilogue): three channels, no dilation, a square window; 3x3 or 7x7 at stride 2
// without a pool, any storage; at 16-bit storage (x16) 3x3 at stride 1 too, with or without the
// pool (VGG's stem; at stride 2 the pooled 16-bit kernels would spill: the gather kernels run).
bool fits(const ConvParams& p, const StemPool& pool, bool x16) {
  if (p.in_c != 3 || p.dilation_h != 1 || p.dilation_w != 1 || p.kernel_h != p.kernel_w ||
      p.stride_h != p.stride_w)
    return false;
  if (p.stride_h == 1) return x16 && p.kernel_h == 3;
  return p.stride_h == 2 && (p.kernel_h == 3 || p.kernel_h == 7) && pool.kernel_h == 0;
}

// The 16-bit kernel (T: __half, __nv_bfloat16) or the FP32-storage one (T: float; THREE: 3xTF32).
// U8 (16-bit only): x is the uint8 pixels, normalised by `pre` as staged.
template <typename T, bool THREE, int KS, int NT, int S = 2, bool POOL = false, bool U8 = false>
void launch(const Geom& g, const void* x, const void* w, const float* bias, void* y, ActFn act,
            cudaStream_t s, const StemPixels& pre) {
  if constexpr (std::is_same_v<T, float>) {
    static_assert(!U8, "the FP32-storage stem reads the bytes through stem_rows_bytes_kernel");
    launch_tiles(stem_rows_f32_kernel<THREE, KS, NT>, g, NT, smem_bytes_f32<KS, NT>(), s,
                 static_cast<const float*>(x), static_cast<const float*>(w), bias, static_cast<float*>(y), g,
                 act);
  } else {
    launch_tiles(stem_rows_kernel<T, KS, NT, S, POOL, U8>, g, NT, smem_bytes<KS, NT, S>(), s, x,
                 static_cast<const uint16_t*>(w), bias, static_cast<T*>(y), g, act, pre);
  }
}

// The stride-2 kernels without a pool (fits), 3x3 or 7x7, the filters a block.
template <typename T, bool THREE, bool U8 = false>
void launch_s2(const Geom& g, const void* x, const void* w, const float* bias, void* y, ActFn act,
               cudaStream_t s, const StemPixels& pre) {
  const bool wide = n_tiles(g) == 8;
  if (g.kh == 7)
    wide ? launch<T, THREE, 7, 8, 2, false, U8>(g, x, w, bias, y, act, s, pre)
         : launch<T, THREE, 7, 4, 2, false, U8>(g, x, w, bias, y, act, s, pre);
  else
    wide ? launch<T, THREE, 3, 8, 2, false, U8>(g, x, w, bias, y, act, s, pre)
         : launch<T, THREE, 3, 4, 2, false, U8>(g, x, w, bias, y, act, s, pre);
}

// Any of them (fits): 16-bit also 3x3 at stride 1, pooled or not, and reading the bytes (U8).
template <typename T, bool THREE = false, bool U8 = false>
void launch_any(const Geom& g, const void* x, const void* w, const float* bias, void* y, ActFn act,
                cudaStream_t s, const StemPixels& pre = StemPixels{}) {
  if constexpr (!std::is_same_v<T, float>) {
    if (g.sh == 1) {
      const bool wide = n_tiles(g) == 8;
      if (g.pooled)
        wide ? launch<T, false, 3, 8, 1, true, U8>(g, x, w, bias, y, act, s, pre)
             : launch<T, false, 3, 4, 1, true, U8>(g, x, w, bias, y, act, s, pre);
      else
        wide ? launch<T, false, 3, 8, 1, false, U8>(g, x, w, bias, y, act, s, pre)
             : launch<T, false, 3, 4, 1, false, U8>(g, x, w, bias, y, act, s, pre);
      return;
    }
  }
  launch_s2<T, THREE, U8>(g, x, w, bias, y, act, s, pre);
}

template <int KS, int NT>
void launch_bytes(const Geom& g, const uint8_t* x, const StemBytesDevice& w, float* y, ActFn act,
                  cudaStream_t s) {
  launch_tiles(stem_rows_bytes_kernel<KS, NT>, g, NT, smem_u8<KS, NT>(), s, x, w, y, g, act);
}

void launch_bytes_any(const Geom& g, const uint8_t* x, const StemBytesDevice& w, float* y, ActFn act,
                      cudaStream_t s) {
  const bool wide = n_tiles(g) == 8;
  if (g.kh == 7)
    wide ? launch_bytes<7, 8>(g, x, w, y, act, s) : launch_bytes<7, 4>(g, x, w, y, act, s);
  else
    wide ? launch_bytes<3, 8>(g, x, w, y, act, s) : launch_bytes<3, 4>(g, x, w, y, act, s);
}

}  // namespace rows

// FP32 storage (--precision tf32 or fp32): the same GEMM on m16n8k8 TF32 products, a tap a
// k-slot (no channel pairs: every value is a 32-bit word), the patch and the weights staged as
// FP32. TF32: both operands rounded to nearest. FP32 (THREE): 3xTF32, each operand split into a
// TF32 high part and the remainder (implicit/mma.cuh, as the implicit kernel's), a_lo b_hi +
// a_hi b_lo + a_hi b_hi: about FP32 accuracy.
template <bool THREE, int NT>
__global__ void __launch_bounds__(kThreads, 2)
    stem_f32_kernel(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                    float* __restrict__ y, Geom g, ActFn act) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int NB = NT * 8;
  constexpr int OS = out_stride(NT, 4);
  float* ws = reinterpret_cast<float*>(smem);          // [NB][ks]
  int* koff = reinterpret_cast<int*>(ws + NB * g.ks);  // [kp]: a tap's offset
  float* out = reinterpret_cast<float*>(koff + g.kp);  // [tile pixels][OS], after the products ...
  float* patch = out;                                  // ... [patch], before them
  const int f0 = blockIdx.y * NB;
  // TF32: operands rounded once as they are staged; 3xTF32 splits them in the loop.
  auto operand = [](float v) { return THREE ? v : __uint_as_float(implicit::tf32_rn(v)); };
  for (int i = threadIdx.x; i < NB * g.kp; i += kThreads) {
    const int nn = i / g.kp, k = i - nn * g.kp, f = f0 + nn;
    ws[nn * g.ks + k] = f < g.filters && k < g.k ? operand(w[static_cast<int64_t>(f) * g.kc + k]) : 0.f;
  }
  for (int t = threadIdx.x; t < g.kp; t += kThreads) {
    int off = -1;
    if (t < g.k) {
      const int ch = t % g.c, rs = t / g.c, r = rs / g.kw, q = rs - r * g.kw;
      off = (r * g.dh * g.patch_w + q * g.dw) * g.c + ch;
    }
    koff[t] = off;
  }

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
  const uint32_t b_row = b_rows(ws, g.ks);
  int base[2][2];  // [m16 tile][row gr, gr + 8]: the pixel's first value in the patch (cp = c)
  pixel_bases(base, g, warp, gr);
  float bv[NT][2];
  bias_fragment<NT>(bv, bias, g, f0, tq);

  for (int64_t t = blockIdx.x; t < g.total; t += gridDim.x) {
    const TileOrigin o = tile_origin(g, t);
    const int img = o.img, py0 = o.py0, px0 = o.px0, oy0 = o.oy0, ox0 = o.ox0, iy0 = o.iy0, ix0 = o.ix0;
    const float* xi = x + static_cast<int64_t>(img) * g.in_h * g.in_w * g.c;
    __syncthreads();  // the previous tile's reads of the patch and the outputs are done
    // A thread a patch pixel at a time, its channels (zeros outside the image).
    for (int i = threadIdx.x; i < g.patch_h * g.patch_w; i += kThreads) {
      const int py = i / g.patch_w, px = i - py * g.patch_w, iy = iy0 + py, ix = ix0 + px;
      const bool inside = iy >= 0 && iy < g.in_h && ix >= 0 && ix < g.in_w;
      const int64_t src = (static_cast<int64_t>(iy) * g.in_w + ix) * g.c;
      for (int ch = 0; ch < g.c; ++ch) patch[i * g.c + ch] = inside ? operand(xi[src + ch]) : 0.f;
    }
    __syncthreads();

    float acc[2][NT][4];
    zero_acc<NT>(acc);
    for (int kb = 0; kb < g.kp; kb += 8) {
      const int p0 = koff[kb + tq], p1 = koff[kb + tq + 4];  // taps tq and tq + 4 of the k-step
      auto at = [&](int r, int p) { return p < 0 ? 0.f : patch[r + p]; };
      unsigned ah[2][4], al[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const float a[4] = {at(base[mt][0], p0), at(base[mt][1], p0), at(base[mt][0], p1),
                            at(base[mt][1], p1)};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          ah[mt][i] = THREE ? implicit::tf32_hi(a[i]) : __float_as_uint(a[i]);
          al[mt][i] = THREE ? __float_as_uint(a[i] - __uint_as_float(ah[mt][i])) : 0u;
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT; nt += 2) {
        uint32_t b[4];  // b0, b1 of filter tile nt, then of nt + 1
        ldmatrix_x4(b, b_row + static_cast<uint32_t>((nt * 8 * g.ks + kb) * 4));
        mma_tf32_tiles<THREE, NT>(acc, ah, al, b, nt);
      }
    }
    __syncthreads();  // every warp's reads of the patch are done: the outputs take its place
    write_tile<float, NT>(acc, bv, out, y, g, act, img, oy0, ox0, py0, px0, f0);
  }
}

// The reading-bytes stem (StemBytesWeights): the 16-bit kernel's GEMM on the staged byte - o[c]
// (FP16, exact), against the high and the low part of the scaled weights (two ldmatrix, four
// products of each per two filter tiles), the low part's products first. FP32 outputs go from the
// accumulators straight to memory (a quad of lanes writes 32 contiguous bytes of a pixel: whole
// sectors), so shared memory holds only the weights, the tables and the patch, and three blocks
// fit an SM; with a pool the outputs are staged in place of the patch as the other kernels' are.
size_t smem_bytes_u8(const Geom& g, int nt) {
  const size_t patch = static_cast<size_t>(g.patch) * 2;
  const size_t out = g.pooled ? static_cast<size_t>(kTileH * kTileW * out_stride(nt, 4)) * 4 : 0;
  return static_cast<size_t>(2 * nt * 8 * g.ks) * 2 + static_cast<size_t>(g.kp / 2) * 4 +
         static_cast<size_t>(2 * nt * 8 + 4) * 4 + std::max(out, patch);
}

template <int NT>
__global__ void __launch_bounds__(kThreads, 3)
    stem_bytes_kernel(const uint8_t* __restrict__ x, StemBytesDevice a, float* __restrict__ y, Geom g,
                      ActFn act) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int NB = NT * 8;
  uint16_t* wh = reinterpret_cast<uint16_t*>(smem);        // [NB][ks]: high parts
  uint16_t* wl = wh + NB * g.ks;                           // [NB][ks]: low parts
  int* koff = reinterpret_cast<int*>(wl + NB * g.ks);      // [kp / 2]: a pair of taps' offset
  float* osc = reinterpret_cast<float*>(koff + g.kp / 2);  // [NB]: the accumulators' scale
  float* tmid = osc + NB;                         // [NB]: the table's values for the middle output's classes
  int* offs = reinterpret_cast<int*>(tmid + NB);  // [4]: o[c]
  float* out = reinterpret_cast<float*>(offs + 4);     // pooled: [tile pixels][OS], after the products ...
  uint32_t* patch = reinterpret_cast<uint32_t*>(out);  // ... [patch / 2], before them
  const int f0 = blockIdx.y * NB;
  for (int i = threadIdx.x; i < NB * g.kp; i += kThreads) {
    const int nn = i / g.kp, k = i - nn * g.kp, f = f0 + nn, rs = k / g.cp, ch = k - rs * g.cp;
    const bool in = f < g.filters && k < g.k && ch < g.c;
    const int64_t src = static_cast<int64_t>(f) * g.kc + rs * g.c + ch;
    wh[nn * g.ks + k] = in ? a.w_hi[src] : uint16_t{0};
    wl[nn * g.ks + k] = in ? a.w_lo[src] : uint16_t{0};
  }
  pair_offsets(koff, g);
  // Every output whose row and column classes are the middle output's (most of them) takes the
  // table's value from shared memory; the others read their row of the table.
  const int rmid = a.row_class[g.out_h / 2], cmid = a.col_class[g.out_w / 2];
  stage_scale_table(osc, tmid, a, g.filters, f0, NB, rmid, cmid);
  if (threadIdx.x == 0)  // (constant indices: the parameters stay out of local memory)
    offs[0] = a.offset[0], offs[1] = a.offset[1], offs[2] = a.offset[2], offs[3] = a.offset[3];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
  const uint32_t b_row = b_rows(wh, g.ks);
  const uint32_t lo_bytes = static_cast<uint32_t>(NB * g.ks * 2);
  int base[2][2];
  pixel_bases(base, g, warp, gr);
  const int64_t plane = static_cast<int64_t>(g.in_h) * g.in_w;
  const int hp = g.cp / 2, pairs = g.patch_w * hp, items = g.patch_h * pairs;

  for (int64_t t = blockIdx.x; t < g.total; t += gridDim.x) {
    const TileOrigin o = tile_origin(g, t);
    const uint8_t* xi = x + static_cast<int64_t>(o.img) * g.c * plane;
    __syncthreads();  // the previous tile's reads of the patch (and staged outputs) are done
    // The patch's pairs of a pixel's channels, byte - o[c] as FP16 (zeros outside the image and
    // for the padding channels), eight a thread at a time: their loads all issued before the first
    // is used (the bytes of three planes, mostly from L2), then converted and stored.
    for (int i0 = 0; i0 < items; i0 += 8 * kThreads) {
      uint32_t raw[8];  // two 16-bit fields: a byte, or 256 for a zero
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int i = i0 + u * kThreads + static_cast<int>(threadIdx.x);
        uint32_t b0 = 256, b1 = 256;
        if (i < items) {
          const int py = i / pairs, j = i - py * pairs;
          const int px = hp == 2 ? j >> 1 : j, ch = (j & (hp - 1)) * 2, iy = o.iy0 + py, ix = o.ix0 + px;
          if (iy >= 0 && iy < g.in_h && ix >= 0 && ix < g.in_w) {
            const uint8_t* src = xi + static_cast<int64_t>(iy) * g.in_w + ix + ch * plane;
            if (ch < g.c) b0 = src[0];
            if (ch + 1 < g.c) b1 = src[plane];
          }
        }
        raw[u] = b0 | (b1 << 16);
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int i = i0 + u * kThreads + static_cast<int>(threadIdx.x);
        if (i >= items) break;
        const int ch = ((i % pairs) & (hp - 1)) * 2;
        const uint32_t b0 = raw[u] & 0xffffu, b1 = raw[u] >> 16;
        const float v0 = b0 > 255 ? 0.f : static_cast<float>(static_cast<int>(b0) - offs[ch]);
        const float v1 = b1 > 255 ? 0.f : static_cast<float>(static_cast<int>(b1) - offs[ch + 1]);
        patch[i] = pack(__half_as_ushort(__float2half_rn(v0)), __half_as_ushort(__float2half_rn(v1)));
      }
    }
    __syncthreads();

    float acc[2][NT][4];
    zero_acc<NT>(acc);
    for (int kb = 0; kb < g.kp; kb += 16) {
      uint32_t af[2][4];
      a_pairs(af, patch, base, koff, kb, tq);
#pragma unroll
      for (int nt = 0; nt < NT; nt += 2) {
        const uint32_t addr = b_row + static_cast<uint32_t>((nt * 8 * g.ks + kb) * 2);
        uint32_t bh[4], bl[4];
        ldmatrix_x4(bl, addr + lo_bytes);
        ldmatrix_x4(bh, addr);
        mma16_tiles<implicit::kTcFp16, NT>(acc, af, bl, nt);  // the low parts first
        mma16_tiles<implicit::kTcFp16, NT>(acc, af, bh, nt);
      }
    }
    // Scaled back, plus the bias and the r[c] sum of the output's classes.
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = warp * 32 + mt * 16 + h * 8 + gr, oy = o.oy0 + m / kTileW, ox = o.ox0 + m % kTileW;
        const float* row =
            oy < g.out_h && ox < g.out_w ? table_row(a, tmid, rmid, cmid, g.filters, oy, ox, f0) : tmid;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int i = nt * 8 + tq * 2 + j;
            const float tv = f0 + i < g.filters ? row[i] : 0.f;
            acc[mt][nt][h * 2 + j] = fmaf(acc[mt][nt][h * 2 + j], osc[i], tv);
          }
      }
    if (g.pooled) {
      float zero[NT][2];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) zero[nt][0] = zero[nt][1] = 0.f;
      __syncthreads();  // every warp's reads of the patch are done: the outputs take its place
      write_tile<float, NT>(acc, zero, out, y, g, act, o.img, o.oy0, o.ox0, o.py0, o.px0, f0);
      continue;
    }
    auto store = [&](auto fn) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int m = warp * 32 + mt * 16 + h * 8 + gr, oy = o.oy0 + m / kTileW, ox = o.ox0 + m % kTileW;
          if (oy >= g.out_h || ox >= g.out_w) continue;
          float* dst =
              y + ((static_cast<int64_t>(o.img) * g.out_h + oy) * g.out_w + ox) * g.filters + f0 + tq * 2;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            if (f0 + nt * 8 < g.filters)
              *reinterpret_cast<float2*>(dst + nt * 8) =
                  make_float2(fn(acc[mt][nt][h * 2]), fn(acc[mt][nt][h * 2 + 1]));
        }
    };
    with_act_stored<float>(act, store);
  }
}

// `kernel` (stem_kernel, or stem_f32_kernel) with NT 8-filter tiles a block: X the type its input
// and weights are read as, Y its output's.
template <typename X, typename Y, int NT, typename K>
void launch(K kernel, const Geom& g, const void* x, const void* w, const float* bias, void* y, ActFn act,
            cudaStream_t s) {
  launch_tiles(kernel, g, NT, smem_bytes(g, NT), s, static_cast<const X*>(x), static_cast<const X*>(w), bias,
               static_cast<Y*>(y), g, act);
}

}  // namespace

namespace {

// The conditions on the convolution itself, for stored values of `es` bytes, but for the
// kernel's shared memory (each kernel's own: smem_bytes, smem_bytes_u8).
std::string taps_cannot_run(const ConvParams& p, int es) {
  if (p.groups != 1) return "groups (" + std::to_string(p.groups) + ") > 1";
  if (p.in_c < 1 || p.in_c > 4) return "input channels (" + std::to_string(p.in_c) + ") are not 1 to 4";
  if (p.filters % 8 != 0) return "filters (" + std::to_string(p.filters) + ") are not a multiple of 8";
  if (geom(p, 1, es).kp > kMaxTaps)
    return "kernel " + std::to_string(p.kernel_h) + "x" + std::to_string(p.kernel_w) + " x " +
           std::to_string(p.in_c) + " channels is over " + std::to_string(kMaxTaps) + " taps";
  return "";
}

// ... and the 16-bit or FP32 kernel's shared memory.
std::string shape_cannot_run(const ConvParams& p, int es) {
  if (std::string why = taps_cannot_run(p, es); !why.empty()) return why;
  const Geom g = geom(p, 1, es);
  if (smem_bytes(g, n_tiles(g)) > kMaxSmem)
    return "the input under a tile of " + std::to_string(kTileH) + "x" + std::to_string(kTileW) +
           " outputs (stride and dilation) is over its shared memory";
  return "";
}

int bytes_of(Precision prec) { return storage_bytes(storage_of(prec)); }

// The reading-bytes stem's conditions: the 16-bit kernel's taps, its own shared memory.
std::string bytes_cannot_run(const ConvParams& p) {
  if (std::string why = taps_cannot_run(p, 2); !why.empty()) return why;
  const Geom g = geom(p, 1, 2);
  // With a fused pool its outputs are staged too: a conv the stem may pool must fit either way,
  // since whether the pool is fused is decided after this.
  Geom pooled = g;
  pooled.pooled = true;
  if (smem_bytes_u8(pooled, n_tiles(g)) > kMaxSmem)
    return "the input under a tile of " + std::to_string(kTileH) + "x" + std::to_string(kTileW) +
           " outputs (stride and dilation) and its staged outputs are over its shared memory";
  return "";
}

// Each output row's (column's) in-image window rows (columns) as a class: the first and the last
// window row whose input row is inside the image (an empty range: first > last); classes
// numbered in order of first appearance.
int classes(int64_t out, int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil,
            std::vector<int>* cls, std::vector<std::pair<int, int>>* ranges) {
  cls->assign(static_cast<size_t>(out), 0);
  ranges->clear();
  for (int64_t o = 0; o < out; ++o) {
    int lo = static_cast<int>(k), hi = -1;
    for (int64_t r = 0; r < k; ++r) {
      const int64_t i = o * stride - pad + r * dil;
      if (i >= 0 && i < in) lo = std::min(lo, static_cast<int>(r)), hi = std::max(hi, static_cast<int>(r));
    }
    const auto it = std::find(ranges->begin(), ranges->end(), std::make_pair(lo, hi));
    (*cls)[static_cast<size_t>(o)] = static_cast<int>(it - ranges->begin());
    if (it == ranges->end()) ranges->emplace_back(lo, hi);
  }
  return static_cast<int>(ranges->size());
}

}  // namespace

std::string stem_bytes_weights(const ConvParams& p, const float* weight, const float* bias,
                               const std::vector<float>& scale, const std::vector<float>& shift,
                               StemBytesWeights* out) {
  if (std::string why = bytes_cannot_run(p); !why.empty()) return why;
  if (static_cast<int64_t>(scale.size()) != p.in_c || static_cast<int64_t>(shift.size()) != p.in_c)
    return "the preprocessing has " + std::to_string(scale.size()) + " scales for " + std::to_string(p.in_c) +
           " input channels";
  StemBytesWeights b;
  std::vector<double> r(static_cast<size_t>(p.in_c));
  for (int64_t c = 0; c < p.in_c; ++c) {
    const double sc = scale[static_cast<size_t>(c)], sh = shift[static_cast<size_t>(c)];
    if (!std::isfinite(sc) || !std::isfinite(sh)) return "the preprocessing is not finite";
    const double o = sc == 0 ? 0.0 : std::min(255.0, std::max(0.0, std::nearbyint(-sh / sc)));
    b.offset.push_back(static_cast<int>(o));
    r[static_cast<size_t>(c)] = sc * o + sh;
  }
  const int64_t taps = p.kernel_h * p.kernel_w, kc = taps * p.in_c;
  auto w = [&](int64_t f, int64_t c, int64_t t) {
    return static_cast<double>(weight[(f * p.in_c + c) * taps + t]);
  };
  b.w_hi.resize(static_cast<size_t>(p.filters * kc));
  b.w_lo.resize(b.w_hi.size());
  b.out_scale.resize(static_cast<size_t>(p.filters));
  for (int64_t f = 0; f < p.filters; ++f) {
    double big = 0;
    for (int64_t c = 0; c < p.in_c; ++c)
      for (int64_t t = 0; t < taps; ++t) {
        const double v = w(f, c, t) * scale[static_cast<size_t>(c)];
        if (!std::isfinite(v) || (bias && !std::isfinite(bias[f]))) return "the weights are not finite";
        big = std::max(big, std::fabs(v));
      }
    // The largest scaled weight in [2^14, 2^15): high parts normal FP16 below 65504, sums of 256
    // products of 9-bit integers far inside FP32.
    const int e = big > 0 ? 14 - std::ilogb(big) : 0;
    b.out_scale[static_cast<size_t>(f)] = std::ldexp(1.f, -e);
    if (!std::isfinite(b.out_scale[static_cast<size_t>(f)]) || b.out_scale[static_cast<size_t>(f)] == 0)
      return "the weights' range is too wide for FP16 parts";
    for (int64_t c = 0; c < p.in_c; ++c)
      for (int64_t t = 0; t < taps; ++t) {
        const float v = static_cast<float>(std::ldexp(w(f, c, t) * scale[static_cast<size_t>(c)], e));
        const __half hi = __float2half_rn(v);
        const __half lo = __float2half_rn(v - __half2float(hi));
        const size_t at = static_cast<size_t>(f * kc + t * p.in_c + c);  // [f][kh][kw][c]
        b.w_hi[at] = __half_as_ushort(hi);
        b.w_lo[at] = __half_as_ushort(lo);
      }
  }
  std::vector<std::pair<int, int>> rows, cols;
  b.row_classes =
      classes(p.out_h, p.in_h, p.kernel_h, p.stride_h, p.pad_h, p.dilation_h, &b.row_class, &rows);
  b.col_classes =
      classes(p.out_w, p.in_w, p.kernel_w, p.stride_w, p.pad_w, p.dilation_w, &b.col_class, &cols);
  b.table.resize(static_cast<size_t>(b.row_classes * b.col_classes * p.filters));
  for (int rc = 0; rc < b.row_classes; ++rc)
    for (int cc = 0; cc < b.col_classes; ++cc)
      for (int64_t f = 0; f < p.filters; ++f) {
        double sum = bias ? bias[f] : 0.0;
        for (int kr = rows[static_cast<size_t>(rc)].first; kr <= rows[static_cast<size_t>(rc)].second; ++kr)
          for (int ks = cols[static_cast<size_t>(cc)].first; ks <= cols[static_cast<size_t>(cc)].second; ++ks)
            for (int64_t c = 0; c < p.in_c; ++c)
              sum += r[static_cast<size_t>(c)] * w(f, c, kr * p.kernel_w + ks);
        b.table[static_cast<size_t>((rc * b.col_classes + cc) * p.filters + f)] = static_cast<float>(sum);
      }
  *out = std::move(b);
  return "";
}

std::string stem_bytes_cannot_run(const ConvParams& p) { return bytes_cannot_run(p); }

void launch_conv_stem_bytes(const ConvParams& p, const uint8_t* x, const StemBytesDevice& w, float* y,
                            int64_t n, ActFn act, cudaStream_t s, const StemPool& pool, bool rows) {
  std::string why = bytes_cannot_run(p);
  if (why.empty() && pool.kernel_h > 0) why = stem_pool_cannot_run(p, pool);
  const Geom g = geom(p, n, 2, pool);
  if (why.empty() && smem_bytes_u8(g, n_tiles(g)) > kMaxSmem)
    why = "the input under a tile and its outputs for the pool are over its shared memory";
  if (!why.empty()) throw Error("stem convolution: " + why);
  if (n <= 0) return;
  if (rows && rows::fits(p, pool, false)) {
    rows::launch_bytes_any(g, x, w, y, act, s);
    CUDA_CHECK_LAUNCH("stem_rows_bytes_kernel");
    return;
  }
  if (n_tiles(g) == 8)
    launch_tiles(stem_bytes_kernel<8>, g, 8, smem_bytes_u8(g, 8), s, x, w, y, g, act);
  else
    launch_tiles(stem_bytes_kernel<4>, g, 4, smem_bytes_u8(g, 4), s, x, w, y, g, act);
  CUDA_CHECK_LAUNCH("stem_bytes_kernel");
}

std::string stem_pool_cannot_run(const ConvParams& p, const StemPool& pool) {
  if (const std::string why = shape_cannot_run(p, 2); !why.empty()) return why;
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
  if (!channels_last) return "the stem kernel runs channels last (--layout nhwc)";
  return shape_cannot_run(p, bytes_of(prec));
}

bool stem_runs_rows(const ConvParams& p, Precision prec, const StemPool& pool) {
  return shape_cannot_run(p, bytes_of(prec)).empty() && rows::fits(p, pool, bytes_of(prec) == 2);
}

std::string stem_u8_cannot_run(const ConvParams& p, Precision prec, const StemPool& pool) {
  if (bytes_of(prec) != 2)
    return "in FP32 storage the stem reads the bytes as exact pixels (launch_conv_stem_bytes)";
  // The shape's conditions (stem_pool_cannot_run checks them first, then the pool's).
  if (std::string why = pool.kernel_h > 0 ? stem_pool_cannot_run(p, pool) : shape_cannot_run(p, 2);
      !why.empty())
    return why;
  if (!rows::fits(p, pool, true))
    return "only the rows kernels read the bytes (three channels, 3x3 or 7x7 at stride 2, or 3x3 at stride "
           "1)";
  return "";
}

void launch_conv_stem_u8(const ConvParams& p, const uint8_t* x, const StemPixels& pre, Precision prec,
                         const void* w, const float* bias, void* y, int64_t n, ActFn act, cudaStream_t s,
                         const StemPool& pool) {
  if (const std::string why = stem_u8_cannot_run(p, prec, pool); !why.empty())
    throw Error("stem convolution on the uint8 pixels: " + why);
  if (n <= 0) return;
  const Geom g = geom(p, n, 2, pool);
  if (prec == Precision::kFp16)
    rows::launch_any<__half, false, true>(g, x, w, bias, y, act, s, pre);
  else
    rows::launch_any<__nv_bfloat16, false, true>(g, x, w, bias, y, act, s, pre);
  CUDA_CHECK_LAUNCH("stem_rows_kernel (uint8 input)");
}

void launch_conv_stem(const ConvParams& p, const void* x, Precision prec, const void* w, const float* bias,
                      void* y, int64_t n, ActFn act, cudaStream_t s, const StemPool& pool, bool rows) {
  const int es = bytes_of(prec);
  std::string why = shape_cannot_run(p, es);
  if (why.empty() && pool.kernel_h > 0) why = stem_pool_cannot_run(p, pool);
  if (!why.empty()) throw Error("stem convolution: " + why);
  if (n <= 0) return;
  const Geom g = geom(p, n, es, pool);
  const bool wide = n_tiles(g) == 8;
  switch (prec) {
    case Precision::kFp16:
      if (rows && rows::fits(p, pool, true)) {
        rows::launch_any<__half>(g, x, w, bias, y, act, s);
        break;
      }
      wide ? launch<uint16_t, __half, 8>(stem_kernel<__half, 8>, g, x, w, bias, y, act, s)
           : launch<uint16_t, __half, 4>(stem_kernel<__half, 4>, g, x, w, bias, y, act, s);
      break;
    case Precision::kBf16:
      if (rows && rows::fits(p, pool, true)) {
        rows::launch_any<__nv_bfloat16>(g, x, w, bias, y, act, s);
        break;
      }
      wide ? launch<uint16_t, __nv_bfloat16, 8>(stem_kernel<__nv_bfloat16, 8>, g, x, w, bias, y, act, s)
           : launch<uint16_t, __nv_bfloat16, 4>(stem_kernel<__nv_bfloat16, 4>, g, x, w, bias, y, act, s);
      break;
    case Precision::kTf32:
      if (rows && rows::fits(p, pool, false)) {
        rows::launch_any<float>(g, x, w, bias, y, act, s);
        break;
      }
      wide ? launch<float, float, 8>(stem_f32_kernel<false, 8>, g, x, w, bias, y, act, s)
           : launch<float, float, 4>(stem_f32_kernel<false, 4>, g, x, w, bias, y, act, s);
      break;
    case Precision::kFp32:
      if (rows && rows::fits(p, pool, false)) {
        rows::launch_any<float, true>(g, x, w, bias, y, act, s);
        break;
      }
      wide ? launch<float, float, 8>(stem_f32_kernel<true, 8>, g, x, w, bias, y, act, s)
           : launch<float, float, 4>(stem_f32_kernel<true, 4>, g, x, w, bias, y, act, s);
      break;
  }
  CUDA_CHECK_LAUNCH("stem_kernel");
}

}  // namespace cnnrun::gpu
