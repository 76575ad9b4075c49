// cuDNN's graph API through the cuDNN frontend (the one file that includes it). Why the frontend
// rather than the legacy API alone: its operation graphs reach the engines the legacy API does
// not offer (Hopper's, and runtime-fused epilogues), and one graph carries the bias, a residual
// add and the activation into the convolution's kernel; why not the backend descriptors by hand:
// the frontend is NVIDIA's own library for building them (docs/architecture.md, "Libraries").
#include "engine/gpu/conv2d_cudnn_graph.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "engine/core/error.h"
#include "engine/gpu/check.h"

#if CNNRUN_HAVE_CUDNN_FE
#include <cudnn_frontend.h>
#endif

namespace cnnrun::gpu {

#if CNNRUN_HAVE_CUDNN_FE

namespace fe = cudnn_frontend;

namespace {

enum Uid : int64_t { kX = 1, kW, kBias, kZ, kY };

fe::DataType_t io_type(Precision p) {
  return p == Precision::kFp16   ? fe::DataType_t::HALF
         : p == Precision::kBf16 ? fe::DataType_t::BFLOAT16
                                 : fe::DataType_t::FLOAT;
}

// The activation as pointwise operations on t, or null when cuDNN's modes do not express it.
std::shared_ptr<fe::graph::Tensor_attributes> apply_act(
    fe::graph::Graph& g, const std::shared_ptr<fe::graph::Tensor_attributes>& t, const ActFn& a) {
  auto pw = [&](fe::PointwiseMode_t m) {
    return fe::graph::Pointwise_attributes().set_mode(m).set_compute_data_type(fe::DataType_t::FLOAT);
  };
  switch (a.kind) {
    case Act::kIdentity:
      return t;
    case Act::kRelu:
      return g.pointwise(t, pw(fe::PointwiseMode_t::RELU_FWD));
    case Act::kRelu6:
      return g.pointwise(t, pw(fe::PointwiseMode_t::RELU_FWD).set_relu_upper_clip(6.f));
    case Act::kLeakyRelu:
      return g.pointwise(t, pw(fe::PointwiseMode_t::RELU_FWD).set_relu_lower_clip_slope(a.slope));
    case Act::kSigmoid:
      return g.pointwise(t, pw(fe::PointwiseMode_t::SIGMOID_FWD));
    case Act::kTanh:
      return g.pointwise(t, pw(fe::PointwiseMode_t::TANH_FWD));
    case Act::kSilu:
      return g.pointwise(t, pw(fe::PointwiseMode_t::SWISH_FWD).set_swish_beta(1.f));
    case Act::kGelu:
      return g.pointwise(t, pw(fe::PointwiseMode_t::GELU_FWD));
    case Act::kGeluTanh:
      return g.pointwise(t, pw(fe::PointwiseMode_t::GELU_APPROX_TANH_FWD));
    case Act::kHardswish:
    case Act::kHardsigmoid:
      break;
  }
  return nullptr;
}

std::string msg(fe::error_t e) { return e.get_message(); }

// The frontend's message when no plan is left lists each candidate on a line of its own ("Plan at
// index i: Deselecting execution plan"); a report line keeps the first line and the count.
std::string one_line(const std::string& m) {
  size_t deselected = 0;
  for (size_t at = m.find("Deselecting execution plan"); at != std::string::npos;
       at = m.find("Deselecting execution plan", at + 1))
    ++deselected;
  std::string line = m.substr(0, m.find('\n'));
  if (deselected > 0)
    line += " (all " + std::to_string(deselected) +
            " candidates deselected by the precision's numerical notes: tensor cores or down-conversion "
            "at FP32, Winograd, FFT or reduced-precision reduction where excluded)";
  return line;
}

}  // namespace

struct CudnnGraphConv::Impl {
  ConvParams p;
  ActFn act;
  bool residual = false;
  int64_t y_ld = 0;  // y's values between pixels (a channel slice of a wider tensor); 0: K
  Precision prec = Precision::kFp16;
  bool split = false;  // split_operands
  std::string why;
  // The tuned engine, replayed for other batch sizes.
  bool tuned = false;
  int64_t engine = -1;
  std::unordered_map<fe::KnobType_t, int64_t> knobs;
  std::string engine_name;
  struct Built {
    fe::graph::Graph g;
    int64_t plan = -1;  // the executable plan's index
    int64_t ws = 0;
    std::vector<std::pair<int64_t, int64_t>> cands;  // before tune: built plans' indices, workspaces
  };
  std::map<int64_t, std::unique_ptr<Built>> by_n;
  std::unique_ptr<Built> pending;  // prepare's candidates for tune
  int64_t pending_n = -1;

  // The graph for n images with the tuned engine and knobs; cuDNN's first heuristic choice that
  // builds within ws_bytes when they cannot run n.
  std::unique_ptr<Built> replay(cudnnHandle_t h, int64_t n, size_t ws_bytes) {
    std::unique_ptr<Built> b;
    if (engine >= 0) {
      b = graph(h, n, false);
      if (!b) throw Error("cudnn graph convolution: " + why);
      int64_t need = 0;
      if (b->g.create_execution_plan(engine, knobs).is_good() && b->g.build_plan_at_index(0).is_good() &&
          b->g.get_workspace_size_plan_at_index(0, need).is_good() && need >= 0 &&
          static_cast<size_t>(need) <= ws_bytes)
        b->plan = 0, b->ws = need;
    }
    if (!b || b->plan < 0) {
      b = graph(h, n, true);
      if (!b) throw Error("cudnn graph convolution: " + why);
      const int64_t count = b->g.get_execution_plan_count();
      for (int64_t i = 0; i < count && b->plan < 0; ++i) {
        int64_t need = 0;
        if (b->g.build_plan_at_index(i).is_good() &&
            b->g.get_workspace_size_plan_at_index(i, need).is_good() && need >= 0 &&
            static_cast<size_t>(need) <= ws_bytes)
          b->plan = i, b->ws = need;
      }
      if (b->plan < 0)
        throw Error("cudnn graph convolution: no engine runs " + std::to_string(n) + " images within " +
                    std::to_string(ws_bytes) + " bytes of workspace");
    }
    return b;
  }

  // The operation graph for n images, heuristics queried and filtered to the precision's
  // arithmetic; null with why set when cuDNN cannot express or support it.
  std::unique_ptr<Built> graph(cudnnHandle_t h, int64_t n, bool heuristics) {
    auto b = std::make_unique<Built>();
    fe::graph::Graph& g = b->g;
    const fe::DataType_t t = io_type(prec);
    g.set_io_data_type(t)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const int64_t C = p.in_c, H = p.in_h, W = p.in_w, K = p.filters, R = p.kernel_h, S = p.kernel_w;
    const int64_t Cg = p.group_channels();  // a grouped conv: w holds C / groups channels
    const int64_t OH = p.out_h, OW = p.out_w;
    auto X = g.tensor(fe::graph::Tensor_attributes()
                          .set_name("x")
                          .set_uid(kX)
                          .set_data_type(t)
                          .set_dim({n, C, H, W})
                          .set_stride({C * H * W, 1, C * W, C}));
    auto Wt = g.tensor(fe::graph::Tensor_attributes()
                           .set_name("w")
                           .set_uid(kW)
                           .set_data_type(t)
                           .set_dim({K, Cg, R, S})
                           .set_stride({Cg * R * S, 1, Cg * S, Cg}));
    auto y = g.conv_fprop(X, Wt,
                          fe::graph::Conv_fprop_attributes()
                              .set_padding({p.pad_h, p.pad_w})
                              .set_stride({p.stride_h, p.stride_w})
                              .set_dilation({p.dilation_h, p.dilation_w})
                              .set_compute_data_type(fe::DataType_t::FLOAT));
    auto B = g.tensor(fe::graph::Tensor_attributes()
                          .set_name("bias")
                          .set_uid(kBias)
                          .set_data_type(fe::DataType_t::FLOAT)
                          .set_dim({1, K, 1, 1})
                          .set_stride({K, 1, K, K}));
    auto add = fe::graph::Pointwise_attributes()
                   .set_mode(fe::PointwiseMode_t::ADD)
                   .set_compute_data_type(fe::DataType_t::FLOAT);
    y = g.pointwise(y, B, add);
    if (residual) {
      auto Z = g.tensor(fe::graph::Tensor_attributes()
                            .set_name("z")
                            .set_uid(kZ)
                            .set_data_type(t)
                            .set_dim({n, K, OH, OW})
                            .set_stride({K * OH * OW, 1, K * OW, K}));
      y = g.pointwise(y, Z, add);
    }
    y = apply_act(g, y, act);
    if (!y) {
      why = "cuDNN's pointwise modes have no " + act_fn_name(act);
      return nullptr;
    }
    y->set_output(true).set_uid(kY).set_data_type(t).set_dim({n, K, OH, OW});
    const int64_t ld = y_ld > 0 ? y_ld : K;
    y->set_stride({ld * OH * OW, 1, ld * OW, ld});
    fe::error_t e = g.validate();
    if (e.is_good()) e = g.build_operation_graph(h);
    if (e.is_bad()) {
      why = "cuDNN's graph API: " + msg(e);
      return nullptr;
    }
    if (!heuristics) return b;
    e = g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK});
    if (e.is_bad()) {
      why = "cuDNN's heuristics: " + msg(e);
      return nullptr;
    }
    filter(g);
    e = g.check_support(h);
    if (e.is_bad()) {
      why = "no engine of cuDNN's supports it: " + one_line(msg(e));
      return nullptr;
    }
    return b;
  }

  // The precision's arithmetic, as for the legacy API (conv2d_cudnn.cpp): FP32 keeps FP32
  // products (no tensor cores, no down-conversion), TF32 no conversion to 16 bits, and no
  // precision takes Winograd's transforms; split operands (3xTF32) no FFT either, and no
  // reduction below FP32.
  void filter(fe::graph::Graph& g) const {
    std::vector<fe::NumericalNote_t> no = {
        fe::NumericalNote_t::WINOGRAD, fe::NumericalNote_t::WINOGRAD_TILE_4x4,
        fe::NumericalNote_t::WINOGRAD_TILE_6x6, fe::NumericalNote_t::WINOGRAD_TILE_13x13};
    if (prec == Precision::kFp32 || prec == Precision::kTf32)
      no.push_back(fe::NumericalNote_t::DOWN_CONVERT_INPUTS);
    if (prec == Precision::kFp32) no.push_back(fe::NumericalNote_t::TENSOR_CORE);
    if (split) {
      no.push_back(fe::NumericalNote_t::FFT);
      no.push_back(fe::NumericalNote_t::REDUCED_PRECISION_REDUCTION);
    }
    g.deselect_numeric_notes(no);
  }

  static std::unordered_map<int64_t, void*> pack(const GraphConvIo& io) {
    std::unordered_map<int64_t, void*> m = {{kX, const_cast<void*>(io.x)},
                                            {kW, const_cast<void*>(io.w)},
                                            {kBias, const_cast<float*>(io.bias)},
                                            {kY, io.y}};
    if (io.z) m[kZ] = const_cast<void*>(io.z);
    return m;
  }
};

bool CudnnGraphConv::built() { return true; }

CudnnGraphConv::CudnnGraphConv(const ConvParams& p, ActFn act, bool residual, Precision prec,
                               bool split_operands, int64_t y_ld)
    : impl_(std::make_unique<Impl>()) {
  if (y_ld > 0 && (y_ld < p.filters || residual))
    throw Error("cudnn graph convolution: an output slice of " + std::to_string(p.filters) +
                " channels in pixels of " + std::to_string(y_ld) + (residual ? " with a residual" : ""));
  impl_->y_ld = y_ld;
  impl_->p = p;
  impl_->split = split_operands;
  impl_->act = act;
  impl_->residual = residual;
  impl_->prec = prec;
}

CudnnGraphConv::~CudnnGraphConv() = default;

bool CudnnGraphConv::tuned() const { return impl_->tuned; }
int64_t CudnnGraphConv::workspace(int64_t n) const {
  const Impl& m = *impl_;
  const auto it = m.by_n.find(n);
  return m.tuned && it != m.by_n.end() && it->second->plan >= 0 ? it->second->ws : -1;
}
std::string CudnnGraphConv::why() const { return impl_->why; }

void CudnnGraphConv::prepare(void* handle, int64_t n, size_t ws_bytes, int max_plans) {
  Impl& m = *impl_;
  const auto h = static_cast<cudnnHandle_t>(handle);
  if (m.tuned) {
    if (m.by_n.count(n) == 0) m.by_n[n] = m.replay(h, n, ws_bytes);
    return;
  }
  if (m.pending && m.pending_n == n) return;
  m.pending.reset();
  m.pending_n = n;
  std::unique_ptr<Impl::Built> b = m.graph(h, n, true);
  if (!b) return;
  const int64_t count = b->g.get_execution_plan_count();
  for (int64_t i = 0; i < count && static_cast<int>(b->cands.size()) < max_plans; ++i) {
    int64_t need = 0;
    if (b->g.build_plan_at_index(i).is_good() && b->g.get_workspace_size_plan_at_index(i, need).is_good() &&
        need >= 0 && static_cast<size_t>(need) <= ws_bytes)
      b->cands.push_back({i, need});
  }
  if (b->cands.empty()) {
    m.why = "none of cuDNN's " + std::to_string(count) + " candidate engines built within " +
            std::to_string(ws_bytes) + " bytes of workspace";
    return;
  }
  m.pending = std::move(b);
}

float CudnnGraphConv::tune(void* handle, cudaStream_t s, int64_t n, const GraphConvIo& io, void* ws,
                           size_t ws_bytes, int max_plans) {
  Impl& m = *impl_;
  m.tuned = false;
  m.by_n.clear();
  const auto h = static_cast<cudnnHandle_t>(handle);
  if (cudnnSetStream(h, s) != CUDNN_STATUS_SUCCESS) throw Error("cudnnSetStream failed");
  if (!m.pending || m.pending_n != n) prepare(handle, n, ws_bytes, max_plans);
  std::unique_ptr<Impl::Built> b = std::move(m.pending);
  if (!b) return -1.f;
  auto vp = Impl::pack(io);
  float best = -1.f;
  std::string last;
  for (const auto& [i, need] : b->cands) {
    if (static_cast<size_t>(need) > ws_bytes) continue;
    fe::error_t e = b->g.execute_plan_at_index(h, vp, ws, i);  // warm-up (and the check that it runs)
    // After a failed call the plan is dropped below; the rest of its timings are never read.
    const float ms_best = least_ms(s, 3, [&] {
      if (e.is_good()) e = b->g.execute_plan_at_index(h, vp, ws, i);
    });
    if (e.is_bad()) {
      last = msg(e);
      continue;
    }
    if (best < 0 || ms_best < best) {
      best = ms_best;
      b->plan = i;
      b->ws = need;
    }
  }
  CUDA_CHECK(cudaStreamSynchronize(s));
  if (best < 0) {
    m.why = "no engine ran: " + last;
    return -1.f;
  }
  if (b->g.get_engine_and_knobs_at_index(b->plan, m.engine, m.knobs).is_bad()) m.engine = -1;
  if (b->g.get_plan_name_at_index(b->plan, m.engine_name).is_bad()) m.engine_name = "?";
  m.tuned = true;
  m.by_n[n] = std::move(b);
  return best;
}

void CudnnGraphConv::forward(void* handle, cudaStream_t s, int64_t n, const GraphConvIo& io, void* ws,
                             size_t ws_bytes) {
  Impl& m = *impl_;
  if (!m.tuned) throw Error("cudnn graph convolution: forward before tune");
  const auto h = static_cast<cudnnHandle_t>(handle);
  if (cudnnSetStream(h, s) != CUDNN_STATUS_SUCCESS) throw Error("cudnnSetStream failed");
  auto it = m.by_n.find(n);
  if (it == m.by_n.end()) it = m.by_n.emplace(n, m.replay(h, n, ws_bytes)).first;
  if (static_cast<size_t>(it->second->ws) > ws_bytes)
    throw Error("cudnn graph convolution: " + m.engine_name + " needs " + std::to_string(it->second->ws) +
                " bytes of workspace for " + std::to_string(n) + " images, " + std::to_string(ws_bytes) +
                " reserved");
  auto vp = Impl::pack(io);
  const fe::error_t e = it->second->g.execute_plan_at_index(h, vp, ws, it->second->plan);
  if (e.is_bad()) throw Error("cudnn graph convolution: " + msg(e));
}

std::string CudnnGraphConv::name() const {
  const Impl& m = *impl_;
  std::string what = "bias";
  if (m.residual) what += "+add";
  if (m.act.kind != Act::kIdentity) what += "+" + act_fn_name(m.act);
  return "cudnn graph:" + m.engine_name + "(fused " + what + ")";
}

#else  // built without the cuDNN frontend's headers

struct CudnnGraphConv::Impl {};
bool CudnnGraphConv::built() { return false; }
CudnnGraphConv::CudnnGraphConv(const ConvParams&, ActFn, bool, Precision, bool, int64_t) {}
CudnnGraphConv::~CudnnGraphConv() = default;
bool CudnnGraphConv::tuned() const { return false; }
int64_t CudnnGraphConv::workspace(int64_t) const { return -1; }
std::string CudnnGraphConv::why() const {
  return "built without the cuDNN frontend (scripts/fetch_headers.sh)";
}
void CudnnGraphConv::prepare(void*, int64_t, size_t, int) {}
float CudnnGraphConv::tune(void*, cudaStream_t, int64_t, const GraphConvIo&, void*, size_t, int) {
  return -1.f;
}
void CudnnGraphConv::forward(void*, cudaStream_t, int64_t, const GraphConvIo&, void*, size_t) {
  throw Error("cudnn graph convolution: " + why());
}
std::string CudnnGraphConv::name() const { return "cudnn graph"; }

#endif

}  // namespace cnnrun::gpu
