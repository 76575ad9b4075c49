// The `implicit` convolution: our own fused kernel that never writes the im2col matrix.
// The public API (CUTLASS's conv/device level); the code is in engine/gpu/implicit/, and
// implicit/launch.cu's opening comment says why it is shaped as it is.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/precision.h"
#include "engine/gpu/activation.h"
#include "engine/layers/activation.h"
#include "engine/layers/conv.h"

namespace cnnrun::gpu {

// What the kernel fuses around the convolution. Both are optional; implicit_config says
// whether a convolution and block size allow them (ok == false and why otherwise).
struct ImplicitFusion {
  // The activation, then a 2x2 stride-2 pool without padding: each thread's 4 pixels are one
  // pool window, and only the pooled values are written ([n, F, OH/2, OW/2], floor as the CPU
  // does: an odd last row or column of the convolution is never computed). Stride-1 only.
  // A max-pool after a ReLU; with avg_pool the average of the window's four activated values.
  bool pool = false;
  // With pool and tensor_core: the pool averages act(conv + bias) over its window (any
  // activation, summed in the CPU reference's order: row by row, then divided by 4), as after
  // LeNet-5's tanh. The FFMA kernel does not have it.
  bool avg_pool = false;
  // The input is the network's uint8 pixels ([n, C, H, W] bytes), normalised as
  // float(byte) * scale[c] + shift[c] while it is staged (padding stays 0, as after
  // normalisation). Needs whole images per tile, one channel chunk, and W % 4 == 0.
  bool u8_input = false;
  // With pool, at most 32 filters: the 3xTF32 tensor-core kernel (weights from
  // implicit_weights_tc) instead of FFMAs; about FP32 accuracy.
  bool tensor_core = false;
  // With tensor_core: the operands' format. FP32 is 3xTF32 as above; TF32 one product of
  // tf32-rounded operands; FP16 / BF16 m16n8k16 products; all accumulate in FP32.
  Precision precision = Precision::kFp32;
  // With u8_input, tensor_core and FP32: the bytes are staged as byte - offset[c], exact in FP16
  // (the ImplicitIo's scale is 1 and shift -offset, from exact_input_offsets), and the products
  // are FP16 m16n8k16 of those exact values and of the weights times the preprocessing scale in
  // two FP16 parts (implicit_weights_x16): 2 products per 16 taps instead of 3xTF32's 6, with
  // FP32-level results.
  bool u8_exact = false;
  // Stages may copy whole input rows 16 bytes at a time where the shape allows (GpuTuning's
  // `rows`; off: element by element, to measure what the copies gain).
  bool row_copies = true;
  // With tensor_core and FP32: the last n-tile's spare columns carry its low parts (GpuTuning's
  // `pack`); the weights must have been packed with the same value (implicit_weights_tc).
  bool pack_low = true;
};

// How one convolution is cut into thread blocks for a block of n images.
struct ImplicitConfig {
  bool ok = false;
  std::string why;  // when !ok: why the kernel cannot run this convolution
  ImplicitFusion fuse;
  int bm = 0;       // filters per thread block (every thread computes all of them)
  int m_tiles = 0;  // thread blocks along the filters
  int images = 0;   // images per thread block (G)
  int rows = 0;     // output rows per thread block (R; even with pool)
  int row_tiles = 0;
  int out_h = 0, out_w = 0;  // convolution outputs computed (pool: even, what the pool reads)
  int chunk_c = 0;           // input channels staged in shared memory at a time
  int chunks = 0;            // chunk_c-channel chunks per tile
  int patch_h = 0, patch_w = 0;
  int pitch = 0;                           // floats per patch row (>= patch_w; chosen against bank conflicts)
  bool row_copy = false;                   // stages copy whole input rows, 16 bytes at a time
  int tc_nt = 0, k_pad = 0;                // tensor cores: n-tiles of 8 filters; taps rounded up to 8
  int xs = 0;                              // patch column of input column -PW (row copies: alignment)
  int patch_floats = 0, stage_floats = 0;  // one stage buffer: patch, then weights
  size_t smem = 0;                         // dynamic shared memory bytes (two stage buffers)
  int64_t grid_x = 0;  // tiles along images x output rows (the persistent grid walks them)
};

ImplicitConfig implicit_config(const ConvParams& p, int64_t n, ImplicitFusion fuse = {});

// Weights rearranged for the kernel: [m_tiles][C*KH*KW][bm], zero-padded past the last filter,
// so a thread block copies its slice with contiguous 16-byte loads.
std::vector<float> implicit_weights(const ConvParams& p, const float* weight);
// For the tensor-core kernel: per k-step of 8 taps, n-tile of 8 filters and lane, a float4 with
// the lane's two B values (taps lane % 4 and lane % 4 + 4, filter lane / 4): for FP32 rounded to
// tf32 and then the two remainders, rounded too; for TF32 the two rounded; for FP16 / BF16 the
// pair as the bits of one half2 / bfloat162. [k-steps][n-tiles][32][4].
// FP32 with pack_low: where the last n-tile has at most 4 filters, its columns 4-7 hold the low
// parts of its columns 0-3 instead of zeros (one product fewer per k-step for that n-tile).
std::vector<float> implicit_weights_tc(const ConvParams& p, const float* weight, Precision prec,
                                       bool pack_low = true);

// For u8_exact: per input channel an offset o with byte - o exact in FP16 for every byte and
// scale * (byte - o) equal to byte * scale + shift up to a change below FP32 rounding (o a
// multiple of 1/8 within 2^-22 of the exact -shift/scale, relative to the largest |byte - o|).
// ConvNetJS's byte / 255 - 0.5 has one (127.5); mean/std normalisations usually do not.
bool exact_input_offsets(const std::vector<float>& scale, const std::vector<float>& shift,
                         std::vector<float>* offset);
// The weights for u8_exact, laid out as implicit_weights_tc's FP16 (one k-step per float4) with
// {high pair, low pair, 0, 0}: weight * scale[c] * 2^s in two FP16 parts, 2^s putting the largest
// near 2^14; *out_scale = 2^-s. Empty when the weights cannot be represented so.
std::vector<float> implicit_weights_x16(const ConvParams& p, const float* weight,
                                        const std::vector<float>& scale, float* out_scale);
int implicit_bm(int64_t filters);

// What the kernel reads and writes. x is float NCHW, or with fuse.u8_input x_u8 (bytes) with
// scale/shift (one per input channel, on the device). y is [n, F, OH, OW], or with
// fuse.pool the pooled [n, F, OH/2, OW/2].
struct ImplicitIo {
  const float* x = nullptr;
  const uint8_t* x_u8 = nullptr;
  const float* scale = nullptr;
  const float* shift = nullptr;
  float* y = nullptr;
  float out_scale = 1.f;  // fuse.u8_exact: what the accumulators are scaled by (implicit_weights_x16)
};

// y = act(conv(x) + bias) for n images, then the pool when cfg.fuse.pool; wt from
// implicit_weights() (or the tensor-core layouts); bias: `filters` values. act: identity or
// ReLU (the other activations run as their own pass after it), ReLU with the max-pool, any with
// the average pool.
void launch_conv_implicit(const ImplicitConfig& cfg, const ConvParams& p, const ImplicitIo& io,
                          const float* wt, const float* bias, int64_t n, const ActFn& act, cudaStream_t s);

}  // namespace cnnrun::gpu
