// Nearest and bilinear upsampling on the GPU, PyTorch's nn.Upsample / F.interpolate on NCHW.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace cnnrun::gpu {

struct UpsampleArgs {
  int channels = 0, in_h = 0, in_w = 0, out_h = 0, out_w = 0;
  bool bilinear = false;
  bool align_corners = false;  // bilinear only
  // Output to input coordinate scale per axis, as PyTorch computes it (upsample_source_scale).
  float scale_h = 1.f, scale_w = 1.f;
};

// PyTorch's area_pixel_compute_scale: with align_corners (in - 1) / (out - 1) (0 for one
// output); otherwise 1 / scale_factor when the layer gives one (> 0), else in / out; as float.
float upsample_source_scale(int in, int out, bool align_corners, double scale_factor);

// out[n][c][oy][ox] for n images.
void launch_upsample(const float* in, float* out, int64_t n, const UpsampleArgs& a, cudaStream_t s);

}  // namespace cnnrun::gpu
