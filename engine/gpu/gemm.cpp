#include "engine/gpu/gemm.h"

#include "engine/gpu/check.h"

namespace cnnrun::gpu {

namespace {

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                                   bool row_major, int batch, int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  if (row_major) {
    cublasLtOrder_t order = CUBLASLT_ORDER_ROW;
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof(order)));
  }
  if (batch > 1) {
    int32_t count = batch;
    CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                  sizeof(stride)));
  }
  return l;
}

}  // namespace

cublasComputeType_t compute_type(Precision p) {
  switch (p) {
    case Precision::kTf32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case Precision::kFp16:
      return CUBLAS_COMPUTE_32F_FAST_16F;
    case Precision::kBf16:
      return CUBLAS_COMPUTE_32F_FAST_16BF;
    case Precision::kFp32:
      break;
  }
  return CUBLAS_COMPUTE_32F;
}

std::string precision_tag(Precision p) {
  return p == Precision::kFp32 ? std::string() : std::string(" [") + precision_name(p) + "]";
}

LtGemm::~LtGemm() { destroy(); }

void LtGemm::destroy() {
  if (la_) cublasLtMatrixLayoutDestroy(la_);
  if (lb_) cublasLtMatrixLayoutDestroy(lb_);
  if (ld_) cublasLtMatrixLayoutDestroy(ld_);
  if (op_) cublasLtMatmulDescDestroy(op_);
  la_ = lb_ = ld_ = nullptr;
  op_ = nullptr;
  ok_ = false;
}

bool LtGemm::init(cublasLtHandle_t lt, const GemmSpec& s, size_t workspace_bytes) {
  destroy();
  spec_ = s;
  // The exactness rule: FP32 compute, so no TF32 whatever the math-mode defaults are, unless
  // the run's precision allows a faster one (16-bit operands are already rounded: FP32 sums).
  const cublasComputeType_t ct = s.type == CUDA_R_32F ? compute_type(s.precision) : CUBLAS_COMPUTE_32F;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&op_, ct, CUDA_R_32F));
  cublasOperation_t ta = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_EPILOGUE, &s.epilogue, sizeof(s.epilogue)));
  if (s.bias) {
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &s.bias, sizeof(s.bias)));
    int64_t zero = 0;  // one bias vector for every batch member
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &zero, sizeof(zero)));
  }
  // Stored shapes: A is m x k (k x m when transposed), B is k x n (n x k), D is m x n.
  const cudaDataType_t t = s.type;
  la_ = s.trans_a ? make_layout(t, s.k, s.m, s.lda, s.row_major, s.batch, s.stride_a)
                  : make_layout(t, s.m, s.k, s.lda, s.row_major, s.batch, s.stride_a);
  lb_ = s.trans_b ? make_layout(t, s.n, s.k, s.ldb, s.row_major, s.batch, s.stride_b)
                  : make_layout(t, s.k, s.n, s.ldb, s.row_major, s.batch, s.stride_b);
  ld_ = make_layout(t, s.m, s.n, s.ldd, s.row_major, s.batch, s.stride_d);

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = workspace_bytes;
  CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  if (s.align_d > 0) {
    const uint32_t align = static_cast<uint32_t>(s.align_d);
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                      &align, sizeof(align)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                      &align, sizeof(align)));
  }
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, op_, la_, lb_, ld_, ld_, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || found == 0) {
    destroy();
    return false;
  }
  CUBLAS_CHECK(st);
  algo_ = res.algo;
  algo_ws_ = res.workspaceSize;
  ok_ = true;
  return true;
}

void LtGemm::run(cublasLtHandle_t lt, const void* a, const void* b, const void* c, void* d, void* workspace,
                 size_t workspace_bytes, cudaStream_t stream) const {
  if (!ok_) throw Error("engine/gpu/gemm.cpp: LtGemm::run on a plan cuBLASLt rejected");
  if (algo_ws_ > workspace_bytes) throw Error("engine/gpu/gemm.cpp: cuBLASLt workspace too small");
  if (spec_.add_c && !c) throw Error("engine/gpu/gemm.cpp: LtGemm::run without the C its plan adds");
  const float one = 1.f, zero = 0.f;
  CUBLAS_CHECK(cublasLtMatmul(lt, op_, &one, a, la_, b, lb_, spec_.add_c ? &one : &zero, spec_.add_c ? c : d,
                              ld_, d, ld_, &algo_, workspace, workspace_bytes, stream));
}

}  // namespace cnnrun::gpu
