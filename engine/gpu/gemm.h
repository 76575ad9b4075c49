// One cuBLASLt matmul, planned once (descriptor, layouts, the heuristic's algorithm) and run
// many times: D = op(A) * op(B) (+ C) (+ bias per row of D, then ReLU, in the epilogue),
// optionally a strided batch. FP32 operands by default, with FP32 compute (CUBLAS_COMPUTE_32F,
// never _FAST_TF32) unless the run's --precision allows cuBLAS to round them
// (CUBLAS_COMPUTE_32F_FAST_*); FP16 or BF16 operands (GemmSpec::type) accumulate in FP32.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "engine/core/precision.h"

namespace cnnrun::gpu {

struct GemmSpec {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  bool row_major = false;  // all of A, B and D stored row-major (CUBLASLT_ORDER_ROW)
  int64_t lda = 0, ldb = 0, ldd = 0;
  int batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_d = 0;  // elements between batch members
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // length m, for the BIAS epilogues, of `type`
  Precision precision = Precision::kFp32;
  // A, B, C, D and the bias: CUDA_R_32F, CUDA_R_16F or CUDA_R_16BF.
  cudaDataType_t type = CUDA_R_32F;
  // run() adds a C of D's layout (its own pointer) to the product, before the epilogue.
  bool add_c = false;
  // The alignment in bytes D's (and C's) pointer is known to have, where less than cuBLASLt's
  // default assumption (256): a channel slice of a wider tensor. 0: the default.
  int align_d = 0;
};

// The cuBLAS compute type for a precision: 32F, 32F_FAST_TF32, 32F_FAST_16F, 32F_FAST_16BF.
cublasComputeType_t compute_type(Precision p);
// " [tf32]" etc. for a layer's algorithm name; empty for FP32.
std::string precision_tag(Precision p);

class LtGemm {
 public:
  LtGemm() = default;
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  ~LtGemm();

  // Builds the plan; false (and nothing thrown) when cuBLASLt offers no algorithm for it.
  bool init(cublasLtHandle_t lt, const GemmSpec& spec, size_t workspace_bytes);
  void run(cublasLtHandle_t lt, const float* a, const float* b, float* d, void* workspace,
           size_t workspace_bytes, cudaStream_t stream) const {
    run(lt, a, b, nullptr, d, workspace, workspace_bytes, stream);
  }
  // c: read when the spec has add_c (else ignored).
  void run(cublasLtHandle_t lt, const void* a, const void* b, const void* c, void* d, void* workspace,
           size_t workspace_bytes, cudaStream_t stream) const;
  const GemmSpec& spec() const { return spec_; }

 private:
  void destroy();
  GemmSpec spec_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, ld_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  size_t algo_ws_ = 0;
  bool ok_ = false;
};

}  // namespace cnnrun::gpu
