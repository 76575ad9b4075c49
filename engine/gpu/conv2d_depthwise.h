// The `depthwise` convolution: our own kernel for convolutions with groups == input channels
// (each filter reads one channel; filters a multiple of the channels, PyTorch's depthwise with a
// channel multiplier), any kernel size, stride, padding and dilation, with the bias and any
// ActFn applied in its epilogue.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "engine/gpu/activation.h"
#include "engine/gpu/nhwc.h"
#include "engine/layers/conv.h"

namespace cnnrun::gpu {

struct DepthwiseArgs {
  int channels = 0, filters = 0;  // filters = channels * multiplier; filter f reads channel f / multiplier
  int in_h = 0, in_w = 0, out_h = 0, out_w = 0;
  int kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1,
      dilation_w = 1;
};

// How the kernel tiles a layer: a thread block computes `rows` output rows of `planes`
// consecutive (image, filter) planes from an input patch staged in shared memory.
struct DepthwiseConfig {
  bool ok = false;
  std::string why;  // when !ok
  int planes = 0, rows = 0, row_tiles = 0;
  int patch_h = 0, patch_w = 0;
  size_t smem = 0;
};

// tile_outputs: about how many outputs a thread block computes (256 threads; a tuning knob,
// measured in docs/performance.md).
constexpr int kDepthwiseTileOutputs = 4096;
DepthwiseConfig depthwise_config(const DepthwiseArgs& a, int tile_outputs = kDepthwiseTileOutputs);

// A conv's arguments and tiling: cfg.ok false (with why) unless groups == channels and the
// filters are a multiple of them, and the tile fits. nhwc_ok: the channels-last kernel runs it
// (groups == channels and the filters a multiple of them; it needs no tile).
struct DepthwisePlan {
  DepthwiseArgs args;
  DepthwiseConfig cfg;
  bool nhwc_ok = false;
};
DepthwisePlan depthwise_plan(const ConvParams& p);

// y = act(conv(x) + bias) for n images: x [n, channels, in_h, in_w], w PyTorch's
// [filters, 1, kh, kw], bias `filters` values (may be null: zero), y [n, filters, out_h, out_w].
void launch_conv_depthwise(const DepthwiseConfig& cfg, const DepthwiseArgs& a, const float* x, const float* w,
                           const float* bias, float* y, int64_t n, ActFn act, cudaStream_t s);

// Channels last, in the run's storage format (--layout nhwc): x [n, in_h, in_w, channels] and
// y [n, out_h, out_w, filters] of T, w_taps the FP32 weights as [kh * kw][filters], bias FP32.
// A thread computes depthwise_nhwc_vector(a, t) consecutive filters of
// depthwise_nhwc_pixels(a, row_pixels) consecutive output pixels of a row, from 16-byte loads of
// the input pixels' channels (L1 and L2 serve the rows' reuse), in FP32, and rounds once when it
// stores, as the other channels-last kernels do.
// Where depthwise_nhwc_strip(a, t, strip_pixels) says so, a thread instead computes a strip:
// several filters of several consecutive output pixels of a row, with their weights in registers.
// Where depthwise_nhwc_tile(a, t, knobs) says so (before either), a block stages a tile's input
// patch in shared memory and each lane computes 2 filters of several pixels of a row from it.
// The kernels' tuning knobs, measured in docs/performance.md:
struct DepthwiseNhwcKnobs {
  int row_pixels = 1;    // the vector kernel's pixels a thread where the conv allows several
  int strip_pixels = 8;  // the strip kernel's most pixels a thread, 0 for never
  // The tile kernel's most shared memory a block, 0 for never: at FP32 storage (twice that at
  // stride 2), and at 16-bit storage, where 64 KiB (3 blocks an SM) ran EfficientNet-B0's and
  // MobileNetV2's depthwise layers 2-3 % faster than 46 KiB (4 blocks), up to 9 % at stride 2
  // (docs/performance.md, Session 42).
  size_t tile_smem = size_t(46) << 10;
  size_t tile_smem_16 = size_t(64) << 10;
  int tile_pixels = 4;           // the tile kernel's pixels a lane: 4 or 8
  bool tile_everywhere = false;  // the tile kernel wherever it can run, not only where it won
  bool tile_pack = true;         // the tile kernel's lane groups: several strips a warp in chunks
                                 // of 32 channels or fewer (else one, most lanes idle)
  // A tile of at most this many strips (rows x strips a row, 4 pixels a strip) runs in blocks of
  // 128 threads instead of 256 (0: never) where shared memory lets at least 1.5x as many blocks
  // onto an SM, each staging its own patch: more bytes in flight where a block's arithmetic is
  // short (7x7 maps, one tile each: docs/performance.md, Session 43).
  int small_tile_strips = 16;
  // The tile kernel's output rows a lane where depthwise_nhwc_tile allows two (16-bit storage, 3x3
  // windows of unit stride, blocks of 256 threads): 2, or 1 for never. Each staged row is loaded
  // and converted once for both rows whose windows hold it (docs/performance.md, Session 44).
  int tile_rows = 2;
  // The whole-plane mean in the strip and vector kernels too (DepthwiseMean), not only in the tile
  // kernel, where it won (in EfficientNet-B0 at bf16 the others' mean kernels were slower than
  // the plain kernel and the pool pass, docs/performance.md, Session 21)
  bool mean_everywhere = false;
  // Both storages' tile_smem at once (0: never the tile kernel).
  void set_tile_smem(size_t bytes) { tile_smem = tile_smem_16 = bytes; }
};
// The whole-plane average of the output (a squeeze-and-excitation block's pool, read from the
// same output by the pool pass otherwise), computed by the kernel as it stores: each thread block
// writes its filters' sums of its stored (rounded) outputs to `partial`, [n][slots][filters] FP32,
// then one small kernel adds each image's slots in slot order, divides by out_h * out_w and
// writes `out`, [n][filters] in the storage format. No atomics: the same inputs give the same
// bits. slots = depthwise_nhwc_mean_slots(a, t, k); partial null: no mean.
struct DepthwiseMean {
  float* partial = nullptr;
  void* out = nullptr;
};
void launch_conv_depthwise_nhwc(const DepthwiseArgs& a, const void* x, Storage t, const float* w_taps,
                                const float* bias, void* y, int64_t n, ActFn act, cudaStream_t s,
                                const DepthwiseNhwcKnobs& k = {}, const DepthwiseMean& mean = {});
// The thread blocks an image's outputs take in the kernel that launch_conv_depthwise_nhwc runs,
// (the vector and strip kernels with the mean: 8 output rows a block), which is how many partial
// sums of each filter the mean has; 0 where the mean is not computed there: where that kernel's
// partial sums would be more than a quarter of the output's bytes (maps of a few pixels: the pool
// pass reads less), where the conv is not 3x3 or 5x5 with one filter per
// channel, a multiple of 16 bytes of them a pixel, in the strip and vector kernels unless
// mean_everywhere, where the strip kernel has stride 2 (FP32), and
// where the kernel runs with knobs other than
// the defaults' pixels a thread (the variants instantiated with the mean). Independent of the
// images: a launch with the mean whose grid would pass CUDA's limits throws instead.
int depthwise_nhwc_mean_slots(const DepthwiseArgs& a, Storage t, const DepthwiseNhwcKnobs& k = {});
// The staged tile the tile kernel computes (smem 0 where it does not run): any storage, one
// filter per channel, channels a multiple of 8, 3x3 or 5x5 windows of equal stride 1 or 2 both
// ways, no dilation, and (unless tile_everywhere) where it was measured to win; tile_h x tile_w
// outputs of 64 channels a block, its input patch and the few pixels a row's last strip reads past
// it (tile_overreach) at most tile_smem_16 bytes of shared memory at 16-bit storage, tile_smem
// at FP32 (rows of half the outputs there, whose pixels take twice the bytes; twice tile_smem at
// stride 2). A
// grid beyond CUDA's limits (2^31 - 1 blocks of images x row tiles, 65535 of channel chunks x
// column tiles) runs the other kernels instead.
struct DepthwiseTile {
  int tile_h = 0, tile_w = 0, row_tiles = 0, col_tiles = 0, pixels = 0;
  size_t smem = 0;
  // A block's threads: 256, or 128 for a tile of few strips (DepthwiseNhwcKnobs::small_tile_strips).
  int threads = 256;
  int rows = 1;  // output rows a lane: 1, or 2 (DepthwiseNhwcKnobs::tile_rows)
};
DepthwiseTile depthwise_nhwc_tile(const DepthwiseArgs& a, Storage t, const DepthwiseNhwcKnobs& k = {});
// The strip a thread of the strip kernel computes, or pixels 0 where it does not run, as measured
// against the vector kernel (docs/performance.md). It needs one filter per channel, an even
// channel count, no dilation along the row, rows of 4 outputs or more and strip_pixels >= 4, and:
// - at FP32 storage: 3x3 or 5x5 windows of stride 1 or 2 along the row; 2 filters of 8, 7 or 4
//   pixels (at most strip_pixels), the one that wastes least of a row's last strip;
// - at 16-bit storage: 3x3 windows of stride 1 along the row and channels a multiple of 4;
//   4 filters of 4 pixels.
// A launch of 2^31 threads or more runs the vector kernel instead.
struct DepthwiseStrip {
  int filters = 0, pixels = 0;
};
DepthwiseStrip depthwise_nhwc_strip(const DepthwiseArgs& a, Storage t,
                                    int strip_pixels = DepthwiseNhwcKnobs{}.strip_pixels);
int depthwise_nhwc_vector(const DepthwiseArgs& a, Storage t);
// The pixels a thread computes: row_pixels (2 or 4) for 3x3 and 5x5 kernels with unit stride and
// dilation along the row (each window row's weights and input columns loaded once for them), else 1.
int depthwise_nhwc_pixels(const DepthwiseArgs& a, int row_pixels = DepthwiseNhwcKnobs{}.row_pixels);

}  // namespace cnnrun::gpu
