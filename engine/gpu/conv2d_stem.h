// The `stem` convolution: our tensor-core kernel for convolutions of few input channels (1 to 4:
// a network's grey or RGB first layer), channels last in 16-bit storage (--precision fp16 or bf16
// --layout nhwc), any kernel size up to 256 taps x channels (1 channel counted as 2, 3 as 4),
// stride, padding and dilation, groups 1, filters a multiple of 8, with the bias and any ActFn in
// its epilogue. cuDNN's kernels for three input channels are slow at BF16 (ResNet-18's 7x7 stem:
// 8.0 ms for 1000 images at 224x224 against 2.2 ms at FP16; docs/performance.md), and no
// library's implicit GEMM reads three 2-byte channels with its vector loads.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "engine/core/precision.h"
#include "engine/gpu/activation.h"
#include "engine/gpu/nhwc.h"
#include "engine/layers/conv.h"

namespace cnnrun::gpu {

// "" when the stem kernel computes this convolution at `prec` in the layout given, else why not.
std::string stem_cannot_run(const ConvParams& p, Precision prec, bool channels_last);

// y = act(conv(x) + bias) for n images: x [n, in_h, in_w, in_c] and y [n, out_h, out_w, filters]
// in storage t (FP16 or BF16), w [filters][kernel_h][kernel_w][in_c] in t (DeviceWeights'
// w_nhwc), bias `filters` FP32 values (may be null: zero). An implicit GEMM on mma.sync: a thread
// block stages its weights in shared memory once, then for each tile of 8 x 16 output pixels
// the input patch under it, and multiplies with FP32 accumulation; one rounding when it stores
// (staged in shared memory, written in 16-byte vectors).
void launch_conv_stem(const ConvParams& p, const void* x, Storage t, const void* w, const float* bias,
                      void* y, int64_t n, ActFn act, cudaStream_t s);

}  // namespace cnnrun::gpu
