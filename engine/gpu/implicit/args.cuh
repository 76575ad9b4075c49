// The kernels' argument block (one struct passed by value), with the multiply-high divisions
// (engine/gpu/fast_div.cuh) the staging and tile arithmetic use.
#pragma once

#include <cstdint>

#include "engine/gpu/fast_div.cuh"  // FastDiv, make_fastdiv, fdiv (the enclosing namespace's)
#include "engine/gpu/implicit/tiling.h"

namespace cnnrun::gpu::implicit {

struct ImplArgs {
  const float* x;
  const uint8_t* xu8;
  const float* scale;
  const float* shift;
  const float* wt;
  const float* bias;
  float* y;
  int n, C, H, W, F, KH, KW, SH, SW, PH, PW;
  int OH, OW;  // convolution outputs computed (with the pool: even; y is then [F, OH/2, OW/2])
  int G, R, CB, patch_h, pitch, row_tiles, K;
  int tiles, chunks, stage_floats, patch_floats;
  int chw;       // uint8 input: bytes per image
  int xs;        // patch column of input column -PW (row copies: so that input rows land 16-byte aligned)
  int row_copy;  // stage whole input rows with 16-byte copies (the padding was zeroed once)
  int tc_nt;     // tensor-core kernel: n-tiles of 8 filters (0: the FFMA kernel)
  int k_pad;     // tensor-core kernel: C*KH*KW rounded up to 8
  FastDiv div_pitch, div_ph, div_cb, div_cb_last, div_row_tiles;
  FastDiv div_chw, div_hw, div_w;  // uint8 input: decoding a byte offset in the tile
  FastDiv div_w4, div_h;           // row copies: decoding a 16-byte unit in the tile
  float out_scale;                 // kTcX16: the accumulators' scale (a power of two)
  int act;                         // the average pool's activation (an Act), before the mean
  float act_slope;                 // ... its slope (leaky ReLU)
};

}  // namespace cnnrun::gpu::implicit
