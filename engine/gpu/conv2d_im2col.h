// The `im2col` convolution: an explicit column matrix per image, then one strided-batched
// cuBLASLt GEMM per chunk of images with the bias (and a following ReLU) in the GEMM.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <string>

#include "engine/gpu/activation.h"
#include "engine/gpu/check.h"
#include "engine/gpu/gemm.h"
#include "engine/layers/conv.h"

namespace cnnrun::gpu {

// Whether im2col computes this convolution: dense ones (groups 1), dilated or not. False with
// the reason in *why for a grouped one.
bool im2col_can_run(const ConvParams& p, std::string* why);

class Im2colConv {
 public:
  // p must pass im2col_can_run. act: a ReLU is applied by the cuBLASLt epilogue, any other
  // activation by one in-place pass after each GEMM. weight and bias on the host (bias:
  // `filters` values), dev_bias the same bias on the device.
  Im2colConv(const ConvParams& p, ActFn act, const float* weight, const float* bias, const float* dev_bias);

  // Column-matrix bytes of one image; the caller's column buffer holds at least one.
  size_t col_bytes_per_image() const;
  // y = act(conv(x) + bias) for n images; w the [F, C*KH*KW] weights on the device, col a
  // scratch buffer of col_bytes, ws cuBLASLt's.
  void forward(cublasLtHandle_t lt, const float* x, const float* w, float* y, int64_t n, float* col,
               size_t col_bytes, void* ws, size_t ws_bytes, cudaStream_t s);
  std::string algo_name() const;
  // The operands' format for the GEMMs from now on (drops the plans made for another).
  void set_precision(Precision p);

 private:
  // By images per GEMM call. `bias_epilogue` false when cuBLASLt refused the row-major form
  // with the bias epilogue: then the column-major form with the bias as an extra K row.
  struct Plan {
    LtGemm gemm;
    bool bias_epilogue = false;
  };
  Plan& plan(cublasLtHandle_t lt, int64_t images, size_t ws_bytes);
  ConvParams p_;
  ActFn act_;
  const float* bias_;
  DevBuf w_ext_;  // [F][K+1]: the weights with the bias as the last column
  std::map<int64_t, std::unique_ptr<Plan>> plans_;
  bool last_bias_epilogue_ = true;
  Precision prec_ = Precision::kFp32;
};

}  // namespace cnnrun::gpu
