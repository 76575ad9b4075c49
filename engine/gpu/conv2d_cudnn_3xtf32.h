// The `cudnn-3xtf32` convolution: FP32-level accuracy from cuDNN's TF32 tensor-core kernels.
// Each FP32 operand is split into a TF32 high part and a TF32 remainder (v = hi + lo, both
// exactly representable in TF32, rounded to nearest), and the three products that matter are
// stacked along the reduction as one convolution over three times the input channels:
//     x3 = [x_hi, x_lo, x_hi]  (per pixel, 3C channels)
//     w3 = [w_lo, w_hi, w_hi]  (per filter tap, 3C channels)
//     conv(x3, w3) = x_hi*w_lo + x_lo*w_hi + x_hi*w_hi   (x_lo*w_lo, ~2^-22 relative, dropped)
// TF32 tensor cores read the parts exactly and accumulate in FP32; the small products come first
// in each tap's reduction (4x closer to FP32 than the big-first order on the H100,
// docs/performance.md, Session 19). No transform-based algorithm may run it (Winograd, FFT: they
// transform the parts before rounding, which undoes the split). One pass per block writes x3 into
// a buffer of the plan (Step::split_buf); the filters are split once, on first use. The bias, a
// residual add and the activation run as the `cudnn` convolution runs them (conv2d_cudnn.h).
// FP32 channels last (--precision fp32 --layout nhwc), groups 1.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "engine/core/precision.h"
#include "engine/gpu/activation.h"
#include "engine/gpu/check.h"
#include "engine/gpu/conv2d_cudnn.h"
#include "engine/layers/conv.h"

namespace cnnrun::gpu {

// "" when cudnn-3xtf32 computes this convolution at precision `prec` in the layout given, else
// why not: FP32 channels last, groups 1.
std::string cudnn_3xtf32_cannot_run(const ConvParams& p, Precision prec, bool channels_last);

// The split pass: in holds `rows` rows of `c` FP32 values (channels-last pixels, or a filter's
// taps), out `rows` rows of 3c: [hi, lo, hi] (filters false: activations) or [lo, hi, hi]
// (filters true), hi = v rounded to TF32 (nearest, ties away), lo = (v - hi) rounded to TF32
// (0 where v is not finite: hi carries an infinity or NaN alone).
void launch_split_tf32(const float* in, float* out, int64_t rows, int64_t c, bool filters, cudaStream_t s);

class Cudnn3xTf32Conv {
 public:
  Cudnn3xTf32Conv(const ConvParams& p, ActFn act, bool residual);
  // The graph API's use for the stacked conv (CudnnConv::set_graph_use); false: unchanged.
  bool set_graph_use(CudnnConv::GraphUse u, int plans) { return conv_.set_graph_use(u, plans); }
  // y = act(conv(x, w) + bias [+ z]) for n images, all FP32 channels last: x [n, H, W, C], w
  // [K, R, S, C], y and z [n, out_h, out_w, K]; x3: n*H*W*3C floats for the split input. The
  // filters are split on the first call (not inside a stream capture), which also runs cuDNN's
  // search on these buffers. After stacked_conv().set_out_slice: `slice` as CudnnConv::find takes
  // it, and the output goes to slice->y where stacked_conv().writes_slice(), else to y.
  void forward(const CudnnHandle& h, cudaStream_t s, int64_t n, const float* x, float* x3, const float* w,
               const float* bias, const float* z, float* y, void* ws, size_t ws_bytes,
               const CudnnConv::OutSlice* slice = nullptr);
  // The stacked convolution cuDNN runs (its workspace, and CudnnConv::prepare's host work ahead
  // of the search).
  CudnnConv& stacked_conv() { return conv_; }
  // "cudnn-3xtf32(cudnn:IMPLICIT_PRECOMP_GEMM(fused bias+relu) [fp32 NHWC, tf32 tensor cores
  // allowed], TF32 parts [x_hi, x_lo, x_hi] x [w_lo, w_hi, w_hi])" for the report.
  std::string algo_name() const;
  // The stacked convolution: 3x the input channels.
  static ConvParams stacked(const ConvParams& p);

 private:
  ConvParams p_;
  CudnnConv conv_;
  DevBuf w3_;
};

}  // namespace cnnrun::gpu
