// What conv2d_cutlass.cu hands a CUTLASS kernel (engine/gpu/cutlass/fprop.cuh), in plain types:
// the translation units that include CUTLASS see this, CUTLASS and the engine's error checks only.
#pragma once

#include <cuda_runtime_api.h>

namespace cnnrun::gpu::cutlass_conv {

struct Problem {
  int n, in_h, in_w, in_c;  // input, NHWC
  int filters, kernel_h, kernel_w;
  int out_h, out_w;
  int pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w;
  const float* x;
  const float* wt;  // [filters][kernel_h][kernel_w][in_c]
  const float* bias;
  const float* z;  // residual, or null
  float* y;
  int y_c_stride;  // values between consecutive pixels of y and z (0: filters; more: a channel slice)
  float lo, hi;    // the activation as a clamp
};

// One function per tile (tile_*.cu); conv2d_cutlass.cu's table lists them.
void run_256x64x16_s4(const Problem& q, cudaStream_t s);
void run_128x128x16_s4(const Problem& q, cudaStream_t s);
void run_128x64x32_s3(const Problem& q, cudaStream_t s);
void run_128x64x16_s4(const Problem& q, cudaStream_t s);
void run_64x128x16_s4(const Problem& q, cudaStream_t s);
void run_64x64x16_s5(const Problem& q, cudaStream_t s);

}  // namespace cnnrun::gpu::cutlass_conv
