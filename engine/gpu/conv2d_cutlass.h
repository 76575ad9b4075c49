// The `cutlass` convolution: CUTLASS's implicit-GEMM forward convolution with FP32 operands on
// tensor cores as 3xTF32 (OpMultiplyAddFastF32: each operand split into a TF32 high part and a
// TF32 remainder, three products summed in FP32: FP32-level accuracy at tensor-core speed).
// Channels last, FP32 storage (--precision fp32 --layout nhwc). The bias, a residual add and a
// clamp-shaped activation (none, ReLU, ReLU6) run in its epilogue; any other activation is one
// pass after it. CUTLASS's own headers are seen by engine/gpu/cutlass/ alone.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "engine/core/precision.h"
#include "engine/gpu/activation.h"
#include "engine/layers/conv.h"

namespace cnnrun::gpu {

// Whether this build has CUTLASS (its headers from scripts/fetch_headers.sh); "" when it does,
// else why not.
std::string cutlass_missing();

// "" when the cutlass convolution computes this convolution for blocks of n images at precision
// `prec` in the layout given, else why not: FP32 channels last, groups 1, input channels and
// filters multiples of 4 (16-byte loads), one image's tensors and the filters under 2 GiB (a block
// whose tensors are larger runs as several launches).
std::string cutlass_cannot_run(const ConvParams& p, Precision prec, bool channels_last, int64_t n);

// The thread-block tiles built (each a kernel of its own; the executor times them per layer).
// "128x128x16/3" is a 128-pixel x 128-filter tile, 16 taps per step, 3 stages.
int cutlass_tiles();
const char* cutlass_tile_name(int tile);

// Whether `act` runs in the epilogue (identity, ReLU, ReLU6); any other activation is the
// caller's pass after a launch with ActFn{}.
bool cutlass_fuses(ActFn act);

// The fastest tile for this convolution on these buffers (as launch_conv_cutlass takes them):
// every tile run once, then timed 3 times on `s`, the least time kept. Throws Error when no tile
// runs it (CUTLASS's words). Not while `s` is being captured.
int cutlass_pick_tile(const ConvParams& p, int64_t n, const float* x, const float* w, const float* bias,
                      const float* z, float* y, ActFn act, cudaStream_t s, int64_t y_c_stride = 0);

// y = act(conv(x) + bias + z) for n images with tile `tile`: x [n, in_h, in_w, in_c], w
// [filters, kernel_h, kernel_w, in_c], y and z (may be null: no residual) [n, out_h, out_w,
// filters], all FP32, 16-byte aligned; bias `filters` values. act must be one cutlass_fuses
// accepts. y_c_stride > 0: y and z are a channel slice of wider tensors, that many values between
// consecutive pixels (a multiple of 4). Throws Error with CUTLASS's words when it refuses the
// problem.
void launch_conv_cutlass(int tile, const ConvParams& p, int64_t n, const float* x, const float* w,
                         const float* bias, const float* z, float* y, ActFn act, cudaStream_t s,
                         int64_t y_c_stride = 0);

// A conv whose leading filters read only their window's centre tap (their other taps all zero:
// merge_concat_convs centres a 1x1 branch in a 3x3 conv, engine/passes.h) runs as two launches
// into channel slices of its output: those filters as a 1x1 conv, the rest as the conv they are
// (3xTF32 is compute-bound: the zero taps cost what the others do; docs/performance.md). The
// count of those filters, or 0 where the split does not apply: groups 1, an odd window whose
// padding centres it (the 1x1 conv sees the same pixels, no padding), and both parts at least 4
// filters and multiples of 4. w: PyTorch's [filters][in_c][kernel_h][kernel_w].
int64_t cutlass_centre_split(const ConvParams& p, const float* w);
// The split's 1x1 conv: filters `centre`, a 1x1 window, no padding or dilation; the rest: the
// other filters.
ConvParams cutlass_centre_part(const ConvParams& p, int64_t centre);
ConvParams cutlass_rest_part(const ConvParams& p, int64_t centre);

}  // namespace cnnrun::gpu
