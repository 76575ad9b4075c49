// Launchers for the GPU executor's small kernels: everything but convolution, the GEMMs and
// the layers with files of their own (activation, pool2d, mul, upsample).
// Each takes the stream it runs on and checks its launch; all tensors are NCHW float32 over a
// block of n images unless said otherwise.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace cnnrun::gpu {

// y = float(byte) * scale[c] + shift[c] (rounded after the multiply, like preprocess_images).
void launch_preprocess(const uint8_t* in, float* out, int64_t n, int channels, int64_t plane,
                       const float* scale, const float* shift, cudaStream_t s);

// y = x * scale[c] + shift[c] (an unfolded batchnorm).
void launch_channel_affine(const float* in, float* out, int64_t n, int channels, int64_t plane,
                           const float* scale, const float* shift, cudaStream_t s);

// out = in[0] + in[1] + ... (left to right), count values each.
void launch_add(const float* const* in, int num_inputs, float* out, int64_t count, cudaStream_t s);

// Softmax over the channels at each spatial position.
void launch_softmax(const float* in, float* out, int64_t n, int channels, int64_t plane, cudaStream_t s);

// pred[i] = first index of the largest of the `size` values of image i; counts the images whose
// prediction equals labels[(first + i) % label_count] into correct[0] (a label of -1 never does),
// and the images with a NaN or infinite value among their `size` into correct[1].
void launch_argmax(const float* in, int64_t n, int size, int32_t* pred, const int32_t* labels, int64_t first,
                   int64_t label_count, unsigned long long* correct, cudaStream_t s);

}  // namespace cnnrun::gpu
