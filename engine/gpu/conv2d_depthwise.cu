// Depthwise convolution. Why this shape: a depthwise layer does KH*KW multiply-adds per output
// and reads each input value KH*KW times, so it is bound by memory traffic, not arithmetic, and
// the GEMM lowerings (im2col, cuDNN's grouped GEMMs with one channel per group) waste most of their
// work on tiny matrices. Here a thread block stages the input rows that `rows` output rows of
// `planes` consecutive (image, filter) planes need, padding as zeros, and the planes' weights into
// shared memory once (each input value is read from global memory about once), with asynchronous
// copies (cp.async): a thread has all its copies in flight before it waits for any. Then its 256
// threads compute about 16 outputs each (kDepthwiseTileOutputs) from shared memory, add the bias,
// apply the activation and write them coalesced. No index is divided per value: rows of 32 values
// or more are staged and computed a warp a row, lanes along it; narrower planes a warp a plane,
// each lane carrying its (row, column) from one value to the next 32 on (Walk); only planes under
// 32 values (1x1 and 2x2 outputs) go one value a thread over the flattened tile. Small planes
// are packed several per block, in whole rounds of the 8 warps; large ones are cut into row tiles
// of even height. The common 3x3 and 5x5 kernels are compile-time loops; other sizes use the same
// code with run-time bounds.
#include <algorithm>
#include <climits>
#include <type_traits>

#include "engine/gpu/activation.cuh"
#include "engine/gpu/check.h"
#include "engine/gpu/conv2d_depthwise.h"
#include "engine/gpu/cp_async.cuh"
#include "engine/gpu/grid_stride.h"
#include "engine/gpu/storage.cuh"

namespace cnnrun::gpu {

namespace {

constexpr int kThreads = 256;
constexpr int kMeanRows = 8;            // the vector kernel's output rows a block with the mean
constexpr size_t kMaxSmem = 48u << 10;  // the default limit, no opt-in needed

struct Tile {
  int planes, rows, row_tiles, patch_h, patch_w;
  int64_t plane_groups;
};

// Row-major positions of a plane `width` wide, from `start` on in steps of 32: (row, col) carried
// from one to the next with an add and a compare, no division.
struct Walk {
  int row, col, width, d_row, d_col;
  __device__ Walk(int start, int w)
      : row(start / w), col(start % w), width(w), d_row(32 / w), d_col(32 % w) {}
  __device__ void step(int& r, int& c) const {
    c += d_col;
    r += d_row;
    if (c >= width) c -= width, ++r;
  }
};

// SPLIT (stride 2 across, undilated, rows of 32 or more): each staged row holds its even columns,
// then its odd ones, so that a warp's 32 outputs read 32 consecutive words per tap (with the
// columns in place, a stride-2 read hits each bank twice).
template <int KH, int KW, bool SPLIT>
__global__ void __launch_bounds__(kThreads)
    depthwise_kernel(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                     float* __restrict__ y, int64_t nf, DepthwiseArgs a, Tile t, ActFn act) {
  extern __shared__ float smem[];  // [planes][patch_h][patch_w] then [planes][taps]
  const int kh_n = KH > 0 ? KH : a.kernel_h, kw_n = KW > 0 ? KW : a.kernel_w;
  const int taps = kh_n * kw_n;
  const int patch = t.patch_h * t.patch_w;
  const int mult = a.filters / a.channels;
  const int tile_outputs = t.planes * t.rows * a.out_w;
  const int64_t tiles = t.plane_groups * t.row_tiles;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // A warp a plane (planes of 32 values or more but rows under 32): each lane walks the plane's
  // row-major positions 32 apart, carrying (row, column) instead of dividing per value. Its
  // start and step, for the staged patch and for the tile's outputs, once per thread.
  const Walk in_walk(lane, t.patch_w), out_walk(lane, a.out_w);

  // A tile's place: planes p0.. (live of them exist), output rows oy0.., input rows iy0... Its
  // planes as (image, filter) from one 64-bit division per tile: plane pb is filter f0 + pb of
  // image img0, carried over the images with 32-bit arithmetic, so no value staged or written
  // pays a 64-bit division.
  struct Place {
    int64_t p0, img0;
    int oy0, iy0, f0, live;
  };
  auto place = [&](int64_t tile) {
    Place u;
    u.p0 = tile / t.row_tiles * t.planes;
    u.oy0 = static_cast<int>(tile % t.row_tiles) * t.rows;
    u.iy0 = u.oy0 * a.stride_h - a.pad_h;
    u.img0 = u.p0 / a.filters;
    u.f0 = static_cast<int>(u.p0 - u.img0 * a.filters);
    const int64_t left = nf - u.p0;
    u.live = left < t.planes ? static_cast<int>(left) : t.planes;
    return u;
  };

  // Issue a tile's copies into the stage (asynchronous: a thread has all its copies in flight at
  // once).
  auto stage = [&](const Place& u, float* buf) {
    // The tile's (image, filter) plane pb, as a pointer to its input channel.
    auto channel = [&](int pb) {
      if (mult == 1) return x + (u.p0 + pb) * a.in_h * a.in_w;  // plane p0 + pb is input plane p0 + pb
      const int f = u.f0 + pb, di = f / a.filters;
      const int c = (f - di * a.filters) / mult;
      return x + ((u.img0 + di) * a.channels + c) * a.in_h * a.in_w;
    };
    if (t.patch_w >= 32) {  // a warp a patch row, its lanes along it: no division per value
      for (int row = warp; row < t.planes * t.patch_h; row += kThreads / 32) {
        const int pb = row / t.patch_h, iy = u.iy0 + row - pb * t.patch_h;
        const bool in = pb < u.live && iy >= 0 && iy < a.in_h;
        const float* src = in ? channel(pb) + int64_t(iy) * a.in_w : x;
        float* dst = buf + row * t.patch_w;
        const int half = (t.patch_w + 1) / 2;
        for (int px = lane; px < t.patch_w; px += 32) {
          const int ix = px - a.pad_w;
          const bool ok = in && ix >= 0 && ix < a.in_w;
          cp_async4(dst + (SPLIT ? (px & 1) * half + (px >> 1) : px), ok ? src + ix : x, ok);
        }
      }
    } else if (patch >= 32) {  // a warp a plane
      for (int pb = warp; pb < t.planes; pb += kThreads / 32) {
        const bool in = pb < u.live;
        const float* src = in ? channel(pb) : x;
        float* dst = buf + pb * patch;
        int py = in_walk.row, px = in_walk.col;
        for (int r = lane; r < patch; r += 32) {
          const int iy = u.iy0 + py, ix = px - a.pad_w;
          const bool ok = in && iy >= 0 && iy < a.in_h && ix >= 0 && ix < a.in_w;
          cp_async4(dst + r, ok ? src + int64_t(iy) * a.in_w + ix : x, ok);
          in_walk.step(py, px);
        }
      }
    } else {  // tiny planes, many a tile: one value a thread
      for (int j = threadIdx.x; j < t.planes * patch; j += kThreads) {
        const int pb = j / patch, r = j - pb * patch;
        const int py = r / t.patch_w, px = r - py * t.patch_w;
        const int iy = u.iy0 + py, ix = px - a.pad_w;
        const bool ok = pb < u.live && iy >= 0 && iy < a.in_h && ix >= 0 && ix < a.in_w;
        cp_async4(buf + j, ok ? channel(pb) + int64_t(iy) * a.in_w + ix : x, ok);
      }
    }
    float* wsm = buf + t.planes * patch;
    for (int j = threadIdx.x; j < t.planes * taps; j += kThreads) {
      const int pb = j / taps;
      const bool ok = pb < u.live;
      cp_async4(wsm + j, ok ? w + ((u.f0 + pb) % a.filters) * taps + (j - pb * taps) : w, ok);
    }
  };

  // A tile's outputs from its stage.
  auto compute = [&](const Place& u, const float* buf) {
    const float* wsm = buf + t.planes * patch;
    // One output: plane pb, tile row ry, column ox.
    auto output = [&](int pb, int ry, int ox) {
      const float* src = buf + pb * patch + ry * a.stride_h * t.patch_w + ox * a.stride_w;
      const float* wk = wsm + pb * taps;
      float acc = 0.f;
      if constexpr (SPLIT) {
        const float* row = buf + pb * patch + ry * a.stride_h * t.patch_w;
        const int half = (t.patch_w + 1) / 2;
#pragma unroll
        for (int ky = 0; ky < KH; ++ky)
#pragma unroll
          for (int kx = 0; kx < KW; ++kx)  // column 2 ox + kx
            acc = fmaf(row[ky * a.dilation_h * t.patch_w + (kx & 1) * half + ox + (kx >> 1)],
                       wk[ky * KW + kx], acc);
      } else if constexpr (KH > 0) {
#pragma unroll
        for (int ky = 0; ky < KH; ++ky)
#pragma unroll
          for (int kx = 0; kx < KW; ++kx)
            acc = fmaf(src[ky * a.dilation_h * t.patch_w + kx * a.dilation_w], wk[ky * KW + kx], acc);
      } else {
        for (int ky = 0; ky < kh_n; ++ky)
          for (int kx = 0; kx < kw_n; ++kx)
            acc = fmaf(src[ky * a.dilation_h * t.patch_w + kx * a.dilation_w], wk[ky * kw_n + kx], acc);
      }
      return acc;
    };
    if (a.out_w >= 32) {  // a warp an output row
      for (int row = warp; row < t.planes * t.rows; row += kThreads / 32) {
        const int pb = row / t.rows, ry = row - pb * t.rows, oy = u.oy0 + ry;
        if (pb >= u.live || oy >= a.out_h) continue;
        const float b = bias ? __ldg(bias + (u.f0 + pb) % a.filters) : 0.f;
        float* dst = y + ((u.p0 + pb) * a.out_h + oy) * a.out_w;
        for (int ox = lane; ox < a.out_w; ox += 32) dst[ox] = act_eval(act, __fadd_rn(output(pb, ry, ox), b));
      }
    } else if (t.rows * a.out_w >= 32) {  // a warp a plane
      for (int pb = warp; pb < u.live; pb += kThreads / 32) {
        const float b = bias ? __ldg(bias + (u.f0 + pb) % a.filters) : 0.f;
        float* dst = y + ((u.p0 + pb) * a.out_h + u.oy0) * a.out_w;
        int ry = out_walk.row, ox = out_walk.col;
        for (int r = lane; r < t.rows * a.out_w; r += 32) {
          if (u.oy0 + ry < a.out_h) dst[r] = act_eval(act, __fadd_rn(output(pb, ry, ox), b));
          out_walk.step(ry, ox);
        }
      }
    } else {
      for (int j = threadIdx.x; j < tile_outputs; j += kThreads) {
        const int pb = j / (t.rows * a.out_w), r = j - pb * (t.rows * a.out_w);
        const int ry = r / a.out_w, ox = r - ry * a.out_w;
        const int oy = u.oy0 + ry;
        if (pb >= u.live || oy >= a.out_h) continue;
        const float b = bias ? __ldg(bias + (u.f0 + pb) % a.filters) : 0.f;
        y[((u.p0 + pb) * a.out_h + oy) * a.out_w + ox] = act_eval(act, __fadd_rn(output(pb, ry, ox), b));
      }
    }
  };

  // One stage: a block per tile (as many as fit run at once, and while some wait for their copies
  // others compute; two stages in a grid of resident blocks measured slower, docs/performance.md).
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const Place u = place(tile);
    stage(u, smem);
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();
    compute(u, smem);
    __syncthreads();  // the stage's reads are done before the next tile's copies refill it
  }
}

int patch_rows(const DepthwiseArgs& a, int rows) {
  return (rows - 1) * a.stride_h + (a.kernel_h - 1) * a.dilation_h + 1;
}

// The stage: the planes' patches and weights.
size_t stage_bytes(const DepthwiseConfig& c, int taps) {
  return sizeof(float) * (size_t(c.planes) * size_t(c.patch_h) * size_t(c.patch_w) + size_t(c.planes) * taps);
}

template <int KH, int KW, bool SPLIT>
void launch(const DepthwiseConfig& cfg, const DepthwiseArgs& a, const float* x, const float* w,
            const float* bias, float* y, int64_t nf, const Tile& t, ActFn act, cudaStream_t s) {
  const int64_t tiles = t.plane_groups * t.row_tiles;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(tiles, int64_t(1) << 24));
  depthwise_kernel<KH, KW, SPLIT><<<grid, kThreads, cfg.smem, s>>>(x, w, bias, y, nf, a, t, act);
  CUDA_CHECK_LAUNCH("depthwise_kernel");
}

// V consecutive FP32 values (weights of V filters, their biases) in 16- or 8-byte loads where V
// allows (p is then aligned: filters and f0 are multiples of V); scalar loads per tap were the
// channels-last kernel's limit (docs/performance.md).
template <int V>
__device__ __forceinline__ void load_floats(const float* __restrict__ p, float (&out)[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int k = 0; k < V; k += 4) {
      const float4 q = __ldg(reinterpret_cast<const float4*>(p + k));
      out[k] = q.x, out[k + 1] = q.y, out[k + 2] = q.z, out[k + 3] = q.w;
    }
  } else if constexpr (V == 2) {
    const float2 q = __ldg(reinterpret_cast<const float2*>(p));
    out[0] = q.x, out[1] = q.y;
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = __ldg(p + k);
  }
}

// The whole-plane mean's partial sums (DepthwiseMean): thread t of a block (of at most kThreads)
// holds v, its sums of the outputs it stored of filter vector (base + t) % vecs (zeros for a thread
// that stored none); part[j * V + k] becomes the sum of the block's threads' v[k] of vector j,
// added in thread order (0 where no thread had j), for every j < vecs. Every thread of the block
// calls it.
template <int V>
__device__ __forceinline__ void block_filter_sums(const float (&v)[V], int base, int vecs,
                                                  float* __restrict__ part) {
  __shared__ float sums[kThreads * V];
#pragma unroll
  for (int k = 0; k < V; ++k) sums[threadIdx.x * V + k] = v[k];
  __syncthreads();
  const int first = base % vecs;  // thread 0's vector
  const int threads = static_cast<int>(blockDim.x);
  for (int i = static_cast<int>(threadIdx.x); i < vecs * V; i += threads) {
    const int j = i / V, k = i - j * V;
    float sum = 0.f;
    for (int t = (j - first + vecs) % vecs; t < threads; t += vecs) sum = __fadd_rn(sum, sums[t * V + k]);
    part[i] = sum;
  }
}

// Channels last: block (row, chunk) covers output row `row` (image row / out_h, oy row % out_h),
// its threads V consecutive filters of P consecutive output pixels each; the row's pixel groups
// x filter vectors are row_vecs, blockDim.x a chunk. V > 1 only with one filter per channel
// (filter f reads channel f, so a vector of filters reads a vector of channels). P > 1 only with
// a compile-time kernel width, unit stride and dilation along the row: a window row's weights
// are loaded once for the P pixels and its P + KW - 1 input columns once each (P = 1: KW loads
// of both per pixel). Each output sums its taps in the same order either way.
template <typename T, int V, int KH, int KW, int P>
__global__ void __launch_bounds__(kThreads)
    depthwise_nhwc_kernel(const T* __restrict__ x, const float* __restrict__ w,
                          const float* __restrict__ bias, T* __restrict__ y, DepthwiseArgs a, int row_vecs,
                          ActFn act) {
  static_assert(P == 1 || KW > 0, "several pixels a thread need a compile-time kernel width");
  const int j = blockIdx.y * blockDim.x + threadIdx.x;
  if (j >= row_vecs) return;
  const int kh_n = KH > 0 ? KH : a.kernel_h, kw_n = KW > 0 ? KW : a.kernel_w;
  const int fv = a.filters / V;
  const int group = j / fv, f0 = (j - group * fv) * V;
  const int ox0 = group * P;
  const int64_t row = blockIdx.x;
  const int64_t img = row / a.out_h;
  const int oy = static_cast<int>(row - img * a.out_h);
  const int mult = a.filters / a.channels;
  const int c0 = f0 / mult;
  const T* xi = x + img * a.in_h * a.in_w * a.channels;
  float acc[P][V];
#pragma unroll
  for (int p = 0; p < P; ++p)
#pragma unroll
    for (int k = 0; k < V; ++k) acc[p][k] = 0.f;
  const int iy0 = oy * a.stride_h - a.pad_h, ix0 = ox0 * a.stride_w - a.pad_w;
#pragma unroll
  for (int ky = 0; ky < kh_n; ++ky) {
    const int iy = iy0 + ky * a.dilation_h;
    if (iy < 0 || iy >= a.in_h) continue;
    const T* xrow = xi + int64_t(iy) * a.in_w * a.channels + c0;
    if constexpr (P == 1) {
#pragma unroll
      for (int kx = 0; kx < kw_n; ++kx) {
        const int ix = ix0 + kx * a.dilation_w;
        if (ix < 0 || ix >= a.in_w) continue;
        float wk[V];
        load_floats<V>(w + (ky * kw_n + kx) * a.filters + f0, wk);
        const Vec<T, V> xv = *reinterpret_cast<const Vec<T, V>*>(xrow + int64_t(ix) * a.channels);
#pragma unroll
        for (int k = 0; k < V; ++k) acc[0][k] = fmaf(ld(xv.v[k]), wk[k], acc[0][k]);
      }
    } else {
      float wr[KW][V];
#pragma unroll
      for (int kx = 0; kx < KW; ++kx) load_floats<V>(w + (ky * KW + kx) * a.filters + f0, wr[kx]);
#pragma unroll
      for (int q = 0; q < P + KW - 1; ++q) {  // input column ix0 + q serves pixel p = q - kx
        const int ix = ix0 + q;
        if (ix < 0 || ix >= a.in_w) continue;
        const Vec<T, V> xv = *reinterpret_cast<const Vec<T, V>*>(xrow + int64_t(ix) * a.channels);
#pragma unroll
        for (int kx = 0; kx < KW; ++kx) {
          const int p = q - kx;
          if (p < 0 || p >= P) continue;
#pragma unroll
          for (int k = 0; k < V; ++k) acc[p][k] = fmaf(ld(xv.v[k]), wr[kx][k], acc[p][k]);
        }
      }
    }
  }
  float b[V];
  if (bias)
    load_floats<V>(bias + f0, b);
  else
#pragma unroll
    for (int k = 0; k < V; ++k) b[k] = 0.f;
#pragma unroll
  for (int p = 0; p < P; ++p) {
    if (ox0 + p >= a.out_w) break;
    Vec<T, V> out;
#pragma unroll
    for (int k = 0; k < V; ++k) out.v[k] = to<T>(act_eval_stored<T>(act, __fadd_rn(acc[p][k], b[k])));
    *reinterpret_cast<Vec<T, V>*>(y + (row * a.out_w + ox0 + p) * a.filters + f0) = out;
  }
}

// Channels last, a strip: V filters a thread (V = 2: one 32-bit word of 16-bit storage, two
// floats of FP32; V = 4: 8 bytes of 16-bit storage) of P consecutive output pixels of a row, for
// K x K windows with stride S along the row and no dilation there, one filter per channel. The
// thread keeps its filters' K * K weights in registers for all P pixels and loads each of a
// window row's (P - 1) * S + K input columns once, all of a row's loads in flight before its
// sums; a warp's lanes take consecutive vectors of one pixel. Against depthwise_nhwc_kernel (V
// filters of one pixel, 16-byte loads) it makes a fraction of the loads an output (measured in
// docs/performance.md), and the same FP32 sum in the same tap order, rounded once when it stores.
template <typename T, int V, int K, int S, int P>
__global__ void __launch_bounds__(kThreads)
    depthwise_strip_kernel(const T* __restrict__ x, const float* __restrict__ w,
                           const float* __restrict__ bias, T* __restrict__ y, DepthwiseArgs a, int row_items,
                           int items, ActFn act) {
  // 32-bit indices and divisions (the launch keeps items under 2^31; 2-4 % faster than 64-bit,
  // docs/performance.md).
  const int g = static_cast<int>(blockIdx.x) * kThreads + static_cast<int>(threadIdx.x);
  if (g >= items) return;
  const int row = g / row_items;  // image row / out_h, output row row % out_h
  const int item = g - row * row_items;
  const int vecs = a.channels / V;
  const int strip = item / vecs, c0 = (item - strip * vecs) * V;
  const int img = row / a.out_h;
  const int oy = row - img * a.out_h;
  const int ox0 = strip * P;
  float wr[K * K][V];
#pragma unroll
  for (int t = 0; t < K * K; ++t) load_floats<V>(w + t * a.filters + c0, wr[t]);
  float acc[P][V];
#pragma unroll
  for (int p = 0; p < P; ++p)
#pragma unroll
    for (int k = 0; k < V; ++k) acc[p][k] = 0.f;
  constexpr int kCols = (P - 1) * S + K;  // the input columns the P pixels' windows span
  const int iy0 = oy * a.stride_h - a.pad_h, ix0 = ox0 * S - a.pad_w;
  const T* xi = x + int64_t(img) * a.in_h * a.in_w * a.channels + c0;
#pragma unroll
  for (int ky = 0; ky < K; ++ky) {
    const int iy = iy0 + ky * a.dilation_h;
    if (iy < 0 || iy >= a.in_h) continue;
    const T* xrow = xi + int64_t(iy) * a.in_w * a.channels;
    Vec<T, V> v[kCols];
#pragma unroll
    for (int q = 0; q < kCols; ++q) {
      const int ix = ix0 + q;
      if (ix >= 0 && ix < a.in_w)
        v[q] = *reinterpret_cast<const Vec<T, V>*>(xrow + int64_t(ix) * a.channels);
      else
#pragma unroll
        for (int k = 0; k < V; ++k) v[q].v[k] = to<T>(0.f);
    }
#pragma unroll
    for (int kx = 0; kx < K; ++kx)
#pragma unroll
      for (int p = 0; p < P; ++p)  // pixel p reads column p * S + kx
#pragma unroll
        for (int k = 0; k < V; ++k) acc[p][k] = fmaf(ld(v[p * S + kx].v[k]), wr[ky * K + kx][k], acc[p][k]);
  }
  // The vector kernel's epilogue, repeated: one shared helper measured 2-9 % slower on its bf16
  // layers (docs/performance.md, Session 17).
  float b[V];
  if (bias)
    load_floats<V>(bias + c0, b);
  else
#pragma unroll
    for (int k = 0; k < V; ++k) b[k] = 0.f;
  T* yrow = y + (int64_t(row) * a.out_w + ox0) * a.filters + c0;
#pragma unroll
  for (int p = 0; p < P; ++p) {
    if (ox0 + p >= a.out_w) break;
    Vec<T, V> out;
#pragma unroll
    for (int k = 0; k < V; ++k) out.v[k] = to<T>(act_eval_stored<T>(act, __fadd_rn(acc[p][k], b[k])));
    *reinterpret_cast<Vec<T, V>*>(yrow + int64_t(p) * a.filters) = out;
  }
}

// With the whole-plane mean (DepthwiseMean), the vector kernel's work: block (b, chunk) covers kMeanRows
// output rows (the last block of an image fewer) of image b / row_blocks, adding each thread's outputs over
// them before the block adds its threads' (that reduction measured costlier than a row's outputs,
// docs/performance.md), and writes its partial sums to its image's slot (b % row_blocks) * gridDim.y + chunk
// in part.
template <typename T, int V, int KH, int KW, int P>
__global__ void __launch_bounds__(kThreads)
    depthwise_nhwc_mean_kernel(const T* __restrict__ x, const float* __restrict__ w,
                               const float* __restrict__ bias, T* __restrict__ y, DepthwiseArgs a,
                               int row_vecs, ActFn act, float* __restrict__ part, int row_blocks) {
  static_assert(P == 1 || KW > 0, "several pixels a thread need a compile-time kernel width");
  const int j_all = blockIdx.y * blockDim.x + threadIdx.x;
  const bool live = j_all < row_vecs;  // every thread reaches the block's barrier
  const int j = live ? j_all : row_vecs - 1;
  const int kh_n = KH > 0 ? KH : a.kernel_h, kw_n = KW > 0 ? KW : a.kernel_w;
  const int fv = a.filters / V;
  const int group = j / fv, f0 = (j - group * fv) * V;
  const int ox0 = group * P;
  const int64_t img = blockIdx.x / row_blocks;
  const int rb = static_cast<int>(blockIdx.x - img * row_blocks);
  const int oy_first = rb * kMeanRows;
  const int oy_end = min(a.out_h, oy_first + kMeanRows);
  const int mult = a.filters / a.channels;
  const int c0 = f0 / mult;
  const T* xi = x + img * a.in_h * a.in_w * a.channels;
  float msum[V];
#pragma unroll
  for (int k = 0; k < V; ++k) msum[k] = 0.f;
  for (int oy = oy_first; oy < oy_end; ++oy) {
    const int64_t row = img * a.out_h + oy;
    float acc[P][V];
#pragma unroll
    for (int p = 0; p < P; ++p)
#pragma unroll
      for (int k = 0; k < V; ++k) acc[p][k] = 0.f;
    const int iy0 = oy * a.stride_h - a.pad_h, ix0 = ox0 * a.stride_w - a.pad_w;
#pragma unroll
    for (int ky = 0; ky < kh_n; ++ky) {
      const int iy = iy0 + ky * a.dilation_h;
      if (iy < 0 || iy >= a.in_h) continue;
      const T* xrow = xi + int64_t(iy) * a.in_w * a.channels + c0;
      if constexpr (P == 1) {
#pragma unroll
        for (int kx = 0; kx < kw_n; ++kx) {
          const int ix = ix0 + kx * a.dilation_w;
          if (ix < 0 || ix >= a.in_w) continue;
          float wk[V];
          load_floats<V>(w + (ky * kw_n + kx) * a.filters + f0, wk);
          const Vec<T, V> xv = *reinterpret_cast<const Vec<T, V>*>(xrow + int64_t(ix) * a.channels);
#pragma unroll
          for (int k = 0; k < V; ++k) acc[0][k] = fmaf(ld(xv.v[k]), wk[k], acc[0][k]);
        }
      } else {
        float wr[KW][V];
#pragma unroll
        for (int kx = 0; kx < KW; ++kx) load_floats<V>(w + (ky * KW + kx) * a.filters + f0, wr[kx]);
#pragma unroll
        for (int q = 0; q < P + KW - 1; ++q) {  // input column ix0 + q serves pixel p = q - kx
          const int ix = ix0 + q;
          if (ix < 0 || ix >= a.in_w) continue;
          const Vec<T, V> xv = *reinterpret_cast<const Vec<T, V>*>(xrow + int64_t(ix) * a.channels);
#pragma unroll
          for (int kx = 0; kx < KW; ++kx) {
            const int p = q - kx;
            if (p < 0 || p >= P) continue;
#pragma unroll
            for (int k = 0; k < V; ++k) acc[p][k] = fmaf(ld(xv.v[k]), wr[kx][k], acc[p][k]);
          }
        }
      }
    }
    float b[V];
    if (bias)
      load_floats<V>(bias + f0, b);
    else
#pragma unroll
      for (int k = 0; k < V; ++k) b[k] = 0.f;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if (ox0 + p >= a.out_w || !live) break;
      Vec<T, V> out;
#pragma unroll
      for (int k = 0; k < V; ++k) out.v[k] = to<T>(act_eval_stored<T>(act, __fadd_rn(acc[p][k], b[k])));
      *reinterpret_cast<Vec<T, V>*>(y + (row * a.out_w + ox0 + p) * a.filters + f0) = out;
#pragma unroll
      for (int k = 0; k < V; ++k) msum[k] = __fadd_rn(msum[k], ld(out.v[k]));
    }
  }  // oy
  block_filter_sums<V>(msum, static_cast<int>(blockIdx.y * blockDim.x), fv,
                       part + ((img * row_blocks + rb) * gridDim.y + blockIdx.y) * a.filters);
}

// The strip kernel with the whole-plane mean, as the vector kernel's: block (b, chunk) covers kMeanRows
// output rows of image b / row_blocks (items a row's strips x vectors from chunk * kThreads on), adding each
// thread's outputs over them, and writes the block's partial sums to its image's slot
// (b % row_blocks) * gridDim.y + chunk in part.
template <typename T, int V, int K, int S, int P>
__global__ void __launch_bounds__(kThreads)
    depthwise_strip_mean_kernel(const T* __restrict__ x, const float* __restrict__ w,
                                const float* __restrict__ bias, T* __restrict__ y, DepthwiseArgs a,
                                int row_items, ActFn act, float* __restrict__ part, int row_blocks) {
  // 32-bit indices and divisions (the launch keeps items under 2^31; 2-4 % faster than 64-bit,
  // docs/performance.md).
  int img, rb = 0, oy_first, oy_end, item;
  bool live;  // every thread reaches the block's barrier
  img = static_cast<int>(blockIdx.x) / row_blocks;
  rb = static_cast<int>(blockIdx.x) - img * row_blocks;
  oy_first = rb * kMeanRows;
  oy_end = min(a.out_h, oy_first + kMeanRows);
  const int i = static_cast<int>(blockIdx.y * blockDim.x + threadIdx.x);
  live = i < row_items;
  item = live ? i : row_items - 1;
  const int vecs = a.channels / V;
  const int strip = item / vecs, c0 = (item - strip * vecs) * V;
  const int ox0 = strip * P;
  float wr[K * K][V];
#pragma unroll
  for (int t = 0; t < K * K; ++t) load_floats<V>(w + t * a.filters + c0, wr[t]);
  float msum[V];
#pragma unroll
  for (int k = 0; k < V; ++k) msum[k] = 0.f;
  for (int oy = oy_first; oy < oy_end; ++oy) {
    float acc[P][V];
#pragma unroll
    for (int p = 0; p < P; ++p)
#pragma unroll
      for (int k = 0; k < V; ++k) acc[p][k] = 0.f;
    constexpr int kCols = (P - 1) * S + K;  // the input columns the P pixels' windows span
    const int iy0 = oy * a.stride_h - a.pad_h, ix0 = ox0 * S - a.pad_w;
    const T* xi = x + int64_t(img) * a.in_h * a.in_w * a.channels + c0;
#pragma unroll
    for (int ky = 0; ky < K; ++ky) {
      const int iy = iy0 + ky * a.dilation_h;
      if (iy < 0 || iy >= a.in_h) continue;
      const T* xrow = xi + int64_t(iy) * a.in_w * a.channels;
      Vec<T, V> v[kCols];
#pragma unroll
      for (int q = 0; q < kCols; ++q) {
        const int ix = ix0 + q;
        if (ix >= 0 && ix < a.in_w)
          v[q] = *reinterpret_cast<const Vec<T, V>*>(xrow + int64_t(ix) * a.channels);
        else
#pragma unroll
          for (int k = 0; k < V; ++k) v[q].v[k] = to<T>(0.f);
      }
#pragma unroll
      for (int kx = 0; kx < K; ++kx)
#pragma unroll
        for (int p = 0; p < P; ++p)  // pixel p reads column p * S + kx
#pragma unroll
          for (int k = 0; k < V; ++k) acc[p][k] = fmaf(ld(v[p * S + kx].v[k]), wr[ky * K + kx][k], acc[p][k]);
    }
    // The vector kernel's epilogue, repeated: one shared helper measured 2-9 % slower on its bf16
    // layers (docs/performance.md, Session 17).
    float b[V];
    if (bias)
      load_floats<V>(bias + c0, b);
    else
#pragma unroll
      for (int k = 0; k < V; ++k) b[k] = 0.f;
    T* yrow = y + ((int64_t(img) * a.out_h + oy) * a.out_w + ox0) * a.filters + c0;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if (ox0 + p >= a.out_w || !live) break;
      Vec<T, V> out;
#pragma unroll
      for (int k = 0; k < V; ++k) out.v[k] = to<T>(act_eval_stored<T>(act, __fadd_rn(acc[p][k], b[k])));
      *reinterpret_cast<Vec<T, V>*>(yrow + int64_t(p) * a.filters) = out;
#pragma unroll
      for (int k = 0; k < V; ++k) msum[k] = __fadd_rn(msum[k], ld(out.v[k]));
    }
  }  // oy
  block_filter_sums<V>(msum, static_cast<int>(blockIdx.y * blockDim.x), vecs,
                       part + ((int64_t(img) * row_blocks + rb) * gridDim.y + blockIdx.y) * a.filters);
}

// Channels last, a staged tile: a block stages the input patch that
// tile_h x tile_w output pixels of kTileChannels channels of one image need (K x K windows of
// stride S both ways, undilated, one filter per channel), padding as zeros, into shared memory with
// 16-byte asynchronous copies, each input value read from global memory once per tile. Each lane
// then computes one channel pair of P consecutive output pixels of R rows from shared memory (a
// warp's 32 lanes read one pixel's 128 bytes, or 256 at FP32 storage: no bank conflicts), its K * K weight
// pairs in registers and each staged row's (P - 1) * S + K columns loaded once for the R rows whose
// windows hold it. Without the staging, the
// taps' loads of a row's neighbouring pixels all miss L1 at once and each goes to L2 (the vector
// kernel moved about K * K times its input there; docs/performance.md). The same FP32 sum in the
// same tap order as the other kernels (a padding tap adds 0), rounded once when it stores. One
// patch buffer a block, resident blocks overlapping each other's copies: a persistent grid with two
// buffers a block measured slower (half the resident warps; docs/performance.md, Session 35).
constexpr int kTileChannels = 64;
constexpr size_t kMaxTileSmem = size_t(227) << 10;  // sm_90's most for a block, opted in above 48 KiB

// The staged pixels a tile's last strip reads past its row (outputs past the tile, not stored):
// the patch is followed by that many, so that the last row's reads stay in shared memory.
__host__ __device__ constexpr int tile_overreach(int tile_w, int p, int s) {
  return ((tile_w + p - 1) / p * p - tile_w) * s;
}

// The staged rows a tile's patch holds: its tile_h output rows' windows, and the rows past them
// that the last lane strip of r rows reads (outputs past the tile, not stored).
__host__ __device__ constexpr int tile_patch_rows(int tile_h, int r, int k, int s) {
  return ((tile_h + r - 1) / r * r - 1) * s + k;
}

// The tile kernel's blocks an SM by its launch bounds (the registers a thread they allow): 4 of
// 256 threads for 3x3 windows of 4 pixels a lane, 3 otherwise, twice as many of 128; 3 with two
// output rows a lane (r: 76-80 registers for 3x3 windows).
__host__ __device__ constexpr int tile_min_blocks(int k, int p, int threads, int r = 1) {
  return (r > 1 ? 3 : k == 3 && p == 4 ? 4 : 3) * (kThreads / threads);
}

// MEAN: the block's partial sums for the whole-plane mean go to its image's slot
// row tile * col_tiles + column tile in part, through NT / 32 x kTileChannels floats of shared
// memory after the patch. NT: the block's threads, kThreads or half (a small tile: as many
// registers a thread, twice the blocks an SM where shared memory allows). R: output rows a lane (2
// only for 16-bit 3x3 windows of unit stride in blocks of kThreads: depthwise_nhwc_tile).
template <typename T, int K, int S, int P, bool MEAN, int NT = kThreads, int R = 1>
__global__ void __launch_bounds__(NT, tile_min_blocks(K, P, NT, R))
    depthwise_tile_kernel(const T* __restrict__ x, const float* __restrict__ w,
                          const float* __restrict__ bias, T* __restrict__ y, DepthwiseArgs a, int tile_h,
                          int tile_w, int row_tiles, int col_tiles, ActFn act, float* __restrict__ part,
                          bool pack) {
  extern __shared__ __align__(16) unsigned char dw_tile_smem[];
  T* patch = reinterpret_cast<T*>(dw_tile_smem);
  const int patch_w = (tile_w - 1) * S + K;  // the staged rows' pitch in pixels
  const int img = static_cast<int>(blockIdx.x) / row_tiles;
  const int oy0 = (static_cast<int>(blockIdx.x) - img * row_tiles) * tile_h;
  const int chunk = static_cast<int>(blockIdx.y) / col_tiles;
  const int ox0 = (static_cast<int>(blockIdx.y) - chunk * col_tiles) * tile_w;
  const int c0 = chunk * kTileChannels, cc = min(kTileChannels, a.channels - c0);
  const int th = min(tile_h, a.out_h - oy0), tw = min(tile_w, a.out_w - ox0);
  const int iy0 = oy0 * S - a.pad_h, ix0 = ox0 * S - a.pad_w;
  constexpr int kPiece = kVec<T>;  // values in a 16-byte copy
  const int vecs = cc / kPiece;    // 16-byte pieces of a staged pixel
  const int ph = (th - 1) * S + K, pw = (tw - 1) * S + K;
  const T* xi = x + int64_t(img) * a.in_h * a.in_w * a.channels + c0;
  auto stage = [&](int r, int q, int v) {
    const int iy = iy0 + r, ix = ix0 + q;
    const bool in = iy >= 0 && iy < a.in_h && ix >= 0 && ix < a.in_w;
    cp_async16(patch + (r * patch_w + q) * kTileChannels + v * kPiece,
               in ? xi + (int64_t(iy) * a.in_w + ix) * a.channels + v * kPiece : x, in);
  };
  if (NT % vecs == 0) {
    // A thread keeps its 16-byte piece v and steps NT / vecs pixels at a time, carrying its
    // (row, column): no division a copy.
    const int v = static_cast<int>(threadIdx.x) % vecs, step = NT / vecs;
    int pix = static_cast<int>(threadIdx.x) / vecs, r = pix / pw, q = pix - r * pw;
    for (; pix < ph * pw; pix += step) {
      stage(r, q, v);
      for (q += step; q >= pw && r < ph; q -= pw) ++r;
    }
  } else {
    for (int i = static_cast<int>(threadIdx.x); i < ph * pw * vecs; i += NT) {
      const int pix = i / vecs, v = i - pix * vecs;
      const int r = pix / pw;
      stage(r, pix - r * pw, v);
    }
  }
  cp_async_commit();
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  // A chunk of 32 channels or fewer (the last of 144 or 96, a 32-channel layer's only one) puts
  // several strips on a warp at once: lane groups of gl lanes (the power of two that holds its
  // channel pairs), each its own strip, instead of 16 to 28 of the 32 lanes idle.
  const int gl = cc > 32 || !pack ? 32 : cc > 16 ? 16 : cc > 8 ? 8 : 4, groups = 32 / gl;
  const int glane = lane & (gl - 1), group = lane / gl;
  const bool active = 2 * glane < cc;
  const int c = c0 + 2 * glane;
  float wr[K * K][2];
  float b[2] = {0.f, 0.f};
  if (active) {
#pragma unroll
    for (int t = 0; t < K * K; ++t) load_floats<2>(w + t * a.filters + c, wr[t]);
    if (bias) load_floats<2>(bias + c, b);
  }
  cp_async_wait_all();
  __syncthreads();
  if (!MEAN && !active) return;           // no barrier follows
  constexpr int kCols = (P - 1) * S + K;  // the input columns a strip's windows span
  constexpr int kRows = (R - 1) * S + K;  // the staged rows a strip's R output rows' windows span
  const int strips = (tw + P - 1) / P;
  float msum[2] = {0.f, 0.f};
  // The lane group's strips (R rows of P pixels), NT / 32 * groups apart, as (first row, first
  // pixel) carried from one to the next.
  const int first = warp * groups + group;
  int r = first / strips * R, sx = (first - first / strips * strips) * P;
  for (; active && r < th; sx += NT / 32 * groups * P) {
    while (sx >= strips * P) sx -= strips * P, r += R;
    if (r >= th) break;
    float acc[R][P][2];
#pragma unroll
    for (int j = 0; j < R; ++j) {
#pragma unroll
      for (int p = 0; p < P; ++p) acc[j][p][0] = acc[j][p][1] = 0.f;
    }
    // Each staged row loaded once for the R output rows whose windows hold it: output row j takes
    // it as window row i - j * S. Each output's taps in the same order (window rows, then columns).
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const T* prow = patch + ((r * S + i) * patch_w + sx * S) * kTileChannels + 2 * glane;
      float v[kCols][2];
#pragma unroll
      for (int q = 0; q < kCols; ++q) {
        // A row's last strip may read past its staged columns (the next row's, or the slack
        // after the patch), the last strip of rows past the tile's rows (tile_patch_rows): those
        // feed only outputs past the tile, which are not stored.
        const Vec<T, 2> e = *reinterpret_cast<const Vec<T, 2>*>(prow + q * kTileChannels);
        v[q][0] = ld(e.v[0]), v[q][1] = ld(e.v[1]);
      }
#pragma unroll
      for (int j = 0; j < R; ++j) {
        const int ky = i - j * S;
        if (ky < 0 || ky >= K) continue;
#pragma unroll
        for (int kx = 0; kx < K; ++kx)
#pragma unroll
          for (int p = 0; p < P; ++p)
#pragma unroll
            for (int e = 0; e < 2; ++e)
              acc[j][p][e] = fmaf(v[p * S + kx][e], wr[ky * K + kx][e], acc[j][p][e]);
      }
    }
    auto epilogue = [&](auto fn) {
#pragma unroll
      for (int j = 0; j < R; ++j) {
        if (r + j >= th) break;
        T* yrow = y + ((int64_t(img) * a.out_h + oy0 + r + j) * a.out_w + ox0 + sx) * a.filters + c;
#pragma unroll
        for (int p = 0; p < P; ++p) {
          if (sx + p >= tw) break;
          Vec<T, 2> out;
#pragma unroll
          for (int e = 0; e < 2; ++e) out.v[e] = to<T>(fn(__fadd_rn(acc[j][p][e], b[e])));
          *reinterpret_cast<Vec<T, 2>*>(yrow + int64_t(p) * a.filters) = out;
          if constexpr (MEAN)
            msum[0] = __fadd_rn(msum[0], ld(out.v[0])), msum[1] = __fadd_rn(msum[1], ld(out.v[1]));
        }
      }
    };
    // 3x3: the activation's kind a constant in the loop (with_act_stored); 5x5: through
    // act_eval_stored's switch, as the constant kinds made its instances spill (16-24 bytes at 80
    // registers against 4-8).
    if constexpr (K == 3)
      with_act_stored<T>(act, epilogue);
    else
      epilogue([&](float v) { return act_eval_stored<T>(act, v); });
  }
  if constexpr (MEAN) {  // the lane groups' sums by shuffles, then the warps', added in warp order
    for (int o = gl; o < 32; o <<= 1)
#pragma unroll
      for (int e = 0; e < 2; ++e) msum[e] = __fadd_rn(msum[e], __shfl_xor_sync(0xffffffffu, msum[e], o));
    float* red = reinterpret_cast<float*>(
        dw_tile_smem + size_t(tile_patch_rows(tile_h, R, K, S) * patch_w + tile_overreach(tile_w, P, S)) *
                           kTileChannels * sizeof(T));
    if (group == 0) {
      red[warp * kTileChannels + 2 * glane] = msum[0];
      red[warp * kTileChannels + 2 * glane + 1] = msum[1];
    }
    __syncthreads();
    const int i = static_cast<int>(threadIdx.x);
    if (i < cc) {
      float sum = 0.f;
#pragma unroll
      for (int k = 0; k < NT / 32; ++k) sum = __fadd_rn(sum, red[k * kTileChannels + i]);
      const int slot = (static_cast<int>(blockIdx.x) - img * row_tiles) * col_tiles +
                       (static_cast<int>(blockIdx.y) - chunk * col_tiles);
      part[(int64_t(img) * row_tiles * col_tiles + slot) * a.filters + c0 + i] = sum;
    }
  }
}

// The whole-plane mean from the kernels' partial sums: out[i] = (sum of its image's slots of
// filter i % filters, in slot order) / plane, for i < count = images x filters.
template <typename T>
__global__ void mean_slots_kernel(const float* __restrict__ part, T* __restrict__ out, int64_t count,
                                  int filters, int slots, float plane) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t img = i / filters;
    const float* p = part + img * slots * filters + (i - img * filters);
    float sum = 0.f;
    for (int k = 0; k < slots; ++k) sum = __fadd_rn(sum, p[int64_t(k) * filters]);
    out[i] = to<T>(__fdiv_rn(sum, plane));
  }
}

}  // namespace

DepthwiseConfig depthwise_config(const DepthwiseArgs& a, int tile_outputs) {
  DepthwiseConfig c;
  if (a.channels < 1 || a.filters < a.channels || a.filters % a.channels != 0) {
    c.why = "filters (" + std::to_string(a.filters) + ") are not a multiple of the channels (" +
            std::to_string(a.channels) + ")";
    return c;
  }
  if (a.out_h < 1 || a.out_w < 1 || a.kernel_h < 1 || a.kernel_w < 1 || a.stride_h < 1 || a.stride_w < 1 ||
      a.dilation_h < 1 || a.dilation_w < 1) {
    c.why = "empty output or a non-positive kernel, stride or dilation";
    return c;
  }
  tile_outputs = std::max(tile_outputs, 1);
  const int64_t plane = int64_t(a.out_h) * a.out_w;
  if (plane >= tile_outputs) {
    c.planes = 1;
    c.rows = static_cast<int>(std::clamp<int64_t>(tile_outputs / a.out_w, 1, a.out_h));
  } else {
    c.planes = static_cast<int>(tile_outputs / plane);
    if (c.planes >= 8) c.planes -= c.planes % 8;  // whole rounds of the 8 warps, a plane each
    c.rows = a.out_h;
  }
  c.patch_w = (a.out_w - 1) * a.stride_w + (a.kernel_w - 1) * a.dilation_w + 1;
  const int taps = a.kernel_h * a.kernel_w;
  for (;;) {
    c.patch_h = patch_rows(a, c.rows);
    c.smem = stage_bytes(c, taps);
    if (c.smem <= kMaxSmem) break;
    if (c.planes > 1) {
      c.planes = c.planes / 2 >= 8 ? c.planes / 2 / 8 * 8 : (c.planes + 1) / 2;
    } else if (c.rows > 1) {
      c.rows = (c.rows + 1) / 2;
    } else {
      c.why = "one output row needs " + std::to_string(c.smem) +
              " bytes of input patch and weights, more than " + std::to_string(kMaxSmem) +
              " of shared memory";
      return c;
    }
  }
  // Rows spread evenly over the row tiles (56 rows as 14+14+14+14, not 18+18+18+2: a short
  // last tile leaves most of its block idle).
  c.row_tiles = (a.out_h + c.rows - 1) / c.rows;
  c.rows = (a.out_h + c.row_tiles - 1) / c.row_tiles;
  c.patch_h = patch_rows(a, c.rows);
  c.smem = stage_bytes(c, taps);
  c.ok = true;
  return c;
}

DepthwisePlan depthwise_plan(const ConvParams& p) {
  DepthwisePlan d;
  if (p.groups != p.in_c || p.filters % p.in_c != 0) {
    d.cfg.why = p.groups == 1 ? "a dense convolution: the depthwise kernel needs groups == channels"
                              : "groups (" + std::to_string(p.groups) + ") differ from the channels (" +
                                    std::to_string(p.in_c) + ")";
    return d;
  }
  DepthwiseArgs& a = d.args;
  a.channels = static_cast<int>(p.in_c), a.filters = static_cast<int>(p.filters);
  a.in_h = static_cast<int>(p.in_h), a.in_w = static_cast<int>(p.in_w);
  a.out_h = static_cast<int>(p.out_h), a.out_w = static_cast<int>(p.out_w);
  a.kernel_h = static_cast<int>(p.kernel_h), a.kernel_w = static_cast<int>(p.kernel_w);
  a.stride_h = static_cast<int>(p.stride_h), a.stride_w = static_cast<int>(p.stride_w);
  a.pad_h = static_cast<int>(p.pad_h), a.pad_w = static_cast<int>(p.pad_w);
  a.dilation_h = static_cast<int>(p.dilation_h), a.dilation_w = static_cast<int>(p.dilation_w);
  d.cfg = depthwise_config(a);
  d.nhwc_ok = a.out_h >= 1 && a.out_w >= 1;
  return d;
}

void launch_conv_depthwise(const DepthwiseConfig& cfg, const DepthwiseArgs& a, const float* x, const float* w,
                           const float* bias, float* y, int64_t n, ActFn act, cudaStream_t s) {
  if (!cfg.ok) throw Error("depthwise convolution: " + cfg.why);
  const int64_t nf = n * a.filters;
  if (nf <= 0) return;
  Tile t{cfg.planes, cfg.rows, cfg.row_tiles, cfg.patch_h, cfg.patch_w, (nf + cfg.planes - 1) / cfg.planes};
  const bool split = a.stride_w == 2 && a.dilation_w == 1 && cfg.patch_w >= 32 && a.out_w >= 32;
  if (a.kernel_h == 3 && a.kernel_w == 3) {
    if (split)
      launch<3, 3, true>(cfg, a, x, w, bias, y, nf, t, act, s);
    else
      launch<3, 3, false>(cfg, a, x, w, bias, y, nf, t, act, s);
  } else if (a.kernel_h == 5 && a.kernel_w == 5) {
    if (split)
      launch<5, 5, true>(cfg, a, x, w, bias, y, nf, t, act, s);
    else
      launch<5, 5, false>(cfg, a, x, w, bias, y, nf, t, act, s);
  } else {
    launch<0, 0, false>(cfg, a, x, w, bias, y, nf, t, act, s);
  }
}

namespace {

// 3x3 or 5x5 windows: the compile-time kernels the channels-last rules and launches share.
bool square_3_or_5(const DepthwiseArgs& a) {
  return a.kernel_h == a.kernel_w && (a.kernel_h == 3 || a.kernel_h == 5);
}

// fn(K, S) with K (3 or 5) and S (1 or 2) as compile-time constants from the window and the stride
// along the row, for a conv square_3_or_5 and of stride 1 or 2 along the row.
template <typename Fn>
void with_window(const DepthwiseArgs& a, Fn fn) {
  auto by_stride = [&](auto k) {
    if (a.stride_w == 1)
      fn(k, std::integral_constant<int, 1>{});
    else
      fn(k, std::integral_constant<int, 2>{});
  };
  if (a.kernel_w == 5)
    by_stride(std::integral_constant<int, 5>{});
  else
    by_stride(std::integral_constant<int, 3>{});
}

}  // namespace

int depthwise_nhwc_vector(const DepthwiseArgs& a, Storage t) {
  if (a.filters != a.channels) return 1;  // a channel multiplier: filters of a vector read one channel
  const int widest = t == Storage::kF32 ? 4 : 8;  // 16 bytes
  for (int v = widest; v > 1; v /= 2)
    if (a.filters % v == 0) return v;
  return 1;
}

int depthwise_nhwc_pixels(const DepthwiseArgs& a, int row_pixels) {
  const bool shares = a.stride_w == 1 && a.dilation_w == 1 && square_3_or_5(a);
  return shares && (row_pixels == 2 || row_pixels == 4) ? row_pixels : 1;
}

DepthwiseStrip depthwise_nhwc_strip(const DepthwiseArgs& a, Storage t, int strip_pixels) {
  DepthwiseStrip d;
  if (a.filters != a.channels || a.channels % 2 != 0 || !square_3_or_5(a) ||
      (a.stride_w != 1 && a.stride_w != 2) || a.dilation_w != 1 || a.out_w < 4 || strip_pixels < 4)
    return d;
  if (t != Storage::kF32) {  // 16-bit storage: 4 filters of 4 pixels, 3x3 windows of stride 1 only
    if (a.kernel_h != 3 || a.stride_w != 1 || a.channels % 4 != 0) return d;
    d.filters = d.pixels = 4;
    return d;
  }
  // FP32 storage: 2 filters of the widest P that wastes the fewest of a row's last strip
  // (224x224 networks' rows are multiples of 7, 32x32 ones' powers of two).
  d.filters = 2;
  int best_waste = 0;
  for (int p : {8, 7, 4}) {
    if (p > strip_pixels) continue;
    const int waste = (a.out_w + p - 1) / p * p - a.out_w;
    if (d.pixels == 0 || waste * d.pixels < best_waste * p) d.pixels = p, best_waste = waste;
  }
  return d;
}

// Shared memory the tile kernel's mean adds after the patch: its warps' sums of 64 channels (at
// most 8 warps: kTileMeanSmem).
constexpr size_t tile_mean_smem(int threads) { return sizeof(float) * size_t(threads / 32) * kTileChannels; }
constexpr size_t kTileMeanSmem = tile_mean_smem(kThreads);

// The tile kernel's blocks resident on an SM at 4 pixels a lane: its launch bounds'
// (tile_min_blocks) and those whose shared memory fits sm_90's 228 KiB (1 KiB reserved a block;
// `smem` with the mean's sums).
static int tile_blocks_per_sm(int k, int threads, size_t smem) {
  return std::min(tile_min_blocks(k, 4, threads),
                  static_cast<int>((size_t(228) << 10) / (smem + (size_t(1) << 10))));
}

DepthwiseTile depthwise_nhwc_tile(const DepthwiseArgs& a, Storage t, const DepthwiseNhwcKnobs& kn) {
  DepthwiseTile d;
  const bool pixels_ok = kn.tile_pixels == 4 || kn.tile_pixels == 8;
  if (a.filters != a.channels || a.channels % 8 != 0 || !square_3_or_5(a) || a.stride_h != a.stride_w ||
      (a.stride_w != 1 && a.stride_w != 2) || a.dilation_h != 1 || a.dilation_w != 1 || !pixels_ok)
    return d;
  // Where it won against the vector and strip kernels (docs/performance.md): at 16-bit storage
  // everywhere since its lane groups (Session 36: MobileNetV2's and EfficientNet-B0's depthwise
  // layers within 3 % of the others' time or faster, 32 channels on 112-wide rows up to 1.8x). At FP32
  // (Sessions 20, 23 and 36): 128 channels or more on rows of at most 56 outputs, 5x5 windows on
  // rows of 7 or more at either stride, 3x3 ones of unit stride on rows of 14 or more; on 112-wide
  // rows, with 3x3 windows of stride 2 and on 7x7 maps the others were faster.
  const bool won =
      t != Storage::kF32 || (a.channels >= 128 && a.out_w <= 56 &&
                             (a.kernel_w == 5 ? a.out_w >= 7 : a.stride_w == 1 && a.out_w >= 14));
  if (!kn.tile_everywhere && !won) return d;
  const int k = a.kernel_w, s = a.stride_w;
  const size_t pixel = size_t(kTileChannels) * storage_bytes(t);
  // Columns: rows of up to 32 / S outputs at 16-bit storage, split evenly (112 as 4 x 28), and
  // of half that at FP32 (4 KiB of a stride-1 tile row's outputs either way), so that a patch
  // of the same bytes keeps as many rows.
  const int max_w = int(4096 / pixel) / s;
  d.col_tiles = (a.out_w + max_w - 1) / max_w;
  d.tile_w = (a.out_w + d.col_tiles - 1) / d.col_tiles;
  const size_t row_bytes = size_t((d.tile_w - 1) * s + k) * pixel,
               slack = size_t(tile_overreach(d.tile_w, kn.tile_pixels, s)) * pixel;
  // At FP32 storage of stride 2, twice the bytes: 46 KiB held 3 output rows of a 5x5 window's
  // tile (slower than the strip kernel), and at 92 KiB EfficientNet-B0's two such layers ran 17-28 %
  // faster than the strip kernel and its pool pass (Session 36; at stride 1 92 KiB was slower).
  const size_t budget =
      std::min(t != Storage::kF32 ? kn.tile_smem_16 : kn.tile_smem * (s == 2 ? 2 : 1), kMaxTileSmem);
  const int patch_rows = budget > slack ? static_cast<int>((budget - slack) / row_bytes) : 0;
  if (patch_rows < k) return DepthwiseTile{};
  const int max_h = std::min((patch_rows - k) / s + 1, a.out_h);
  d.row_tiles = (a.out_h + max_h - 1) / max_h;
  d.tile_h = (a.out_h + d.row_tiles - 1) / d.row_tiles;
  d.pixels = kn.tile_pixels;
  d.smem = size_t(tile_patch_rows(d.tile_h, 1, k, s)) * row_bytes + slack;
  // A tile of few strips (a 7x7 map's: 14 of 4 pixels) keeps a block's 8 warps busy for a round or
  // two between its patch's copies and its stores: in blocks of half the threads more blocks (and
  // their copies) fit an SM, where shared memory lets at least 1.5x as many in (an FP32 stride-2
  // patch of 73 KiB fits 3 either way: half the warps, slower; Session 43). 4 pixels a lane only
  // (the instances built).
  const size_t need = d.smem + kTileMeanSmem;
  if (d.pixels == 4 && d.tile_h * ((d.tile_w + 3) / 4) <= kn.small_tile_strips &&
      2 * tile_blocks_per_sm(k, kThreads / 2, need) >= 3 * tile_blocks_per_sm(k, kThreads, need)) {
    d.threads = kThreads / 2;
    return d;
  }
  // Two output rows a lane, each staged row loaded and converted once for both: at 16-bit storage,
  // 3x3 windows of unit stride, 4 pixels a lane, blocks of 256 threads (the instances built), where
  // the patch with the row its last lane strip reads past the tile still fits. 2-9 % faster there
  // on 14- to 112-wide rows; slower with 5x5 windows (105-113 registers: 2 blocks an SM), at FP32
  // storage and mostly at stride 2 (docs/performance.md, Session 44).
  const size_t two = size_t(tile_patch_rows(d.tile_h, 2, k, s)) * row_bytes + slack;
  if (kn.tile_rows == 2 && t != Storage::kF32 && k == 3 && s == 1 && d.pixels == 4 &&
      two + kTileMeanSmem <= kMaxTileSmem)
    d.rows = 2, d.smem = two;
  return d;
}

namespace {

// Which channels-last kernel a launch runs, and how: the tile kernel where depthwise_nhwc_tile
// says so, else the strip kernel where depthwise_nhwc_strip does, else the vector kernel; each
// only where its grid fits CUDA's limits and its indices 32 bits. With the mean (blocks_images
// false), the choice does not depend on the images: the launch checks their grid.
enum class NhwcKernel { kTile, kStrip, kVector };
struct NhwcChoice {
  NhwcKernel kind = NhwcKernel::kVector;
  DepthwiseTile tile;
  DepthwiseStrip strip;
  int row_items = 0;  // the strip kernel's strips x filter vectors a row
  int v = 1, px = 1;  // the vector kernel's filters and pixels a thread
  int64_t row_vecs = 0;
  // The strip and vector kernels: blocks of kThreads a row (the strip kernel's with the mean), and
  // with the mean blocks of kMeanRows rows an image.
  int64_t chunks = 0;
  int row_blocks = 0;
  int slots = 0;  // with the mean: thread blocks an image (strip and vector: row blocks x chunks)
};

NhwcChoice choose_nhwc(const DepthwiseArgs& a, Storage t, const DepthwiseNhwcKnobs& kn, int64_t n,
                       bool blocks_images) {
  NhwcChoice c;
  c.row_blocks = (a.out_h + kMeanRows - 1) / kMeanRows;
  c.tile = depthwise_nhwc_tile(a, t, kn);
  const int64_t tile_chunks = (a.channels + kTileChannels - 1) / kTileChannels;
  if (c.tile.smem > 0 && (!blocks_images || n * c.tile.row_tiles <= INT32_MAX) &&
      tile_chunks * c.tile.col_tiles <= 65535) {
    c.kind = NhwcKernel::kTile;
    c.slots = c.tile.row_tiles * c.tile.col_tiles;
    return c;
  }
  c.strip = depthwise_nhwc_strip(a, t, kn.strip_pixels);
  if (c.strip.pixels > 0) {
    c.row_items = (a.out_w + c.strip.pixels - 1) / c.strip.pixels * (a.channels / c.strip.filters);
    const int64_t image_items = int64_t(a.out_h) * c.row_items;
    if ((blocks_images ? n : 1) * image_items <= INT32_MAX - kThreads) {  // else the vector kernel
      c.kind = NhwcKernel::kStrip;
      c.chunks = (c.row_items + kThreads - 1) / kThreads;
      c.slots = static_cast<int>(c.row_blocks * c.chunks);
      return c;
    }
  }
  c.v = depthwise_nhwc_vector(a, t);
  c.px = depthwise_nhwc_pixels(a, kn.row_pixels);
  c.row_vecs = int64_t((a.out_w + c.px - 1) / c.px) * (a.filters / c.v);
  c.chunks = (c.row_vecs + kThreads - 1) / kThreads;
  c.slots = static_cast<int>(std::min<int64_t>(c.row_blocks * c.chunks, INT32_MAX));
  return c;
}

// With the mean, the strip and vector kernels' threads a block: a row's items split evenly over
// its chunks in whole warps (336 items as 2 x 192, not 256 + 80; tried against FP32 strips of
// stride 2, where the mean stayed slower either way, docs/performance.md, Session 21).
int mean_block_threads(int64_t row_items, int64_t chunks) {
  const int64_t per = (row_items + chunks - 1) / chunks;
  return static_cast<int>((per + 31) / 32 * 32);
}

}  // namespace

int depthwise_nhwc_mean_slots(const DepthwiseArgs& a, Storage t, const DepthwiseNhwcKnobs& kn) {
  if (a.filters != a.channels || !square_3_or_5(a) || a.out_h < 1 || a.out_w < 1 ||
      a.channels % (16 / static_cast<int>(storage_bytes(t))) != 0)
    return 0;
  const NhwcChoice c = choose_nhwc(a, t, kn, 1, false);
  switch (c.kind) {  // the variants instantiated with the mean
    case NhwcKernel::kTile:
      if (c.tile.pixels != 4 || c.tile.smem + kTileMeanSmem > kMaxTileSmem) return 0;
      break;
    case NhwcKernel::kStrip:  // FP32 strips of stride 2: measured slower with the mean (docs/performance.md)
      if (!kn.mean_everywhere || a.stride_w != 1) return 0;
      break;
    case NhwcKernel::kVector:
      if (!kn.mean_everywhere || c.px != 1) return 0;
      break;
  }
  // Partial sums (FP32) of no more than a quarter of the output's bytes.
  const int64_t out_bytes = int64_t(a.out_h) * a.out_w * a.filters * storage_bytes(t);
  return int64_t(c.slots) * a.filters * int64_t(sizeof(float)) * 4 <= out_bytes ? c.slots : 0;
}

void launch_conv_depthwise_nhwc(const DepthwiseArgs& a, const void* x, Storage t, const float* w_taps,
                                const float* bias, void* y, int64_t n, ActFn act, cudaStream_t s,
                                const DepthwiseNhwcKnobs& kn, const DepthwiseMean& mean) {
  if (a.channels < 1 || a.filters % a.channels != 0 || a.out_h < 1 || a.out_w < 1)
    throw Error("channels-last depthwise convolution: filters (" + std::to_string(a.filters) +
                ") are not a multiple of the channels (" + std::to_string(a.channels) + ")");
  if (n <= 0) return;
  const bool with_mean = mean.partial != nullptr;
  const int slots = with_mean ? depthwise_nhwc_mean_slots(a, t, kn) : 0;
  if (with_mean && slots == 0)
    throw Error("channels-last depthwise convolution: the kernel for " + std::to_string(a.out_h) + " x " +
                std::to_string(a.out_w) + " x " + std::to_string(a.filters) +
                " outputs cannot compute their mean (depthwise_nhwc_mean_slots is 0)");
  const NhwcChoice c = choose_nhwc(a, t, kn, n, !with_mean);
  auto too_many = [&] {
    return Error("channels-last depthwise convolution: " + std::to_string(n) + " images of " +
                 std::to_string(a.out_h) + " x " + std::to_string(a.out_w) + " x " +
                 std::to_string(a.filters) + " outputs exceed its grid");
  };
  float* part = mean.partial;
  if (c.kind == NhwcKernel::kTile) {
    const int64_t tile_blocks = n * c.tile.row_tiles;
    if (tile_blocks > INT32_MAX) throw too_many();  // only with the mean (else not chosen)
    const int64_t tile_chunks = (a.channels + kTileChannels - 1) / kTileChannels;
    const dim3 grid(static_cast<unsigned>(tile_blocks),
                    static_cast<unsigned>(tile_chunks * c.tile.col_tiles));
    const size_t smem = c.tile.smem + (with_mean ? tile_mean_smem(c.tile.threads) : 0);
    with_storage(t, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      const T* xt = static_cast<const T*>(x);
      T* yt = static_cast<T*>(y);
      auto run = [&](auto kernel) {
        if (smem > kMaxSmem)
          CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
        kernel<<<grid, c.tile.threads, smem, s>>>(xt, w_taps, bias, yt, a, c.tile.tile_h, c.tile.tile_w,
                                                  c.tile.row_tiles, c.tile.col_tiles, act, part,
                                                  kn.tile_pack);
      };
      constexpr int kHalf = kThreads / 2;
      const bool half = c.tile.threads == kHalf;
      with_window(a, [&](auto k, auto stride) {
        constexpr int K = decltype(k)::value, S = decltype(stride)::value;
        if constexpr (K == 3 && S == 1 && !std::is_same_v<T, float>) {  // two rows a lane: 256 threads
          if (c.tile.rows == 2) {
            if (with_mean)
              run(depthwise_tile_kernel<T, K, S, 4, true, kThreads, 2>);
            else
              run(depthwise_tile_kernel<T, K, S, 4, false, kThreads, 2>);
            return;
          }
        }
        if (with_mean && half)
          run(depthwise_tile_kernel<T, K, S, 4, true, kHalf>);
        else if (with_mean)
          run(depthwise_tile_kernel<T, K, S, 4, true>);
        else if (c.tile.pixels == 8)
          run(depthwise_tile_kernel<T, K, S, 8, false>);
        else if (half)
          run(depthwise_tile_kernel<T, K, S, 4, false, kHalf>);
        else
          run(depthwise_tile_kernel<T, K, S, 4, false>);
      });
    });
    CUDA_CHECK_LAUNCH("depthwise_tile_kernel");
  } else if (c.kind == NhwcKernel::kStrip) {
    const int pp = c.strip.pixels;
    const int64_t image_items = int64_t(a.out_h) * c.row_items;
    // With the mean: row blocks x chunks of a row's items (as the vector kernel's grid).
    const int row_blocks = c.row_blocks;
    const int64_t chunks = c.chunks;
    const int64_t blocks = with_mean ? n * row_blocks : (n * image_items + kThreads - 1) / kThreads;
    if (blocks > INT32_MAX || chunks > 65535) throw too_many();  // only with the mean (else not chosen)
    const int items = static_cast<int>(with_mean ? 0 : n * image_items);
    const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(with_mean ? chunks : 1));
    with_storage(t, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      const T* xt = static_cast<const T*>(x);
      T* yt = static_cast<T*>(y);
      auto go = [&](auto kernel) {
        kernel<<<grid, kThreads, 0, s>>>(xt, w_taps, bias, yt, a, c.row_items, items, act);
      };
      auto go_mean = [&](auto kernel) {
        kernel<<<grid, mean_block_threads(c.row_items, chunks), 0, s>>>(xt, w_taps, bias, yt, a, c.row_items,
                                                                        act, part, row_blocks);
      };
      if constexpr (!std::is_same_v<T, float>) {  // 4 filters x 4 pixels, 3x3, stride 1
        if (with_mean)
          go_mean(depthwise_strip_mean_kernel<T, 4, 3, 1, 4>);
        else
          go(depthwise_strip_kernel<T, 4, 3, 1, 4>);
      } else {
        with_window(a, [&](auto k, auto stride) {
          constexpr int K = decltype(k)::value, S = decltype(stride)::value;
          auto by_mean = [&](auto p) {
            constexpr int P = decltype(p)::value;
            if (with_mean)
              go_mean(depthwise_strip_mean_kernel<T, 2, K, S, P>);
            else
              go(depthwise_strip_kernel<T, 2, K, S, P>);
          };
          if (pp == 8)
            by_mean(std::integral_constant<int, 8>{});
          else if (pp == 7)
            by_mean(std::integral_constant<int, 7>{});
          else
            by_mean(std::integral_constant<int, 4>{});
        });
      }
    });
    CUDA_CHECK_LAUNCH("depthwise_strip_kernel");
  } else {
    const int row_blocks = c.row_blocks;  // with the mean
    const int64_t rows = n * (with_mean ? row_blocks : a.out_h);
    if (c.chunks > 65535 || rows > INT32_MAX) throw too_many();
    const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(c.chunks));
    const bool k3 = a.kernel_h == 3 && a.kernel_w == 3, k5 = a.kernel_h == 5 && a.kernel_w == 5;
    const int px = c.px;
    with_storage(t, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      const T* xt = static_cast<const T*>(x);
      T* yt = static_cast<T*>(y);
      const int rv = static_cast<int>(c.row_vecs);
      auto go = [&](auto vec) {
        constexpr int V = decltype(vec)::value;
        auto fixed = [&](auto kernel) {  // KH = KW = K, P pixels a thread
          constexpr int K = decltype(kernel)::value;
          if (px == 4)
            depthwise_nhwc_kernel<T, V, K, K, 4><<<grid, kThreads, 0, s>>>(xt, w_taps, bias, yt, a, rv, act);
          else if (px == 2)
            depthwise_nhwc_kernel<T, V, K, K, 2><<<grid, kThreads, 0, s>>>(xt, w_taps, bias, yt, a, rv, act);
          else
            depthwise_nhwc_kernel<T, V, K, K, 1><<<grid, kThreads, 0, s>>>(xt, w_taps, bias, yt, a, rv, act);
        };
        if (k3)
          fixed(std::integral_constant<int, 3>{});
        else if (k5)
          fixed(std::integral_constant<int, 5>{});
        else
          depthwise_nhwc_kernel<T, V, 0, 0, 1><<<grid, kThreads, 0, s>>>(xt, w_taps, bias, yt, a, rv, act);
      };
      if (with_mean) {  // the widest vector, one pixel a thread, 3x3 or 5x5 (depthwise_nhwc_mean_slots)
        constexpr int V = kVec<T>;
        const int threads = mean_block_threads(c.row_vecs, c.chunks);
        if (k3)
          depthwise_nhwc_mean_kernel<T, V, 3, 3, 1>
              <<<grid, threads, 0, s>>>(xt, w_taps, bias, yt, a, rv, act, part, row_blocks);
        else
          depthwise_nhwc_mean_kernel<T, V, 5, 5, 1>
              <<<grid, threads, 0, s>>>(xt, w_taps, bias, yt, a, rv, act, part, row_blocks);
      } else if (c.v == kVec<T>) {
        go(std::integral_constant<int, kVec<T>>{});
      } else if (c.v == 4) {
        go(std::integral_constant<int, 4>{});
      } else if (c.v == 2) {
        go(std::integral_constant<int, 2>{});
      } else {
        go(std::integral_constant<int, 1>{});
      }
    });
    CUDA_CHECK_LAUNCH("depthwise_nhwc_kernel");
  }
  if (!with_mean) return;
  const int64_t count = n * a.filters;
  with_storage(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    mean_slots_kernel<T><<<grid_stride_blocks(count), kGridStrideThreads, 0, s>>>(
        part, static_cast<T*>(mean.out), count, a.filters, slots, static_cast<float>(a.out_h * a.out_w));
  });
  CUDA_CHECK_LAUNCH("mean_slots_kernel");
}

}  // namespace cnnrun::gpu
