// The `conv1x1` convolution: our tensor-core kernel for 1x1 convolutions of few input channels
// in channels-last storage (MobileNetV2's and EfficientNet's expansions, 16-40 channels into
// 96-240; SqueezeNet's expand1x1), 16-bit or FP32 (TF32 or 3xTF32 products). Such a conv is a matrix product
// of the pixels' K channels by the N x K filters whose K is too small for the libraries' tiles: cuDNN's and
// cuBLASLt's kernels ran EfficientNet-B0's 16 -> 96 expansion at 112x112 at about a third of the memory's
// speed (docs/performance.md, Session 34), and neither applies SiLU or ReLU6 in cuBLASLt's
// epilogue. Here the product costs next to nothing and the kernel is a stream: each thread block
// stages all the filters once, then tiles of 128 pixels' channels (double-buffered cp.async), and
// writes each output once, with the bias, a residual and any ActFn applied on the way out. In
// FP32 storage cuDNN ran those expansions at 2-3x their bytes' time (Session 38's tf32 reports).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "engine/core/precision.h"
#include "engine/gpu/activation.h"
#include "engine/gpu/pool2d.h"
#include "engine/layers/conv.h"

namespace cnnrun::gpu {

// "" when the conv1x1 kernel computes this convolution at `prec` in the layout given, else why
// not: channels last, a 1x1 window of stride 1, unpadded, undilated, groups 1, input channels
// and filters multiples of 8, and the filters and a tile's stages within kConv1x1MaxSmem bytes of
// shared memory (input channels up to 256 in 16-bit storage, 128 in FP32). `pooled`: the kernel
// takes the max-pool before the conv (Conv1x1Io::pool), whose maxima go through registers into one
// A buffer instead of two, so that wider convs fit.
std::string conv1x1_cannot_run(const ConvParams& p, Precision prec, bool channels_last, bool pooled = false);

// The shared memory a block of the kernel takes for p at prec, `pooled` as above (0 where it cannot run).
constexpr size_t kConv1x1MaxSmem = size_t(160) << 10;
size_t conv1x1_smem(const ConvParams& p, Precision prec, bool pooled = false);

struct Conv1x1Io {
  const void* x = nullptr;      // n x H x W x C in the storage format
  const void* w = nullptr;      // N x C in the storage format (DeviceWeights' w_nhwc)
  const float* bias = nullptr;  // N FP32 values, or null: zero
  const void* z = nullptr;      // a residual of y's shape (dense), or null
  void* y = nullptr;            // n x H x W x N in the storage format
  // > 0: y is a channel slice of a wider tensor, y_ld values between consecutive pixels (a
  // concat's buffer); y and y_ld 16-byte aligned (multiples of 8 values); not with a residual.
  int64_t y_ld = 0;
  // Non-null: the max-pool before the conv, taken as the kernel stages its input: x is the pool's
  // input (pool->in_h x pool->in_w pixels of the conv's K channels) and the conv multiplies each
  // window's maximum (the pool's output pixels, the conv's H x W); no residual (conv1x1_pool_cannot_run).
  const Pool2dArgs* pool = nullptr;
};

// "" when the kernel can take max-pool `a` before the conv p (Conv1x1Io::pool), else why not:
// a max of fixed square 2x2 or 3x3 windows over p's input channels, giving p's input plane, each
// window holding some of the input (taps past it are clamped onto it: the same maxima), no residual.
std::string conv1x1_pool_cannot_run(const ConvParams& p, const Pool2dArgs& a, bool residual);

// y = act(x * W^T + bias + z) for n images, the sum in FP32 on m16n8k16 (FP16 or BF16
// operands) or m16n8k8 (TF32 operands: tf32 one product, fp32 three), rounded once when it stores. Throws
// Error where conv1x1_cannot_run (or with io.pool conv1x1_pool_cannot_run) says no or the slice is
// misaligned.
void launch_conv1x1(const ConvParams& p, Precision prec, const Conv1x1Io& io, int64_t n, ActFn act,
                    cudaStream_t s);

}  // namespace cnnrun::gpu
