// The `im2col` convolution: an explicit column matrix per image, then one strided-batched
// cuBLASLt GEMM per chunk of images with the bias (and a following ReLU) in its epilogue.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <string>

#include "engine/gpu/gemm.h"
#include "engine/layers/activation.h"
#include "engine/layers/conv.h"

namespace cnnrun::gpu {

class Im2colConv {
 public:
  // act: kNone or kRelu (what the cuBLASLt epilogue can apply); bias: device, `filters` values.
  Im2colConv(const ConvParams& p, ActKind act, const float* bias);

  // Column-matrix bytes of one image; the caller's column buffer holds at least one.
  size_t col_bytes_per_image() const;
  // y = act(conv(x) + bias) for n images; col is a scratch buffer of col_bytes, ws cuBLASLt's.
  void forward(cublasLtHandle_t lt, const float* x, const float* w, float* y, int64_t n, float* col,
               size_t col_bytes, void* ws, size_t ws_bytes, cudaStream_t s);
  std::string algo_name() const;

 private:
  // By images per GEMM call; `epilogue` false when cuBLASLt refused the row-major epilogue form
  // and the bias/activation run as a separate kernel.
  struct Plan {
    LtGemm gemm;
    bool epilogue = false;
  };
  Plan& plan(cublasLtHandle_t lt, int64_t images, size_t ws_bytes);
  ConvParams p_;
  ActKind act_;
  const float* bias_;
  std::map<int64_t, std::unique_ptr<Plan>> plans_;
  bool last_epilogue_ = true;
};

}  // namespace cnnrun::gpu
