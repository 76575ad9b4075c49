// Kernel workbench (not a test): whether CUTLASS 3's Hopper convolution (TMA im2col loads, wgmma,
// warp-specialized, CollectiveBuilder's choices) beats what cnnrun runs today for ResNet-18's 3x3
// and 1x1 convolutions (or VGG-11-BN's 3x3 ones) at 16-bit storage. Each layer, channels last, FP16, bias +
// ReLU in the epilogue, timed on the same tensors as:
//   - cudnn: the executor's CudnnConv (cuDNN's search on the legacy API and on the graph API,
//     the faster kept, its fused bias + ReLU), as `--layout nhwc --precision fp16` runs it;
//   - three CUTLASS tiles, 128x64x64, 128x128x64 and 128x256x64 (M: output pixels, N: filters,
//     K: taps x channels), one CTA a cluster, the stage count from the shared memory the epilogue
//     leaves.
// Prints one line per layer (median ms, cuDNN's time over the faster tile's, CUTLASS's largest
// difference from cuDNN's outputs relative to their largest magnitude) and the totals. Built with
// the GPU executor and CUTLASS's headers, for sm_90a (wgmma), outside `all`:
//   cmake --build build --target conv_sm90_bench && build/conv_sm90_bench [IMAGES=1000] [INPUT=224]
//   [REPEATS=20] [NET=resnet18|vgg11]
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

// clang-format off: cutlass::KernelHardwareInfo first, the conv collectives name it without including it
#include "cutlass/kernel_hardware_info.hpp"
// clang-format on
#include "bench/bench_timing.h"
#include "cute/tensor.hpp"
#include "cutlass/conv/collective/collective_builder.hpp"
#include "cutlass/conv/convnd_problem_shape.hpp"
#include "cutlass/conv/device/conv_universal_adapter.hpp"
#include "cutlass/conv/kernel/conv_universal.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "engine/core/error.h"
#include "engine/executor.h"
#include "engine/gpu/activation.h"
#include "engine/gpu/check.h"
#include "engine/gpu/conv2d_cudnn.h"

using namespace cnnrun;
using namespace cnnrun::gpu;

namespace {

struct ConvShape {
  const char* name;
  int h, c, k, r, stride;  // input side, channels, filters, window, stride (padding r / 2)
};

// ResNet-18's convolutions past the stem at `input` (224: 56x56 after the stem and its pool).
std::vector<ConvShape> resnet18(int input) {
  const int h = input / 4;
  return {{"layer1 3x3", h, 64, 64, 3, 1},
          {"layer2.0.conv1 3x3/2", h, 64, 128, 3, 2},
          {"layer2.0.down 1x1/2", h, 64, 128, 1, 2},
          {"layer2 3x3", h / 2, 128, 128, 3, 1},
          {"layer3.0.conv1 3x3/2", h / 2, 128, 256, 3, 2},
          {"layer3 3x3", h / 4, 256, 256, 3, 1},
          {"layer4.0.conv1 3x3/2", h / 4, 256, 512, 3, 2},
          {"layer4 3x3", h / 8, 512, 512, 3, 1}};
}

// VGG-11-BN's convolutions past the stem (each after a 2x2/2 pool; 224: 112x112 first).
std::vector<ConvShape> vgg11(int input) {
  const int h = input / 2;
  return {{"features.4 3x3", h, 64, 128, 3, 1},       {"features.8 3x3", h / 2, 128, 256, 3, 1},
          {"features.11 3x3", h / 2, 256, 256, 3, 1}, {"features.15 3x3", h / 4, 256, 512, 3, 1},
          {"features.18 3x3", h / 4, 512, 512, 3, 1}, {"features.22 3x3", h / 8, 512, 512, 3, 1},
          {"features.25 3x3", h / 8, 512, 512, 3, 1}};
}

// The tensors of one layer, channels last, FP16 (the bias also FP32, as the executor keeps it).
struct Problem {
  int n, h, w, c, k, r, s, stride, pad, out_h, out_w;
  const __half *x, *wt;
  const float* bias;
  __half* y;
};

template <int TM, int TN>
struct Sm90Conv {
  using Element = cutlass::half_t;
  using Tile = cute::Shape<cute::Int<TM>, cute::Int<TN>, cute::Shape<cute::_64>>;
  using Cluster = cute::Shape<cute::_1, cute::_1, cute::_1>;
  // D = ReLU(acc + bias[filter]), FP32 arithmetic, one rounding to FP16; C (beta 0) never read.
  using Fusion = cutlass::epilogue::fusion::LinCombPerColBiasEltAct<cutlass::epilogue::thread::ReLu, Element,
                                                                    float, float>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, Element, cutlass::layout::TensorNHWC, 8,
      Element, cutlass::layout::TensorNHWC, 8, cutlass::epilogue::TmaWarpSpecialized, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::conv::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::conv::Operator::kFprop, Element,
      cutlass::layout::TensorNHWC, 8, Element, cutlass::layout::TensorNHWC, 8, float, Tile, Cluster,
      cutlass::conv::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      cutlass::conv::collective::KernelScheduleAuto>::CollectiveOp;
  using Shape = cutlass::conv::ConvProblemShape<cutlass::conv::Operator::kFprop, 2>;
  using Kernel = cutlass::conv::kernel::ConvUniversal<Shape, Mainloop, Epilogue>;
  using Op = cutlass::conv::device::ConvUniversalAdapter<Kernel>;

  Op op;
  DevBuf workspace;

  // Prepares op for q; false (and why) where CUTLASS cannot run it.
  bool init(const Problem& q, cudaStream_t s, std::string* why) {
    const Shape shape(cutlass::conv::Mode::kCrossCorrelation, {q.n, q.h, q.w, q.c}, {q.k, q.r, q.s, q.c},
                      {q.pad, q.pad}, {q.pad, q.pad}, {q.stride, q.stride}, {1, 1}, 1);
    // The output's strides, innermost first in CUTLASS's order: from the problem's packed NHWC ones.
    typename Kernel::StrideC stride_c;
    typename Kernel::StrideD stride_d;
    cute::for_each(cute::make_seq<cute::rank<0>(typename Kernel::StrideC{})>{}, [&](auto i) {
      cute::get<0, i>(stride_c) = shape.stride_C[Shape::RankT - 2 - i];
      cute::get<0, i>(stride_d) = shape.stride_C[Shape::RankT - 2 - i];
    });
    typename Op::Arguments args{};  // the GEMM-universal form's mode (where it has one): its default
    args.problem_shape = shape;
    args.mainloop = {reinterpret_cast<const Element*>(q.x), reinterpret_cast<const Element*>(q.wt)};
    args.epilogue = {
        {}, reinterpret_cast<const Element*>(q.y), stride_c, reinterpret_cast<Element*>(q.y), stride_d};
    args.epilogue.thread.alpha = 1.f;
    args.epilogue.thread.beta = 0.f;
    args.epilogue.thread.bias_ptr = q.bias;
    if (op.can_implement(args) != cutlass::Status::kSuccess) {
      *why = "cannot implement";
      return false;
    }
    const size_t bytes = Op::get_workspace_size(args);
    if (bytes > workspace.bytes()) workspace = DevBuf(bytes);
    const cutlass::Status st = op.initialize(args, workspace.get(), s);
    if (st != cutlass::Status::kSuccess) {
      *why = cutlass::cutlassGetStatusString(st);
      return false;
    }
    return true;
  }
  void run(cudaStream_t s) {
    if (op.run(s) != cutlass::Status::kSuccess) throw Error("CUTLASS: the convolution did not launch");
  }
};

std::vector<float> download_half(const __half* d, size_t count) {
  std::vector<__half> h(count);
  CUDA_CHECK(cudaMemcpy(h.data(), d, count * sizeof(__half), cudaMemcpyDeviceToHost));
  std::vector<float> f(count);
  for (size_t i = 0; i < count; ++i) f[i] = __half2float(h[i]);
  return f;
}

// max |a - b| over max |b|.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0, d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, std::fabs(double(b[i])));
    d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
  }
  return m > 0 ? d / m : d;
}

}  // namespace

int main(int argc, char** argv) {
  const int images = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int input = argc > 2 ? std::atoi(argv[2]) : 224;
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 20;
  const std::string net = argc > 4 ? argv[4] : "resnet18";
  if (images < 1 || input < 32 || input % 32 != 0 || repeats < 1 || (net != "resnet18" && net != "vgg11")) {
    std::fprintf(stderr,
                 "usage: %s [IMAGES>=1] [INPUT: a multiple of 32] [REPEATS>=1] [NET=resnet18|vgg11]\n",
                 argv[0]);
    return 2;
  }
  try {
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CudnnHandle h;
    const size_t ws_bytes = size_t{256} << 20;
    DevBuf ws(ws_bytes);
    std::printf("%s's convolutions + bias + ReLU, %d images at %dx%d, fp16 NHWC, median of %d (ms)\n",
                net == "vgg11" ? "VGG-11-BN" : "ResNet-18", images, input, input, repeats);
    std::printf("%-22s %9s %9s %9s %9s %7s %9s | %s\n", "layer", "cudnn", "128x64", "128x128", "128x256",
                "ratio", "max rel", "cudnn algorithm");
    std::mt19937 g(7);
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    double tot_cudnn = 0, tot_best = 0;
    Sm90Conv<128, 64> a;
    Sm90Conv<128, 128> b;
    Sm90Conv<128, 256> c;
    for (const ConvShape& l : net == "vgg11" ? vgg11(input) : resnet18(input)) {
      ConvParams p;
      p.filters = l.k;
      p.kernel_h = p.kernel_w = l.r;
      p.stride_h = p.stride_w = l.stride;
      p.pad_h = p.pad_w = l.r / 2;
      p.in_c = l.c;
      p.in_h = p.in_w = l.h;
      p.out_h = p.out_w = (l.h + 2 * (l.r / 2) - l.r) / l.stride + 1;
      const size_t nx = size_t(images) * l.h * l.h * l.c, nw = size_t(l.k) * l.r * l.r * l.c,
                   ny = size_t(images) * p.out_h * p.out_w * l.k;
      std::vector<__half> hx(nx), hw(nw), hbt(size_t(l.k));
      std::vector<float> hb(size_t(l.k));
      for (auto& v : hx) v = __float2half(d(g));
      const float scale = 1.f / std::sqrt(float(l.r * l.r * l.c));  // outputs of about unit size
      for (auto& v : hw) v = __float2half(d(g) * scale);
      for (size_t i = 0; i < hb.size(); ++i) hb[i] = d(g) * 0.1f, hbt[i] = __float2half(hb[i]);
      DevBuf x = upload(hx.data(), nx), w = upload(hw.data(), nw), bias = upload(hb.data(), hb.size()),
             bias_t = upload(hbt.data(), hbt.size()), y_cudnn(ny * sizeof(__half)),
             y_cutlass(ny * sizeof(__half));

      CudnnConv conv(p, ActFn{Act::kRelu});
      conv.set_format(Precision::kFp16, true);
      conv.set_graph_use(CudnnConv::GraphUse::kTimed, GpuTuning{}.graph_plans);  // as the executor's default
      conv.find(h, s, images, x.get(), w.get(), bias.as<float>(), bias_t.get(), nullptr, y_cudnn.get(),
                ws.get(), ws_bytes);
      const float t_cudnn = bench::median_ms(s, repeats, [&] {
        conv.forward(h, s, images, x.get(), w.get(), bias.as<float>(), bias_t.get(), nullptr, y_cudnn.get(),
                     ws.get(), ws_bytes);
      });
      const std::vector<float> ref = download_half(static_cast<const __half*>(y_cudnn.get()), ny);

      const Problem q{images,
                      l.h,
                      l.h,
                      l.c,
                      l.k,
                      l.r,
                      l.r,
                      l.stride,
                      l.r / 2,
                      int(p.out_h),
                      int(p.out_w),
                      static_cast<const __half*>(x.get()),
                      static_cast<const __half*>(w.get()),
                      bias.as<float>(),
                      static_cast<__half*>(y_cutlass.get())};
      float t_tile[3] = {-1.f, -1.f, -1.f};
      double err = 0;
      std::string why;
      auto try_tile = [&](auto& op, int i) {
        if (!op.init(q, s, &why)) return;
        t_tile[i] = bench::median_ms(s, repeats, [&] { op.run(s); });
        err = std::max(err, rel_diff(download_half(static_cast<const __half*>(y_cutlass.get()), ny), ref));
      };
      try_tile(a, 0);
      try_tile(b, 1);
      try_tile(c, 2);
      float best = -1.f;
      for (float t : t_tile)
        if (t > 0 && (best < 0 || t < best)) best = t;
      tot_cudnn += t_cudnn;
      tot_best += best > 0 ? best : t_cudnn;
      std::printf("%-22s %9.4f %9.4f %9.4f %9.4f %6.2fx %9.1e | %s%s\n", l.name, t_cudnn, t_tile[0],
                  t_tile[1], t_tile[2], best > 0 ? t_cudnn / best : 0.f, err, conv.algo_name().c_str(),
                  why.empty() ? "" : (" (CUTLASS: " + why + ")").c_str());
    }
    std::printf("%-22s %9.4f %9s %9s %9s %6.2fx  (the fastest tile each layer; cuDNN where none ran)\n",
                "total", tot_cudnn, "", "", "", tot_cudnn / tot_best);
    CUDA_CHECK(cudaStreamDestroy(s));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "conv_sm90_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
