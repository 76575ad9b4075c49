#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "engine/gpu/check.h"
#include "engine/gpu/conv2d_gemm.h"
#include "engine/gpu/grid_stride.h"
#include "engine/gpu/storage.cuh"

namespace cnnrun::gpu {

std::string gemm_cannot_run(const ConvParams& p, bool channels_last) {
  if (!channels_last) return "the gemm convolution runs channels last (--layout nhwc) only";
  if (p.kernel_h != 1 || p.kernel_w != 1) return "the gemm convolution runs 1x1 windows only";
  if (p.stride_h != 1 || p.stride_w != 1) return "the gemm convolution runs stride 1 only";
  if (p.pad_h != 0 || p.pad_w != 0) return "the gemm convolution runs unpadded convolutions only";
  if (p.dilated()) return "the gemm convolution runs undilated convolutions only";
  if (p.groups != 1) return "the gemm convolution runs groups 1 only";
  return "";
}

namespace {

template <typename T>
__global__ void scale_weights_kernel(const float* __restrict__ w, const T* __restrict__ scale, int64_t count,
                                     int64_t filters, int64_t channels, T* __restrict__ out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % channels, q = i / channels, img = q / filters;
    out[i] = to<T>(__fmul_rn(w[i % (filters * channels)], ld(scale[img * channels + c])));
  }
}

cudaDataType_t cuda_type(Storage t) {
  return t == Storage::kF16 ? CUDA_R_16F : t == Storage::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
}

}  // namespace

void launch_scale_weights(const float* w, const void* scale, Storage t, int64_t n, int64_t filters,
                          int64_t channels, void* out, cudaStream_t s) {
  const int64_t count = n * filters * channels;
  if (count <= 0) return;
  with_storage(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    scale_weights_kernel<T><<<grid_stride_blocks(count), kGridStrideThreads, 0, s>>>(
        w, static_cast<const T*>(scale), count, filters, channels, static_cast<T*>(out));
  });
  CUDA_CHECK_LAUNCH("scale_weights_kernel");
}

void GemmConv::run(cublasLtHandle_t lt, const ConvParams& p, int64_t n, Precision prec, const GemmIo& io,
                   bool relu, void* workspace, size_t workspace_bytes, cudaStream_t s) {
  const bool per_image = io.scale != nullptr, residual = io.z != nullptr;
  const Storage t = storage_of(prec);
  const int64_t K = p.filters, C = p.in_c, plane = p.out_h * p.out_w;
  const int64_t ld = io.y_ld > 0 ? io.y_ld : 0;
  if (ld > 0 && (ld < K || per_image || residual))
    throw Error("gemm convolution: an output slice of " + std::to_string(K) + " channels in pixels of " +
                std::to_string(ld) + (per_image || residual ? " with a scale or residual" : ""));
  // A slice's pointer is aligned to the largest power of two dividing its address (at most 256).
  const uintptr_t at = reinterpret_cast<uintptr_t>(io.y);
  const int align = ld > 0 ? static_cast<int>(std::min<uintptr_t>(at & (~at + 1), 256)) : 0;
  std::unique_ptr<LtGemm>& plan = plans_[{n, static_cast<int>(prec), per_image, residual, relu, ld, align}];
  if (!plan) {
    // Column-major: y^T (K x pixels, ld K) = W (stored C x K, ld C)^T * x^T (C x pixels, ld C).
    GemmSpec g;
    g.m = K, g.k = C;
    g.n = per_image ? plane : n * plane;
    g.trans_a = true;
    g.lda = C, g.ldb = C, g.ldd = ld > 0 ? ld : K;
    g.align_d = align;
    if (per_image) {
      g.batch = static_cast<int>(n);
      g.stride_a = K * C, g.stride_b = plane * C, g.stride_d = plane * K;
    }
    g.epilogue = relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    g.bias = io.bias;
    g.precision = prec;
    g.type = cuda_type(t);
    g.add_c = residual;
    auto made = std::make_unique<LtGemm>();
    if (!made->init(lt, g, workspace_bytes))
      throw Error(std::string("gemm convolution: cuBLASLt has no ") + precision_name(prec) +
                  " algorithm for a " + std::to_string(K) + "x" + std::to_string(C) + " matmul" +
                  (per_image ? " batched per image" : ""));
    plan = std::move(made);
  }
  const void* w = io.w;
  if (per_image) {
    launch_scale_weights(io.w_f32, io.scale, t, n, K, C, io.w_image, s);
    w = io.w_image;
  }
  plan->run(lt, w, io.x, io.z, io.y, workspace, workspace_bytes, s);
}

}  // namespace cnnrun::gpu
