// The `cudnn` convolution through cuDNN's graph API (NVIDIA's cuDNN frontend, header-only, from
// the nvidia-cudnn-frontend wheel: scripts/fetch_headers.sh), behind a plain header: the
// frontend is seen by conv2d_cudnn_graph.cpp alone. One operation graph per layer and batch size,
//     y = act(conv(x, w) + bias [+ z])
// on channels-last tensors in the precision's storage format, which cuDNN runs as one kernel
// where an engine fuses it: the bias (a folded batchnorm), a residual input z (ResNet's add) and
// the activation all in the convolution's epilogue. Its engines are the graph API's, chosen by
// cuDNN's heuristics and then by timing, a wider set than the legacy API's eight algorithms
// (conv2d_cudnn.cpp), which CudnnConv times it against.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "engine/core/precision.h"
#include "engine/gpu/activation.h"
#include "engine/layers/conv.h"

namespace cnnrun::gpu {

// The tensors of one call. bias is FP32 (K values); x, w (K x R x S x C), z and y are channels
// last in the precision's storage format; z is null unless the graph has a residual input.
struct GraphConvIo {
  const void* x = nullptr;
  const void* w = nullptr;
  const float* bias = nullptr;
  const void* z = nullptr;
  void* y = nullptr;
};

class CudnnGraphConv {
 public:
  // Whether this build has the frontend (CMake found its headers); without it tune() reports
  // that no engine exists and nothing else may be called.
  static bool built();

  // residual: the graph adds z before the activation. The activations cuDNN's pointwise
  // operations express: identity, relu, relu6, leaky_relu, sigmoid, tanh, silu, gelu (erf and
  // tanh forms); any other makes tune() report no engine. split_operands: x and w hold TF32
  // parts of split FP32 values (conv2d_cudnn_3xtf32.h): no engine may transform them (FFT) or
  // reduce in less than FP32. y_ld > 0: y is a channel slice of a wider tensor (a concat's
  // buffer), y_ld values between pixels (no residual then); cuDNN's engines that cannot write it
  // are left out, and tune() reports none when no engine can.
  CudnnGraphConv(const ConvParams& p, ActFn act, bool residual, Precision prec, bool split_operands = false,
                 int64_t y_ld = 0);
  ~CudnnGraphConv();
  CudnnGraphConv(const CudnnGraphConv&) = delete;
  CudnnGraphConv& operator=(const CudnnGraphConv&) = delete;

  // The host half of tune and forward for n images, no GPU work: before tune, the graph, cuDNN's
  // heuristics within the precision's arithmetic (FP32: no tensor cores, no down-conversion;
  // TF32: no down-conversion; never Winograd) and the first max_plans engines that build within
  // ws_bytes; once tuned, the tuned engine's plan for n. Building a plan compiles its kernel
  // (NVRTC, up to a second each), so the executor calls this for every layer at once, one thread
  // and handle per layer (cuDNN: one handle per thread); objects are independent.
  void prepare(void* cudnn_handle, int64_t n, size_t ws_bytes, int max_plans);
  // Times prepare's engines (prepared here when they were not) on these buffers, best of 3
  // after one warm-up, and keeps the fastest. Returns its milliseconds, or a negative value when
  // none could run (why() says why). Not inside a stream capture.
  float tune(void* cudnn_handle, cudaStream_t s, int64_t n, const GraphConvIo& io, void* ws, size_t ws_bytes,
             int max_plans);
  // Runs the tuned engine on n images. A batch size not tuned before (a short last block) gets
  // its own graph with the same engine and knobs, or cuDNN's first heuristic choice that fits
  // when that engine cannot run it; building one outside a stream capture.
  void forward(void* cudnn_handle, cudaStream_t s, int64_t n, const GraphConvIo& io, void* ws,
               size_t ws_bytes);
  bool tuned() const;
  // The workspace bytes the plan for n images needs; -1 when there is none for n yet (not tuned,
  // or neither tune, prepare nor forward has built one).
  int64_t workspace(int64_t n) const;
  // "eng12 k2=3 ... (fused bias+add+relu)" for the report.
  std::string name() const;
  std::string why() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cnnrun::gpu
