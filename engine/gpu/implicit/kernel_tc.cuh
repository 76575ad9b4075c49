// 3xTF32 tensor-core variant of the fused conv + ReLU + 2x2 max-pool (stride-1 convs, at most
// 32 filters); with AVG, conv + any activation + 2x2 average pool instead (LeNet-5's tanh). Same tiles,
// staging and patch as the FFMA kernel; only the arithmetic differs. The GEMM is M = pixels, N = filters
// (n-tiles of 8), K = taps (k-steps of 8), one mma.sync.m16n8k8 per (m-tile, n-tile, k-step) and term. Each
// warp owns GPW groups of 8 pool windows (a tile's 256 windows over 8 or 16 warps); a group is two m-tiles
// (window column dx = 0, 1) whose rows 0-7 / 8-15 are the windows' dy = 0 / 1 pixels, so every thread holds
// all 4 pixels of one window for its filters and the pool is again a max over its own registers. A is
// gathered from the patch (a tap is an offset, from a table in shared memory); B comes pre-split into tf32
// hi/lo fragments from the host, one float4 per lane and n-tile. Each product is a_lo*b_hi + a_hi*b_lo +
// a_hi*b_hi with a = a_hi + a_lo, b = b_hi + b_lo split into tf32 parts: about FP32 accuracy (what is dropped
// is ~2^-20 relative) at tensor-core speed.
#pragma once

#include "engine/gpu/activation.cuh"
#include "engine/gpu/implicit/args.cuh"
#include "engine/gpu/implicit/mma.cuh"
#include "engine/gpu/implicit/staging.cuh"

namespace cnnrun::gpu::implicit {

// GPW groups of 8 windows per warp (the tile's 256 windows over 32 / GPW warps): 4 for all. 2
// (16 warps of at most 128 registers) for more than 16 filters is as fast alone but slower over
// a whole run on three streams (docs/performance.md).
template <int NT>
constexpr int tc_gpw() {
  return 4;
}
template <int NT>
constexpr int tc_threads() {
  return 32 * 32 / tc_gpw<NT>();
}

// The average pool's window: act of each of its four values (x00, x01 the first row), summed
// row by row as the CPU's average pool sums them, divided by 4 (a multiply by 0.25: the same
// rounding). Not inlined: act_eval's eleven activations, inlined at each of the epilogue's
// unrolled filters, made the kernels' code half the binary. The call is dear (tanh through it
// made LeNet-5's conv1 1.5x slower than tanh_avg4 inline), so tanh, the activation the average
// pool's networks use, has its own inline path below.
static __device__ __noinline__ float act_avg4(int kind, float slope, float x00, float x01, float x10,
                                              float x11) {
  const Act k = static_cast<Act>(kind);
  const float s = __fadd_rn(
      __fadd_rn(__fadd_rn(act_eval(k, slope, x00), act_eval(k, slope, x01)), act_eval(k, slope, x10)),
      act_eval(k, slope, x11));
  return __fmul_rn(s, 0.25f);
}

// The same for tanh (LeNet-5's), inline: the four values' tanh interleave and there is no call or
// switch. The TF32, FP16 and BF16 kernels, whose operands are rounded to 11 bits or fewer, take
// the hardware's tanh.approx.f32 (tanh_approx: one instruction, about 2^-11 relative, within
// those precisions' validation tolerance of 16 such units); FP32 and exact products keep CUDA's
// accurate tanhf. Summed and divided as act_avg4.
template <int PREC>
__device__ __forceinline__ float tanh_avg4(float x00, float x01, float x10, float x11) {
  constexpr bool approx = PREC == kTcTf32 || PREC == kTcFp16 || PREC == kTcBf16;
  auto t = [](float x) { return approx ? tanh_approx(x) : tanhf(x); };
  const float s = __fadd_rn(__fadd_rn(__fadd_rn(t(x00), t(x01)), t(x10)), t(x11));
  return __fmul_rn(s, 0.25f);
}

// Two blocks per SM (128 registers) only where the accumulators fit: at most 16 filters with a
// flush every k-step; three (80 registers) for at most 8 filters (LeNet-5's conv1, a few bytes of
// spill in some variants: faster all the same, docs/performance.md, Session 25).
// PK (FP32 only): the last n-tile holds at most 4 filters, its B columns 0-3 their tf32 high
// parts and 4-7 their low parts (implicit_weights_tc), so two products (a_hi and a_lo times
// that B) give all of a_hi*b_hi + a_lo*b_hi + a_hi*b_lo + a_lo*b_lo once columns c and c + 4
// are added in the epilogue: 2 mma for that n-tile instead of 3 (conv2 and conv3 of the CIFAR
// net: 20 filters, 8 mma per k-step instead of 9).
// AVG: the average pool of act(accumulator + bias) over each window (tanh_avg4, else act_avg4).
template <int NT, bool U8, int PREC, int FL, bool PK, bool AVG>
__global__ void __launch_bounds__(tc_threads<NT>(), NT == 1 && FL == 1   ? 3
                                                    : NT <= 2 && FL == 1 ? 2
                                                                         : 1)
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
    issue_next_stage<8, U8>(a, smem, raw, has_next, next_tile, next_chunk, buf, 0);

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
          // (TF32 / FP16 keep the predicates: there the zeroing cost more than it saved.)
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

    if (chunk == a.chunks - 1) {  // pool, bias, activation, store; start the next tile afresh
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
            const bool mine = !(PK && nt == NT - 1) || (lane & 3) < 2;  // PK: lanes of columns 0-3
            if constexpr (AVG) {
              // acc[q][dx][nt][h + 2 * dy] is the window's pixel (dy, dx).
              auto px = [&](int dx, int dy) {
                const float m = acc[q][dx][nt][h + 2 * dy];
                return __fadd_rn(PREC == kTcX16 ? m * a.out_scale : m, bias_s[f]);
              };
              if (ok && mine && f < a.F)
                out[static_cast<int64_t>(f) * pplane] =
                    a.act == static_cast<int>(Act::kTanh)
                        ? tanh_avg4<PREC>(px(0, 0), px(1, 0), px(0, 1), px(1, 1))
                        : act_avg4(a.act, a.act_slope, px(0, 0), px(1, 0), px(0, 1), px(1, 1));
            } else {
              const float m = fmaxf(fmaxf(acc[q][0][nt][h], acc[q][0][nt][2 + h]),
                                    fmaxf(acc[q][1][nt][h], acc[q][1][nt][2 + h]));
              const float v = (PREC == kTcX16 ? m * a.out_scale : m) + bias_s[f];
              if (ok && mine && f < a.F) out[static_cast<int64_t>(f) * pplane] = fmaxf(v, 0.f);
            }
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
    finish_next_stage<U8>(a, smem, raw, next_tile, buf);
    tile = next_tile, chunk = next_chunk, buf ^= 1;
  }
}

}  // namespace cnnrun::gpu::implicit
