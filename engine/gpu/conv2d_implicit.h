// The `implicit` convolution: our own fused kernel that never writes the im2col matrix.
// See conv2d_implicit.cu for why it is shaped as it is.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/layers/activation.h"
#include "engine/layers/conv.h"

namespace cnnrun::gpu {

// How one convolution is cut into thread blocks for a block of n images.
struct ImplicitConfig {
  bool ok = false;
  std::string why;  // when !ok: why the kernel cannot run this convolution
  int bm = 0;       // filters per thread block (every thread computes all of them)
  int m_tiles = 0;  // thread blocks along the filters
  int images = 0;   // images per thread block (G)
  int rows = 0;     // output rows per thread block (R)
  int row_tiles = 0;
  int chunk_c = 0;  // input channels staged in shared memory at a time
  int chunks = 0;   // chunk_c-channel chunks per tile
  int patch_h = 0, patch_w = 0;
  int patch_floats = 0, stage_floats = 0;  // one stage buffer: patch, then weights
  size_t smem = 0;                         // dynamic shared memory bytes (two stage buffers)
  int64_t grid_x = 0;  // tiles along images x output rows (the persistent grid walks them)
};

ImplicitConfig implicit_config(const ConvParams& p, int64_t n);

// Weights rearranged for the kernel: [m_tiles][C*KH*KW][bm], zero-padded past the last filter,
// so a thread block copies its slice with contiguous 16-byte loads.
std::vector<float> implicit_weights(const ConvParams& p, const float* weight);
int implicit_bm(int64_t filters);

// y = act(conv(x) + bias) for n images, act kNone or kRelu (the ReLU the executor fuses;
// tanh and sigmoid run as their own pass); wt from implicit_weights(); bias: `filters` values.
void launch_conv_implicit(const ImplicitConfig& cfg, const ConvParams& p, const float* x, const float* wt,
                          const float* bias, float* y, int64_t n, ActKind act, cudaStream_t s);

}  // namespace cnnrun::gpu
