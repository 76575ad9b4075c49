// The FFMA kernel: every thread computes all of its block's filters for 4 output pixels (see
// the design notes in launch.cu), bias, ReLU and the 2x2 max-pool in the epilogue.
#pragma once

#include "engine/gpu/implicit/args.cuh"
#include "engine/gpu/implicit/staging.cuh"

namespace cnnrun::gpu::implicit {

// Filters 4*m4 .. 4*m4+3 (weights w4) times the thread's kPix input values b, into acc.
template <int BM>
__device__ __forceinline__ void fma_4_filters(float (&acc)[BM][kPix], int m4, float4 w4,
                                              const float (&b)[kPix]) {
#pragma unroll
  for (int j = 0; j < kPix; ++j) {
    acc[m4 * 4 + 0][j] = fmaf(w4.x, b[j], acc[m4 * 4 + 0][j]);
    acc[m4 * 4 + 1][j] = fmaf(w4.y, b[j], acc[m4 * 4 + 1][j]);
    acc[m4 * 4 + 2][j] = fmaf(w4.z, b[j], acc[m4 * 4 + 2][j]);
    acc[m4 * 4 + 3][j] = fmaf(w4.w, b[j], acc[m4 * 4 + 3][j]);
  }
}

template <int BM, int KWT, int EPI, bool U8>
__global__ void __launch_bounds__(kThreads, (BM <= 16 || (BM == 20 && KWT != 3)) ? 2 : 1)
    conv_implicit_kernel(ImplArgs a) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  __shared__ float bias_s[BM];
  constexpr bool POOL = EPI == kEpiReluPool;
  constexpr bool RELU = EPI != kEpiNone;
  const int kw_n = KWT > 0 ? KWT : a.KW;
  const int plane = a.patch_h * a.pitch;
  const int patch_img = a.CB * plane;
  const int mt = blockIdx.y;
  const int tid = threadIdx.x;

  // A pixel's offset in the patch, and its image, row and column in the tile, depend only on
  // its place in the tile: computed once, the place packed as g | r << 10 | ox << 20 (with the
  // pool: the window's image, pool row and pool column).
  int noff[kPix];
  unsigned place[kPix];
  if constexpr (POOL) {
    const int pw = a.OW >> 1, wins_img = (a.R >> 1) * pw;
    const int g = tid / wins_img, pr = (tid % wins_img) / pw, pc = tid % pw;
    const bool ok = tid < a.G * wins_img;
    const int o = (ok ? g * patch_img + 2 * pr * a.pitch + 2 * pc : 0) + a.xs;
#pragma unroll
    for (int j = 0; j < kPix; ++j) {
      noff[j] = o + (j >> 1) * a.pitch + (j & 1);
      place[j] =
          ok ? static_cast<unsigned>(g) | static_cast<unsigned>(pr) << 10 | static_cast<unsigned>(pc) << 20
             : ~0u;
    }
  } else {
    const int rows_ow = a.R * a.OW;
    const int tile_pixels = a.G * rows_ow;
#pragma unroll
    for (int j = 0; j < kPix; ++j) {
      const int q = tid + j * kThreads;
      noff[j] = 0;
      place[j] = ~0u;
      if (q < tile_pixels) {
        const int g = q / rows_ow, r = (q / a.OW) % a.R, ox = q % a.OW;
        noff[j] = g * patch_img + r * a.SH * a.pitch + ox * a.SW + a.xs;
        place[j] =
            static_cast<unsigned>(g) | static_cast<unsigned>(r) << 10 | static_cast<unsigned>(ox) << 20;
      }
    }
  }
  if (tid < BM)
    bias_s[tid] = mt * BM + tid < a.F ? a.bias[mt * BM + tid] : 0.f;  // read after the first barrier

  float acc[BM][kPix];
#pragma unroll
  for (int m = 0; m < BM; ++m)
#pragma unroll
    for (int j = 0; j < kPix; ++j) acc[m][j] = 0.f;

  int tile = blockIdx.x, chunk = 0, buf = 0;
  if (tile >= a.tiles) return;
  unsigned* raw = reinterpret_cast<unsigned*>(smem + 2 * a.stage_floats);
  if (!U8 && a.row_copy) {  // the padding is zeroed once: row copies never write it
    for (int i = tid; i < a.patch_floats; i += kThreads) smem[i] = smem[a.stage_floats + i] = 0.f;
    __syncthreads();
  }
  if (U8) {
    for (int i = tid; i < a.patch_floats; i += kThreads) smem[i] = smem[a.stage_floats + i] = 0.f;
    issue_weights<BM>(a, smem, 0, 0, mt);
    issue_u8(a, raw, tile);
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();  // the zeros land before any thread's pixels
    store_u8(a, smem, tile, raw);
  } else {
    issue_stage<BM>(a, smem, tile, 0, 0, mt);
  }
  for (;;) {
    int next_tile = tile, next_chunk = chunk + 1;
    if (next_chunk == a.chunks) next_chunk = 0, next_tile += gridDim.x;
    const bool has_next = next_tile < a.tiles;
    issue_next_stage<BM, U8>(a, smem, raw, has_next, next_tile, next_chunk, buf, mt);

    const float* patch = smem + buf * a.stage_floats;
    const float* wsm = patch + a.patch_floats;
    const int cb = min(a.CB, a.C - chunk * a.CB);
    for (int c = 0; c < cb; ++c)
      for (int kh = 0; kh < a.KH; ++kh) {
        const float* prow = patch + c * plane + kh * a.pitch;
        const float* wrow = wsm + (c * a.KH + kh) * kw_n * BM;
        if constexpr (POOL && KWT > 0) {
          // The window's two rows, KW+1 values each (rounded up to pairs), as float2 loads
          // made as the taps reach them, so that few are live at once.
          float r0[KWT + 2], r1[KWT + 2];
#pragma unroll
          for (int kw = 0; kw < KWT; ++kw) {
            if (kw == 0 || kw % 2 == 1) {
              const int i = kw == 0 ? 0 : kw + 1;
              const float2 v0 = *reinterpret_cast<const float2*>(prow + noff[0] + i);
              const float2 v1 = *reinterpret_cast<const float2*>(prow + noff[0] + a.pitch + i);
              r0[i] = v0.x, r0[i + 1] = v0.y, r1[i] = v1.x, r1[i + 1] = v1.y;
            }
            const float b[kPix] = {r0[kw], r0[kw + 1], r1[kw], r1[kw + 1]};
#pragma unroll
            for (int m4 = 0; m4 < BM / 4; ++m4) {
              const float4 w4 = *reinterpret_cast<const float4*>(wrow + kw * BM + m4 * 4);
              fma_4_filters(acc, m4, w4, b);
            }
          }
        } else {
#pragma unroll
          for (int kw = 0; kw < kw_n; ++kw) {
            float b[kPix];
#pragma unroll
            for (int j = 0; j < kPix; ++j) b[j] = prow[noff[j] + kw];
#pragma unroll
            for (int m4 = 0; m4 < BM / 4; ++m4) {
              const float4 w4 = *reinterpret_cast<const float4*>(wrow + kw * BM + m4 * 4);
              fma_4_filters(acc, m4, w4, b);
            }
          }
        }
      }

    if (chunk == a.chunks - 1) {  // the tile's last chunk: write it out and start afresh
      const int group = fdiv(tile, a.div_row_tiles), rt = tile - group * a.row_tiles;
      const int img0 = group * a.G;
      const int f_end = min(BM, a.F - mt * BM);
      if (POOL) {
        const int ph = a.OH >> 1, pw = a.OW >> 1, pplane = ph * pw;
        const int pr0 = rt * (a.R >> 1);
        float* base =
            a.y + (static_cast<int64_t>(img0) * a.F + mt * BM) * pplane + static_cast<int64_t>(pr0) * pw;
        const int g = place[0] & 1023, pr = (place[0] >> 10) & 1023, pc = place[0] >> 20;
        const bool ok = place[0] != ~0u && img0 + g < a.n && pr0 + pr < ph;
        const int off = ok ? g * a.F * pplane + pr * pw + pc : -1;
#pragma unroll
        for (int m = 0; m < BM; ++m) {
          const float v = fmaxf(fmaxf(acc[m][0], acc[m][1]), fmaxf(acc[m][2], acc[m][3])) + bias_s[m];
          if (m < f_end && off >= 0) base[off + m * pplane] = fmaxf(v, 0.f);
#pragma unroll
          for (int j = 0; j < kPix; ++j) acc[m][j] = 0.f;
        }
      } else {
        const int oh0 = rt * a.R;
        const int out_plane = a.OH * a.OW;
        // One 64-bit base for the tile, 32-bit offsets per pixel (-1: no pixel there): the
        // epilogue must fit the main loop's register budget.
        float* base =
            a.y + (static_cast<int64_t>(img0) * a.F + mt * BM) * out_plane + static_cast<int64_t>(oh0) * a.OW;
        int off[kPix];
#pragma unroll
        for (int j = 0; j < kPix; ++j) {
          const int g = place[j] & 1023, r = (place[j] >> 10) & 1023, ox = place[j] >> 20;
          const bool ok = place[j] != ~0u && img0 + g < a.n && oh0 + r < a.OH;
          off[j] = ok ? g * a.F * out_plane + r * a.OW + ox : -1;
        }
#pragma unroll
        for (int m = 0; m < BM; ++m) {
          const float bv = bias_s[m];
          if (m < f_end) {
#pragma unroll
            for (int j = 0; j < kPix; ++j) {
              float v = acc[m][j] + bv;
              if (RELU) v = fmaxf(v, 0.f);
              if (off[j] >= 0) base[off[j] + m * out_plane] = v;
            }
          }
#pragma unroll
          for (int j = 0; j < kPix; ++j) acc[m][j] = 0.f;
        }
      }
    }
    if (!has_next) break;
    finish_next_stage<U8>(a, smem, raw, next_tile, buf);
    tile = next_tile, chunk = next_chunk, buf ^= 1;
  }
}

}  // namespace cnnrun::gpu::implicit
