// The `gemm` convolution: a 1x1 conv of stride 1 without padding, channels last, is one matrix
// product: the n*H*W pixels' C channels times the K x C filters, one cuBLASLt matmul in the
// storage format (FP32 operands: FP32 compute at --precision fp32, TF32 at tf32; FP16/BF16
// operands: FP32 sums). The bias (in the storage format, as cuDNN's channels-last one), a
// residual add (cuBLASLt's C) and a ReLU run in its epilogue; any other activation is one pass
// after it.
//
// It can also fold a per-image channel scale into its filters, so that the scaled tensor never
// exists: a squeeze-and-excitation block's mul x * s (s: one value per image and channel) read
// only by this conv is conv(x * s) = (W diag(s_n)) x for image n. A kernel makes each image's
// filters W diag(s_n) (FP32 products, rounded once to the storage format) and the matmul runs as
// a strided batch, one image a member. That moves n*K*C values instead of the mul's pass over
// n*H*W*C twice, so the planner folds only where K <= H*W (engine/gpu/plan.h, Step::scale_layer).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "engine/core/precision.h"
#include "engine/gpu/gemm.h"
#include "engine/gpu/nhwc.h"
#include "engine/layers/conv.h"

namespace cnnrun::gpu {

// "" when the gemm convolution computes this convolution, else why not: channels last, a 1x1
// window, stride 1, no padding, no dilation, groups 1.
std::string gemm_cannot_run(const ConvParams& p, bool channels_last);

// out[i][k][c] = w[k][c] * scale[i][c] for images i < n, rounded once to `t`: w FP32 K x C, scale
// and out in `t` (scale: n x C, the channels-last 1x1 tensor of a per-channel mul input).
void launch_scale_weights(const float* w, const void* scale, Storage t, int64_t n, int64_t filters,
                          int64_t channels, void* out, cudaStream_t s);

struct GemmIo {
  const void* x = nullptr;     // n x H x W x C in the storage format
  const void* w = nullptr;     // K x C in the storage format (unused with a scale)
  const void* bias = nullptr;  // K values in the storage format
  const void* z = nullptr;     // a residual of y's shape, or null
  void* y = nullptr;           // n x H x W x K in the storage format
  // > 0: y is a channel slice of a wider tensor, y_ld values between consecutive pixels (a
  // concat's buffer, engine/gpu/plan.h Step::concat_step); not with a residual or a scale.
  int64_t y_ld = 0;
  // The folded scale (null: none): w_f32 the FP32 K x C filters, scale n x C in the storage
  // format, w_image room for n x K x C values of it.
  const float* w_f32 = nullptr;
  const void* scale = nullptr;
  void* w_image = nullptr;
};

class GemmConv {
 public:
  // y = (x * W^T + bias + z), then a ReLU when `relu`, for n images (io above). The matmul plan
  // is made on the first call for each block size, precision and fusion, and kept. Throws Error
  // when cuBLASLt offers no algorithm.
  void run(cublasLtHandle_t lt, const ConvParams& p, int64_t n, Precision prec, const GemmIo& io, bool relu,
           void* workspace, size_t workspace_bytes, cudaStream_t s);

 private:
  // (images, precision, per-image filters, residual, ReLU, y's pixel stride (0: K), y's alignment
  // in bytes (0: not a slice))
  std::map<std::tuple<int64_t, int, bool, bool, bool, int64_t, int>, std::unique_ptr<LtGemm>> plans_;
};

}  // namespace cnnrun::gpu
