// The `stem` convolution: our tensor-core kernel for convolutions of few input channels (1 to 4:
// a network's grey or RGB first layer), channels last (--layout nhwc), any kernel size up to 256
// taps x channels (16-bit: 1 channel counted as 2, 3 as 4), stride, padding and dilation, groups
// 1, filters a multiple of 8, with the bias and any ActFn in its epilogue. 16-bit storage (fp16,
// bf16) multiplies on m16n8k16; FP32 storage on m16n8k8 TF32 products (tf32), or 3xTF32 (fp32:
// about FP32 accuracy). cuDNN's kernels for three input channels are slow at BF16 (ResNet-18's
// 7x7 stem: 8.0 ms for 1000 images at 224x224 against 2.2 ms at FP16) and in FP32 storage (6.2
// ms at tf32, 11.4 ms at fp32; docs/performance.md), cutlass takes channels in fours, and no
// library's implicit GEMM reads three 2-byte channels with its vector loads. Two kernels compute
// it: one gathers A's values from the staged input through tables (any shape above); the other
// (`rows`: three channels, stride 2, 3x3 or 7x7) reads A's fragments with ldmatrix straight from
// rows of the staged input, which is about twice as fast (docs/architecture.md, **stem**).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/precision.h"
#include "engine/gpu/activation.h"
#include "engine/gpu/nhwc.h"
#include "engine/layers/conv.h"

namespace cnnrun::gpu {

// "" when the stem kernel computes this convolution at `prec` in the layout given, else why not.
std::string stem_cannot_run(const ConvParams& p, Precision prec, bool channels_last);

// A max-pool of fixed windows computed in the stem kernel's epilogue, over the convolution's
// output (its input): PyTorch's windows (start o * stride - pad, clipped to the input; ceil_mode
// is in out_h and out_w). kernel_h 0: none.
struct StemPool {
  int kernel_h = 0, kernel_w = 0, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  int out_h = 0, out_w = 0;
};

// "" when the stem kernel computes convolution `p` followed by `pool`, else why not: the pool's
// windows must tile the kernel's tile of 8 x 16 outputs (stride = window, no padding, the window
// dividing 8 x 16: VGG's 3x3 conv then 2x2/2 pool). Overlapping windows (ResNet's 3x3/2) would
// have two tiles compute the outputs they share, which measured slower than the separate pool.
std::string stem_pool_cannot_run(const ConvParams& p, const StemPool& pool);

// y = act(conv(x) + bias) for n images: x [n, in_h, in_w, in_c] and y [n, out_h, out_w, filters]
// in `prec`'s storage (FP16, BF16, or FP32 for tf32 and fp32), w [filters][kernel_h][kernel_w][in_c]
// in that storage (DeviceWeights' w_nhwc), bias `filters` FP32 values (may be null: zero). An implicit GEMM
// on mma.sync: a thread block stages its weights in shared memory once, then for each tile of 8 x 16 output
// pixels the input patch under it, and multiplies with FP32 accumulation; one rounding when it stores (staged
// in shared memory, written in 16-byte vectors). With `pool` (kernel_h > 0), y is the pool's output [n,
// pool.out_h, pool.out_w, filters]: a tile's 8 x 16 convolution outputs are the windows of its pooled outputs
// (4 x 8 for a 2x2/2 pool), and the convolution's output is never written to memory. The max is taken over
// the rounded values, as a separate pool would.
// rows (GpuTuning::stem_rows): where stem_runs_rows, the kernel that reads A's fragments from rows
// of the patch (ldmatrix) computes it; else (or false) the one that gathers them through tables.
void launch_conv_stem(const ConvParams& p, const void* x, Precision prec, const void* w, const float* bias,
                      void* y, int64_t n, ActFn act, cudaStream_t s, const StemPool& pool = StemPool{},
                      bool rows = true);

// Whether the `rows` kernels (launch_conv_stem's and launch_conv_stem_bytes') compute p with
// `pool` at `prec`: the stem's own conditions, three input channels, no dilation, a square window;
// 3x3 or 7x7 at stride 2 without a pool at any storage (16-bit on m16n8k16, FP32 on TF32 or
// 3xTF32); at 16-bit storage 3x3 at stride 1 too (VGG's stem), with or without the pool.
bool stem_runs_rows(const ConvParams& p, Precision prec, const StemPool& pool = StemPool{});

// The preprocessing of the network's three input channels: byte * scale[c] + shift[c].
struct StemPixels {
  float scale[3] = {1.f, 1.f, 1.f}, shift[3] = {0.f, 0.f, 0.f};
};
// "" when launch_conv_stem_u8 computes p followed by `pool` (kernel_h 0: none) at `prec`, else
// why not: 16-bit storage, where a rows kernel computes it (stem_runs_rows).
std::string stem_u8_cannot_run(const ConvParams& p, Precision prec, const StemPool& pool = StemPool{});
// The 16-bit stem (fp16, bf16) reading the network's uint8 pixels, planar [n][3][in_h][in_w] (the
// data set's own order), with no preprocess pass: each value byte * scale[c] + shift[c] rounded to
// the storage as the patch is staged, the bits the preprocess pass (launch_preprocess_nhwc) would
// have written, the padding zero; so y is bit for bit launch_conv_stem's on that pass's output.
// w, bias, y, pool as launch_conv_stem's; the rows kernels only.
void launch_conv_stem_u8(const ConvParams& p, const uint8_t* x, const StemPixels& pre, Precision prec,
                         const void* w, const float* bias, void* y, int64_t n, ActFn act, cudaStream_t s,
                         const StemPool& pool = StemPool{});
// The stem reading the network's uint8 pixels (FP32 storage: --precision fp32 or tf32), the
// preprocessing byte * scale[c] + shift[c] folded in. It equals scale[c] * (byte - o[c]) + r[c]
// for o[c] the integer nearest -shift[c] / scale[c] (within 0..255) and r[c] = scale[c] * o[c] +
// shift[c], so
//   conv(x)[pixel, f] = 2^-e[f] * sum over the window's taps inside the image of
//                       (byte - o[c]) * (w[f, tap, c] * scale[c] * 2^e[f])
//                     + bias[f] + sum over the same taps of r[c] * w[f, tap, c].
// byte - o[c] is an integer of at most 9 bits, exact in FP16; the scaled weights are split into
// an FP16 high part and an FP16 remainder (2^e[f] puts each filter's largest near 2^14, so both
// parts stay normal down to weights 2^-17 of it): two m16n8k16 FP16 products per 16 taps, each
// exact, summed in FP32, against 3xTF32's six m16n8k8 products, and about 22 bits of every
// weight (3xTF32: about 21). The last sum depends only on which taps of the window lie inside the
// image, the same for every row inside it and every column inside it: a table of (row class,
// column class, filter), the bias included, where the classes are the distinct in-image ranges of
// window rows (columns). The padding stays zero in x, as the float path's does.
struct StemBytesWeights {
  std::vector<int> offset;                // o[c]
  std::vector<uint16_t> w_hi, w_lo;       // FP16 bits, [filters][kernel_h][kernel_w][c]
  std::vector<float> out_scale;           // 2^-e[f]
  std::vector<int> row_class, col_class;  // [out_h], [out_w]: each output row's (column's) class
  int row_classes = 0, col_classes = 0;
  std::vector<float> table;  // [row class][column class][filters]: bias + the r[c] sum
};

// "" when launch_conv_stem_bytes computes this convolution (whatever its weights), else why not.
std::string stem_bytes_cannot_run(const ConvParams& p);

// The host side (no GPU): "" and *out filled when the stem can read these bytes (the stem's own
// conditions, one scale and shift per input channel, every value finite), else why not. weight:
// PyTorch's [filters][c][kernel_h][kernel_w]; bias: `filters` values or null (zero).
std::string stem_bytes_weights(const ConvParams& p, const float* weight, const float* bias,
                               const std::vector<float>& scale, const std::vector<float>& shift,
                               StemBytesWeights* out);

// StemBytesWeights on the device.
struct StemBytesDevice {
  const uint16_t* w_hi = nullptr;
  const uint16_t* w_lo = nullptr;
  const float* out_scale = nullptr;
  const float* table = nullptr;
  const int* row_class = nullptr;
  const int* col_class = nullptr;
  int row_classes = 0, col_classes = 0;
  int offset[4] = {0, 0, 0, 0};
};

// y = act(conv(preprocess(x)) + bias) for n images: x the uint8 pixels, planar [n][c][in_h][in_w]
// (the data set's own order); y FP32 channels last [n, out_h, out_w, filters], or with `pool` the
// pool's output (as launch_conv_stem's). rows: where stem_runs_rows, the rows kernel's layout
// (A by ldmatrix from the patch of byte - o[c]) computes it, else the gather kernel.
void launch_conv_stem_bytes(const ConvParams& p, const uint8_t* x, const StemBytesDevice& w, float* y,
                            int64_t n, ActFn act, cudaStream_t s, const StemPool& pool = StemPool{},
                            bool rows = true);

}  // namespace cnnrun::gpu
