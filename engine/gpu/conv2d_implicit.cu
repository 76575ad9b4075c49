// Implicit-GEMM convolution ("fused unroll + matrix multiply"): the im2col matrix is never
// written. Why it is shaped this way:
// - The networks this engine is for have few filters (16-20 in the CIFAR net) and many output
//   pixels, so the GEMM is short and fat (M = filters, N = images x pixels, K = C*KH*KW). A
//   classic square register tile would waste most of M, so each thread computes ALL the block's
//   filters (BM, a multiple of 4 up to 32, a template parameter) for 4 output pixels: BM x 4
//   accumulators in registers, one FFMA per weight-pixel pair.
// - Instead of gathering im2col columns from global memory (KH*KW reads of every input value),
//   a thread block stages the input PATCH its outputs need (G images x R output rows x all
//   columns, plus the halo, zero-padded) for a chunk of channels in shared memory once. Each tap
//   (c, kh, kw) is then a fixed offset into the patch, so the inner loop has no bounds checks and
//   no index arithmetic: per tap, the pixels' shared loads, BM/4 broadcast float4 loads of the
//   weights, and 4*BM FFMAs. The patch's row pitch is chosen on the host (a few candidates
//   simulated against the 32 banks) so that a warp's pixel loads do not conflict when its
//   threads span several rows or images.
// - Staging is asynchronous (cp.async, zero-filling the padding) into two buffers, and the grid
//   is persistent: each thread block walks its tiles and channel chunks as one sequence of
//   stages and loads stage s+1 while it computes stage s, with one barrier per stage.
// - Fused max-pool (conv -> ReLU -> 2x2/2 max-pool, stride-1 convolutions): each thread's 4
//   pixels are one pool window, so the pool is a max over the thread's own accumulators and
//   only a quarter of the values are written; the pre-pool tensor never reaches device memory.
//   The window's two rows are read as float2 pairs (KW+1 values per row cover all KW taps of
//   both columns): fewer shared loads than one per pixel and tap. relu(max(a) + b) equals
//   max(relu(a + b)) exactly (rounding and ReLU are monotone), so results match the CPU's.
// - Fused uint8 input (the network's first convolution): the tile is whole images, so the
//   patch's padding is the same for every tile and is zeroed once; the bytes of the next tile
//   are loaded into registers (4-byte words, coalesced) before the current tile's FFMAs and
//   normalised into shared memory after them. The float input never exists in device memory.
// - Everything that does not depend on the tile (a pixel's offset in the patch and its place in
//   the tile) is computed once per thread; staging takes consecutive elements per thread (every
//   lane busy) decoded with multiply-high divisions; the epilogue goes filter by filter with the
//   bias loaded once; the activation is a template flag (ReLU or none: what the executor fuses).
//   A first version with a runtime activation switch, per-row staging and per-tile divisions
//   spent as many instructions outside the FFMAs as in them (Nsight Compute: 47% FFMAs).
// - The kernel width is a template parameter for the common 3 and 5, so the kw loop unrolls and
//   its loads use immediate offsets; other widths take the runtime loop.
// - Two thread blocks per SM where the accumulators fit in 128 registers without spilling
//   (BM <= 16, and BM = 20 except with 3-wide kernels, checked with ptxas -v): with one block per
//   SM every barrier idles the SM, and Nsight showed only 54-59% of issue slots used.
// - Bias (from shared memory) and the ReLU are applied in the epilogue; each output value is
//   written once, coalesced along the output row.
// - For conv + ReLU + pool with at most 32 filters a second kernel (conv_tc_pool_kernel, below)
//   does the same on the tensor cores in 3xTF32: FFMAs had stalled at ~60% of the FMA pipe,
//   and three TF32 products per multiply still keep FP32-level accuracy. Where the first conv
//   reads bytes whose preprocessing has an exact offset (exact_input_offsets), it stages
//   byte - offset, exact in FP16, and two FP16 products (the weights' high and low parts) per 16
//   taps replace six TF32 ones, at the same accuracy.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "engine/gpu/check.h"
#include "engine/gpu/conv2d_implicit.h"

namespace cnnrun::gpu {

namespace {

constexpr int kThreads = 256;
constexpr int kPix = 4;                       // output pixels per thread
constexpr int kTilePixels = kThreads * kPix;  // output pixels per tile (and each of G, R, OW < 1024)
constexpr int kTileWindows = kThreads;        // pool windows per tile (one per thread)
constexpr size_t kStageBudget = 40 * 1024;    // shared memory per stage buffer (two of them)
constexpr int kU8Words = 4;                   // uint8 input: 4-byte words per thread per tile, at most
constexpr int kTcMaxK = 2048;                 // tensor cores: taps (C*KH*KW) in the offset table, at most
// Tensor cores with more than 16 filters run one block per SM (registers), so a stage may use
// most of the SM's shared memory: fewer chunks, and chunks whose taps start on a k-step of 8.
constexpr size_t kTcStageBudget = 104 * 1024;
constexpr int kTcSmemMax = static_cast<int>(2 * kTcStageBudget) + kU8Words * kThreads * 4 + kTcMaxK * 4 + 64;

enum Epi { kEpiNone = 0, kEpiRelu = 1, kEpiReluPool = 2 };
// The tensor-core kernel's arithmetic (Precision's order): 3xTF32 with FP32 flushes, TF32,
// FP16 or BF16 operands.
// kTcX16: FP32 results for uint8 input staged exactly as byte - offset (ImplicitFusion::u8_exact):
// FP16 products of those exact values and of weights split in two FP16 parts.
enum TcPrec { kTcFp32 = 0, kTcTf32 = 1, kTcFp16 = 2, kTcBf16 = 3, kTcX16 = 4 };

// n / d for 0 <= n < 2^31 as a multiply-high and a shift (Granlund-Montgomery): the staging
// and tile arithmetic divide by run-time sizes, and a hardware-less integer division costs ~20
// instructions.
struct FastDiv {
  unsigned d = 1, m = 1;
  int s = 0;
};
FastDiv make_fastdiv(unsigned d) {
  FastDiv f;
  f.d = d;
  while ((1ull << f.s) < d) ++f.s;
  f.m = static_cast<unsigned>(((1ull << 32) * ((1ull << f.s) - d)) / d + 1);
  return f;
}
__device__ __forceinline__ int fdiv(int n, const FastDiv& f) {
  return static_cast<int>((__umulhi(static_cast<unsigned>(n), f.m) + static_cast<unsigned>(n)) >> f.s);
}

struct ImplArgs {
  const float* x;
  const uint8_t* xu8;
  const float* scale;
  const float* shift;
  const float* wt;
  const float* bias;
  float* y;
  int n, C, H, W, F, KH, KW, SH, SW, PH, PW;
  int OH, OW;  // convolution outputs computed (with the pool: even; y is then [F, OH/2, OW/2])
  int G, R, CB, patch_h, pitch, row_tiles, K;
  int tiles, chunks, stage_floats, patch_floats;
  int chw;       // uint8 input: bytes per image
  int xs;        // patch column of input column -PW (row copies: so that input rows land 16-byte aligned)
  int row_copy;  // stage whole input rows with 16-byte copies (the padding was zeroed once)
  int tc_nt;     // tensor-core kernel: n-tiles of 8 filters (0: the FFMA kernel)
  int k_pad;     // tensor-core kernel: C*KH*KW rounded up to 8
  FastDiv div_pitch, div_ph, div_cb, div_cb_last, div_row_tiles;
  FastDiv div_chw, div_hw, div_w;  // uint8 input: decoding a byte offset in the tile
  FastDiv div_w4, div_h;           // row copies: decoding a 16-byte unit in the tile
  float out_scale;                 // kTcX16: the accumulators' scale (a power of two)
};

__device__ __forceinline__ void cp_async4(float* dst, const float* src, bool valid) {
  unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }

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
    // This stage's copies are done and visible, and every thread has finished reading the
    // other buffer (the previous stage), which the next stage's copies now overwrite.
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
#pragma unroll
              for (int j = 0; j < kPix; ++j) {
                acc[m4 * 4 + 0][j] = fmaf(w4.x, b[j], acc[m4 * 4 + 0][j]);
                acc[m4 * 4 + 1][j] = fmaf(w4.y, b[j], acc[m4 * 4 + 1][j]);
                acc[m4 * 4 + 2][j] = fmaf(w4.z, b[j], acc[m4 * 4 + 2][j]);
                acc[m4 * 4 + 3][j] = fmaf(w4.w, b[j], acc[m4 * 4 + 3][j]);
              }
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
#pragma unroll
              for (int j = 0; j < kPix; ++j) {
                acc[m4 * 4 + 0][j] = fmaf(w4.x, b[j], acc[m4 * 4 + 0][j]);
                acc[m4 * 4 + 1][j] = fmaf(w4.y, b[j], acc[m4 * 4 + 1][j]);
                acc[m4 * 4 + 2][j] = fmaf(w4.z, b[j], acc[m4 * 4 + 2][j]);
                acc[m4 * 4 + 3][j] = fmaf(w4.w, b[j], acc[m4 * 4 + 3][j]);
              }
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
    if (U8) {
      cp_async_wait_all();
      store_u8(a, smem + (buf ^ 1) * a.stage_floats, next_tile, raw);
    }
    tile = next_tile, chunk = next_chunk, buf ^= 1;
  }
}

// ---------------------------------------------------------------------------------------------
// 3xTF32 tensor-core variant of the fused conv + ReLU + 2x2 max-pool (stride-1 convs, at most
// 32 filters). Same tiles, staging and patch as the FFMA kernel; only the arithmetic differs.
// The GEMM is M = pixels, N = filters (n-tiles of 8), K = taps (k-steps of 8), one
// mma.sync.m16n8k8 per (m-tile, n-tile, k-step) and term. Each warp owns GPW groups of 8 pool
// windows (a tile's 256 windows over 8 or 16 warps); a group is two m-tiles (window column dx = 0, 1) whose
// rows 0-7 / 8-15 are the windows' dy = 0 / 1 pixels, so every thread holds all 4 pixels of one window for
// its filters and the pool is again a max over its own registers. A is gathered from the patch (a tap is an
// offset, from a table in shared memory); B comes pre-split into tf32 hi/lo fragments from the
// host, one float4 per lane and n-tile. Each product is a_lo*b_hi + a_hi*b_lo + a_hi*b_hi with
// a = a_hi + a_lo, b = b_hi + b_lo split into tf32 parts: about FP32 accuracy (what is dropped is
// ~2^-20 relative) at tensor-core speed.

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

// GPW groups of 8 windows per warp (the tile's 256 windows over 32 / GPW warps). 2 (16 warps of
// at most 128 registers) was tried for more than 16 filters, against 8 warps of ~190 registers:
// as fast alone (conv2 364 vs 356 us) but 0.8 ms slower over 50000 CIFAR images on three
// streams, so 4 for all.
template <int NT>
constexpr int tc_gpw() {
  return 4;
}
template <int NT>
constexpr int tc_threads() {
  return 32 * 32 / tc_gpw<NT>();
}

// Two blocks per SM (128 registers) only where the accumulators fit: at most 16 filters with a
// flush every k-step.
// PK (FP32 only): the last n-tile holds at most 4 filters, its B columns 0-3 their tf32 high
// parts and 4-7 their low parts (implicit_weights_tc), so two products (a_hi and a_lo times
// that B) give all of a_hi*b_hi + a_lo*b_hi + a_hi*b_lo + a_lo*b_lo once columns c and c + 4
// are added in the epilogue: 2 mma for that n-tile instead of 3 (conv2 and conv3 of the CIFAR
// net: 20 filters, 8 mma per k-step instead of 9).
template <int NT, bool U8, int PREC, int FL, bool PK>
__global__ void __launch_bounds__(tc_threads<NT>(), NT <= 2 && FL == 1 ? 2 : 1)
    conv_tc_pool_kernel(ImplArgs a) {
  static_assert(!PK || PREC == kTcFp32, "packed low parts are a 3xTF32 layout");
  static_assert(PREC != kTcX16 || (U8 && FL == 1), "exact products need the uint8 input");
  constexpr int GPW = tc_gpw<NT>(), TPB = tc_threads<NT>();
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  __shared__ float bias_s[NT * 8];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int plane = a.patch_h * a.pitch;
  const int patch_img = a.CB * plane;
  const int khkw = a.KH * a.KW;
  unsigned* raw = reinterpret_cast<unsigned*>(smem + 2 * a.stage_floats);
  int* tab = reinterpret_cast<int*>(smem + 2 * a.stage_floats + (U8 ? kU8Words * kThreads : 0));
  for (int k = tid; k < a.k_pad; k += TPB) {  // tap k -> its offset in the patch (chunk-relative below)
    int v = 0;
    if (k < a.K) {
      const int c = k / khkw, t = k - c * khkw, kh = t / a.KW;
      v = c * plane + kh * a.pitch + (t - kh * a.KW);
    }
    tab[k] = v;
  }
  if (tid < NT * 8) bias_s[tid] = tid < a.F ? a.bias[tid] : 0.f;

  // The thread's window in each of its warp's 4 groups: offset in the patch, place in the tile.
  // (Recomputing the place in the epilogue instead of keeping it spilled more: 12 bytes for the
  // 16-filter uint8 kernel at its 128-register bound instead of 4.)
  const int pw = a.OW >> 1, wins_img = (a.R >> 1) * pw, wins = a.G * wins_img;
  int woff[GPW];
  unsigned wplace[GPW];
#pragma unroll
  for (int q = 0; q < GPW; ++q) {
    const int w = (warp * GPW + q) * 8 + (lane >> 2);
    const int g = w / wins_img, pr = (w % wins_img) / pw, pc = w % pw;
    const bool ok = w < wins;
    woff[q] = (ok ? g * patch_img + 2 * pr * a.pitch + 2 * pc : 0) + a.xs;
    wplace[q] =
        ok ? static_cast<unsigned>(g) | static_cast<unsigned>(pr) << 10 | static_cast<unsigned>(pc) << 20
           : ~0u;
  }

  float acc[GPW][2][NT][4];
#pragma unroll
  for (int q = 0; q < GPW; ++q)
#pragma unroll
    for (int dx = 0; dx < 2; ++dx)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[q][dx][nt][i] = 0.f;

  int tile = blockIdx.x, chunk = 0, buf = 0;
  if (tile >= a.tiles) return;
  if (U8 || a.row_copy) {  // the padding is zeroed once: these stagings never write it
    for (int i = tid; i < a.patch_floats; i += TPB) smem[i] = smem[a.stage_floats + i] = 0.f;
    __syncthreads();
  }
  if (U8) {
    issue_weights<8>(a, smem, 0, 0, 0);
    issue_u8(a, raw, tile);
    cp_async_commit();
    cp_async_wait_all();
    store_u8(a, smem, tile, raw);
  } else {
    issue_stage<8>(a, smem, tile, 0, 0, 0);
  }
  for (;;) {
    int next_tile = tile, next_chunk = chunk + 1;
    if (next_chunk == a.chunks) next_chunk = 0, next_tile += gridDim.x;
    const bool has_next = next_tile < a.tiles;
    cp_async_wait_all();
    __syncthreads();
    if (has_next) {
      if (U8) {
        issue_weights<8>(a, smem, next_chunk, buf ^ 1, 0);
        issue_u8(a, raw, next_tile);
        cp_async_commit();
      } else {
        issue_stage<8>(a, smem, next_tile, next_chunk, buf ^ 1, 0);
      }
    }

    const float* patch = smem + buf * a.stage_floats;
    const float4* wsm = reinterpret_cast<const float4*>(patch + a.patch_floats);
    const int c0 = chunk * a.CB;
    const int kbeg = c0 * khkw, kend = min(a.C, c0 + a.CB) * khkw;
    const int ks0 = kbeg / 8, ks1 = (kend + 7) / 8;
    const int cshift = c0 * plane;
    // KSI k-steps of 8 per iteration: FP32 flushes its partial sums every FL k-steps, FP16,
    // BF16 and X16 take two per m16n8k16 product, TF32 one. A k-step past ks1 reads zeros (A
    // masked by v0/v1, or B set to zero: never stale shared memory, which could hold a NaN).
    // (X16 has one chunk whose taps past K have zero weights, and reads finite pixels there.)
    constexpr bool UNPRED = PREC == kTcFp32 || PREC == kTcX16;  // A loads without predicates
    constexpr int KSI = PREC == kTcFp32 ? FL : PREC == kTcTf32 ? 1 : 2;
#pragma unroll 1
    for (int ks = ks0; ks < ks1; ks += KSI) {
      int t0[KSI], t1[KSI];
      bool v0[KSI], v1[KSI];
      // B: per k-step and n-tile the lane's float4 {b0 hi, b1 hi, b0 lo, b1 lo} (FP32), {b0, b1}
      // rounded to tf32 (TF32), or {b0 b1 as a half2 / bfloat162} (FP16, BF16).
      float4 b[KSI][NT];
#pragma unroll
      for (int j = 0; j < KSI; ++j) {
        const int k0 = (ks + j) * 8 + (lane & 3), k1 = k0 + 4;
        v0[j] = k0 >= kbeg && k0 < kend, v1[j] = k1 >= kbeg && k1 < kend;
        t0[j] = v0[j] ? tab[k0] - cshift : 0, t1[j] = v1[j] ? tab[k1] - cshift : 0;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          float4 w = KSI == 1 || ks + j < ks1 ? wsm[((ks + j - ks0) * NT + nt) * 32 + lane]
                                              : make_float4(0.f, 0.f, 0.f, 0.f);
          // FP32: a tap outside this chunk gets a zero weight here, once per k-step, so that the
          // A loads below need no predicate (they read the window's own first pixel instead).
          // (The same for TF32 / FP16 cost more than it saved: 4.9 -> 5.2 ms, 4.55 -> 4.83.)
          if constexpr (PREC == kTcFp32) {
            if (!v0[j]) w.x = w.z = 0.f;
            if (!v1[j]) w.y = w.w = 0.f;
          }
          b[j][nt] = w;
        }
      }
#pragma unroll
      for (int q = 0; q < GPW; ++q)
#pragma unroll
        for (int dx = 0; dx < 2; ++dx) {
          const float* p = patch + woff[q] + dx;
          // The thread's A values of k-step j: rows g / g + 8 (the window's dy = 0 / 1 pixel),
          // taps k0 / k1. FP32: a tap outside the chunk reads offset 0 (a pixel of the patch,
          // finite unless the input is not) against its zero weight; otherwise it reads 0.
          float x[KSI][4];
#pragma unroll
          for (int j = 0; j < KSI; ++j) {
            if constexpr (UNPRED) {
              x[j][0] = p[t0[j]], x[j][1] = p[a.pitch + t0[j]];
              x[j][2] = p[t1[j]], x[j][3] = p[a.pitch + t1[j]];
            } else {
              x[j][0] = v0[j] ? p[t0[j]] : 0.f, x[j][1] = v0[j] ? p[a.pitch + t0[j]] : 0.f;
              x[j][2] = v1[j] ? p[t1[j]] : 0.f, x[j][3] = v1[j] ? p[a.pitch + t1[j]] : 0.f;
            }
          }
          if constexpr (PREC == kTcFp32) {
            // Each group of FL k-steps' three products per k-step go into a fresh partial sum
            // that is then added to the accumulator in FP32 (round to nearest). The tensor cores
            // round their sums toward zero: accumulating all 150-odd products of conv2 in the
            // mma accumulator itself let that bias add up to ~1e-5 relative (CIFAR-10
            // probabilities 1.01e-5 from PyTorch's, over tests/pytorch_crosscheck.py's 1e-5); a
            // partial over a few k-steps is small beside the total, so its truncation no longer
            // shows.
            float part[NT][4];
#pragma unroll
            for (int j = 0; j < KSI; ++j) {
              unsigned ah[4], al[4];
#pragma unroll
              for (int i = 0; i < 4; ++i) {
                ah[i] = tf32_hi(x[j][i]);
                al[i] = __float_as_uint(x[j][i] - __uint_as_float(ah[i]));
              }
#pragma unroll
              for (int nt = 0; nt < NT; ++nt) {
                const unsigned bh0 = __float_as_uint(b[j][nt].x), bh1 = __float_as_uint(b[j][nt].y);
                if (j == 0)
                  mma_tf32_first(part[nt], al, bh0, bh1);
                else
                  mma_tf32(part[nt], al, bh0, bh1);
              }
#pragma unroll
              for (int nt = 0; nt < (PK ? NT - 1 : NT); ++nt)
                mma_tf32(part[nt], ah, __float_as_uint(b[j][nt].z), __float_as_uint(b[j][nt].w));
#pragma unroll
              for (int nt = 0; nt < NT; ++nt)
                mma_tf32(part[nt], ah, __float_as_uint(b[j][nt].x), __float_as_uint(b[j][nt].y));
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
              for (int i = 0; i < 4; ++i) acc[q][dx][nt][i] += part[nt][i];
          } else if constexpr (PREC == kTcX16) {
            // The staged values are byte - offset, exact in FP16, and the weights come as two
            // FP16 parts (b.x high, b.y low; implicit_weights_x16): two exact-product m16n8k16
            // per 16 taps into a fresh partial sum, added in FP32 as above.
            unsigned af[4];
            a_frag16<kTcFp16>(x, af);
            float part[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
              mma_f16_first(part[nt], af, __float_as_uint(b[0][nt].y), __float_as_uint(b[1][nt].y));
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
              mma_16<kTcFp16>(part[nt], af, __float_as_uint(b[0][nt].x), __float_as_uint(b[1][nt].x));
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
              for (int i = 0; i < 4; ++i) acc[q][dx][nt][i] += part[nt][i];
          } else if constexpr (PREC == kTcTf32) {
            // One product, operands rounded to tf32 (to nearest), accumulated by the tensor
            // cores (their truncation is far below tf32's own rounding).
            unsigned ar[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) ar[i] = tf32_rn(x[0][i]);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
              mma_tf32(acc[q][dx][nt], ar, __float_as_uint(b[0][nt].x), __float_as_uint(b[0][nt].y));
          } else {
            // m16n8k16 over two k-steps of 8 (B is packed in a_frag16's k order).
            unsigned af[4];
            a_frag16<PREC>(x, af);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
              mma_16<PREC>(acc[q][dx][nt], af, __float_as_uint(b[0][nt].x), __float_as_uint(b[1][nt].x));
          }
        }
    }

    if (chunk == a.chunks - 1) {  // pool, bias, ReLU, store; start the next tile afresh
      const int group = fdiv(tile, a.div_row_tiles), rt = tile - group * a.row_tiles;
      const int img0 = group * a.G;
      const int ph = a.OH >> 1, pplane = ph * pw, pr0 = rt * (a.R >> 1);
#pragma unroll
      for (int q = 0; q < GPW; ++q) {
        const int g = wplace[q] & 1023, pr = (wplace[q] >> 10) & 1023, pc = wplace[q] >> 20;
        const bool ok = wplace[q] != ~0u && img0 + g < a.n && pr0 + pr < ph;
        float* out = a.y + (static_cast<int64_t>(img0 + g) * a.F) * pplane + (pr0 + pr) * pw + pc;
        if constexpr (PK)  // column c += column c + 4 (lane + 2 holds it), before the pool's max
#pragma unroll
          for (int dx = 0; dx < 2; ++dx)
#pragma unroll
            for (int i = 0; i < 4; ++i)
              acc[q][dx][NT - 1][i] += __shfl_xor_sync(0xffffffffu, acc[q][dx][NT - 1][i], 2);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int f = nt * 8 + 2 * (lane & 3) + h;
            const float m = fmaxf(fmaxf(acc[q][0][nt][h], acc[q][0][nt][2 + h]),
                                  fmaxf(acc[q][1][nt][h], acc[q][1][nt][2 + h]));
            const float v = (PREC == kTcX16 ? m * a.out_scale : m) + bias_s[f];
            const bool mine = !(PK && nt == NT - 1) || (lane & 3) < 2;  // PK: lanes of columns 0-3
            if (ok && mine && f < a.F) out[static_cast<int64_t>(f) * pplane] = fmaxf(v, 0.f);
          }
#pragma unroll
        for (int dx = 0; dx < 2; ++dx)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[q][dx][nt][i] = 0.f;
      }
    }
    if (!has_next) break;
    if (U8) {
      cp_async_wait_all();
      store_u8(a, smem + (buf ^ 1) * a.stage_floats, next_tile, raw);
    }
    tile = next_tile, chunk = next_chunk, buf ^= 1;
  }
}

// Whether the 3xTF32 weights of `filters` filters carry the last n-tile's low parts in its spare
// columns (PK above): at most 4 filters in that n-tile, and `pack` (ImplicitFusion::pack_low,
// off to measure it); the weights and the launch both ask here.
bool tc_packs_lo(int64_t filters, bool pack) { return pack && filters > 0 && (filters - 1) % 8 < 4; }

int sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    return v;
  }();
  return n;
}

// Resident thread blocks per SM for one instantiation and shared-memory size (cached: the
// persistent grid is sized from it).
template <int BM, int KWT, int EPI, bool U8>
int blocks_per_sm(size_t smem) {
  static std::mutex mu;
  static std::map<size_t, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(smem);
  if (it != cache.end()) return it->second;
  auto kernel = conv_implicit_kernel<BM, KWT, EPI, U8>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(2 * kStageBudget + kU8Words * kThreads * 4 + 64)));
  int blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, smem));
  if (blocks < 1)
    throw Error("implicit convolution: the kernel does not fit on an SM with " + std::to_string(smem) +
                " bytes of shared memory");
  cache[smem] = blocks;
  return blocks;
}

template <int NT, bool U8, int PREC, int FL, bool PK = false>
void launch_tc(const ImplicitConfig& cfg, const ImplArgs& a, cudaStream_t s) {
  static std::mutex mu;
  static std::map<size_t, int> cache;
  auto kernel = conv_tc_pool_kernel<NT, U8, PREC, FL, PK>;
  int blocks = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(cfg.smem);
    if (it == cache.end()) {
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kTcSmemMax));
      CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, tc_threads<NT>(), cfg.smem));
      if (blocks < 1) throw Error("implicit convolution (tensor cores): the kernel does not fit on an SM");
      cache[cfg.smem] = blocks;
    } else {
      blocks = it->second;
    }
  }
  const int64_t gx = std::min<int64_t>(a.tiles, static_cast<int64_t>(blocks) * sm_count());
  kernel<<<static_cast<unsigned>(gx), tc_threads<NT>(), cfg.smem, s>>>(a);
  CUDA_CHECK_LAUNCH("conv_tc_pool_kernel");
}

// FP32 flushes its partial sums every 2 k-steps where there are more than 8 filters (H200, 50000
// CIFAR images, input resident: 8.66 -> 8.39 ms with the 16-filter kernel at one block per SM,
// where its 128-register bound for two had it spill), else every k-step.
template <int NT>
constexpr int tc_flush() {
  return NT >= 2 ? 2 : 1;
}

template <int NT, bool U8>
void launch_tc_prec(const ImplicitConfig& cfg, const ImplArgs& a, cudaStream_t s) {
  switch (cfg.fuse.precision) {
    case Precision::kTf32:
      return launch_tc<NT, U8, kTcTf32, 1>(cfg, a, s);
    case Precision::kFp16:
      return launch_tc<NT, U8, kTcFp16, 1>(cfg, a, s);
    case Precision::kBf16:
      return launch_tc<NT, U8, kTcBf16, 1>(cfg, a, s);
    case Precision::kFp32:
      break;
  }
  if (cfg.fuse.u8_exact) {
    if constexpr (U8) return launch_tc<NT, true, kTcX16, 1>(cfg, a, s);
    throw Error("implicit convolution: exact products need the uint8 input");
  }
  if (tc_packs_lo(a.F, cfg.fuse.pack_low)) return launch_tc<NT, U8, kTcFp32, tc_flush<NT>(), true>(cfg, a, s);
  launch_tc<NT, U8, kTcFp32, tc_flush<NT>(), false>(cfg, a, s);
}

void launch_tc_nt(const ImplicitConfig& cfg, const ImplArgs& a, cudaStream_t s) {
  const bool u8 = cfg.fuse.u8_input;
  switch (cfg.tc_nt) {
    case 1:
      return u8 ? launch_tc_prec<1, true>(cfg, a, s) : launch_tc_prec<1, false>(cfg, a, s);
    case 2:
      return u8 ? launch_tc_prec<2, true>(cfg, a, s) : launch_tc_prec<2, false>(cfg, a, s);
    case 3:
      return u8 ? launch_tc_prec<3, true>(cfg, a, s) : launch_tc_prec<3, false>(cfg, a, s);
    default:
      return u8 ? launch_tc_prec<4, true>(cfg, a, s) : launch_tc_prec<4, false>(cfg, a, s);
  }
}

template <int BM, int KWT, int EPI, bool U8>
void launch_kernel(const ImplicitConfig& cfg, const ImplArgs& a, cudaStream_t s) {
  const int64_t resident = static_cast<int64_t>(blocks_per_sm<BM, KWT, EPI, U8>(cfg.smem)) * sm_count();
  const int64_t gx = std::min<int64_t>(a.tiles, std::max<int64_t>(1, resident / cfg.m_tiles));
  dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(cfg.m_tiles));
  conv_implicit_kernel<BM, KWT, EPI, U8><<<grid, kThreads, cfg.smem, s>>>(a);
  CUDA_CHECK_LAUNCH("conv_implicit_kernel");
}

template <int BM, int EPI, bool U8>
void launch_kw(const ImplicitConfig& cfg, const ImplArgs& a, cudaStream_t s) {
  if (a.KW == 3)
    launch_kernel<BM, 3, EPI, U8>(cfg, a, s);
  else if (a.KW == 5)
    launch_kernel<BM, 5, EPI, U8>(cfg, a, s);
  else
    launch_kernel<BM, 0, EPI, U8>(cfg, a, s);
}

template <int BM, int EPI>
void launch_u8(const ImplicitConfig& cfg, const ImplArgs& a, cudaStream_t s) {
  if (cfg.fuse.u8_input)
    launch_kw<BM, EPI, true>(cfg, a, s);
  else
    launch_kw<BM, EPI, false>(cfg, a, s);
}

template <int BM>
void launch_bm(const ImplicitConfig& cfg, const ImplArgs& a, int epi, cudaStream_t s) {
  if (epi == kEpiReluPool)
    launch_u8<BM, kEpiReluPool>(cfg, a, s);
  else if (epi == kEpiRelu)
    launch_u8<BM, kEpiRelu>(cfg, a, s);
  else
    launch_u8<BM, kEpiNone>(cfg, a, s);
}

// Shared-memory wavefronts of the first warp's pixel loads for a patch pitch: without the pool
// one 4-byte load per lane; with it one 8-byte load per lane, served as two half-warps.
int pixel_wavefronts(bool pool, const ConvParams& p, int g, int r, int ow, int pitch, int patch_img, int xs) {
  std::vector<int64_t> words;  // (phase, word) pairs flattened
  int total = 0;
  auto count = [&](const std::vector<int64_t>& ws) {
    std::map<int, std::vector<int64_t>> bank;
    for (int64_t w : ws) {
      auto& v = bank[static_cast<int>(w % 32)];
      if (std::find(v.begin(), v.end(), w) == v.end()) v.push_back(w);
    }
    size_t worst = 0;
    for (auto& kv : bank) worst = std::max(worst, kv.second.size());
    return static_cast<int>(worst);
  };
  if (pool) {
    const int pw = ow / 2, wins_img = (r / 2) * pw;
    for (int phase = 0; phase < 2; ++phase) {
      words.clear();
      for (int lane = phase * 16; lane < phase * 16 + 16; ++lane) {
        if (lane >= g * wins_img) break;
        const int64_t o = static_cast<int64_t>(lane / wins_img) * patch_img +
                          2 * ((lane % wins_img) / pw) * pitch + 2 * (lane % pw) + xs;
        words.push_back(o);
        words.push_back(o + 1);
      }
      total += count(words);
    }
  } else {
    words.clear();
    for (int q = 0; q < 32 && q < g * r * ow; ++q)
      words.push_back(static_cast<int64_t>(q / (r * ow)) * patch_img + ((q / ow) % r) * p.stride_h * pitch +
                      (q % ow) * p.stride_w + xs);
    total = count(words);
  }
  return total;
}

}  // namespace

int implicit_bm(int64_t filters) {
  if (filters > 24) return 32;  // more filters: several thread blocks along M
  int bm = static_cast<int>((filters + 3) / 4 * 4);
  return bm < 8 ? 8 : bm;
}

ImplicitConfig implicit_config_uncached(const ConvParams& p, int64_t n, ImplicitFusion fuse);

// The executor asks for a config at every launch (and auto times launches, host work included);
// the pitch search simulates bank conflicts with small maps, so configs are kept by their inputs.
ImplicitConfig implicit_config(const ConvParams& p, int64_t n, ImplicitFusion fuse) {
  // Checked before the cache, whose key is the dense shape: the kernel's patch and tap offsets
  // are for dense, undilated convolutions.
  if (p.groups != 1 || p.dilated()) {
    ImplicitConfig c;
    c.fuse = fuse;
    c.why = p.groups != 1 ? "grouped convolution (" + std::to_string(p.groups) +
                                " groups): the implicit kernel computes dense convolutions only"
                          : "dilated convolution (dilation " + std::to_string(p.dilation_h) + "x" +
                                std::to_string(p.dilation_w) + "): the implicit kernel's taps are adjacent";
    return c;
  }
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, int64_t, int>;
  const Key key{p.filters, p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w,
                p.in_c,    p.in_h,     p.in_w,     p.out_h,    p.out_w,    n};
  const int flags = (fuse.relu_pool ? 1 : 0) | (fuse.u8_input ? 2 : 0) | (fuse.tensor_core ? 4 : 0) |
                    (fuse.row_copies ? 0 : 8);
  static std::mutex mu;
  static std::map<std::pair<Key, int>, ImplicitConfig> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find({key, flags});
    if (it != cache.end()) {
      ImplicitConfig c = it->second;
      c.fuse = fuse;  // the precision is not part of the shape
      return c;
    }
  }
  ImplicitConfig c = implicit_config_uncached(p, n, fuse);
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() > 4096) cache.clear();  // block sizes vary little; never grow without bound
  cache.emplace(std::make_pair(key, flags), c);
  return c;
}

ImplicitConfig implicit_config_uncached(const ConvParams& p, int64_t n, ImplicitFusion fuse) {
  ImplicitConfig c;
  c.fuse = fuse;
  c.bm = implicit_bm(p.filters);
  c.m_tiles = static_cast<int>((p.filters + c.bm - 1) / c.bm);
  const bool pool = fuse.relu_pool;
  const int64_t khkw = p.kernel_h * p.kernel_w, kk = p.in_c * khkw;
  if (fuse.tensor_core) {
    if (!pool || p.filters > 32 || kk > kTcMaxK) {
      c.why = "the tensor-core kernel is for the fused pool, at most 32 filters and " +
              std::to_string(kTcMaxK) + " taps";
      return c;
    }
    c.tc_nt = static_cast<int>((p.filters + 7) / 8);
    c.k_pad = static_cast<int>((kk + 7) / 8 * 8);
    c.bm = c.tc_nt * 8;
    c.m_tiles = 1;
  }
  int64_t oh = p.out_h, ow = p.out_w;
  int64_t g = 1, r = oh;
  if (pool) {
    if (p.stride_h != 1 || p.stride_w != 1) {
      c.why = "the fused max-pool needs a stride-1 convolution";
      return c;
    }
    oh = oh / 2 * 2, ow = ow / 2 * 2;  // the pool floors: an odd last row/column is never read
    if (oh < 2 || ow < 2) {
      c.why = "output too small for a 2x2 pool";
      return c;
    }
    if (ow / 2 > kTileWindows) {
      c.why = "pooled rows of " + std::to_string(ow / 2) + " exceed the kernel's tile of " +
              std::to_string(kTileWindows) + " windows";
      return c;
    }
    const int64_t wins = (oh / 2) * (ow / 2);
    if (wins >= kTileWindows)
      r = 2 * std::min<int64_t>(oh / 2, kTileWindows / (ow / 2));
    else
      g = std::max<int64_t>(1, std::min<int64_t>(kTileWindows / wins, n));
  } else {
    if (ow > kTilePixels) {
      c.why = "output rows of " + std::to_string(ow) + " pixels exceed the kernel's tile of " +
              std::to_string(kTilePixels);
      return c;
    }
    const int64_t pix = oh * ow;
    if (pix >= kTilePixels)
      r = std::min<int64_t>(oh, kTilePixels / ow);
    else
      g = std::max<int64_t>(1, std::min<int64_t>(kTilePixels / pix, n));
  }
  // Weights per channel in a stage; tensor cores: hi and lo per tap and filter, plus the k-steps
  // of 8 that straddle a chunk's ends (one at each end).
  const size_t taps_bytes = static_cast<size_t>(khkw * c.bm) * sizeof(float) * (c.tc_nt ? 2 : 1);
  const size_t budget = (c.tc_nt >= 3 ? kTcStageBudget : kStageBudget) -
                        (c.tc_nt ? static_cast<size_t>(2 * c.tc_nt * 128) * sizeof(float) : 0);
  // Tensor cores: a k-step of 8 taps that straddles two chunks runs in both (conv2 of the CIFAR
  // net in 3-channel chunks ran 62 k-steps where 50 do), so the chunk size with the fewest
  // k-steps in all wins.
  auto ksteps = [&](int64_t cb) {
    int64_t t = 0;
    for (int64_t c0 = 0; c0 < p.in_c; c0 += cb)
      t += (std::min<int64_t>(p.in_c, c0 + cb) * khkw + 7) / 8 - c0 * khkw / 8;
    return t;
  };
  for (;;) {
    const int64_t ph = (r - 1) * p.stride_h + p.kernel_h, pw = (ow - 1) * p.stride_w + p.kernel_w;
    // The pitch: at least the patch width (even with the pool: its float2 loads), the candidate
    // with the fewest bank conflicts for the first warp, the narrowest of those.
    int64_t best_pitch = 0, best_cb = 0;
    int best_wf = 1 << 30;
    // Whole images per tile and rows of a multiple of 4 floats: the stages copy input rows 16
    // bytes at a time to a column xs + PW that is a multiple of 4 (the padding is zeroed once).
    const int64_t xs = (4 - p.pad_w % 4) % 4;
    const bool row_copy =
        !fuse.u8_input && r >= oh && p.in_w % 4 == 0 && (!pool || xs % 2 == 0) && fuse.row_copies;
    const int64_t need_w = std::max<int64_t>(pool ? (pw + 1) / 2 * 2 : pw, row_copy ? p.pad_w + p.in_w : 0);
    const int64_t pitch0 = row_copy ? (xs + need_w + 3) / 4 * 4 : need_w;
    // (A search for the tensor-core kernel's own load pattern, over any pitch, found pitches with
    // fewer simulated conflicts that ran 30 % slower: reverted, see docs/performance.md.)
    for (int k = 0; k < 16; ++k) {
      const int64_t pitch = pitch0 + (row_copy ? 4 * k : pool ? 2 * k : k);
      const size_t per_c = static_cast<size_t>(g * ph * pitch) * sizeof(float) + taps_bytes;
      int64_t cb = std::min<int64_t>(p.in_c, static_cast<int64_t>((budget - 16) / per_c));
      if (cb < 1) break;
      if (c.tc_nt && cb < p.in_c) {
        int64_t best = cb;
        for (int64_t x = cb - 1; x >= 1; --x)
          if (ksteps(x) < ksteps(best)) best = x;
        cb = best;  // the last chunk may be the short one
      } else {
        const int64_t chunks = (p.in_c + cb - 1) / cb;
        cb = (p.in_c + chunks - 1) / chunks;  // even chunks
      }
      const int wf = pixel_wavefronts(pool, p, static_cast<int>(g), static_cast<int>(r), static_cast<int>(ow),
                                      static_cast<int>(pitch), static_cast<int>(cb * ph * pitch),
                                      row_copy ? static_cast<int>(xs) : 0);
      if (wf < best_wf) best_wf = wf, best_pitch = pitch, best_cb = cb;
    }
    // uint8 input: all channels in one stage and at most 4 KiB of pixels per tile; fewer images
    // per tile until that holds, so whether it fuses does not depend on n.
    const bool u8_short =
        fuse.u8_input && (best_cb < p.in_c || g * p.in_c * p.in_h * p.in_w > 4 * kU8Words * kThreads);
    if (best_cb >= 1 && !(u8_short && g > 1)) {
      const int64_t cb = best_cb, pitch = best_pitch;
      c.images = static_cast<int>(g);
      c.rows = static_cast<int>(r);
      c.row_tiles = static_cast<int>((oh + r - 1) / r);
      c.out_h = static_cast<int>(oh);
      c.out_w = static_cast<int>(ow);
      c.chunk_c = static_cast<int>(cb);
      c.patch_h = static_cast<int>(ph);
      c.patch_w = static_cast<int>(pw);
      c.pitch = static_cast<int>(pitch);
      c.row_copy = row_copy;
      c.xs = row_copy ? static_cast<int>(xs) : 0;
      c.patch_floats = static_cast<int>((g * cb * ph * pitch + 3) / 4 * 4);
      c.stage_floats = c.patch_floats + static_cast<int>(c.tc_nt ? ((cb * khkw + 7) / 8 + 1) * c.tc_nt * 128
                                                                 : cb * khkw * c.bm);
      c.smem = 2 * static_cast<size_t>(c.stage_floats) * sizeof(float) +
               (fuse.u8_input ? static_cast<size_t>(kU8Words * kThreads) * 4 : 0) +
               static_cast<size_t>(c.k_pad) * sizeof(int);
      c.chunks = static_cast<int>((p.in_c + cb - 1) / cb);
      c.grid_x = (n + g - 1) / g * c.row_tiles;  // tiles
      c.ok = true;
      if (c.grid_x > 0x7fffffff) {
        c.ok = false;
        c.why = "grid too large";
      }
      if (c.ok && fuse.u8_input) {
        if (c.row_tiles != 1 || c.chunks != 1)
          c.ok = false, c.why = "uint8 input needs whole images and all channels in one tile";
        else if (p.in_w % 4 != 0)
          c.ok = false, c.why = "uint8 input needs an input width that is a multiple of 4";
        else if (g * p.in_c * p.in_h * p.in_w > 4 * kU8Words * kThreads)
          c.ok = false,
          c.why = "uint8 input: more than " + std::to_string(4 * kU8Words * kThreads) + " bytes per tile";
      }
      return c;
    }
    if (g > 1) {
      g = (g + 1) / 2;
    } else if (pool ? r > 2 : r > 1) {
      r = pool ? 2 * ((r / 2 + 1) / 2) : (r + 1) / 2;
    } else {
      c.why = "one input channel's patch for a single output row does not fit in " +
              std::to_string(kStageBudget / 1024) + " KiB of shared memory";
      return c;
    }
  }
}

// Round to tf32 as cvt.rna does: to nearest, ties away from zero, on the 13 low mantissa bits.
float round_tf32(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  b = (b + 0x1000u) & ~0x1fffu;
  std::memcpy(&x, &b, 4);
  return x;
}

// Two weights as the bits of a half2 / bfloat162 (pack2, the kernel's own packing of A), stored
// in a float of the weights array.
float pack_pair(Precision prec, float lo, float hi) {
  const uint32_t v = prec == Precision::kFp16 ? pack2<kTcFp16>(lo, hi) : pack2<kTcBf16>(lo, hi);
  float f;
  std::memcpy(&f, &v, 4);
  return f;
}

// The tensor-core kernel's B fragments, [k-steps][n-tiles][32 lanes] float4 (zeros unless
// filled): fill(o, t, g, kk) writes lane's float4 o of n-tile t, whose column (filter t * 8 + g)
// and k-step rows (taps kk[0] and kk[1] = kk[0] + 4) the mma's B layout gives it.
template <class Fill>
std::vector<float> tc_fragments(const ConvParams& p, Fill fill) {
  const int64_t k = p.in_c * p.kernel_h * p.kernel_w, ksteps = (k + 7) / 8, nt = (p.filters + 7) / 8;
  std::vector<float> out(static_cast<size_t>(ksteps * nt * 128), 0.f);
  for (int64_t ks = 0; ks < ksteps; ++ks)
    for (int64_t t = 0; t < nt; ++t)
      for (int lane = 0; lane < 32; ++lane) {
        const int64_t kk[2] = {ks * 8 + lane % 4, ks * 8 + lane % 4 + 4};
        fill(&out[static_cast<size_t>(((ks * nt + t) * 32 + lane) * 4)], t, lane / 4, kk);
      }
  return out;
}

std::vector<float> implicit_weights_tc(const ConvParams& p, const float* weight, Precision prec,
                                       bool pack_low) {
  const int64_t k = p.in_c * p.kernel_h * p.kernel_w, nt = (p.filters + 7) / 8;
  const bool pack_lo = tc_packs_lo(p.filters, pack_low);
  auto w = [&](int64_t f, int64_t kk) { return f < p.filters && kk < k ? weight[f * k + kk] : 0.f; };
  return tc_fragments(p, [&](float* o, int64_t t, int g, const int64_t(&kk)[2]) {
    const int64_t f = t * 8 + g;
    switch (prec) {
      case Precision::kFp32:
        if (pack_lo && t == nt - 1) {  // columns 0-3: filters' high parts; 4-7: their low parts
          for (int h = 0; h < 2; ++h) {
            const float v = w(t * 8 + g % 4, kk[h]);
            o[h] = g < 4 ? round_tf32(v) : round_tf32(v - round_tf32(v));
          }
          break;
        }
        for (int h = 0; h < 2; ++h) o[h] = round_tf32(w(f, kk[h])), o[2 + h] = round_tf32(w(f, kk[h]) - o[h]);
        break;
      case Precision::kTf32:
        o[0] = round_tf32(w(f, kk[0])), o[1] = round_tf32(w(f, kk[1]));
        break;
      case Precision::kFp16:
      case Precision::kBf16:
        o[0] = pack_pair(prec, w(f, kk[0]), w(f, kk[1]));
        break;
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Exact uint8 input (kTcX16).

bool exact_input_offsets(const std::vector<float>& scale, const std::vector<float>& shift,
                         std::vector<float>* offset) {
  if (scale.size() != shift.size() || scale.empty()) return false;
  std::vector<float> off(scale.size());
  for (size_t c = 0; c < scale.size(); ++c) {
    const double sc = scale[c], sh = shift[c];
    if (!std::isfinite(sc) || !std::isfinite(sh) || sc == 0) return false;
    const double o_true = -sh / sc;                   // byte * sc + sh == sc * (byte - o_true)
    const double o = std::nearbyint(o_true * 8) / 8;  // a multiple of 1/8: bytes - o stay in 11 bits
    double big = 0;
    for (int b = 0; b < 256; ++b) {
      const float v = static_cast<float>(b - o);  // exact in FP16 (and so in FP32)?
      if (v != b - o || __half2float(__float2half_rn(v)) != v) return false;
      big = std::max(big, std::fabs(b - o_true));
    }
    // What moving the offset changes is below the FP32 rounding of the largest inputs.
    if (std::fabs(o - o_true) > std::ldexp(big, -22)) return false;
    off[c] = static_cast<float>(o);
  }
  if (offset) *offset = off;
  return true;
}

std::vector<float> implicit_weights_x16(const ConvParams& p, const float* weight,
                                        const std::vector<float>& scale, float* out_scale) {
  const int64_t khkw = p.kernel_h * p.kernel_w, k = p.in_c * khkw;
  if (static_cast<int64_t>(scale.size()) != p.in_c) return {};
  auto scaled = [&](int64_t f, int64_t kk) {  // weight times its channel's scale, 0 past the ends
    return f < p.filters && kk < k
               ? static_cast<double>(weight[f * k + kk]) * scale[static_cast<size_t>(kk / khkw)]
               : 0.0;
  };
  double big = 0;
  for (int64_t f = 0; f < p.filters; ++f)
    for (int64_t kk = 0; kk < k; ++kk) {
      const double v = scaled(f, kk);
      if (!std::isfinite(v)) return {};
      big = std::max(big, std::fabs(v));
    }
  // The largest weight near 2^14: every high part a normal FP16, low parts normal down to
  // weights 2^-17 of it, and no product or 16-tap sum near FP16's or FP32's range limits
  // (|byte - offset| < 2048 and the sums are kept in FP32).
  int e = 0;
  if (big > 0) std::frexp(big, &e);
  const int sh = 14 - e;
  if (sh < -100 || sh > 100) return {};
  if (out_scale) *out_scale = std::ldexp(1.f, -sh);
  return tc_fragments(p, [&](float* o, int64_t t, int g, const int64_t(&kk)[2]) {
    float hi[2], lo[2];
    for (int h = 0; h < 2; ++h) {
      const double v = std::ldexp(scaled(t * 8 + g, kk[h]), sh);
      hi[h] = __half2float(__float2half_rn(static_cast<float>(v)));
      lo[h] = __half2float(__float2half_rn(static_cast<float>(v - hi[h])));
    }
    o[0] = pack_pair(Precision::kFp16, hi[0], hi[1]);
    o[1] = pack_pair(Precision::kFp16, lo[0], lo[1]);
  });
}

std::vector<float> implicit_weights(const ConvParams& p, const float* weight) {
  const int bm = implicit_bm(p.filters);
  const int64_t mt = (p.filters + bm - 1) / bm, k = p.in_c * p.kernel_h * p.kernel_w;
  std::vector<float> out(static_cast<size_t>(mt * k * bm), 0.f);
  for (int64_t f = 0; f < p.filters; ++f)
    for (int64_t kk = 0; kk < k; ++kk)
      out[static_cast<size_t>(((f / bm) * k + kk) * bm + f % bm)] = weight[f * k + kk];
  return out;
}

void launch_conv_implicit(const ImplicitConfig& cfg, const ConvParams& p, const ImplicitIo& io,
                          const float* wt, const float* bias, int64_t n, ActKind act, cudaStream_t s) {
  if (!cfg.ok) throw Error("implicit convolution: " + cfg.why);
  if (act != ActKind::kNone && act != ActKind::kRelu)
    throw Error(std::string("implicit convolution: only a ReLU is fused into the epilogue, not ") +
                act_name(act));
  if (cfg.fuse.relu_pool && act != ActKind::kRelu)
    throw Error("implicit convolution: the fused max-pool comes after a ReLU");
  if (cfg.fuse.u8_input ? (!io.x_u8 || !io.scale || !io.shift) : !io.x)
    throw Error("implicit convolution: no input");
  const int chw = static_cast<int>(p.in_c * p.in_h * p.in_w);
  ImplArgs a{io.x,
             io.x_u8,
             io.scale,
             io.shift,
             wt,
             bias,
             io.y,
             static_cast<int>(n),
             static_cast<int>(p.in_c),
             static_cast<int>(p.in_h),
             static_cast<int>(p.in_w),
             static_cast<int>(p.filters),
             static_cast<int>(p.kernel_h),
             static_cast<int>(p.kernel_w),
             static_cast<int>(p.stride_h),
             static_cast<int>(p.stride_w),
             static_cast<int>(p.pad_h),
             static_cast<int>(p.pad_w),
             cfg.out_h,
             cfg.out_w,
             cfg.images,
             cfg.rows,
             cfg.chunk_c,
             cfg.patch_h,
             cfg.pitch,
             cfg.row_tiles,
             static_cast<int>(p.in_c * p.kernel_h * p.kernel_w),
             static_cast<int>(cfg.grid_x),
             cfg.chunks,
             cfg.stage_floats,
             cfg.patch_floats,
             chw,
             cfg.xs,
             cfg.row_copy ? 1 : 0,
             cfg.tc_nt,
             cfg.k_pad,
             make_fastdiv(static_cast<unsigned>(cfg.pitch)),
             make_fastdiv(static_cast<unsigned>(cfg.patch_h)),
             make_fastdiv(static_cast<unsigned>(cfg.chunk_c)),
             make_fastdiv(static_cast<unsigned>(p.in_c - (cfg.chunks - 1) * cfg.chunk_c)),
             make_fastdiv(static_cast<unsigned>(cfg.row_tiles)),
             make_fastdiv(static_cast<unsigned>(chw)),
             make_fastdiv(static_cast<unsigned>(p.in_h * p.in_w)),
             make_fastdiv(static_cast<unsigned>(p.in_w)),
             make_fastdiv(static_cast<unsigned>(std::max<int64_t>(1, p.in_w / 4))),
             make_fastdiv(static_cast<unsigned>(p.in_h)),
             io.out_scale};
  const int epi = cfg.fuse.relu_pool ? kEpiReluPool : act == ActKind::kRelu ? kEpiRelu : kEpiNone;
  if (cfg.tc_nt) return launch_tc_nt(cfg, a, s);
  switch (cfg.bm) {
    case 8:
      launch_bm<8>(cfg, a, epi, s);
      break;
    case 12:
      launch_bm<12>(cfg, a, epi, s);
      break;
    case 16:
      launch_bm<16>(cfg, a, epi, s);
      break;
    case 20:
      launch_bm<20>(cfg, a, epi, s);
      break;
    case 24:
      launch_bm<24>(cfg, a, epi, s);
      break;
    case 32:
      launch_bm<32>(cfg, a, epi, s);
      break;
    default:
      throw Error("implicit convolution: no kernel for a tile of " + std::to_string(cfg.bm) + " filters");
  }
}

}  // namespace cnnrun::gpu
