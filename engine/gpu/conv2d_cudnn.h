// The `cudnn` convolution, behind a plain header: cudnn.h is seen by conv2d_cudnn.cpp alone.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "engine/core/precision.h"
#include "engine/gpu/activation.h"
#include "engine/layers/conv.h"

namespace cnnrun::gpu {

// One cuDNN handle (one per stream: a handle's stream is state).
class CudnnHandle {
 public:
  CudnnHandle();
  ~CudnnHandle();
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;
  void* get() const { return h_; }

 private:
  void* h_ = nullptr;
};

std::string cudnn_version_string();  // "cuDNN 9.14.0 (built with 9.19.0)"

class CudnnConv {
 public:
  // Any convolution ConvParams describes (groups and dilation in the descriptor). act is applied
  // with the bias: inside cudnnConvolutionBiasActivationForward when it is a ReLU or none and
  // cuDNN picked IMPLICIT_PRECOMP_GEMM, otherwise by our bias+activation pass after the
  // convolution.
  // residual: y = act(conv(x) + bias + z) with z (y's shape and format) given to find and
  // forward: in the graph API's fused kernel where one is chosen, else the legacy call (bias, no
  // activation) and one pass y = act(y + z).
  // split_operands: x and w hold TF32 parts of split FP32 values (conv2d_cudnn_3xtf32.h), so no
  // algorithm that transforms its operands (FFT, FFT_TILING; Winograd never runs) may be chosen.
  CudnnConv(const ConvParams& p, ActFn act, bool residual = false, bool split_operands = false);
  ~CudnnConv();
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;

  // cuDNN's own search (cudnnFindConvolutionForwardAlgorithmEx) on real buffers for n images,
  // once per layer shape; only results within the precision's math (FP32: FMA only, no TF32)
  // and ws_bytes of workspace count. x, w, y are in the layout and format set_format chose.
  // bias (FP32) and bias_t (the same in the tensors' format): for trying cuDNN's fused
  // bias+activation call, and timing it against the convolution and our pass (channels last).
  // Channels last, cuDNN's graph API (conv2d_cudnn_graph.h) is then tuned on the same buffers
  // and kept when its fastest engine beats the legacy call with its passes (GraphUse).
  // With set_out_slice, `slice` names where the graph API writes (the concat's slice, y_ld values
  // between pixels) and what the concat's copy of y costs the other ways (added to the legacy
  // call's time); required then, ignored otherwise.
  struct OutSlice {
    void* y = nullptr;
    float copy_ms = 0;
  };
  void find(const CudnnHandle& h, cudaStream_t s, int64_t n, const void* x, const void* w, const float* bias,
            const void* bias_t, const void* z, void* y, void* ws, size_t ws_bytes,
            const OutSlice* slice = nullptr);
  bool found() const;
  // After find with the graph API tried on channels last: its engine's and the legacy call's
  // final times, which decided between them ("" otherwise).
  const std::string& choice_note() const;
  // y = act(conv(x) + bias) (bias FP32, bias_t the same in the tensors' format): in one cuDNN
  // call where cuDNN fuses it (FP32 NCHW: IMPLICIT_PRECOMP_GEMM with a ReLU or nothing; channels
  // last: a ReLU, or nothing with IMPLICIT_PRECOMP_GEMM, where find's trial call succeeded and
  // was the faster),
  // otherwise cudnnConvolutionForward and one bias+activation pass (launch_bias_act_nhwc).
  void forward(const CudnnHandle& h, cudaStream_t s, int64_t n, const void* x, const void* w,
               const float* bias, const void* bias_t, const void* z, void* y, void* ws, size_t ws_bytes);
  std::string algo_name() const;
  // The workspace bytes forward needs for n images with what find chose (after find; for the
  // graph API after a prepare, find or forward for n): -1 when that is not known yet.
  int64_t workspace(const CudnnHandle& h, int64_t n);
  // The arithmetic and tensors cuDNN works with from now on (the next forward searches again).
  // FP32 NCHW tensors (nhwc false): FP32 is FMA math only; TF32 (and BF16, which cuDNN's float
  // path does not offer: TF32 is within what it allows) default math, TF32 tensor cores
  // allowed; FP16 tensor-op math with conversion. Channels-last (nhwc true): x, w (K x R x S x
  // C) and y in the precision's storage format (FP16, BF16, else FP32), FP32 accumulation,
  // tensor-op math for FP16/BF16, default math for TF32, FMA math for FP32.
  void set_format(Precision p, bool nhwc);
  // Channels last, whether find tries cuDNN's graph API: kOff never; kTimed when its fastest
  // engine is faster than the legacy call (GpuTuning::cudnn_graph); kFirst whenever it runs
  // (GpuTuning::graph_first: tests); and how many of cuDNN's heuristic candidates it builds and
  // times (GpuTuning::graph_plans, at least 1). The next forward searches again; false when both
  // were already in use (nothing changed).
  enum class GraphUse { kOff, kTimed, kFirst };
  bool set_graph_use(GraphUse u, int plans);
  bool uses_graph() const;  // find chose the graph API
  // Channels last: whether the graph API's engines may write y as a channel slice of a wider
  // tensor, ld values between pixels (a concat's buffer: engine/gpu/plan.h Step::concat_step);
  // 0: y is packed. The next forward searches again; false when ld was already set. Not with a
  // residual.
  bool set_out_slice(int64_t ld);
  // find chose a graph that writes the slice: forward's y is then the slice (OutSlice::y's place).
  bool writes_slice() const;
  // The host work of cuDNN's graph API for n images, ahead of find (its candidate engines) or of
  // a forward on a batch size not run before (the chosen engine's plan): building a plan
  // compiles a kernel, up to a second each. Different layers may prepare at once on different
  // threads, each with its own handle (GpuExecutor::prepare_graphs). Nothing without the graph
  // API (not channels last, GraphUse::kOff, or the legacy API chosen).
  void prepare(const CudnnHandle& h, int64_t n, size_t ws_bytes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cnnrun::gpu
