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
//
// Files, by level (as CUTLASS's conv/device, conv/kernel, conv/threadblock): the public API and
// the planner (../conv2d_implicit.h, config.cpp: implicit_config says whether and how a
// convolution runs, and why not), weight packing (weights.cu), the tiling constants
// (tiling.h), the argument block (args.cuh), staging (staging.cuh), the mma wrappers (mma.cuh),
// one file per kernel (kernel_ffma.cuh, kernel_tc.cuh), and this file: the launch, which picks
// the kernel's template instantiation for a config.
#include <map>
#include <mutex>
#include <string>

#include "engine/gpu/check.h"
#include "engine/gpu/conv2d_implicit.h"
#include "engine/gpu/implicit/kernel_ffma.cuh"
#include "engine/gpu/implicit/kernel_tc.cuh"

namespace cnnrun::gpu {

namespace implicit {

namespace {

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

template <int NT, bool U8, int PREC, int FL, bool PK, bool AVG>
void launch_tc(const ImplicitConfig& cfg, const ImplArgs& a, cudaStream_t s) {
  static std::mutex mu;
  static std::map<size_t, int> cache;
  auto kernel = conv_tc_pool_kernel<NT, U8, PREC, FL, PK, AVG>;
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

// FP32 flushes its partial sums every 2 k-steps where there are more than 8 filters (the 16-filter
// kernel then runs at one block per SM, where the 128-register bound of two had it spill), else
// every k-step. The measurements are in docs/performance.md.
template <int NT>
constexpr int tc_flush() {
  return NT >= 2 ? 2 : 1;
}

template <int NT, bool U8, bool AVG>
void launch_tc_prec(const ImplicitConfig& cfg, const ImplArgs& a, cudaStream_t s) {
  switch (cfg.fuse.precision) {
    case Precision::kTf32:
      return launch_tc<NT, U8, kTcTf32, 1, false, AVG>(cfg, a, s);
    case Precision::kFp16:
      return launch_tc<NT, U8, kTcFp16, 1, false, AVG>(cfg, a, s);
    case Precision::kBf16:
      return launch_tc<NT, U8, kTcBf16, 1, false, AVG>(cfg, a, s);
    case Precision::kFp32:
      break;
  }
  if (cfg.fuse.u8_exact) {
    if constexpr (U8) return launch_tc<NT, true, kTcX16, 1, false, AVG>(cfg, a, s);
    throw Error("implicit convolution: exact products need the uint8 input");
  }
  if (tc_packs_lo(a.F, cfg.fuse.pack_low))
    return launch_tc<NT, U8, kTcFp32, tc_flush<NT>(), true, AVG>(cfg, a, s);
  launch_tc<NT, U8, kTcFp32, tc_flush<NT>(), false, AVG>(cfg, a, s);
}

template <bool AVG>
void launch_tc_nt(const ImplicitConfig& cfg, const ImplArgs& a, cudaStream_t s) {
  const bool u8 = cfg.fuse.u8_input;
  switch (cfg.tc_nt) {
    case 1:
      return u8 ? launch_tc_prec<1, true, AVG>(cfg, a, s) : launch_tc_prec<1, false, AVG>(cfg, a, s);
    case 2:
      return u8 ? launch_tc_prec<2, true, AVG>(cfg, a, s) : launch_tc_prec<2, false, AVG>(cfg, a, s);
    case 3:
      return u8 ? launch_tc_prec<3, true, AVG>(cfg, a, s) : launch_tc_prec<3, false, AVG>(cfg, a, s);
    default:
      return u8 ? launch_tc_prec<4, true, AVG>(cfg, a, s) : launch_tc_prec<4, false, AVG>(cfg, a, s);
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

}  // namespace

}  // namespace implicit

void launch_conv_implicit(const ImplicitConfig& cfg, const ConvParams& p, const ImplicitIo& io,
                          const float* wt, const float* bias, int64_t n, const ActFn& act, cudaStream_t s) {
  using namespace implicit;
  if (!cfg.ok) throw Error("implicit convolution: " + cfg.why);
  const bool relu = act.kind == Act::kRelu;
  if (!cfg.fuse.avg_pool && !relu && act.kind != Act::kIdentity)
    throw Error("implicit convolution: only a ReLU is fused into the epilogue, not " + act_fn_name(act));
  if (cfg.fuse.pool && !cfg.fuse.avg_pool && !relu)
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
             io.out_scale,
             static_cast<int>(act.kind),
             act.slope};
  const int epi = cfg.fuse.pool ? kEpiReluPool : relu ? kEpiRelu : kEpiNone;
  if (cfg.tc_nt) return cfg.fuse.avg_pool ? launch_tc_nt<true>(cfg, a, s) : launch_tc_nt<false>(cfg, a, s);
  if (cfg.fuse.avg_pool)
    throw Error("implicit convolution: the fused average pool needs the tensor-core kernel");
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
