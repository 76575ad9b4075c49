// Launchers for the GPU executor's small kernels: everything but convolution and the GEMMs.
// Each takes the stream it runs on and checks its launch; all tensors are NCHW float32 over a
// block of n images unless said otherwise.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/layers/activation.h"
#include "engine/layers/pool.h"

namespace cnnrun::gpu {

// y = float(byte) * scale[c] + shift[c] (rounded after the multiply, like preprocess_images).
void launch_preprocess(const uint8_t* in, float* out, int64_t n, int channels, int64_t plane,
                       const float* scale, const float* shift, cudaStream_t s);

// y = act(x), elementwise over count values (in == out allowed).
void launch_activation(const float* in, float* out, int64_t count, ActKind act, cudaStream_t s);

// y[n][c][p] = act(y[n][c][p] + bias[c]) in place: the epilogue of a GEMM that had none.
void launch_bias_act(float* y, const float* bias, int64_t n, int channels, int64_t plane, ActKind act,
                     cudaStream_t s);

// y = x * scale[c] + shift[c] (an unfolded batchnorm).
void launch_channel_affine(const float* in, float* out, int64_t n, int channels, int64_t plane,
                           const float* scale, const float* shift, cudaStream_t s);

struct PoolGeom {
  int c, h, w, out_h, out_w;
};
void launch_pool(const float* in, float* out, int64_t n, const PoolGeom& g, const PoolParams& p,
                 cudaStream_t s);

// out = in[0] + in[1] + ... (left to right), count values each.
void launch_add(const float* const* in, int num_inputs, float* out, int64_t count, cudaStream_t s);

// Softmax over the channels at each spatial position.
void launch_softmax(const float* in, float* out, int64_t n, int channels, int64_t plane, cudaStream_t s);

// pred[i] = first index of the largest of the `size` values of image i; counts the images whose
// prediction equals labels[(first + i) % label_count] into correct[0], and the images with a NaN
// or infinite value among their `size` into correct[1].
void launch_argmax(const float* in, int64_t n, int size, int32_t* pred, const uint8_t* labels, int64_t first,
                   int64_t label_count, unsigned long long* correct, cudaStream_t s);

}  // namespace cnnrun::gpu
