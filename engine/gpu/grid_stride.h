// The launch shape of the element-wise passes (activation, pooling, upsampling, mul, add,
// preprocess, softmax, argmax): one thread per value in a grid-stride loop.
#pragma once

#include <cstdint>

namespace cnnrun::gpu {

constexpr int kGridStrideThreads = 256;

// Blocks for `count` values at one value a thread, at most 65536: the grid-stride loops cover
// the rest, and more blocks than that only add scheduling.
inline unsigned grid_stride_blocks(int64_t count) {
  int64_t blocks = (count + kGridStrideThreads - 1) / kGridStrideThreads;
  if (blocks > 65536) blocks = 65536;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

}  // namespace cnnrun::gpu
