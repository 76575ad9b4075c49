// Nearest and bilinear upsampling on the GPU, PyTorch's nn.Upsample / F.interpolate on NCHW, by
// whole or fractional factors or to a size (engine/layers/upsample.h defines the coordinates).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace cnnrun::gpu {

struct UpsampleArgs {
  int channels = 0, in_h = 0, in_w = 0, out_h = 0, out_w = 0;
  bool bilinear = false;
  bool align_corners = false;      // bilinear only
  int factor_h = 0, factor_w = 0;  // > 0: out = in * factor, nearest by integer division
  float ratio_h = 0, ratio_w = 0;  // the output-to-input ratios (UpsampleAxis::ratio)
};

// out[n][c][oy][ox] for n images.
void launch_upsample(const float* in, float* out, int64_t n, const UpsampleArgs& a, cudaStream_t s);

}  // namespace cnnrun::gpu
