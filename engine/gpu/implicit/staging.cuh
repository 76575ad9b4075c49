// Staging, shared by both kernels: the asynchronous copies (cp.async) of a tile's input patch
// and weights into a stage buffer, and the uint8 input's register-to-shared normalisation.
#pragma once

#include "engine/gpu/cp_async.cuh"
#include "engine/gpu/implicit/args.cuh"

namespace cnnrun::gpu::implicit {

// The weights of one channel chunk into the stage buffer after the patch.
template <int BM>
__device__ __forceinline__ void issue_weights(const ImplArgs& a, float* smem, int chunk, int buf, int mt) {
  float* wsm = smem + buf * a.stage_floats + a.patch_floats;
  const int c0 = chunk * a.CB;
  if (a.tc_nt) {  // tensor cores: the k-steps of 8 that overlap this chunk's taps, all n-tiles
    const int khkw = a.KH * a.KW;
    const int ks0 = c0 * khkw / 8, ks1 = (min(a.C, c0 + a.CB) * khkw + 7) / 8;
    const float4* src = reinterpret_cast<const float4*>(a.wt) + ks0 * a.tc_nt * 32;
    float4* dst = reinterpret_cast<float4*>(wsm);
    for (int i = threadIdx.x; i < (ks1 - ks0) * a.tc_nt * 32; i += blockDim.x) cp_async16(dst + i, src + i);
    return;
  }
  const int cb = min(a.CB, a.C - c0);
  const int taps = a.KH * a.KW;
  const float4* wsrc =
      reinterpret_cast<const float4*>(a.wt + (static_cast<int64_t>(mt) * a.K + c0 * taps) * BM);
  float4* wdst = reinterpret_cast<float4*>(wsm);
  for (int i = threadIdx.x; i < cb * taps * BM / 4; i += blockDim.x) cp_async16(wdst + i, wsrc + i);
}

// Issues the copies of one stage (tile, channel chunk) of float input into buffer `buf`, and
// commits them as one group. Element e of the stage's patch is
// ((g * cb + c) * patch_h + py) * pitch + px: consecutive threads take consecutive elements
// (every lane busy however narrow the rows) and decode them with fast divisions. Columns past
// the patch width (pitch padding) are staged too (zero or real data): never read into results.
template <int BM>
__device__ __forceinline__ void issue_stage(const ImplArgs& a, float* smem, int tile, int chunk, int buf,
                                            int mt) {
  float* patch = smem + buf * a.stage_floats;
  const int group = fdiv(tile, a.div_row_tiles), rt = tile - group * a.row_tiles;
  const int img0 = group * a.G, iy0 = rt * a.R * a.SH - a.PH;
  const int c0 = chunk * a.CB;
  const bool last = chunk == a.chunks - 1;
  const int cb = last ? a.C - c0 : a.CB;
  const FastDiv& div_cb = last ? a.div_cb_last : a.div_cb;
  const int plane = a.patch_h * a.pitch;
  if (a.row_copy) {
    // Whole images per tile, W % 4 == 0: unit u is 4 floats of input row iy of channel c of
    // image g, copied into its place; 32-bit offsets from the tile's first element.
    const int w4 = a.W >> 2;
    const int total = min(a.G, a.n - img0) * cb * a.H * w4;
    const float* xt = a.x + (static_cast<int64_t>(img0) * a.C + c0) * a.H * a.W;
#pragma unroll 1
    for (int u = threadIdx.x; u < total; u += blockDim.x) {
      const int t = fdiv(u, a.div_w4), xq = u - t * w4;
      const int t2 = fdiv(t, a.div_h), iy = t - t2 * a.H;
      const int g = fdiv(t2, div_cb), c = t2 - g * cb;
      const int py = iy + a.PH;
      if (py < a.patch_h)
        cp_async16(patch + ((g * a.CB + c) * a.patch_h + py) * a.pitch + a.xs + a.PW + 4 * xq,
                   xt + ((g * a.C + c) * a.H + iy) * a.W + 4 * xq);
    }
    issue_weights<BM>(a, smem, chunk, buf, mt);
    cp_async_commit();
    return;
  }
  const int total = a.G * cb * plane;
  const int gap = (a.CB - cb) * plane;  // a short last chunk leaves room in each image's slot
#pragma unroll 1                        // issued while the accumulators are live: unrolling would spill them
  for (int e = threadIdx.x; e < total; e += blockDim.x) {
    const int row = fdiv(e, a.div_pitch), px = e - row * a.pitch;
    const int t = fdiv(row, a.div_ph), py = row - t * a.patch_h;
    const int g = fdiv(t, div_cb), c = t - g * cb;
    const int img = img0 + g, iy = iy0 + py, ix = px - a.PW;
    const bool ok = img < a.n && iy >= 0 && iy < a.H && ix >= 0 && ix < a.W;
    const float* src = ok ? a.x + ((static_cast<int64_t>(img) * a.C + c0 + c) * a.H + iy) * a.W + ix : a.x;
    cp_async4(patch + e + g * gap, src, ok);
  }
  issue_weights<BM>(a, smem, chunk, buf, mt);
  cp_async_commit();
}

// uint8 input (whole images per tile, one chunk): the tile's bytes as 4-byte words into a raw
// area of shared memory (4 KiB after the two stage buffers), in flight while the current tile
// computes. Each thread copies, and later converts, only its own words: no barrier between.
__device__ __forceinline__ void issue_u8(const ImplArgs& a, unsigned* raw, int tile) {
  const int img0 = tile * a.G;
  const int words = min(a.G, a.n - img0) * (a.chw >> 2);
  const unsigned* src = reinterpret_cast<const unsigned*>(a.xu8 + static_cast<int64_t>(img0) * a.chw);
#pragma unroll
  for (int k = 0; k < kU8Words; ++k) {
    const int w = threadIdx.x + k * blockDim.x;
    if (w < words) {
      unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(raw + w));
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src + w));
    }
  }
}

// ... then normalised into the patch: float(byte) * scale[c] + shift[c], rounded after the
// multiply like preprocess_images. The padding around the images was zeroed once and is never
// written. (Patch slots of images past n keep stale values: their outputs are never written.)
__device__ __forceinline__ void store_u8(const ImplArgs& a, float* patch, int tile, const unsigned* raw) {
  const int img0 = tile * a.G;
  const int words = min(a.G, a.n - img0) * (a.chw >> 2);
  const int hw = a.H * a.W;
  const int plane = a.patch_h * a.pitch;
#pragma unroll
  for (int k = 0; k < kU8Words; ++k) {
    const int w = threadIdx.x + k * blockDim.x;
    if (w < words) {
      const unsigned v = raw[w];
      const int b = w * 4;
      const int g = fdiv(b, a.div_chw), r = b - g * a.chw;
      const int c = fdiv(r, a.div_hw), rem = r - c * hw;
      const int iy = fdiv(rem, a.div_w), ix = rem - iy * a.W;
      const int py = iy + a.PH, px = ix + a.PW;
      if (py < a.patch_h) {
        float* d = patch + (g * a.CB + c) * plane + py * a.pitch + px;
        const float sc = __ldg(a.scale + c), sh = __ldg(a.shift + c);
#pragma unroll
        for (int q = 0; q < 4; ++q)
          if (px + q < a.pitch)
            d[q] = __fadd_rn(__fmul_rn(static_cast<float>((v >> (8 * q)) & 255u), sc), sh);
      }
    }
  }
}

// The double-buffered walk both kernels make over their (tile, channel chunk) stages: a stage's
// math reads buffer `buf` while the next stage's copies land in the other.

// Before a stage's math: waits until this stage's copies are done and visible and every thread
// has finished reading the other buffer (the previous stage), then issues the next stage's
// copies into it when there is one.
template <int BM, bool U8>
__device__ __forceinline__ void issue_next_stage(const ImplArgs& a, float* smem, unsigned* raw, bool has_next,
                                                 int next_tile, int next_chunk, int buf, int mt) {
  cp_async_wait_all();
  __syncthreads();
  if (has_next) {
    if (U8) {
      issue_weights<BM>(a, smem, next_chunk, buf ^ 1, mt);
      issue_u8(a, raw, next_tile);
      cp_async_commit();
    } else {
      issue_stage<BM>(a, smem, next_tile, next_chunk, buf ^ 1, mt);
    }
  }
}

// After a stage's math, before the next stage becomes this one: uint8 input's pixels, copied
// as raw bytes, are normalised into the next stage's buffer.
template <bool U8>
__device__ __forceinline__ void finish_next_stage(const ImplArgs& a, float* smem, const unsigned* raw,
                                                  int next_tile, int buf) {
  if (U8) {
    cp_async_wait_all();
    store_u8(a, smem + (buf ^ 1) * a.stage_floats, next_tile, raw);
  }
}

}  // namespace cnnrun::gpu::implicit
