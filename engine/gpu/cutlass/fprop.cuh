// One CUTLASS 3xTF32 forward convolution kernel per thread-block tile, instantiated by the
// tile_*.cu files (one kernel a file, so they compile in parallel). The kernel is CUTLASS's
// Ampere-generation implicit GEMM (mma.sync, cp.async multistage, kOptimized iterators), which
// runs unchanged on sm_90; its epilogue is CUTLASS's "with broadcast" one:
//   y = clamp(conv(x) + beta * z + bias, lo, hi)
// with the bias a per-filter vector, z the residual (beta 1, or 0 and never read) and the clamp
// bounds giving identity, ReLU or ReLU6 at run time, so one kernel serves every fused epilogue.
// y and z may be a channel slice of a wider NHWC tensor (Problem::y_c_stride, the layout's pixel
// stride, which the epilogue's output iterator follows): a split conv's two launches each write
// their filters' channels of one output.
#pragma once

#include <string>

#include "cutlass/conv/conv2d_problem_size.h"
#include "cutlass/conv/device/implicit_gemm_convolution.h"
#include "cutlass/conv/kernel/default_conv2d_fprop_with_broadcast.h"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/epilogue/thread/linear_combination_bias_elementwise.h"
#include "engine/core/error.h"
#include "engine/gpu/check.h"
#include "engine/gpu/cutlass/fprop.h"

namespace cnnrun::gpu::cutlass_conv {

template <int TileM, int TileN, int TileK, int WarpM, int WarpN, int Stages>
struct Fprop3xTf32 {
  using Layout = cutlass::layout::TensorNHWC;
  using Clamp = cutlass::epilogue::thread::Clamp<float>;
  using Epilogue = cutlass::epilogue::thread::LinearCombinationBiasElementwise<
      float, float, float, float, float, 128 / 32, Clamp, cutlass::plus<float>, /*StoreT=*/false, float>;
  using Kernel = typename cutlass::conv::kernel::DefaultConv2dFpropWithBroadcast<
      float, Layout, float, Layout, float, Layout, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
      cutlass::gemm::GemmShape<TileM, TileN, TileK>, cutlass::gemm::GemmShape<WarpM, WarpN, TileK>,
      cutlass::gemm::GemmShape<16, 8, 8>, Epilogue,
      cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>, Stages,
      cutlass::arch::OpMultiplyAddFastF32, cutlass::conv::IteratorAlgorithm::kOptimized>::Kernel;
  using Op = cutlass::conv::device::ImplicitGemmConvolution<Kernel>;

  static void run(const Problem& q, cudaStream_t s) {
    const cutlass::conv::Conv2dProblemSize size(
        q.n, q.in_h, q.in_w, q.in_c, q.filters, q.kernel_h, q.kernel_w, q.out_h, q.out_w, q.pad_h, q.pad_w,
        q.stride_h, q.stride_w, q.dilation_h, q.dilation_w, cutlass::conv::Mode::kCrossCorrelation);
    const Layout x_layout = Layout::packed({q.n, q.in_h, q.in_w, q.in_c});
    const Layout w_layout = Layout::packed({q.filters, q.kernel_h, q.kernel_w, q.in_c});
    const int yc = q.y_c_stride > 0 ? q.y_c_stride : q.filters;  // a channel slice of a wider tensor
    const Layout y_layout(yc, q.out_w * yc, q.out_h * q.out_w * yc);
    float* y = q.y;
    const float* z = q.z ? q.z : q.y;  // never read when beta is 0
    typename Epilogue::Params out(1.f, q.z ? 1.f : 0.f, Clamp::Arguments{q.lo, q.hi});
    typename Op::Arguments args(size, {const_cast<float*>(q.x), x_layout},
                                {const_cast<float*>(q.wt), w_layout}, {const_cast<float*>(z), y_layout},
                                {y, y_layout}, out, cutlass::conv::SplitKMode::kSerial,
                                const_cast<float*>(q.bias), nullptr, 0, 0);
    Op op;
    cutlass::Status st = op.can_implement(args);
    if (st == cutlass::Status::kSuccess) st = op.initialize(args, nullptr, s);
    if (st == cutlass::Status::kSuccess) st = op.run(s);
    if (st != cutlass::Status::kSuccess)
      throw Error(std::string("CUTLASS refused the convolution: ") + cutlass::cutlassGetStatusString(st));
    CUDA_CHECK(cudaGetLastError());
  }
};

}  // namespace cnnrun::gpu::cutlass_conv
