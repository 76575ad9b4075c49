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
//   the weights, and 4*BM FFMAs.
// - Staging is asynchronous (cp.async, zero-filling the padding) into two buffers, and the grid
//   is persistent: each thread block walks its tiles and channel chunks as one sequence of
//   stages and loads stage s+1 while it computes stage s.
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
#include <algorithm>
#include <map>
#include <mutex>

#include "engine/gpu/check.h"
#include "engine/gpu/conv2d_implicit.h"

namespace cnnrun::gpu {

namespace {

constexpr int kThreads = 256;
constexpr int kPix = 4;                       // output pixels per thread
constexpr int kTilePixels = kThreads * kPix;  // output pixels per tile (and each of G, R, OW < 1024)
constexpr size_t kStageBudget = 40 * 1024;    // shared memory per stage buffer (two of them)

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
  const float* wt;
  const float* bias;
  float* y;
  int n, C, H, W, F, KH, KW, SH, SW, PH, PW, OH, OW;
  int G, R, CB, patch_h, patch_w, row_tiles, K;
  int tiles, chunks, stage_floats, patch_floats;
  FastDiv div_pw, div_ph, div_cb, div_cb_last, div_row_tiles;
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
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Issues the copies of one stage (tile, channel chunk) into buffer `buf`; every thread commits
// one group, possibly empty, so the group counts agree. Element e of the stage's patch is
// ((g * cb + c) * patch_h + py) * patch_w + px: consecutive threads take consecutive elements
// (every lane busy however narrow the rows) and decode them with fast divisions.
template <int BM>
__device__ __forceinline__ void issue_stage(const ImplArgs& a, float* smem, int tile, int chunk, int buf,
                                            int mt) {
  float* patch = smem + buf * a.stage_floats;
  float* wsm = patch + a.patch_floats;
  const int group = fdiv(tile, a.div_row_tiles), rt = tile - group * a.row_tiles;
  const int img0 = group * a.G, iy0 = rt * a.R * a.SH - a.PH;
  const int c0 = chunk * a.CB;
  const bool last = chunk == a.chunks - 1;
  const int cb = last ? a.C - c0 : a.CB;
  const FastDiv& div_cb = last ? a.div_cb_last : a.div_cb;
  const int plane = a.patch_h * a.patch_w;
  const int total = a.G * cb * plane;
  const int gap = (a.CB - cb) * plane;  // a short last chunk leaves room in each image's slot
#pragma unroll 1                        // issued while the accumulators are live: unrolling would spill them
  for (int e = threadIdx.x; e < total; e += kThreads) {
    const int row = fdiv(e, a.div_pw), px = e - row * a.patch_w;
    const int t = fdiv(row, a.div_ph), py = row - t * a.patch_h;
    const int g = fdiv(t, div_cb), c = t - g * cb;
    const int img = img0 + g, iy = iy0 + py, ix = px - a.PW;
    const bool ok = img < a.n && iy >= 0 && iy < a.H && ix >= 0 && ix < a.W;
    const float* src = ok ? a.x + ((static_cast<int64_t>(img) * a.C + c0 + c) * a.H + iy) * a.W + ix : a.x;
    cp_async4(patch + e + g * gap, src, ok);
  }
  const int taps = a.KH * a.KW;
  const float4* wsrc =
      reinterpret_cast<const float4*>(a.wt + (static_cast<int64_t>(mt) * a.K + c0 * taps) * BM);
  float4* wdst = reinterpret_cast<float4*>(wsm);
  for (int i = threadIdx.x; i < cb * taps * BM / 4; i += kThreads) cp_async16(wdst + i, wsrc + i);
  cp_async_commit();
}

template <int BM, int KWT, bool RELU>
__global__ void __launch_bounds__(kThreads, (BM <= 16 || (BM == 20 && KWT != 3)) ? 2 : 1)
    conv_implicit_kernel(ImplArgs a) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  __shared__ float bias_s[BM];
  const int kw_n = KWT > 0 ? KWT : a.KW;
  const int plane = a.patch_h * a.patch_w;
  const int patch_img = a.CB * plane;
  const int mt = blockIdx.y;
  const int tid = threadIdx.x;
  const int rows_ow = a.R * a.OW;
  const int tile_pixels = a.G * rows_ow;

  // A pixel's offset in the patch, and its image, row and column in the tile, depend only on
  // its place in the tile: computed once, the place packed as g | r << 10 | ox << 20.
  int noff[kPix];
  unsigned place[kPix];
#pragma unroll
  for (int j = 0; j < kPix; ++j) {
    const int q = tid + j * kThreads;
    noff[j] = 0;
    place[j] = ~0u;
    if (q < tile_pixels) {
      const int g = q / rows_ow, r = (q / a.OW) % a.R, ox = q % a.OW;
      noff[j] = g * patch_img + r * a.SH * a.patch_w + ox * a.SW;
      place[j] = static_cast<unsigned>(g) | static_cast<unsigned>(r) << 10 | static_cast<unsigned>(ox) << 20;
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
  issue_stage<BM>(a, smem, tile, 0, 0, mt);
  for (;;) {
    int next_tile = tile, next_chunk = chunk + 1;
    if (next_chunk == a.chunks) next_chunk = 0, next_tile += gridDim.x;
    const bool has_next = next_tile < a.tiles;
    if (has_next) {
      issue_stage<BM>(a, smem, next_tile, next_chunk, buf ^ 1, mt);
      cp_async_wait<1>();  // this stage's group is done; the next one may still be in flight
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    const float* patch = smem + buf * a.stage_floats;
    const float* wsm = patch + a.patch_floats;
    const int cb = min(a.CB, a.C - chunk * a.CB);
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

    if (chunk == a.chunks - 1) {  // the tile's last chunk: write it out and start afresh
      const int group = fdiv(tile, a.div_row_tiles), rt = tile - group * a.row_tiles;
      const int img0 = group * a.G, oh0 = rt * a.R;
      const int out_plane = a.OH * a.OW;
      const int f_end = min(BM, a.F - mt * BM);
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
    if (!has_next) break;
    __syncthreads();  // all reads of this buffer are done before the next issue overwrites it
    tile = next_tile, chunk = next_chunk, buf ^= 1;
  }
}

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
template <int BM, int KWT, bool RELU>
int blocks_per_sm(size_t smem) {
  static std::mutex mu;
  static std::map<size_t, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(smem);
  if (it != cache.end()) return it->second;
  auto kernel = conv_implicit_kernel<BM, KWT, RELU>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(2 * kStageBudget + 64)));
  int blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, smem));
  if (blocks < 1)
    throw Error("implicit convolution: the kernel does not fit on an SM with " + std::to_string(smem) +
                " bytes of shared memory");
  cache[smem] = blocks;
  return blocks;
}

template <int BM, int KWT, bool RELU>
void launch_kernel(const ImplicitConfig& cfg, const ImplArgs& a, cudaStream_t s) {
  const int64_t resident = static_cast<int64_t>(blocks_per_sm<BM, KWT, RELU>(cfg.smem)) * sm_count();
  const int64_t gx = std::min<int64_t>(a.tiles, std::max<int64_t>(1, resident / cfg.m_tiles));
  dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(cfg.m_tiles));
  conv_implicit_kernel<BM, KWT, RELU><<<grid, kThreads, cfg.smem, s>>>(a);
  CUDA_CHECK_LAUNCH("conv_implicit_kernel");
}

template <int BM, bool RELU>
void launch_act(const ImplicitConfig& cfg, const ImplArgs& a, cudaStream_t s) {
  if (a.KW == 3)
    launch_kernel<BM, 3, RELU>(cfg, a, s);
  else if (a.KW == 5)
    launch_kernel<BM, 5, RELU>(cfg, a, s);
  else
    launch_kernel<BM, 0, RELU>(cfg, a, s);
}

template <int BM>
void launch_bm(const ImplicitConfig& cfg, const ImplArgs& a, bool relu, cudaStream_t s) {
  if (relu)
    launch_act<BM, true>(cfg, a, s);
  else
    launch_act<BM, false>(cfg, a, s);
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
    int64_t cb = std::min<int64_t>(p.in_c, static_cast<int64_t>((kStageBudget - 16) / per_c));
    if (cb >= 1) {
      int64_t chunks = (p.in_c + cb - 1) / cb;
      cb = (p.in_c + chunks - 1) / chunks;  // even chunks
      c.images = static_cast<int>(g);
      c.rows = static_cast<int>(r);
      c.row_tiles = static_cast<int>((p.out_h + r - 1) / r);
      c.chunk_c = static_cast<int>(cb);
      c.patch_h = static_cast<int>(ph);
      c.patch_w = static_cast<int>(pw);
      c.patch_floats = static_cast<int>((g * cb * ph * pw + 3) / 4 * 4);
      c.stage_floats = c.patch_floats + static_cast<int>(cb * p.kernel_h * p.kernel_w * c.bm);
      c.smem = 2 * static_cast<size_t>(c.stage_floats) * sizeof(float);
      c.chunks = static_cast<int>((p.in_c + cb - 1) / cb);
      c.grid_x = (n + g - 1) / g * c.row_tiles;  // tiles
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
              std::to_string(kStageBudget / 1024) + " KiB of shared memory";
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
  if (act != ActKind::kNone && act != ActKind::kRelu)
    throw Error(std::string("implicit convolution: only a ReLU is fused into the epilogue, not ") +
                act_name(act));
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
             static_cast<int>(cfg.grid_x),
             cfg.chunks,
             cfg.stage_floats,
             cfg.patch_floats,
             make_fastdiv(static_cast<unsigned>(cfg.patch_w)),
             make_fastdiv(static_cast<unsigned>(cfg.patch_h)),
             make_fastdiv(static_cast<unsigned>(cfg.chunk_c)),
             make_fastdiv(static_cast<unsigned>(p.in_c - (cfg.chunks - 1) * cfg.chunk_c)),
             make_fastdiv(static_cast<unsigned>(cfg.row_tiles))};
  const bool relu = act == ActKind::kRelu;
  switch (cfg.bm) {
    case 8:
      launch_bm<8>(cfg, a, relu, s);
      break;
    case 12:
      launch_bm<12>(cfg, a, relu, s);
      break;
    case 16:
      launch_bm<16>(cfg, a, relu, s);
      break;
    case 20:
      launch_bm<20>(cfg, a, relu, s);
      break;
    case 24:
      launch_bm<24>(cfg, a, relu, s);
      break;
    case 32:
      launch_bm<32>(cfg, a, relu, s);
      break;
    default:
      throw Error("implicit convolution: no kernel for a tile of " + std::to_string(cfg.bm) + " filters");
  }
}

}  // namespace cnnrun::gpu
