// The channels-last passes (--layout nhwc): activations stored N x H x W x C in the run's storage
// format (FP16 for --precision fp16, BF16 for bf16, FP32 otherwise), the layout and formats
// tensor cores read without a transpose. cuDNN runs the convolutions in it (conv2d_cudnn.h);
// these kernels are everything around them: the preprocess that writes it, the bias and
// activation epilogue, the elementwise and windowed passes, the channel concat, and the
// conversion back to FP32 N x C x H x W where a fully-connected layer, a softmax, the argmax or
// the host reads a tensor. Every value is computed in FP32 as the NCHW kernels compute it
// (activation.cuh's formulas, the same pooling windows) and rounded once when it is stored.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "engine/core/precision.h"
#include "engine/gpu/activation.h"
#include "engine/gpu/pool2d.h"

namespace cnnrun::gpu {

enum class Storage { kF32, kF16, kBf16 };

// FP16 for Precision::kFp16, BF16 for kBf16, FP32 for the others.
Storage storage_of(Precision p);
int64_t storage_bytes(Storage t);  // 4 or 2
const char* storage_name(Storage t);

// out (n x plane x channels, T) = in (n x channels x plane, uint8) * scale[c] + shift[c], the
// product rounded before the add as launch_preprocess does.
void launch_preprocess_nhwc(const uint8_t* in, void* out, Storage t, int64_t n, int channels, int64_t plane,
                            const float* scale, const float* shift, cudaStream_t s);
// FP32 NCHW -> T NHWC and back (n images of channels x plane).
void launch_nchw_to_nhwc(const float* in, void* out, Storage t, int64_t n, int channels, int64_t plane,
                         cudaStream_t s);
void launch_nhwc_to_nchw(const void* in, Storage t, float* out, int64_t n, int channels, int64_t plane,
                         cudaStream_t s);
// count FP32 values to T (weights, once).
void launch_to_storage(const float* in, void* out, Storage t, int64_t count, cudaStream_t s);

// y[p][c] = act(y[p][c] + bias[c]) in place over `pixels` positions (bias may be null).
void launch_bias_act_nhwc(void* y, Storage t, const float* bias, int64_t pixels, int channels, ActFn act,
                          cudaStream_t s);
// out = act(in) over count values (layout-free; in == out allowed).
void launch_act_storage(const void* in, void* out, Storage t, int64_t count, ActFn act, cudaStream_t s);
// out = act(in[0] + in[1] + ...) (summed in FP32 left to right, rounded once; layout-free; out
// may be in[0]: a residual add after a convolution, y = act(y + z)).
void launch_add_storage(const std::vector<const void*>& in, void* out, Storage t, int64_t count, ActFn act,
                        cudaStream_t s);
// out[p][c] = in[p][c] * scale[c] + shift[c] (an unfolded batchnorm).
void launch_affine_nhwc(const void* in, void* out, Storage t, int64_t pixels, int channels,
                        const float* scale, const float* shift, cudaStream_t s);
// out = in[0] * in[1] * ... where an input marked per_channel is n x channels (broadcast over the
// plane), the others n x plane x channels.
struct MulInputNhwc {
  const void* data = nullptr;
  bool per_channel = false;
};
void launch_mul_nhwc(const std::vector<MulInputNhwc>& in, void* out, Storage t, int64_t n, int channels,
                     int64_t plane, cudaStream_t s);
// Pool2dArgs' windows over n images, channels last. A 3x3 max at stride 1 (pool_by_rows) runs a
// kernel of its own, several output rows of `row_cols` (1 or 2) columns a thread, that reads each
// input about once; row_cols 0: pool_row_cols(t).
bool pool_by_rows(const Pool2dArgs& a);
// The rows kernel's columns a thread where it was measured faster (docs/performance.md, Session
// 37, GoogLeNet's branch pools at 224x224): 2 at FP32 storage (2.46 -> 2.08 ms), 1 at 16-bit
// storage (2 columns took 88 registers against 62 there: 1.27 -> 1.41 ms).
int pool_row_cols(Storage t);
// Other 2x2 and 3x3 max pools (pool_by_windows) run a kernel with the window unrolled.
bool pool_by_windows(const Pool2dArgs& a);
void launch_pool2d_nhwc(const void* in, void* out, Storage t, int64_t n, const Pool2dArgs& a, cudaStream_t s,
                        int row_cols = 0);
// out[p][offset + c] = in[p][c] for c < in_channels: one input of a channel concat.
void launch_concat_nhwc(const void* in, int in_channels, void* out, int out_channels, int offset, Storage t,
                        int64_t pixels, cudaStream_t s);
// out[p][c] = in[p][offset + c] for c < out_channels: a channel slice of a wider tensor (a conv's
// output written into its concat's buffer, copied back where every layer's values are read).
void launch_slice_nhwc(const void* in, int in_channels, int offset, void* out, int out_channels, Storage t,
                       int64_t pixels, cudaStream_t s);

}  // namespace cnnrun::gpu
