// Depthwise convolution. Why this shape: a depthwise layer does KH*KW multiply-adds per output
// and reads each input value KH*KW times, so it is bound by memory traffic, not arithmetic, and
// the GEMM lowerings (im2col, cuDNN's grouped GEMMs with one channel per group) waste most of their
// work on tiny matrices. Here a thread block stages the input rows that `rows` output rows of
// `planes` consecutive (image, filter) planes need, padding as zeros, into shared memory once
// (each input value is read from global memory about once, (rows - 1) * stride + reach rows for
// `rows` output rows), with the planes' weights; then each of its 256 threads computes about four
// outputs from shared memory, adds the bias and applies the activation, and writes them
// coalesced. Rows of 32 values or more are staged and computed a warp a row, lanes along it (no
// index division per value); narrower ones one value a thread over the flattened tile. Small planes (late
// MobileNet stages, 7x7 or 14x14) are packed several per block so the threads stay busy; large ones are cut
// into row tiles. The common 3x3 and 5x5 kernels are compile-time loops; other sizes use the same code with
// run-time bounds.
#include <algorithm>

#include "engine/gpu/activation.cuh"
#include "engine/gpu/check.h"
#include "engine/gpu/conv2d_depthwise.h"

namespace cnnrun::gpu {

namespace {

constexpr int kThreads = 256;
constexpr int kTargetOutputs = 1024;    // outputs per tile: 4 per thread
constexpr size_t kMaxSmem = 48u << 10;  // the default limit, no opt-in needed

struct Tile {
  int planes, rows, row_tiles, patch_h, patch_w;
  int64_t plane_groups;
};

// SPLIT (stride 2 across, undilated, rows of 32 or more): each staged row holds its even columns,
// then its odd ones, so that a warp's 32 outputs read 32 consecutive words per tap (with the
// columns in place, a stride-2 read hits each bank twice).
template <int KH, int KW, bool SPLIT>
__global__ void __launch_bounds__(kThreads)
    depthwise_kernel(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                     float* __restrict__ y, int64_t nf, DepthwiseArgs a, Tile t, ActFn act) {
  extern __shared__ float smem[];
  const int kh_n = KH > 0 ? KH : a.kernel_h, kw_n = KW > 0 ? KW : a.kernel_w;
  const int taps = kh_n * kw_n;
  const int patch = t.patch_h * t.patch_w;
  float* wsm = smem + t.planes * patch;  // [planes][taps]
  const int mult = a.filters / a.channels;
  const int tile_outputs = t.planes * t.rows * a.out_w;
  const int64_t tiles = t.plane_groups * t.row_tiles;

  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t p0 = tile / t.row_tiles * t.planes;  // first (image, filter) plane
    const int oy0 = static_cast<int>(tile % t.row_tiles) * t.rows;
    const int iy0 = oy0 * a.stride_h - a.pad_h;
    // The tile's planes as (image, filter) from one 64-bit division per tile: plane pb is
    // filter f0 + pb of image img0, carried over the images with 32-bit arithmetic, so no value
    // staged or written pays a 64-bit division.
    const int64_t img0 = p0 / a.filters;
    const int f0 = static_cast<int>(p0 - img0 * a.filters);
    const int64_t left = nf - p0;
    const int live = left < t.planes ? static_cast<int>(left) : t.planes;  // planes of the tile that exist
    __syncthreads();  // the previous tile's reads are done
    // The tile's (image, filter) plane pb, as a pointer to its input channel.
    auto channel = [&](int pb) {
      const int f = f0 + pb, di = f / a.filters;
      const int c = (f - di * a.filters) / mult;
      return x + ((img0 + di) * a.channels + c) * a.in_h * a.in_w;
    };
    if (t.patch_w >= 32) {  // a warp a patch row, its lanes along it: no division per value
      for (int row = threadIdx.x / 32; row < t.planes * t.patch_h; row += kThreads / 32) {
        const int pb = row / t.patch_h, iy = iy0 + row - pb * t.patch_h;
        const bool in = pb < live && iy >= 0 && iy < a.in_h;
        const float* src = in ? channel(pb) + int64_t(iy) * a.in_w : nullptr;
        float* dst = smem + row * t.patch_w;
        const int half = (t.patch_w + 1) / 2;
        for (int px = threadIdx.x % 32; px < t.patch_w; px += 32) {
          const int ix = px - a.pad_w;
          dst[SPLIT ? (px & 1) * half + (px >> 1) : px] =
              in && ix >= 0 && ix < a.in_w ? __ldg(src + ix) : 0.f;
        }
      }
    } else {  // small planes, several a tile: one value a thread
      for (int j = threadIdx.x; j < t.planes * patch; j += kThreads) {
        const int pb = j / patch, r = j - pb * patch;
        const int py = r / t.patch_w, px = r - py * t.patch_w;
        float v = 0.f;
        const int iy = iy0 + py, ix = px - a.pad_w;
        if (pb < live && iy >= 0 && iy < a.in_h && ix >= 0 && ix < a.in_w)
          v = __ldg(channel(pb) + int64_t(iy) * a.in_w + ix);
        smem[j] = v;
      }
    }
    for (int j = threadIdx.x; j < t.planes * taps; j += kThreads) {
      const int pb = j / taps;
      wsm[j] = pb < live ? __ldg(w + ((f0 + pb) % a.filters) * taps + (j - pb * taps)) : 0.f;
    }
    __syncthreads();
    // One output: plane pb, tile row ry, column ox.
    auto output = [&](int pb, int ry, int ox) {
      const float* src = smem + pb * patch + ry * a.stride_h * t.patch_w + ox * a.stride_w;
      const float* wk = wsm + pb * taps;
      float acc = 0.f;
      if constexpr (SPLIT) {
        const float* row = smem + pb * patch + ry * a.stride_h * t.patch_w;
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
      for (int row = threadIdx.x / 32; row < t.planes * t.rows; row += kThreads / 32) {
        const int pb = row / t.rows, ry = row - pb * t.rows, oy = oy0 + ry;
        if (pb >= live || oy >= a.out_h) continue;
        const float b = bias ? __ldg(bias + (f0 + pb) % a.filters) : 0.f;
        float* dst = y + ((p0 + pb) * a.out_h + oy) * a.out_w;
        for (int ox = threadIdx.x % 32; ox < a.out_w; ox += 32)
          dst[ox] = act_eval(act, __fadd_rn(output(pb, ry, ox), b));
      }
    } else {
      for (int j = threadIdx.x; j < tile_outputs; j += kThreads) {
        const int pb = j / (t.rows * a.out_w), r = j - pb * (t.rows * a.out_w);
        const int ry = r / a.out_w, ox = r - ry * a.out_w;
        const int oy = oy0 + ry;
        if (pb >= live || oy >= a.out_h) continue;
        const float b = bias ? __ldg(bias + (f0 + pb) % a.filters) : 0.f;
        y[((p0 + pb) * a.out_h + oy) * a.out_w + ox] = act_eval(act, __fadd_rn(output(pb, ry, ox), b));
      }
    }
  }
}

int patch_rows(const DepthwiseArgs& a, int rows) {
  return (rows - 1) * a.stride_h + (a.kernel_h - 1) * a.dilation_h + 1;
}

}  // namespace

DepthwiseConfig depthwise_config(const DepthwiseArgs& a) {
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
  const int64_t plane = int64_t(a.out_h) * a.out_w;
  if (plane >= kTargetOutputs) {
    c.planes = 1;
    c.rows = static_cast<int>(std::clamp<int64_t>(kTargetOutputs / a.out_w, 1, a.out_h));
  } else {
    c.planes = static_cast<int>(kTargetOutputs / plane);
    c.rows = a.out_h;
  }
  c.patch_w = (a.out_w - 1) * a.stride_w + (a.kernel_w - 1) * a.dilation_w + 1;
  const int taps = a.kernel_h * a.kernel_w;
  for (;;) {
    c.patch_h = patch_rows(a, c.rows);
    c.smem =
        sizeof(float) * (size_t(c.planes) * size_t(c.patch_h) * size_t(c.patch_w) + size_t(c.planes) * taps);
    if (c.smem <= kMaxSmem) break;
    if (c.planes > 1) {
      c.planes = (c.planes + 1) / 2;
    } else if (c.rows > 1) {
      c.rows = (c.rows + 1) / 2;
    } else {
      c.why = "one output row needs " + std::to_string(c.smem) +
              " bytes of input patch and weights, more than " + std::to_string(kMaxSmem) +
              " of shared memory";
      return c;
    }
  }
  c.row_tiles = (a.out_h + c.rows - 1) / c.rows;
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
  return d;
}

void launch_conv_depthwise(const DepthwiseConfig& cfg, const DepthwiseArgs& a, const float* x, const float* w,
                           const float* bias, float* y, int64_t n, ActFn act, cudaStream_t s) {
  if (!cfg.ok) throw Error("depthwise convolution: " + cfg.why);
  const int64_t nf = n * a.filters;
  if (nf <= 0) return;
  Tile t{cfg.planes, cfg.rows, cfg.row_tiles, cfg.patch_h, cfg.patch_w, (nf + cfg.planes - 1) / cfg.planes};
  const int64_t tiles = t.plane_groups * t.row_tiles;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(tiles, int64_t(1) << 24));
  const bool split = a.stride_w == 2 && a.dilation_w == 1 && cfg.patch_w >= 32 && a.out_w >= 32;
  if (a.kernel_h == 3 && a.kernel_w == 3) {
    if (split)
      depthwise_kernel<3, 3, true><<<grid, kThreads, cfg.smem, s>>>(x, w, bias, y, nf, a, t, act);
    else
      depthwise_kernel<3, 3, false><<<grid, kThreads, cfg.smem, s>>>(x, w, bias, y, nf, a, t, act);
    CUDA_CHECK_LAUNCH("depthwise_kernel<3, 3>");
  } else if (a.kernel_h == 5 && a.kernel_w == 5) {
    if (split)
      depthwise_kernel<5, 5, true><<<grid, kThreads, cfg.smem, s>>>(x, w, bias, y, nf, a, t, act);
    else
      depthwise_kernel<5, 5, false><<<grid, kThreads, cfg.smem, s>>>(x, w, bias, y, nf, a, t, act);
    CUDA_CHECK_LAUNCH("depthwise_kernel<5, 5>");
  } else {
    depthwise_kernel<0, 0, false><<<grid, kThreads, cfg.smem, s>>>(x, w, bias, y, nf, a, t, act);
    CUDA_CHECK_LAUNCH("depthwise_kernel<0, 0>");
  }
}

}  // namespace cnnrun::gpu
