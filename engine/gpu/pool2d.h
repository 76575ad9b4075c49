// Max and average pooling on the GPU for every window PyTorch's MaxPool2d, AvgPool2d (with
// ceil_mode) and AdaptiveMaxPool2d / AdaptiveAvgPool2d define. The arguments are plain numbers:
// the caller's shape inference has already fixed the output size, and the windows follow from it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace cnnrun::gpu {

struct Pool2dArgs {
  int channels = 0, in_h = 0, in_w = 0, out_h = 0, out_w = 0;
  bool is_max = true;
  // Adaptive: output cell (oy, ox) pools rows floor(oy * in_h / out_h) to
  // ceil((oy + 1) * in_h / out_h) - 1, and likewise columns; the fields below are unused.
  bool adaptive = false;
  int kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  // Average: divide by the window clipped to the padded input (PyTorch's count_include_pad:
  // with ceil_mode the last window may reach past the padding, and that part is not counted),
  // or, when false, by the elements inside the input. Max pooling ignores it.
  bool count_pad = true;
};

// The output values of one image; throws Error for an empty plane, a non-positive window or
// stride, or a negative pad (both layouts' launches check their arguments here).
int64_t pool2d_values(const Pool2dArgs& a);

// out[n][c][oy][ox] for n images (NCHW float32).
void launch_pool2d(const float* in, float* out, int64_t n, const Pool2dArgs& a, cudaStream_t s);

}  // namespace cnnrun::gpu
