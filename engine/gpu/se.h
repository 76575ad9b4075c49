// A squeeze-and-excitation block's tail in one kernel, channels last: the whole-plane average
// pool of x, the two 1x1 convs (with their fused activations) that make a per-channel scale of
// it, and the mul of x by that scale, which otherwise are four launches (five with an
// activation pass) of tiny work each on small maps (EfficientNet's and MobileNetV3's blocks at
// 32x32 input). A thread block takes several images: it stages their x in shared memory (read
// from global memory once), so each conv's FP32 weights are read once for all of them.
// Each intermediate is rounded to the storage format where the layer-by-layer path stores it
// (the pool's output, each conv's output after its activation) and written to that layer's
// buffer too, so every layer's output exists as without the fusion; the sums run in FP32 (not
// in cuBLAS's or cuDNN's order: within the precision's tolerance, not bit for bit).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/gpu/activation.h"
#include "engine/gpu/nhwc.h"

namespace cnnrun::gpu {

struct SeArgs {
  int channels = 0;   // x's, the pool's and the scale's
  int squeeze = 0;    // the first conv's filters
  int64_t plane = 0;  // x's H x W
  ActFn act1, act2;   // fused into the first and the second conv (identity where none)
};

// Images a thread block takes (at most kSeMaxImages), or 0 where the kernel does not run: where
// fewer than kSeMinImages images' x fit its shared memory budget (large maps: the layer-by-layer
// path streams them), or the sizes are out of its range (channels a multiple of 8 bytes of the
// format: 16-byte copies of whole images; squeeze at most kSeMaxSqueeze).
constexpr int kSeMaxImages = 32, kSeMinImages = 4, kSeMaxSqueeze = 1024;
int se_images_per_block(const SeArgs& a, Storage t);

struct SeTensors {
  const void* x = nullptr;                   // n x plane x channels
  const float *w1 = nullptr, *b1 = nullptr;  // squeeze x channels, squeeze (b1 may be null)
  const float *w2 = nullptr, *b2 = nullptr;  // channels x squeeze, channels (b2 may be null)
  void* pooled = nullptr;                    // n x channels: the pool's output (null: none kept)
  void* hidden = nullptr;                    // n x squeeze: the first conv's, after act1
  void* scale = nullptr;                     // n x channels: the second conv's, after act2
  void* y = nullptr;  // n x plane x channels: the mul's (not x); null: no mul (folded into a conv)
};
void launch_se_nhwc(const SeArgs& a, const SeTensors& p, Storage t, int64_t n, cudaStream_t s);

}  // namespace cnnrun::gpu
