// Nearest and bilinear upsampling on the GPU by integer factors, PyTorch's
// nn.Upsample(scale_factor=...) on NCHW.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace cnnrun::gpu {

struct UpsampleArgs {
  int channels = 0, in_h = 0, in_w = 0, out_h = 0, out_w = 0;
  bool bilinear = false;
  bool align_corners = false;      // bilinear only
  int factor_h = 1, factor_w = 1;  // out = in * factor
};

// out[n][c][oy][ox] for n images.
void launch_upsample(const float* in, float* out, int64_t n, const UpsampleArgs& a, cudaStream_t s);

}  // namespace cnnrun::gpu
