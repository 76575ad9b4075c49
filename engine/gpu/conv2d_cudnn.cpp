// cuDNN 9's legacy convolution API, the one file that includes cudnn.h. The math type is
// CUDNN_FMA_MATH: CUDNN_DEFAULT_MATH lets cuDNN use TF32 tensor cores on Hopper, which would
// break the engine's FP32 exactness. cudnnConvolutionBiasActivationForward fuses bias and ReLU
// only with IMPLICIT_PRECOMP_GEMM; any other algorithm cuDNN's search prefers, and any other
// activation, runs as a plain convolution followed by our bias+activation kernel. Grouped and
// depthwise convolutions are cuDNN's grouped convolution (cudnnSetConvolutionGroupCount, the
// filter descriptor holding channels / groups), dilation is in the convolution descriptor.
#include "engine/gpu/conv2d_cudnn.h"

#include <cudnn.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include "engine/executor.h"
#include "engine/gpu/activation.h"
#include "engine/gpu/check.h"
#include "engine/gpu/conv2d_cudnn_graph.h"
#include "engine/gpu/nhwc.h"

#define CUDNN_CHECK(call) ::cnnrun::gpu::check_cudnn((call), #call, __FILE__, __LINE__)

namespace cnnrun::gpu {

namespace {

void check_cudnn(cudnnStatus_t s, const char* call, const char* file, int line) {
  if (s != CUDNN_STATUS_SUCCESS) fail_call(call, file, line, cudnnGetErrorString(s));
}

cudnnHandle_t H(const CudnnHandle& h) { return static_cast<cudnnHandle_t>(h.get()); }

const char* algo_str(cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM:
      return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM:
      return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM:
      return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT:
      return "DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT:
      return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING:
      return "FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD:
      return "WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED:
      return "WINOGRAD_NONFUSED";
    default:
      return "UNKNOWN";
  }
}

}  // namespace

CudnnHandle::CudnnHandle() {
  cudnnHandle_t h = nullptr;
  CUDNN_CHECK(cudnnCreate(&h));
  h_ = h;
}
CudnnHandle::~CudnnHandle() {
  if (h_) cudnnDestroy(static_cast<cudnnHandle_t>(h_));
}

std::string cudnn_version_string() {
  size_t v = cudnnGetVersion();
  auto fmt = [](size_t x) {
    return std::to_string(x / 10000) + "." + std::to_string(x / 100 % 100) + "." + std::to_string(x % 100);
  };
  return "cuDNN " + fmt(v) + " (built with " + fmt(CUDNN_VERSION) + ")";
}

struct CudnnConv::Impl {
  ConvParams p;
  ActFn act;  // after the bias (and the residual add)
  bool residual = false;
  bool split = false;  // split_operands
  GraphUse graph_use = GraphUse::kTimed;
  int graph_plans = GpuTuning{}.graph_plans;  // the graph API's candidates built and timed (set_graph_use)
  std::unique_ptr<CudnnGraphConv> graph;      // find chose cuDNN's graph API (channels last)
  std::unique_ptr<CudnnGraphConv> cand;       // prepared for the next find
  std::string graph_note;                     // why not, when it was tried
  std::string choice_note;                    // find's final timings of the graph and the legacy call
  // set_out_slice: the graph API's y is a channel slice, y_ld values between pixels (0: none); find
  // chose a graph that writes it (graph_sliced), or why none could (slice_note).
  int64_t y_ld = 0;
  bool graph_sliced = false;
  std::string slice_note;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, b = nullptr;
  cudnnTensorDescriptor_t bt = nullptr;  // the bias in the tensors' format (channels last)
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnActivationDescriptor_t actd = nullptr;
  int64_t n_set = -1;  // batch size the x/y descriptors hold
  bool found = false;
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnMathType_t math = CUDNN_FMA_MATH;  // the picked algorithm's (set on the descriptor)
  bool fused = false;
  Precision prec = Precision::kFp32;
  bool nhwc = false;  // channels-last tensors in the precision's storage format

  cudnnDataType_t dtype() const {
    if (!nhwc) return CUDNN_DATA_FLOAT;
    return prec == Precision::kFp16   ? CUDNN_DATA_HALF
           : prec == Precision::kBf16 ? CUDNN_DATA_BFLOAT16
                                      : CUDNN_DATA_FLOAT;
  }
  cudnnTensorFormat_t format() const { return nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW; }
  bool half_data() const { return dtype() != CUDNN_DATA_FLOAT; }
  // Channels last, cudnnConvolutionBiasActivationForward adds the residual too, y = act(conv + z +
  // bias), for a ReLU or none after (its activations); whether it runs is found by trying.
  bool z_in_call = false;
  // The legacy call's activation: with a residual add the call does not take, none (the add and
  // act are a pass after).
  ActFn call_act() const { return residual && !z_in_call ? ActFn{} : act; }
  void set_actd() {
    CUDNN_CHECK(cudnnSetActivationDescriptor(
        actd, call_act().kind == Act::kRelu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY,
        CUDNN_NOT_PROPAGATE_NAN, 0.0));
  }
  // The fused call (descriptors set for n): alpha2 = 1 with the residual when it takes it; else
  // z = y with alpha2 = 0 (the call requires a z tensor, and may alias it with y).
  cudnnStatus_t fused_call(cudnnHandle_t h, const void* xp, const void* wp, const void* bias_t, const void* z,
                           void* yp, void* ws, size_t ws_bytes) const {
    const float one = 1.f, zero = 0.f;
    return cudnnConvolutionBiasActivationForward(h, &one, x, xp, w, wp, conv, algo, ws, ws_bytes,
                                                 z_in_call ? &one : &zero, y, z_in_call ? z : yp,
                                                 nhwc ? bt : b, bias_t, actd, y, yp);
  }

  // The math type the descriptor allows for the precision.
  cudnnMathType_t allowed() const {
    if (half_data()) return CUDNN_TENSOR_OP_MATH;
    return prec == Precision::kFp32   ? CUDNN_FMA_MATH
           : prec == Precision::kFp16 ? CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
                                      : CUDNN_DEFAULT_MATH;
  }
  // Whether a search result's math type stays within the precision: FMA math always; on FP16 or
  // BF16 tensors any (they are the precision's own format); TF32 tensor cores (default /
  // tensor-op math on float data) unless FP32; conversion to FP16 only for FP16.
  bool math_ok(cudnnMathType_t t) const {
    if (t == CUDNN_FMA_MATH || half_data()) return true;
    if (prec == Precision::kFp32) return false;
    return t != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION || prec == Precision::kFp16;
  }

  // cudnnConvolutionBiasActivationForward: FP32 NCHW, IMPLICIT_PRECOMP_GEMM with a ReLU or
  // nothing after; channels last, a ReLU after any algorithm or nothing after
  // IMPLICIT_PRECOMP_GEMM (cuDNN's rule), where the call ran once on the search's tensors.
  bool fusable() const {
    const bool precomp = algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
    const Act a = call_act().kind;
    if (!nhwc) return precomp && (a == Act::kRelu || a == Act::kIdentity);
    return (a == Act::kRelu || (a == Act::kIdentity && precomp));
  }

  // The filter and convolution descriptors for the format (the tensors' follow in set_n).
  void describe() {
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, dtype(), format(), static_cast<int>(p.filters),
                                           static_cast<int>(p.group_channels()), static_cast<int>(p.kernel_h),
                                           static_cast<int>(p.kernel_w)));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        conv, static_cast<int>(p.pad_h), static_cast<int>(p.pad_w), static_cast<int>(p.stride_h),
        static_cast<int>(p.stride_w), static_cast<int>(p.dilation_h), static_cast<int>(p.dilation_w),
        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, static_cast<int>(p.groups)));
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv, allowed()));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(bt, format(), dtype(), 1, static_cast<int>(p.filters), 1, 1));
    n_set = -1;
  }

  void set_n(int64_t n) {
    if (n == n_set) return;
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, format(), dtype(), static_cast<int>(n),
                                           static_cast<int>(p.in_c), static_cast<int>(p.in_h),
                                           static_cast<int>(p.in_w)));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, format(), dtype(), static_cast<int>(n),
                                           static_cast<int>(p.filters), static_cast<int>(p.out_h),
                                           static_cast<int>(p.out_w)));
    n_set = n;
  }

  // The legacy API's call for the chosen algorithm (descriptors set for n): one fused call, or
  // the convolution and our bias+activation pass; with a residual the call did not take, then
  // y = act(y + z).
  void legacy(cudnnHandle_t h, cudaStream_t s, int64_t n, const void* xp, const void* wp, const float* bias,
              const void* bias_t, const void* z, void* yp, void* ws, size_t ws_bytes) const {
    const float one = 1.f, zero = 0.f;
    const ActFn a = residual ? ActFn{} : act;  // the bias pass's: a residual is added after it
    if (fused) {
      CUDNN_CHECK(fused_call(h, xp, wp, nhwc ? bias_t : static_cast<const void*>(bias), z, yp, ws, ws_bytes));
    } else {
      CUDNN_CHECK(cudnnConvolutionForward(h, &one, x, xp, w, wp, conv, algo, ws, ws_bytes, &zero, y, yp));
      if (nhwc)
        launch_bias_act_nhwc(yp, storage_of(prec), bias, n * p.out_h * p.out_w, static_cast<int>(p.filters),
                             a, s);
      else
        launch_bias_act(static_cast<float*>(yp), bias, n, static_cast<int>(p.filters), p.out_h * p.out_w, a,
                        s);
    }
    if (residual && !(fused && z_in_call))
      launch_add_storage({yp, z}, yp, nhwc ? storage_of(prec) : Storage::kF32,
                         n * p.out_h * p.out_w * p.filters, act, s);
  }
};

CudnnConv::CudnnConv(const ConvParams& p, ActFn act, bool residual, bool split_operands)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.p = p;
  m.split = split_operands;
  m.act = act;
  m.residual = residual;
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&m.x));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&m.y));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&m.b));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&m.bt));
  CUDNN_CHECK(cudnnCreateFilterDescriptor(&m.w));
  CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&m.conv));
  CUDNN_CHECK(cudnnCreateActivationDescriptor(&m.actd));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(m.b, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                                         static_cast<int>(p.filters), 1, 1));
  m.describe();
  m.set_actd();
}

CudnnConv::~CudnnConv() {
  Impl& m = *impl_;
  if (m.actd) cudnnDestroyActivationDescriptor(m.actd);
  if (m.conv) cudnnDestroyConvolutionDescriptor(m.conv);
  if (m.w) cudnnDestroyFilterDescriptor(m.w);
  if (m.b) cudnnDestroyTensorDescriptor(m.b);
  if (m.bt) cudnnDestroyTensorDescriptor(m.bt);
  if (m.y) cudnnDestroyTensorDescriptor(m.y);
  if (m.x) cudnnDestroyTensorDescriptor(m.x);
}

// find's final timings of the graph API's engine against the legacy call: rounds of one run each.
constexpr int kAlternations = 5;

// Winograd trades accuracy for arithmetic: its transforms amplify rounding, and on the H100
// under compute-sanitizer (which changes the timings the search ranks by) cuDNN picked
// WINOGRAD_NONFUSED for a 16 -> 20 filter 5x5 conv and was 2e-3 off the reference, TF32-like.
// Only algorithms with FP32-level results may be picked. Split operands (3xTF32) also rule out
// the FFTs: their transforms mix the TF32 parts before the tensor cores round them.
static bool fp32_accurate(cudnnConvolutionFwdAlgo_t a, bool split) {
  if (split && (a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING))
    return false;
  return a != CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD && a != CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}

bool CudnnConv::found() const { return impl_->found; }

const std::string& CudnnConv::choice_note() const { return impl_->choice_note; }

void CudnnConv::find(const CudnnHandle& h, cudaStream_t s, int64_t n, const void* x, const void* w,
                     const float* bias, const void* bias_t, const void* z, void* y, void* ws, size_t ws_bytes,
                     const OutSlice* slice) {
  Impl& m = *impl_;
  if (m.y_ld > 0 && !slice)
    throw Error("cudnn convolution: find without the output slice set_out_slice named");
  m.set_n(n);
  m.graph.reset();
  m.graph_sliced = false;
  m.graph_note.clear();
  m.choice_note.clear();
  m.slice_note.clear();
  CUDNN_CHECK(cudnnSetStream(H(h), s));
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int returned = 0;
  CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
      H(h), m.x, x, m.w, w, m.conv, m.y, y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf, ws, ws_bytes));
  int pick = -1;
  for (int i = 0; i < returned && pick < 0; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= ws_bytes && m.math_ok(perf[i].mathType) &&
        fp32_accurate(perf[i].algo, m.split))
      pick = i;
  if (pick < 0)
    throw Error(std::string("cudnn convolution: cudnnFindConvolutionForwardAlgorithmEx found no ") +
                (m.prec == Precision::kFp32 ? "FP32 (FMA math)" : precision_name(m.prec)) +
                " algorithm for " + std::to_string(m.p.in_c) + "x" + std::to_string(m.p.in_h) + "x" +
                std::to_string(m.p.in_w) + " -> " + std::to_string(m.p.filters) + " filters " +
                std::to_string(m.p.kernel_h) + "x" + std::to_string(m.p.kernel_w) +
                (m.p.groups > 1 ? " in " + std::to_string(m.p.groups) + " groups" : std::string()) +
                (m.p.dilated()
                     ? " dilated " + std::to_string(m.p.dilation_h) + "x" + std::to_string(m.p.dilation_w)
                     : std::string()));
  m.algo = perf[pick].algo;
  m.math = perf[pick].mathType;
  CUDNN_CHECK(cudnnSetConvolutionMathType(m.conv, m.math));
  m.found = true;
  m.z_in_call = m.residual && m.nhwc && (m.act.kind == Act::kRelu || m.act.kind == Act::kIdentity);
  m.set_actd();
  m.fused = m.fusable();
  // Best of 3 after the calls above, by CUDA events on the stream (least_ms).
  if (m.fused && m.nhwc) {
    // Whether cuDNN fuses this configuration is known by trying (a status other than success: its
    // fused kernels do not cover every format and algorithm), and whether the fused call is
    // faster than the convolution and our bias+activation pass by timing both: for some small
    // planes cuDNN's fused kernel was slower.
    m.fused = m.fused_call(H(h), x, w, bias_t, z, y, ws, ws_bytes) == CUDNN_STATUS_SUCCESS;
    if (!m.fused && m.z_in_call) {  // the bias alone in the call, the add a pass after
      m.z_in_call = false;
      m.set_actd();
      m.fused = m.fusable() && m.fused_call(H(h), x, w, bias_t, z, y, ws, ws_bytes) == CUDNN_STATUS_SUCCESS;
    }
    CUDA_CHECK(cudaStreamSynchronize(s));
    if (m.fused) {
      const float fused_ms =
          least_ms(s, 3, [&] { m.legacy(H(h), s, n, x, w, bias, bias_t, z, y, ws, ws_bytes); });
      m.fused = false;
      const float apart_ms =
          least_ms(s, 3, [&] { m.legacy(H(h), s, n, x, w, bias, bias_t, z, y, ws, ws_bytes); });
      m.fused = fused_ms <= apart_ms;
    }
  }
  if (!m.fused && m.z_in_call) {
    m.z_in_call = false;
    m.set_actd();
  }
  if (!m.nhwc || m.graph_use == GraphUse::kOff) return;
  // cuDNN's graph API on the same buffers: its fastest engine against the legacy way just chosen.
  // With an output slice, the graph writes the slice, and the legacy call's time counts the
  // concat's copy of its output that the slice saves; where no engine writes the slice, the
  // graph writes y as the legacy call does.
  bool sliced = m.y_ld > 0;
  auto g = m.cand ? std::move(m.cand)
                  : std::make_unique<CudnnGraphConv>(m.p, m.act, m.residual, m.prec, m.split, m.y_ld);
  float graph_ms =
      g->tune(h.get(), s, n, GraphConvIo{x, w, bias, z, sliced ? slice->y : y}, ws, ws_bytes, m.graph_plans);
  if (graph_ms < 0 && sliced) {
    m.slice_note = g->why();
    sliced = false;
    g = std::make_unique<CudnnGraphConv>(m.p, m.act, m.residual, m.prec, m.split);
    graph_ms = g->tune(h.get(), s, n, GraphConvIo{x, w, bias, z, y}, ws, ws_bytes, m.graph_plans);
  }
  if (graph_ms < 0) {
    m.graph_note = g->why();
    return;
  }
  if (m.graph_use == GraphUse::kFirst) {
    m.graph = std::move(g);
    m.graph_sliced = sliced;
    return;
  }
  // graph_ms is the least of its candidates' least of three (a pick among several, so biased
  // low), timed at another moment than the legacy call's: the two finalists are timed again,
  // kAlternations rounds alternating (the first of a round swapped each round), and the medians
  // decide (docs/performance.md, Session 33).
  const GraphConvIo io{x, w, bias, z, sliced ? slice->y : y};
  std::vector<float> graph_t, legacy_t;
  for (int r = 0; r < kAlternations; ++r)
    for (int k = 0; k < 2; ++k) {
      if ((k + r) % 2 == 0)
        graph_t.push_back(least_ms(s, 1, [&] { g->forward(h.get(), s, n, io, ws, ws_bytes); }));
      else
        legacy_t.push_back(
            least_ms(s, 1, [&] { m.legacy(H(h), s, n, x, w, bias, bias_t, z, y, ws, ws_bytes); }));
    }
  auto median = [](std::vector<float>& v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  const float graph_med = median(graph_t), legacy_med = median(legacy_t) + (sliced ? slice->copy_ms : 0.f);
  std::ostringstream note;
  note.precision(3);
  note << std::fixed << "graph API " << g->name() << " " << graph_med << " ms, legacy call " << legacy_med
       << " ms" << (sliced ? " with the concat's copy" : "") << " (medians of " << kAlternations
       << ", alternating)";
  m.choice_note = note.str();
  if (graph_med < legacy_med) {
    m.graph = std::move(g);
    m.graph_sliced = sliced;
  }
}

bool CudnnConv::set_out_slice(int64_t ld) {
  Impl& m = *impl_;
  if (ld < 0 || (ld > 0 && (ld < m.p.filters || m.residual)))
    throw Error("cudnn convolution: an output slice of " + std::to_string(m.p.filters) +
                " channels in pixels of " + std::to_string(ld) + (m.residual ? " with a residual" : ""));
  if (ld == m.y_ld) return false;
  m.y_ld = ld;
  m.found = false;
  m.graph.reset();
  m.graph_sliced = false;
  m.cand.reset();
  return true;
}

bool CudnnConv::writes_slice() const { return impl_->graph && impl_->graph_sliced; }

void CudnnConv::set_format(Precision p, bool nhwc) {
  Impl& m = *impl_;
  if (p == m.prec && nhwc == m.nhwc) return;
  m.prec = p;
  m.nhwc = nhwc;
  m.found = false;
  m.graph.reset();
  m.cand.reset();
  m.describe();
}

bool CudnnConv::set_graph_use(GraphUse u, int plans) {
  Impl& m = *impl_;
  if (plans < 1) throw Error("cuDNN's graph API: " + std::to_string(plans) + " candidate plans (at least 1)");
  if (u == m.graph_use && plans == m.graph_plans) return false;
  m.graph_use = u;
  m.graph_plans = plans;
  m.found = false;
  m.graph.reset();
  m.cand.reset();
  return true;
}

void CudnnConv::prepare(const CudnnHandle& h, int64_t n, size_t ws_bytes) {
  Impl& m = *impl_;
  if (!m.nhwc || m.graph_use == GraphUse::kOff || !CudnnGraphConv::built()) return;
  if (m.found) {
    if (m.graph) m.graph->prepare(h.get(), n, ws_bytes, m.graph_plans);
    return;
  }
  if (!m.cand) m.cand = std::make_unique<CudnnGraphConv>(m.p, m.act, m.residual, m.prec, m.split, m.y_ld);
  m.cand->prepare(h.get(), n, ws_bytes, m.graph_plans);
}

bool CudnnConv::uses_graph() const { return impl_->graph != nullptr; }

void CudnnConv::forward(const CudnnHandle& h, cudaStream_t s, int64_t n, const void* x, const void* w,
                        const float* bias, const void* bias_t, const void* z, void* y, void* ws,
                        size_t ws_bytes) {
  Impl& m = *impl_;
  if (!m.found) throw Error("cudnn convolution: forward before find");
  if (m.graph) return m.graph->forward(h.get(), s, n, GraphConvIo{x, w, bias, z, y}, ws, ws_bytes);
  m.set_n(n);
  CUDNN_CHECK(cudnnSetStream(H(h), s));
  size_t need = 0;
  CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(H(h), m.x, m.w, m.conv, m.y, m.algo, &need));
  if (need > ws_bytes) {
    // The search ran on the tuning block; an algorithm's workspace can grow faster than the
    // images (FFT_TILING picked on a small block wanted 604 MB for 3847 images). Take cuDNN's
    // best-ranked heuristic choice that fits, host-side only, so this is safe inside a graph
    // capture.
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int returned = 0;
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(H(h), m.x, m.w, m.conv, m.y,
                                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
    const cudnnConvolutionFwdAlgo_t was = m.algo;
    for (int i = 0; i < returned; ++i) {
      size_t mem = 0;
      if (perf[i].status != CUDNN_STATUS_SUCCESS || !m.math_ok(perf[i].mathType) ||
          !fp32_accurate(perf[i].algo, m.split) ||
          cudnnGetConvolutionForwardWorkspaceSize(H(h), m.x, m.w, m.conv, m.y, perf[i].algo, &mem) !=
              CUDNN_STATUS_SUCCESS ||
          mem > ws_bytes)
        continue;
      m.algo = perf[i].algo;
      m.math = perf[i].mathType;
      m.fused = m.fusable() && !m.nhwc;  // channels last: fused only as the search tried it
      need = mem;
      break;
    }
    if (m.algo == was)
      throw Error("cudnn convolution: " + std::string(algo_str(m.algo)) + " needs " + std::to_string(need) +
                  " bytes of workspace for " + std::to_string(n) + " images, " + std::to_string(ws_bytes) +
                  " reserved, and no other algorithm within " + precision_name(m.prec) + " fits");
    CUDNN_CHECK(cudnnSetConvolutionMathType(m.conv, m.math));
  }
  m.legacy(H(h), s, n, x, w, bias, bias_t, z, y, ws, ws_bytes);
}

int64_t CudnnConv::workspace(const CudnnHandle& h, int64_t n) {
  Impl& m = *impl_;
  if (!m.found) return -1;
  if (m.graph) return m.graph->workspace(n);
  m.set_n(n);
  size_t need = 0;
  CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(H(h), m.x, m.w, m.conv, m.y, m.algo, &need));
  return static_cast<int64_t>(need);
}

std::string CudnnConv::algo_name() const {
  const Impl& m = *impl_;
  if (!m.found) return "cudnn";
  const std::string math = m.nhwc ? std::string(" [") + storage_name(storage_of(m.prec)) + " NHWC" +
                                        (m.math == CUDNN_FMA_MATH ? ""
                                         : m.half_data()          ? ", tensor cores"
                                                                  : ", tf32 tensor cores allowed") +
                                        "]"
                           : m.math == CUDNN_FMA_MATH                        ? ""
                           : m.math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ? " [fp16 tensor cores]"
                                                                             : " [tf32 tensor cores allowed]";
  // With an output slice no engine could write: why not.
  const std::string slice =
      m.slice_note.empty() ? "" : " (no engine writes the concat's slice: " + m.slice_note + ")";
  if (m.graph) return m.graph->name() + " [" + storage_name(storage_of(m.prec)) + " NHWC]" + slice;
  // After find, z_in_call holds only with the fused call (it is cleared otherwise).
  const ActFn la = m.call_act();
  const std::string act =
      (m.z_in_call ? "+add" : "") + (la.kind == Act::kIdentity ? "" : "+" + act_fn_name(la));
  const std::string add =
      m.residual && !m.z_in_call
          ? "+add" + (m.act.kind == Act::kIdentity ? "" : "+" + act_fn_name(m.act)) + " kernel"
          : "";
  // Where the graph API was tried and could not run it, the report says why.
  const std::string graph = m.graph_note.empty() ? "" : " (graph API: " + m.graph_note + ")";
  return std::string("cudnn:") + algo_str(m.algo) + (m.p.groups > 1 ? "[groups]" : "") +
         (m.fused ? "(fused bias" + act + ")" : "+bias" + act + " kernel") + add + math + graph + slice;
}

}  // namespace cnnrun::gpu
