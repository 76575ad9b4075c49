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
//   no index arithmetic: per tap, 4 scalar shared loads (one per pixel; consecutive threads read
//   consecutive pixels, so they are conflict-free for stride 1), BM/4 broadcast float4 loads of
//   the weights, and 4*BM FFMAs. With BM >= 16 the FFMAs dominate.
// - The kernel width is a template parameter for the common 3 and 5, so the kw loop unrolls and
//   its loads use immediate offsets; other widths take the runtime loop.
// - Bias and the activation are applied in the epilogue; each output value is written once,
//   coalesced along the output row.
#include <algorithm>

#include "engine/gpu/check.h"
#include "engine/gpu/conv2d_implicit.h"

namespace cnnrun::gpu {

namespace {

constexpr int kThreads = 256;
constexpr int kPix = 4;                              // output pixels per thread
constexpr int kTilePixels = kThreads * kPix;         // output pixels per thread block
constexpr size_t kSmemBudget = 48 * 1024;            // no opt-in needed; leaves room for 4 blocks/SM

struct ImplArgs {
  const float* x;
  const float* wt;
  const float* bias;
  float* y;
  int n, C, H, W, F, KH, KW, SH, SW, PH, PW, OH, OW;
  int G, R, CB, patch_h, patch_w, row_tiles, K;
  int act;
};

__device__ __forceinline__ float act_apply(int act, float v) {
  switch (act) {
    case static_cast<int>(ActKind::kRelu): return v > 0.f ? v : 0.f;
    case static_cast<int>(ActKind::kTanh): return tanhf(v);
    case static_cast<int>(ActKind::kSigmoid): return 1.f / (1.f + expf(-v));
    default: return v;
  }
}

template <int BM, int KWT>
__global__ void __launch_bounds__(kThreads, (BM <= 20 ? 2 : 1)) conv_implicit_kernel(ImplArgs a) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  const int kw_n = KWT > 0 ? KWT : a.KW;
  const int plane = a.patch_h * a.patch_w;
  const int patch_img = a.CB * plane;
  float* patch = smem;  // [G][CB][patch_h][patch_w]
  float* wsm = smem + ((a.G * patch_img + 3) & ~3);  // [CB*KH*KW][BM], 16-byte aligned

  const int tile = blockIdx.x;
  const int group = tile / a.row_tiles, rt = tile % a.row_tiles;
  const int img0 = group * a.G, oh0 = rt * a.R;
  const int mt = blockIdx.y;
  const int tid = threadIdx.x;
  const int rows_ow = a.R * a.OW;
  const int tile_pixels = a.G * rows_ow;

  int noff[kPix];
#pragma unroll
  for (int j = 0; j < kPix; ++j) {
    int q = tid + j * kThreads;
    noff[j] = 0;
    if (q < tile_pixels) {
      int g = q / rows_ow, r = (q / a.OW) % a.R, ox = q % a.OW;
      noff[j] = g * patch_img + r * a.SH * a.patch_w + ox * a.SW;
    }
  }

  float acc[BM][kPix];
#pragma unroll
  for (int m = 0; m < BM; ++m)
#pragma unroll
    for (int j = 0; j < kPix; ++j) acc[m][j] = 0.f;

  const int taps = a.KH * a.KW;
  const int warp = tid >> 5, lane = tid & 31;
  for (int c0 = 0; c0 < a.C; c0 += a.CB) {
    const int cb = min(a.CB, a.C - c0);
    __syncthreads();  // the previous chunk's readers are done
    // Stage the patch: one warp per patch row, so the row's decomposition is done once.
    const int patch_rows = a.G * cb * a.patch_h;
    for (int row = warp; row < patch_rows; row += kThreads / 32) {
      int py = row % a.patch_h, t = row / a.patch_h, c = t % cb, g = t / cb;
      int img = img0 + g, iy = oh0 * a.SH - a.PH + py;
      bool row_ok = img < a.n && iy >= 0 && iy < a.H;
      const float* src = a.x + ((static_cast<int64_t>(img) * a.C + c0 + c) * a.H + iy) * a.W;
      float* dst = patch + g * patch_img + c * plane + py * a.patch_w;
      for (int px = lane; px < a.patch_w; px += 32) {
        int ix = px - a.PW;
        dst[px] = (row_ok && ix >= 0 && ix < a.W) ? __ldg(src + ix) : 0.f;
      }
    }
    // Stage this chunk's weights: a contiguous slice of the rearranged weights.
    const float4* wsrc = reinterpret_cast<const float4*>(a.wt + (static_cast<int64_t>(mt) * a.K + c0 * taps) * BM);
    float4* wdst = reinterpret_cast<float4*>(wsm);
    for (int i = tid; i < cb * taps * BM / 4; i += kThreads) wdst[i] = __ldg(wsrc + i);
    __syncthreads();

    for (int c = 0; c < cb; ++c)
      for (int kh = 0; kh < a.KH; ++kh) {
        const float* prow = patch + c * plane + kh * a.patch_w;
        const float* wrow = wsm + (c * a.KH + kh) * kw_n * BM;
#pragma unroll
        for (int kw = 0; kw < kw_n; ++kw) {
          float b[kPix];
#pragma unroll
          for (int j = 0; j < kPix; ++j) b[j] = prow[noff[j] + kw];
#pragma unroll
          for (int m4 = 0; m4 < BM / 4; ++m4) {
            float4 w4 = *reinterpret_cast<const float4*>(wrow + kw * BM + m4 * 4);
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

  const int64_t out_plane = static_cast<int64_t>(a.OH) * a.OW;
#pragma unroll
  for (int j = 0; j < kPix; ++j) {
    int q = tid + j * kThreads;
    if (q >= tile_pixels) continue;
    int g = q / rows_ow, r = (q / a.OW) % a.R, ox = q % a.OW;
    int img = img0 + g, oy = oh0 + r;
    if (img >= a.n || oy >= a.OH) continue;
    float* dst = a.y + static_cast<int64_t>(img) * a.F * out_plane + static_cast<int64_t>(oy) * a.OW + ox;
#pragma unroll
    for (int m = 0; m < BM; ++m) {
      int f = mt * BM + m;
      if (f < a.F) dst[f * out_plane] = act_apply(a.act, acc[m][j] + __ldg(a.bias + f));
    }
  }
}

template <int BM>
void launch_bm(const ImplicitConfig& cfg, const ImplArgs& a, cudaStream_t s) {
  dim3 grid(static_cast<unsigned>(cfg.grid_x), static_cast<unsigned>(cfg.m_tiles));
  if (a.KW == 3) {
    conv_implicit_kernel<BM, 3><<<grid, kThreads, cfg.smem, s>>>(a);
  } else if (a.KW == 5) {
    conv_implicit_kernel<BM, 5><<<grid, kThreads, cfg.smem, s>>>(a);
  } else {
    conv_implicit_kernel<BM, 0><<<grid, kThreads, cfg.smem, s>>>(a);
  }
  CUDA_CHECK_LAUNCH("conv_implicit_kernel");
}

}  // namespace

int implicit_bm(int64_t filters) {
  if (filters > 24) return 32;  // more filters: several thread blocks along M
  int bm = static_cast<int>((filters + 3) / 4 * 4);
  return bm < 8 ? 8 : bm;
}

ImplicitConfig implicit_config(const ConvParams& p, int64_t n) {
  ImplicitConfig c;
  c.bm = implicit_bm(p.filters);
  c.m_tiles = static_cast<int>((p.filters + c.bm - 1) / c.bm);
  if (p.out_w > kTilePixels) {
    c.why = "output rows of " + std::to_string(p.out_w) + " pixels exceed the kernel's tile of " +
            std::to_string(kTilePixels);
    return c;
  }
  const int64_t pix = p.out_h * p.out_w;
  int64_t g = 1, r = p.out_h;
  if (pix >= kTilePixels) {
    r = std::min<int64_t>(p.out_h, kTilePixels / p.out_w);
  } else {
    g = std::max<int64_t>(1, std::min<int64_t>(kTilePixels / pix, n));
  }
  const size_t taps_bytes = static_cast<size_t>(p.kernel_h * p.kernel_w * c.bm) * sizeof(float);
  for (;;) {
    int64_t ph = (r - 1) * p.stride_h + p.kernel_h, pw = (p.out_w - 1) * p.stride_w + p.kernel_w;
    size_t per_c = static_cast<size_t>(g * ph * pw) * sizeof(float) + taps_bytes;
    int64_t cb = std::min<int64_t>(p.in_c, static_cast<int64_t>((kSmemBudget - 16) / per_c));
    if (cb >= 1) {
      int64_t chunks = (p.in_c + cb - 1) / cb;
      cb = (p.in_c + chunks - 1) / chunks;  // even chunks
      c.images = static_cast<int>(g);
      c.rows = static_cast<int>(r);
      c.row_tiles = static_cast<int>((p.out_h + r - 1) / r);
      c.chunk_c = static_cast<int>(cb);
      c.patch_h = static_cast<int>(ph);
      c.patch_w = static_cast<int>(pw);
      size_t patch = static_cast<size_t>((g * cb * ph * pw + 3) / 4 * 4) * sizeof(float);
      c.smem = patch + static_cast<size_t>(cb) * taps_bytes;
      c.grid_x = (n + g - 1) / g * c.row_tiles;
      c.ok = true;
      if (c.grid_x > 0x7fffffff) {
        c.ok = false;
        c.why = "grid too large";
      }
      return c;
    }
    if (g > 1) {
      g = (g + 1) / 2;
    } else if (r > 1) {
      r = (r + 1) / 2;
    } else {
      c.why = "one input channel's patch for a single output row does not fit in " +
              std::to_string(kSmemBudget / 1024) + " KiB of shared memory";
      return c;
    }
  }
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

void launch_conv_implicit(const ImplicitConfig& cfg, const ConvParams& p, const float* x, const float* wt,
                          const float* bias, float* y, int64_t n, ActKind act, cudaStream_t s) {
  if (!cfg.ok) throw Error("implicit convolution: " + cfg.why);
  ImplArgs a{x,
             wt,
             bias,
             y,
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
             static_cast<int>(p.out_h),
             static_cast<int>(p.out_w),
             cfg.images,
             cfg.rows,
             cfg.chunk_c,
             cfg.patch_h,
             cfg.patch_w,
             cfg.row_tiles,
             static_cast<int>(p.in_c * p.kernel_h * p.kernel_w),
             static_cast<int>(act)};
  switch (cfg.bm) {
    case 8: launch_bm<8>(cfg, a, s); break;
    case 12: launch_bm<12>(cfg, a, s); break;
    case 16: launch_bm<16>(cfg, a, s); break;
    case 20: launch_bm<20>(cfg, a, s); break;
    case 24: launch_bm<24>(cfg, a, s); break;
    case 32: launch_bm<32>(cfg, a, s); break;
    default: throw Error("implicit convolution: no kernel for a tile of " + std::to_string(cfg.bm) + " filters");
  }
}

}  // namespace cnnrun::gpu
