// The GPU executor: plans the network once (which layers fuse, which buffers alias), uploads
// the weights, then streams blocks of images through it.
//
// Pipeline. The batch is cut into blocks sized from cudaMemGetInfo; block b runs on stream
// b % S with that stream's own buffers (a "slot"): raw uint8 pixels are copied from pinned
// host memory (the data set's own pixel buffer, registered with cudaHostRegister, or a pinned
// staging buffer if registering fails), normalised on the GPU, run through every layer, and
// only the predictions (and the output layer's values when asked) come back. Before a slot
// takes its next block the host waits for the slot's previous one, so at most S blocks are in
// flight: copies of one block overlap the compute of the others, and the host reads each
// block's events while the GPU works on the rest. With RunOptions::resident the pixels are
// uploaded to device memory before the clock and each block's copy is device to device.
//
// Timing. CUDA events are recorded between the stages of every block on its own stream, all
// read relative to one start event, so each stage is an interval on one GPU timeline. A
// layer's time is the sum of its intervals over all blocks; the copy time not hidden behind
// compute is the part of the copy intervals' union that no compute interval covers.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>

#include "engine/gpu/check.h"
#include "engine/gpu/conv2d_cudnn.h"
#include "engine/gpu/conv2d_im2col.h"
#include "engine/gpu/conv2d_implicit.h"
#include "engine/gpu/gemm.h"
#include "engine/gpu/kernels.h"
#include "engine/gpu_api.h"
#include "engine/layers/activation.h"
#include "engine/layers/batchnorm.h"
#include "engine/layers/conv.h"
#include "engine/layers/fc.h"
#include "engine/layers/merge.h"
#include "engine/layers/pool.h"
#include "engine/layers/simple.h"

namespace cnnrun {

namespace gpu {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

constexpr int kDefaultStreams = 3;
constexpr int64_t kDefaultBlock = 4096;         // images; large enough to fill the GPU per layer
constexpr size_t kLtWorkspace = 32u << 20;      // cuBLASLt's recommended workspace on Hopper
constexpr size_t kColBudget = 256u << 20;       // im2col column buffer per stream (at most)
constexpr size_t kCudnnWorkspace = 256u << 20;  // cuDNN workspace per stream (at most)
constexpr int kTuneRepeats = 3;

enum class Op { kConv, kFc, kAct, kPool, kIdentity, kAffine, kAdd, kConcat, kSoftmax, kFused };

const char* const kAlgos[] = {"implicit", "im2col", "cudnn"};

struct ConvState {
  ConvParams p;
  std::string chosen;   // for this run: implicit | im2col | cudnn
  std::string tuned;    // auto's pick, kept across runs with the same block size
  int64_t tuned_n = 0;  // the block size it was timed on
  std::string tune_note;
  DevBuf w, wt, bias;
  DevBuf wt_tc[4];  // for the tensor-core kernel per Precision, when the conv can fuse its pool
  bool tc_ok = false, tc_ok_u8 = false;  // the tensor-core kernel can run it (reading floats / bytes)
  DevBuf wt_x16;                         // FP32 reading bytes: exact pixels, FP16 products (u8_exact)
  float x16_scale = 1.f;                 // ... and its accumulators' scale
  std::unique_ptr<Im2colConv> im2col;
  std::unique_ptr<CudnnConv> cudnn;
};

struct Step {
  Op op = Op::kIdentity;
  int layer = 0;
  int out = 0;           // buffer index
  std::vector<int> ins;  // buffer indices
  Shape in_shape, out_shape;
  ActKind act = ActKind::kNone;  // kAct: the activation; kConv/kFc: fused into the epilogue
  int fused_consumer = -1;       // kConv/kFc: the activation layer computed in this epilogue
  int fused_producer = -1;       // kFused: the layer whose epilogue computes this one
  // kConv: the 2x2/2 max-pool after the fused ReLU that the implicit kernel can compute too
  // (then neither the conv's nor the ReLU's output exists); kPool: that conv.
  int pool_layer = -1;
  int pool_conv = -1;
  // kConv: the only reader of the network input, and the implicit kernel can read the bytes
  // (with and without its pool fused)
  bool u8_input = false, u8_input_pool = false;
  DevBuf w, b, scale, shift;
  std::unique_ptr<ConvState> conv;
  std::map<int64_t, std::unique_ptr<LtGemm>> fc_plans;  // by images
};

// One stream and everything a block needs on it.
struct Slot {
  cudaStream_t stream = nullptr;
  int64_t block = 0;
  DevBuf in_u8, pred;
  std::vector<DevBuf> bufs;
  DevBuf col, lt_ws, cudnn_ws;
  PinnedBuf pred_host, probs_host, staging;
  std::unique_ptr<CudnnHandle> cudnn;
  std::vector<cudaEvent_t> ev;
  DevBuf labels;                   // the block's labels (so a captured graph needs no per-block argument)
  cudaGraphExec_t exec = nullptr;  // the block's launches after its H2D copy, for blocks of exec_n
  int64_t exec_n = 0;
  int64_t first = -1, n = 0;  // block in flight (first < 0: none)

  Slot() = default;
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;
  void drop_graph() {
    if (exec) cudaGraphExecDestroy(exec);
    exec = nullptr;
    exec_n = 0;
  }
  ~Slot() {
    drop_graph();
    for (cudaEvent_t e : ev) cudaEventDestroy(e);
    if (stream) cudaStreamDestroy(stream);
  }
};

// Merged union of intervals.
std::vector<std::pair<double, double>> merge(std::vector<std::pair<double, double>> v) {
  std::sort(v.begin(), v.end());
  std::vector<std::pair<double, double>> out;
  for (auto& iv : v) {
    if (iv.second <= iv.first) continue;
    if (!out.empty() && iv.first <= out.back().second)
      out.back().second = std::max(out.back().second, iv.second);
    else
      out.push_back(iv);
  }
  return out;
}
double length(const std::vector<std::pair<double, double>>& v) {
  double s = 0;
  for (auto& iv : v) s += iv.second - iv.first;
  return s;
}
double overlap(const std::vector<std::pair<double, double>>& a,
               const std::vector<std::pair<double, double>>& b) {
  double s = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    double lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) s += hi - lo;
    if (a[i].second < b[j].second)
      ++i;
    else
      ++j;
  }
  return s;
}

// Records a timing event; inside a stream capture it becomes an event-record node of the graph
// (a plain cudaEventRecord there would only be a capture-internal marker).
// Outside a capture the external flag is an error (cudaErrorIllegalState).
void record(cudaEvent_t e, cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(s, &st));
  if (st == cudaStreamCaptureStatusActive)
    CUDA_CHECK(cudaEventRecordWithFlags(e, s, cudaEventRecordExternal));
  else
    CUDA_CHECK(cudaEventRecord(e, s));
}

std::string fmt_ms(double s) {
  std::ostringstream o;
  o.precision(3);
  o << std::fixed << s * 1e3 << " ms";
  return o.str();
}

class GpuExecutor : public Executor {
 public:
  explicit GpuExecutor(const Network& net) : net_(net) {
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaGetDeviceProperties(&prop_, 0));
    CUBLAS_CHECK(cublasLtCreate(&lt_));
    if (const char* no = std::getenv("CNNRUN_GPU_OFF")) {
      const std::string v = no;
      fuse_pool_ = v.find("pool") == std::string::npos;
      fuse_u8_ = v.find("u8") == std::string::npos;
      graphs_ = v.find("graph") == std::string::npos;
      tc_ = v.find("tc") == std::string::npos;
      exact_ = v.find("exact") == std::string::npos;
    }
    plan();
  }
  ~GpuExecutor() override {
    slots_.clear();
    steps_.clear();
    if (lt_) cublasLtDestroy(lt_);
  }

  std::string name() const override { return "gpu"; }

  std::string fused_into(int index) const override {
    if (index < 0 || index >= static_cast<int>(steps_.size())) return "";
    const Step& s = steps_[static_cast<size_t>(index)];
    const Step* conv = s.op == Op::kConv ? &s : nullptr;
    if (s.op == Op::kFused && steps_[static_cast<size_t>(s.fused_producer)].op == Op::kConv)
      conv = &steps_[static_cast<size_t>(s.fused_producer)];
    if (conv && fuses_pool(*conv, conv->conv->chosen))
      return net_.layers[static_cast<size_t>(conv->pool_layer)]->name;
    return s.fused_consumer >= 0 ? net_.layers[static_cast<size_t>(s.fused_consumer)]->name : "";
  }

  RunResult run(const Dataset& data, const RunOptions& opt) override;
  std::vector<Tensor> forward_layers(const Dataset& data, int64_t first, int64_t n) override;

 private:
  const Network& net_;
  cudaDeviceProp prop_{};
  cublasLtHandle_t lt_ = nullptr;
  std::vector<Step> steps_;
  std::vector<int64_t> buf_floats_;  // per image, by buffer index; buffer 0 = the network input
  bool uploaded_ = false;
  DevBuf pre_scale_, pre_shift_;
  DevBuf exact_scale_, exact_shift_;  // u8_exact staging: 1 and -offset per channel (empty: no offsets)
  std::vector<std::unique_ptr<Slot>> slots_;
  int slot_streams_ = 0;
  int64_t slot_block_ = 0;
  int64_t slot_cap_ =
      0;  // the room under RunOptions::gpu_memory (less the resident images) the slots were sized for
  bool slot_col_ = false, slot_cudnn_ = false;  // the slots have im2col / cuDNN workspaces
  bool any_auto_ = false;
  // Fusions into the implicit kernel; CNNRUN_GPU_OFF=pool,u8 turns them off (to measure).
  bool fuse_pool_ = true, fuse_u8_ = true;
  // CNNRUN_GPU_OFF=graph: launch every block's kernels directly (to measure what graphs gain);
  // =tc: the FFMA kernel where the 3xTF32 tensor-core one could run. (Choosing per layer by
  // timing each kernel alone was tried and dropped: conv3 alone is faster with FFMAs, yet the
  // whole run on three streams was up to 0.9 ms slower, and erratic over block sizes.)
  // =exact: the 3xTF32 products where the first conv could take exact pixels (u8_exact).
  bool graphs_ = true, tc_ = true, exact_ = true;
  std::string forced_algo_;            // the last run's RunOptions::conv_algo
  Precision prec_ = Precision::kFp32;  // the last run's RunOptions::precision (forward_layers uses it)
  int64_t gpu_memory_ = 0;             // the last run's RunOptions::gpu_memory

  // Whether conv step `st` run with `algo` computes its pool / reads the uint8 input.
  bool fuses_pool(const Step& st, const std::string& algo) const {
    return st.pool_layer >= 0 && fuse_pool_ && algo == "implicit";
  }
  bool fuses_u8(const Step& st, const std::string& algo) const {
    return (fuses_pool(st, algo) ? st.u8_input_pool : st.u8_input) && fuse_u8_ && algo == "implicit";
  }
  // The tensor-core kernel's arithmetic for this run's precision, as the report names it.
  std::string tc_name() const {
    switch (prec_) {
      case Precision::kTf32:
        return "TF32 tensor cores, ";
      case Precision::kFp16:
        return "FP16 tensor cores, ";
      case Precision::kBf16:
        return "BF16 tensor cores, ";
      case Precision::kFp32:
        break;
    }
    return "3xTF32 tensor cores, ";
  }
  // The operands' format from now on: plans made for another are dropped (cuBLASLt's, cuDNN's
  // search, auto's picks, the captured graphs).
  void set_precision(Precision p) {
    if (p == prec_) return;
    prec_ = p;
    for (Step& st : steps_) {
      st.fc_plans.clear();
      if (!st.conv) continue;
      st.conv->tuned.clear();
      st.conv->tuned_n = 0;
      if (st.conv->im2col) st.conv->im2col->set_precision(p);
      if (st.conv->cudnn) st.conv->cudnn->set_precision(p);
    }
    for (auto& sp : slots_) sp->drop_graph();
  }
  bool uses_tc(const Step& st, const std::string& algo) const {  // needs the weights uploaded
    return fuses_pool(st, algo) && tc_ && st.conv->wt_tc[0].get() != nullptr &&
           (fuses_u8(st, algo) ? st.conv->tc_ok_u8 : st.conv->tc_ok);
  }
  bool uses_exact(const Step& st, const std::string& algo) const {  // u8_exact this run
    return prec_ == Precision::kFp32 && exact_ && st.conv->wt_x16.get() != nullptr && fuses_u8(st, algo) &&
           uses_tc(st, algo);
  }
  bool pool_fused(const Step& st) const {  // kPool: computed by its conv this run
    return st.pool_conv >= 0 && fuses_pool(steps_[static_cast<size_t>(st.pool_conv)],
                                           steps_[static_cast<size_t>(st.pool_conv)].conv->chosen);
  }
  bool input_fused() const {  // no preprocess pass: the first conv reads the bytes
    for (const Step& st : steps_)
      if (st.op == Op::kConv && fuses_u8(st, st.conv->chosen)) return true;
    return false;
  }
  bool launches(const Step& st) const {
    return st.op != Op::kFused && st.op != Op::kIdentity && !(st.op == Op::kPool && pool_fused(st));
  }

  void plan();
  void upload_weights();
  void resolve_algos(const std::string& forced, int64_t block, bool any_tuning);
  void ensure_slots(int streams, int64_t block, int64_t images, int64_t cap, int64_t reserved,
                    std::vector<std::string>* notes);
  bool may_use(const char* algo) const;

  DevBuf upload_resident(const Dataset& data, int64_t count);
  void copy_in(Slot& s, const Dataset& data, int64_t first, int64_t n, bool staged,
               const uint8_t* resident = nullptr);
  void run_layers(Slot& s, int64_t n, bool events, int ev_base);
  void run_step(Step& st, Slot& s, int64_t n);
  struct BlockOut {  // what a block's launches after its H2D copy write to
    int out_buf;
    int64_t out_size;
    bool want_probs;
    unsigned long long* correct;
  };
  void enqueue_compute(Slot& s, int64_t n, const BlockOut& o);
  void capture(Slot& s, int64_t n, const BlockOut& o);
  void run_conv(Step& st, Slot& s, int64_t n, const std::string& algo);
  void time_conv(Step& st, Slot& s, int64_t n, const std::string& algo);
  float time_ms(Step& st, Slot& s, int64_t n, const std::string& algo, cudaEvent_t e0, cudaEvent_t e1);
  void tune(Slot& s, const Dataset& data, int64_t n, std::vector<std::string>* notes);
  void warm(Slot& s, const Dataset& data, int64_t n, std::vector<std::string>* notes);
  std::string step_algo(const Step& st) const;
};

// ---------------------------------------------------------------------------------------------
// Planning: fusion and buffers (no GPU work).

void GpuExecutor::plan() {
  const size_t L = net_.layers.size();
  std::vector<std::vector<int>> consumers(L);
  for (size_t i = 0; i < L; ++i)
    for (int j : net_.layers[i]->inputs)
      if (j >= 0) consumers[static_cast<size_t>(j)].push_back(static_cast<int>(i));

  buf_floats_.assign(1, net_.input.size());
  std::vector<int> out_buf(L, 0);
  auto buf_of = [&](int layer) { return layer < 0 ? 0 : out_buf[static_cast<size_t>(layer)]; };
  auto new_buf = [&](const Shape& s) {
    buf_floats_.push_back(s.size());
    return static_cast<int>(buf_floats_.size() - 1);
  };

  steps_.resize(L);
  for (size_t i = 0; i < L; ++i) {
    const Layer& l = *net_.layers[i];
    Step& st = steps_[i];
    st.layer = static_cast<int>(i);
    st.in_shape = l.in_shapes[0];
    st.out_shape = l.out_shape;
    for (int j : l.inputs) st.ins.push_back(buf_of(j));

    if (st.op == Op::kFused) {  // set when its producer was planned
      out_buf[i] = st.ins[0];
      st.out = st.ins[0];
      continue;
    }
    bool identity = l.has(kCapIdentity) || (l.has(kCapFoldable) && l.folded);
    if (identity) {
      st.op = Op::kIdentity;
      out_buf[i] = st.ins[0];
      st.out = st.ins[0];
      continue;
    }
    if (auto* c = dynamic_cast<const ConvLayer*>(&l)) {
      st.op = Op::kConv;
      st.conv = std::make_unique<ConvState>();
      st.conv->p = c->p;
    } else if (dynamic_cast<const FcLayer*>(&l)) {
      st.op = Op::kFc;
    } else if (auto* a = dynamic_cast<const ActivationLayer*>(&l)) {
      st.op = Op::kAct;
      st.act = a->p.kind;
    } else if (dynamic_cast<const PoolLayer*>(&l)) {
      st.op = Op::kPool;
    } else if (dynamic_cast<const BatchnormLayer*>(&l)) {
      st.op = Op::kAffine;
    } else if (dynamic_cast<const AddLayer*>(&l)) {
      st.op = Op::kAdd;
    } else if (dynamic_cast<const ConcatLayer*>(&l)) {
      st.op = Op::kConcat;
    } else if (dynamic_cast<const SoftmaxLayer*>(&l)) {
      st.op = Op::kSoftmax;
    } else {
      throw Error(l.loc.str() + ": layer '" + l.name + "': type '" + l.type + "' has no GPU implementation");
    }
    // A ReLU that is the only reader of a conv/fc output runs in that layer's epilogue: all three
    // convolution algorithms and the fc GEMM can apply it, so which layers are materialised
    // never depends on the algorithm chosen. (tanh/sigmoid run as their own pass.)
    if ((st.op == Op::kConv || st.op == Op::kFc) && consumers[i].size() == 1 &&
        static_cast<int>(i) != net_.output) {
      int j = consumers[i][0];
      auto* a = dynamic_cast<const ActivationLayer*>(net_.layers[static_cast<size_t>(j)].get());
      if (a && a->p.kind == ActKind::kRelu) {
        st.act = ActKind::kRelu;
        st.fused_consumer = j;
        steps_[static_cast<size_t>(j)].op = Op::kFused;
        steps_[static_cast<size_t>(j)].fused_producer = static_cast<int>(i);
        // ... and a 2x2 stride-2 max-pool that is that ReLU's only reader can follow it into the
        // implicit kernel (stride-1 convs; the kernel floors odd sizes as the pool does).
        const auto& rc = consumers[static_cast<size_t>(j)];
        auto* pl = rc.size() == 1 && j != net_.output
                       ? dynamic_cast<const PoolLayer*>(net_.layers[static_cast<size_t>(rc[0])].get())
                       : nullptr;
        if (st.op == Op::kConv && pl && pl->p.mode == PoolMode::kMax && !pl->p.global && pl->p.size_h == 2 &&
            pl->p.size_w == 2 && pl->p.stride_h == 2 && pl->p.stride_w == 2 && pl->p.pad_h == 0 &&
            pl->p.pad_w == 0) {
          ImplicitFusion f;
          f.relu_pool = true;
          if (implicit_config(st.conv->p, 1, f).ok) {
            st.pool_layer = rc[0];
            steps_[static_cast<size_t>(rc[0])].pool_conv = static_cast<int>(i);
          }
        }
      }
    }
    // The first conv can read the uint8 pixels and normalise them while staging, when nothing
    // else reads the network input (so the float input never has to exist).
    if (st.op == Op::kConv && l.inputs.size() == 1 && l.inputs[0] < 0) {
      int readers = 0;
      for (const auto& other : net_.layers)
        for (int in : other->inputs) readers += in < 0;
      ImplicitFusion f;
      f.u8_input = true;
      st.u8_input = readers == 1 && implicit_config(st.conv->p, 1, f).ok;
      f.relu_pool = true;
      st.u8_input_pool = readers == 1 && st.pool_layer >= 0 && implicit_config(st.conv->p, 1, f).ok;
    }
    st.out = new_buf(l.out_shape);
    out_buf[i] = st.out;
  }
}

// Weights go up once, on first use (tests and the CLI load them after parsing the netdef).
void GpuExecutor::upload_weights() {
  if (uploaded_) return;
  pre_scale_ = upload(net_.pre.scale.data(), net_.pre.scale.size());
  pre_shift_ = upload(net_.pre.shift.data(), net_.pre.shift.size());
  std::vector<float> offsets;
  const bool exact = exact_input_offsets(net_.pre.scale, net_.pre.shift, &offsets);
  if (exact) {
    std::vector<float> ones(offsets.size(), 1.f), neg(offsets.size());
    for (size_t i = 0; i < offsets.size(); ++i) neg[i] = -offsets[i];
    exact_scale_ = upload(ones.data(), ones.size());
    exact_shift_ = upload(neg.data(), neg.size());
  }
  for (Step& st : steps_) {
    const Layer& l = *net_.layers[static_cast<size_t>(st.layer)];
    if (st.op == Op::kConv) {
      ConvState& c = *st.conv;
      const Tensor& w = l.weight("weight");
      c.w = upload(w.ptr(), w.data.size());
      std::vector<float> wt = implicit_weights(c.p, w.ptr());
      c.wt = upload(wt.data(), wt.size());
      if (st.pool_layer >= 0) {
        ImplicitFusion f;
        f.relu_pool = f.tensor_core = true;
        c.tc_ok = implicit_config(c.p, 1, f).ok;
        f.u8_input = true;
        c.tc_ok_u8 = st.u8_input_pool && implicit_config(c.p, 1, f).ok;
        if (c.tc_ok || c.tc_ok_u8)
          for (Precision pr : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16}) {
            std::vector<float> wtc = implicit_weights_tc(c.p, w.ptr(), pr);
            c.wt_tc[static_cast<int>(pr)] = upload(wtc.data(), wtc.size());
          }
        if (c.tc_ok_u8 && exact) {
          std::vector<float> wx = implicit_weights_x16(c.p, w.ptr(), net_.pre.scale, &c.x16_scale);
          if (!wx.empty()) c.wt_x16 = upload(wx.data(), wx.size());
        }
      }
      std::vector<float> bias(static_cast<size_t>(c.p.filters), 0.f);
      if (c.p.bias) bias = l.weight("bias").data;
      c.bias = upload(bias.data(), bias.size());
      c.im2col = std::make_unique<Im2colConv>(c.p, st.act, w.ptr(), bias.data(), c.bias.as<float>());
      c.cudnn = std::make_unique<CudnnConv>(c.p, st.act);
      c.im2col->set_precision(prec_);
      c.cudnn->set_precision(prec_);
    } else if (st.op == Op::kFc) {
      const auto& fp = dynamic_cast<const FcLayer&>(l).p;
      const Tensor& w = l.weight("weight");
      st.w = upload(w.ptr(), w.data.size());
      std::vector<float> bias(static_cast<size_t>(fp.outputs), 0.f);
      if (fp.bias) bias = l.weight("bias").data;
      st.b = upload(bias.data(), bias.size());
    } else if (st.op == Op::kAffine) {
      std::vector<float> scale, shift;
      dynamic_cast<const BatchnormLayer&>(l).affine(scale, shift);
      st.scale = upload(scale.data(), scale.size());
      st.shift = upload(shift.data(), shift.size());
    }
  }
  uploaded_ = true;
}

// The algorithm each conv runs: RunOptions::conv_algo overrides all, then the netdef's pin,
// then auto: tuned on the first block of a run, kept for later runs with the same block size
// (forward_layers takes any earlier pick, `any_tuning`: it only checks values).
void GpuExecutor::resolve_algos(const std::string& forced, int64_t block, bool any_tuning) {
  if (!forced.empty() && forced != "auto" && forced != "im2col" && forced != "implicit" && forced != "cudnn")
    throw Error("--conv-algo: expected auto, im2col, implicit or cudnn, found '" + forced + "'");
  any_auto_ = false;
  for (Step& st : steps_) {
    if (st.op != Op::kConv) continue;
    const Layer& l = *net_.layers[static_cast<size_t>(st.layer)];
    ConvState& c = *st.conv;
    std::string a = !forced.empty() && forced != "auto" ? forced : l.algo;
    if (a == "implicit") {
      ImplicitConfig cfg = implicit_config(c.p, block);
      if (!cfg.ok)
        throw Error(l.loc.str() + ": layer '" + l.name +
                    "': the implicit convolution cannot run it: " + cfg.why);
    }
    if (a.empty()) {
      if (c.tuned_n == block || (any_tuning && !c.tuned.empty())) a = c.tuned;
      if (a.empty()) any_auto_ = true;
    }
    c.chosen = a;
  }
}

bool GpuExecutor::may_use(const char* algo) const {
  for (const Step& st : steps_)
    if (st.op == Op::kConv && (st.conv->chosen.empty() || st.conv->chosen == algo)) return true;
  return false;
}

// Streams and blocks that fit the GPU's free memory, and the cap (bytes, 0 = none) if one is set,
// less the `reserved` bytes of it that are already taken (the --resident images).
void GpuExecutor::ensure_slots(int streams, int64_t block, int64_t images, int64_t total_cap,
                               int64_t reserved, std::vector<std::string>* notes) {
  const int64_t cap = total_cap > 0 ? total_cap - reserved : 0;
  const int64_t want_blocks = (images + block - 1) / block;
  streams = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(streams, want_blocks)));
  const bool use_im2col = may_use("im2col"), use_cudnn = may_use("cudnn");
  if (!slots_.empty() && slot_streams_ == streams && slot_block_ == block && slot_cap_ == cap &&
      (slot_col_ || !use_im2col) && (slot_cudnn_ || !use_cudnn))
    return;
  slots_.clear();  // give the memory back before measuring what is free

  size_t max_col = 0;
  for (const Step& st : steps_)
    if (st.op == Op::kConv) max_col = std::max(max_col, st.conv->im2col->col_bytes_per_image());

  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  // Room for the libraries' own allocations (cuDNN/cuBLAS handles, kernels' modules).
  const size_t reserve = std::min<size_t>(free_b, (512u << 20) + free_b / 20);
  size_t usable = free_b - reserve;
  const bool capped = cap > 0 && static_cast<uint64_t>(cap) < usable;
  if (capped) usable = static_cast<size_t>(cap);
  size_t col = use_im2col ? std::max(max_col, std::min(kColBudget, usable / 16)) : 0;
  size_t cudnn_ws = use_cudnn ? std::min(kCudnnWorkspace, usable / 16) : 0;
  const size_t fixed = kLtWorkspace + col + cudnn_ws;

  size_t per_image = static_cast<size_t>(net_.input.size()) + sizeof(int32_t);
  for (size_t b = 0; b < buf_floats_.size(); ++b)
    per_image += static_cast<size_t>(buf_floats_[b]) * sizeof(float);

  int64_t fit = 0;
  for (;;) {
    size_t all_fixed = fixed * static_cast<size_t>(streams);
    fit = usable > all_fixed
              ? static_cast<int64_t>((usable - all_fixed) / (per_image * static_cast<size_t>(streams)))
              : 0;
    if (fit >= 1 || streams == 1) break;
    streams = 1;
  }
  if (fit < 1)
    throw Error("GPU memory: one image needs " + std::to_string(per_image) + " bytes of buffers plus " +
                std::to_string(fixed) + " bytes of workspace, but " +
                (capped ? "--gpu-memory allows only " + std::to_string(cap) + " bytes"
                        : "only " + std::to_string(free_b) + " bytes of the " + prop_.name + "'s " +
                              std::to_string(total_b) + " are free"));
  if (block > fit) {
    if (notes)
      notes->push_back("gpu: block of " + std::to_string(block) + " images cut to " + std::to_string(fit) +
                       (capped ? " to fit --gpu-memory (" + std::to_string(cap) + " bytes" +
                                     (reserved ? " left of its " + std::to_string(total_cap) +
                                                     " beside the resident images)"
                                               : std::string(")"))
                               : std::string(" to fit free GPU memory")));
    block = fit;
  }

  for (int i = 0; i < streams; ++i) {
    auto s = std::make_unique<Slot>();
    s->block = block;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    s->in_u8.alloc(static_cast<size_t>(block * net_.input.size()));
    s->pred.alloc(static_cast<size_t>(block) * sizeof(int32_t));
    s->bufs.resize(buf_floats_.size());
    for (size_t b = 0; b < buf_floats_.size(); ++b)
      s->bufs[b].alloc(static_cast<size_t>(block * buf_floats_[b]) * sizeof(float));
    s->lt_ws.alloc(kLtWorkspace);
    s->col.alloc(col);
    s->cudnn_ws.alloc(cudnn_ws);
    s->pred_host.alloc(static_cast<size_t>(block) * sizeof(int32_t));
    s->labels.alloc(static_cast<size_t>(block));
    slots_.push_back(std::move(s));
  }
  slot_streams_ = streams;
  slot_block_ = block;
  slot_cap_ = cap;
  slot_col_ = use_im2col;
  slot_cudnn_ = use_cudnn;
}

// ---------------------------------------------------------------------------------------------
// Running layers.

void GpuExecutor::run_conv(Step& st, Slot& s, int64_t n, const std::string& algo) {
  ConvState& c = *st.conv;
  const float* x = s.bufs[static_cast<size_t>(st.ins[0])].as<float>();
  float* y = s.bufs[static_cast<size_t>(st.out)].as<float>();
  if (algo == "implicit") {
    ImplicitFusion f;
    f.relu_pool = fuses_pool(st, algo);
    f.u8_input = fuses_u8(st, algo);
    f.tensor_core = uses_tc(st, algo);
    f.precision = prec_;
    f.u8_exact = uses_exact(st, algo);
    ImplicitConfig cfg = implicit_config(c.p, n, f);
    ImplicitIo io;
    io.x = x;
    if (f.u8_input)
      io.x_u8 = s.in_u8.as<uint8_t>(), io.scale = pre_scale_.as<float>(), io.shift = pre_shift_.as<float>();
    if (f.u8_exact)
      io.scale = exact_scale_.as<float>(), io.shift = exact_shift_.as<float>(), io.out_scale = c.x16_scale;
    io.y = f.relu_pool
               ? s.bufs[static_cast<size_t>(steps_[static_cast<size_t>(st.pool_layer)].out)].as<float>()
               : y;
    const DevBuf& wt = f.u8_exact ? c.wt_x16 : f.tensor_core ? c.wt_tc[static_cast<int>(prec_)] : c.wt;
    launch_conv_implicit(cfg, c.p, io, wt.as<float>(), c.bias.as<float>(), n, st.act, s.stream);
  } else if (algo == "im2col") {
    c.im2col->forward(lt_, x, c.w.as<float>(), y, n, s.col.as<float>(), s.col.bytes(), s.lt_ws.get(),
                      s.lt_ws.bytes(), s.stream);
  } else if (algo == "cudnn") {
    if (!s.cudnn) s.cudnn = std::make_unique<CudnnHandle>();
    if (!c.cudnn->found())
      c.cudnn->find(*s.cudnn, s.stream, n, x, c.w.as<float>(), y, s.cudnn_ws.get(), s.cudnn_ws.bytes());
    c.cudnn->forward(*s.cudnn, s.stream, n, x, c.w.as<float>(), c.bias.as<float>(), y, s.cudnn_ws.get(),
                     s.cudnn_ws.bytes());
  } else {
    throw Error("layer '" + net_.layers[static_cast<size_t>(st.layer)]->name +
                "': no convolution algorithm chosen");
  }
}

// For auto: the conv with `algo` plus the passes that the implicit kernel's fusions would save
// (the preprocess, the max-pool), so that the algorithms are compared on the same work.
void GpuExecutor::time_conv(Step& st, Slot& s, int64_t n, const std::string& algo) {
  if ((st.u8_input || st.u8_input_pool) && fuse_u8_ && !fuses_u8(st, algo))
    launch_preprocess(s.in_u8.as<uint8_t>(), s.bufs[0].as<float>(), n, static_cast<int>(net_.input.c),
                      net_.input.h * net_.input.w, pre_scale_.as<float>(), pre_shift_.as<float>(), s.stream);
  run_conv(st, s, n, algo);
  if (st.pool_layer >= 0 && fuse_pool_ && !fuses_pool(st, algo)) {
    const Step& ps = steps_[static_cast<size_t>(st.pool_layer)];
    const Shape& i = ps.in_shape;
    PoolGeom g{static_cast<int>(i.c), static_cast<int>(i.h), static_cast<int>(i.w),
               static_cast<int>(ps.out_shape.h), static_cast<int>(ps.out_shape.w)};
    launch_pool(s.bufs[static_cast<size_t>(st.out)].as<float>(),
                s.bufs[static_cast<size_t>(ps.out)].as<float>(), n, g,
                dynamic_cast<const PoolLayer&>(*net_.layers[static_cast<size_t>(ps.layer)]).p, s.stream);
  }
}

void GpuExecutor::run_step(Step& st, Slot& s, int64_t n) {
  auto buf = [&](int b) { return s.bufs[static_cast<size_t>(b)].as<float>(); };
  const Layer& l = *net_.layers[static_cast<size_t>(st.layer)];
  switch (st.op) {
    case Op::kIdentity:
    case Op::kFused:
      return;
    case Op::kConv:
      return run_conv(st, s, n, st.conv->chosen);
    case Op::kFc: {
      const auto& p = dynamic_cast<const FcLayer&>(l).p;
      auto& plan = st.fc_plans[n];
      if (!plan) {
        plan = std::make_unique<LtGemm>();
        GemmSpec g;  // column-major: out (O x n) = W^T-stored (I x O)^T * x (I x n)
        g.m = p.outputs, g.n = n, g.k = p.inputs;
        g.trans_a = true;
        g.lda = p.inputs, g.ldb = p.inputs, g.ldd = p.outputs;
        g.epilogue = st.act == ActKind::kRelu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
        g.bias = st.b.as<float>();
        g.precision = prec_;
        if (!plan->init(lt_, g, s.lt_ws.bytes()))
          throw Error("layer '" + l.name + "': cuBLASLt has no " + precision_name(prec_) +
                      " algorithm for its " + std::to_string(p.outputs) + "x" + std::to_string(p.inputs) +
                      " GEMM");
      }
      plan->run(lt_, st.w.as<float>(), buf(st.ins[0]), buf(st.out), s.lt_ws.get(), s.lt_ws.bytes(), s.stream);
      return;
    }
    case Op::kAct:
      return launch_activation(buf(st.ins[0]), buf(st.out), n * st.out_shape.size(), st.act, s.stream);
    case Op::kPool: {
      if (pool_fused(st)) return;  // its conv wrote it
      const Shape& i = st.in_shape;
      PoolGeom g{static_cast<int>(i.c), static_cast<int>(i.h), static_cast<int>(i.w),
                 static_cast<int>(st.out_shape.h), static_cast<int>(st.out_shape.w)};
      return launch_pool(buf(st.ins[0]), buf(st.out), n, g, dynamic_cast<const PoolLayer&>(l).p, s.stream);
    }
    case Op::kAffine:
      return launch_channel_affine(buf(st.ins[0]), buf(st.out), n, static_cast<int>(st.out_shape.c),
                                   st.out_shape.h * st.out_shape.w, st.scale.as<float>(),
                                   st.shift.as<float>(), s.stream);
    case Op::kAdd: {
      std::vector<const float*> in;
      for (int b : st.ins) in.push_back(buf(b));
      return launch_add(in.data(), static_cast<int>(in.size()), buf(st.out), n * st.out_shape.size(),
                        s.stream);
    }
    case Op::kConcat: {
      const size_t dpitch = static_cast<size_t>(st.out_shape.size()) * sizeof(float);
      size_t off = 0;
      for (size_t k = 0; k < st.ins.size(); ++k) {
        const size_t w = static_cast<size_t>(l.in_shapes[k].size()) * sizeof(float);
        CUDA_CHECK(cudaMemcpy2DAsync(reinterpret_cast<char*>(buf(st.out)) + off, dpitch, buf(st.ins[k]), w, w,
                                     static_cast<size_t>(n), cudaMemcpyDeviceToDevice, s.stream));
        off += w;
      }
      return;
    }
    case Op::kSoftmax:
      return launch_softmax(buf(st.ins[0]), buf(st.out), n, static_cast<int>(st.out_shape.c),
                            st.out_shape.h * st.out_shape.w, s.stream);
  }
}

// Events ev[ev_base + i] after step i when `events`.
void GpuExecutor::run_layers(Slot& s, int64_t n, bool events, int ev_base) {
  if (!input_fused())
    launch_preprocess(s.in_u8.as<uint8_t>(), s.bufs[0].as<float>(), n, static_cast<int>(net_.input.c),
                      net_.input.h * net_.input.w, pre_scale_.as<float>(), pre_shift_.as<float>(), s.stream);
  if (events) record(s.ev[static_cast<size_t>(ev_base - 1)], s.stream);
  for (size_t i = 0; i < steps_.size(); ++i) {
    run_step(steps_[i], s, n);
    if (events) record(s.ev[static_cast<size_t>(ev_base) + i], s.stream);
  }
}

// --resident: images 0..count-1 of the data set in device memory, copied once before the clock
// and before the slots are sized, so that the blocks fit around them. Slots of an earlier run
// that leave less room than ensure_slots' own reserve are given back first (and made again,
// smaller); images that do not fit in the free memory even then are an error, not a silent
// fallback to host copies, since the run would then time something else than it says.
DevBuf GpuExecutor::upload_resident(const Dataset& data, int64_t count) {
  const size_t bytes = static_cast<size_t>(count * data.shape.size());
  constexpr size_t kHeadroom = 512u << 20;  // as ensure_slots keeps back for the libraries
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (!slots_.empty() && free_b < bytes + kHeadroom + free_b / 20) {
    slots_.clear();
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  }
  if (bytes > free_b)
    throw Error("--resident: the " + std::to_string(count) + " distinct images need " +
                std::to_string(bytes) + " bytes of GPU memory, but only " + std::to_string(free_b) +
                " of the " + prop_.name + "'s " + std::to_string(total_b) +
                " are free; run without --resident");
  DevBuf b(bytes);
  CUDA_CHECK(cudaMemcpy(b.get(), data.pixels.data(), bytes, cudaMemcpyHostToDevice));
  return b;
}

// Raw pixels of images first..first+n-1 (modulo the count) into the slot's uint8 buffer: from
// host memory (through the slot's pinned staging buffer when `staged`), or device to device
// from `resident`, which holds images 0..min(batch, count)-1: every index modulo the count.
void GpuExecutor::copy_in(Slot& s, const Dataset& data, int64_t first, int64_t n, bool staged,
                          const uint8_t* resident) {
  const size_t img = static_cast<size_t>(data.shape.size());
  int64_t done = 0;
  while (done < n) {
    int64_t idx = (first + done) % data.count;
    int64_t run = std::min(n - done, data.count - idx);
    uint8_t* dst = s.in_u8.as<uint8_t>() + static_cast<size_t>(done) * img;
    if (resident) {
      CUDA_CHECK(cudaMemcpyAsync(dst, resident + static_cast<size_t>(idx) * img,
                                 static_cast<size_t>(run) * img, cudaMemcpyDeviceToDevice, s.stream));
      done += run;
      continue;
    }
    const uint8_t* src = data.image(idx);
    if (staged) {
      uint8_t* st = s.staging.as<uint8_t>() + static_cast<size_t>(done) * img;
      std::memcpy(st, src, static_cast<size_t>(run) * img);
      src = st;
    }
    CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(run) * img, cudaMemcpyHostToDevice, s.stream));
    done += run;
  }
}

// A block's work after its H2D copy: every layer, argmax + accuracy against the slot's copy of
// the block's labels, the D2H copies, with the timing events between (ev[2..L+4]).
void GpuExecutor::enqueue_compute(Slot& s, int64_t n, const BlockOut& o) {
  const size_t L = steps_.size();
  run_layers(s, n, true, 3);
  launch_argmax(s.bufs[static_cast<size_t>(o.out_buf)].as<float>(), n, static_cast<int>(o.out_size),
                s.pred.as<int32_t>(), s.labels.as<uint8_t>(), 0, n, o.correct, s.stream);
  record(s.ev[L + 3], s.stream);
  CUDA_CHECK(cudaMemcpyAsync(s.pred_host.as<int32_t>(), s.pred.as<int32_t>(),
                             static_cast<size_t>(n) * sizeof(int32_t), cudaMemcpyDeviceToHost, s.stream));
  if (o.want_probs)
    CUDA_CHECK(cudaMemcpyAsync(s.probs_host.as<float>(), s.bufs[static_cast<size_t>(o.out_buf)].as<float>(),
                               static_cast<size_t>(n * o.out_size) * sizeof(float), cudaMemcpyDeviceToHost,
                               s.stream));
  record(s.ev[L + 4], s.stream);
}

// The same launches captured once per slot as a CUDA graph (its buffers and events are the
// slot's own, so one graph serves every full block on it): one launch per block instead of
// ~3 per layer. Weights, algorithms and kernel configurations are fixed by then (warm-up done).
void GpuExecutor::capture(Slot& s, int64_t n, const BlockOut& o) {
  s.drop_graph();
  cudaGraph_t g = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue_compute(s, n, o);
  } catch (...) {
    cudaStreamEndCapture(s.stream, &g);
    if (g) cudaGraphDestroy(g);
    (void)cudaGetLastError();
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(s.stream, &g));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  CUDA_CHECK(e);
  s.exec = exec;
  s.exec_n = n;
}

// Auto: on the first block, time each algorithm that can run every auto conv and keep the
// fastest (layers in order, each on the real output of the layers before it).
// Best of kTuneRepeats after a warm-up (the warm-up also runs cuDNN's own search).
float GpuExecutor::time_ms(Step& st, Slot& s, int64_t n, const std::string& algo, cudaEvent_t e0,
                           cudaEvent_t e1) {
  time_conv(st, s, n, algo);
  float ms_min = 1e30f;
  for (int r = 0; r < kTuneRepeats; ++r) {
    CUDA_CHECK(cudaEventRecord(e0, s.stream));
    time_conv(st, s, n, algo);
    CUDA_CHECK(cudaEventRecord(e1, s.stream));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    ms_min = std::min(ms_min, ms);
  }
  return ms_min;
}

void GpuExecutor::tune(Slot& s, const Dataset& data, int64_t n, std::vector<std::string>* notes) {
  copy_in(s, data, 0, n, false);
  launch_preprocess(s.in_u8.as<uint8_t>(), s.bufs[0].as<float>(), n, static_cast<int>(net_.input.c),
                    net_.input.h * net_.input.w, pre_scale_.as<float>(), pre_shift_.as<float>(), s.stream);
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  try {
    for (Step& st : steps_) {
      if (st.op == Op::kConv && st.conv->chosen.empty()) {
        ConvState& c = *st.conv;
        const std::string& lname = net_.layers[static_cast<size_t>(st.layer)]->name;
        std::string best, line = "gpu: auto " + lname + " (" + std::to_string(n) + " images):";
        float best_ms = 0;
        for (const char* a : kAlgos) {
          if (std::string(a) == "implicit" && !implicit_config(c.p, n).ok) {
            line += std::string(" ") + a + " n/a;";
            continue;
          }
          try {
            const float ms_min = time_ms(st, s, n, a, e0, e1);
            std::ostringstream o;
            o.precision(3);
            o << std::fixed << " " << a << " " << ms_min << " ms;";
            line += o.str();
            if (best.empty() || ms_min < best_ms) best = a, best_ms = ms_min;
          } catch (const Error& e) {
            // An algorithm the libraries refuse for this shape is not a candidate; real CUDA
            // failures surface again when the chosen algorithm runs.
            line += std::string(" ") + a + " failed (" + e.what() + ");";
          }
        }
        if (best.empty()) throw Error("layer '" + lname + "': no convolution algorithm can run it:" + line);
        c.tuned = c.chosen = best;
        c.tuned_n = n;
        c.tune_note = line + " -> " + best;
        if (notes) notes->push_back(c.tune_note);
      }
      run_step(st, s, n);
    }
    CUDA_CHECK(cudaStreamSynchronize(s.stream));
  } catch (...) {
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    throw;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  any_auto_ = false;
}

void GpuExecutor::warm(Slot& s, const Dataset& data, int64_t n, std::vector<std::string>* notes) {
  if (any_auto_) return tune(s, data, n, notes);
  copy_in(s, data, 0, n, false);
  run_layers(s, n, false, 0);
  CUDA_CHECK(cudaStreamSynchronize(s.stream));
}

std::string GpuExecutor::step_algo(const Step& st) const {
  switch (st.op) {
    case Op::kConv: {
      const ConvState& c = *st.conv;
      std::string relu = st.act == ActKind::kRelu ? "+relu" : "";
      if (fuses_pool(st, c.chosen)) relu += "+maxpool";
      if (c.chosen == "implicit")
        return std::string("implicit(") +
               (uses_exact(st, c.chosen) ? "FP16 tensor cores on exact pixels, 2-part weights, "
                : uses_tc(st, c.chosen)  ? tc_name()
                                         : "") +
               (fuses_u8(st, c.chosen) ? "uint8 input, " : "") + "bias" + relu + " epilogue)";
      if (c.chosen == "im2col") return c.im2col->algo_name();
      return c.cudnn->algo_name();
    }
    case Op::kFc:
      return std::string("cublasLt(epilogue bias") + (st.act == ActKind::kRelu ? "+relu)" : ")") +
             precision_tag(prec_);
    case Op::kFused:
      return "fused into " + net_.layers[static_cast<size_t>(st.fused_producer)]->name;
    case Op::kPool:
      return pool_fused(st) ? "fused into " + net_.layers[static_cast<size_t>(st.pool_conv)]->name : "";
    case Op::kIdentity:
      return "identity";
    default:
      return "";
  }
}

// ---------------------------------------------------------------------------------------------

RunResult GpuExecutor::run(const Dataset& data, const RunOptions& opt) {
  check_ready(net_, data);
  const int64_t batch = images_to_run(data, opt);
  if (opt.streams < 0) throw Error("streams must be positive, found " + std::to_string(opt.streams));
  if (opt.block < 0) throw Error("block must be positive, found " + std::to_string(opt.block));
  if (opt.gpu_memory < 0)
    throw Error("gpu_memory must not be negative, found " + std::to_string(opt.gpu_memory));

  RunResult r;
  auto setup_t0 = Clock::now();
  upload_weights();
  set_precision(opt.precision);
  r.precision = prec_;
  int64_t block = opt.block;
  if (block == 0) {  // near kDefaultBlock, cut into equal blocks
    int64_t nb = (batch + kDefaultBlock - 1) / kDefaultBlock;
    block = (batch + nb - 1) / nb;
  }
  block = std::min(block, batch);
  resolve_algos(opt.conv_algo, block, false);
  forced_algo_ = opt.conv_algo;
  gpu_memory_ = opt.gpu_memory;
  // --resident: the pixels every block reads, on the GPU before the clock (and before the slots,
  // which are then sized around them).
  // A --gpu-memory cap covers them too: the slots get what they leave of it.
  const int64_t resident_count = std::min(batch, data.count);
  const int64_t reserved = opt.resident && gpu_memory_ > 0 ? resident_count * data.shape.size() : 0;
  if (reserved > 0 && reserved >= gpu_memory_)
    throw Error("--resident: the " + std::to_string(resident_count) + " distinct images take " +
                std::to_string(reserved) + " bytes of GPU memory, and --gpu-memory allows only " +
                std::to_string(gpu_memory_) + " bytes in all; raise --gpu-memory or run without --resident");
  DevBuf resident;
  if (opt.resident) resident = upload_resident(data, resident_count);
  try {
    ensure_slots(opt.streams > 0 ? opt.streams : kDefaultStreams, block, batch, gpu_memory_, reserved,
                 &r.notes);
  } catch (const Error& e) {
    if (!opt.resident) throw;
    throw Error("--resident (the " + std::to_string(resident_count) + " distinct images take " +
                std::to_string(resident.bytes()) + " bytes of GPU memory): " + e.what());
  }
  block = slot_block_;
  const int S = slot_streams_;
  // Equal blocks but the last; every full block runs the slot's captured graph. (A short first
  // block, so that compute starts after a shorter copy, measured 0.4 ms slower for 50000 CIFAR
  // images: one more block, and two that run outside the graphs.)
  const int64_t nblocks = (batch + block - 1) / block;
  const Layer& out_layer = *net_.layers[static_cast<size_t>(net_.output)];
  const int64_t out_size = out_layer.out_shape.size();
  const int out_buf = steps_[static_cast<size_t>(net_.output)].out;

  // Host memory the copies read: the data set's own pixels, page-locked in place (not with
  // --resident: the timed copies read device memory).
  const bool whole = opt.cycle || batch >= data.count;
  const size_t reg_bytes = static_cast<size_t>((whole ? data.count : batch) * data.shape.size());
  void* reg_ptr = const_cast<uint8_t*>(data.pixels.data());
  bool registered = false, staged = false;
  if (!opt.resident) {
    cudaError_t re = cudaHostRegister(reg_ptr, reg_bytes, cudaHostRegisterDefault);
    if (re == cudaSuccess) {
      registered = true;
    } else {
      (void)cudaGetLastError();
      staged = re != cudaErrorHostMemoryAlreadyRegistered;
    }
  }
  struct Unregister {
    void* p;
    bool on;
    ~Unregister() {
      if (!on) return;
      cudaDeviceSynchronize();  // after an error, copies may still be reading it
      cudaHostUnregister(p);
    }
  } unregister{reg_ptr, registered};

  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (staged && s.staging.bytes() < s.in_u8.bytes()) s.staging.alloc(s.in_u8.bytes());
    if (opt.want_probs) s.probs_host.alloc(static_cast<size_t>(block * out_size) * sizeof(float));
    // events: [0] before H2D (D2D with --resident), [1] after it, [2] after preprocess,
    // [3..3+L) after each layer, [3+L] after argmax, [4+L] after D2H
    const size_t need = steps_.size() + 5;
    while (s.ev.size() < need) {
      cudaEvent_t e;
      CUDA_CHECK(cudaEventCreate(&e));
      s.ev.push_back(e);
    }
    s.first = -1;
  }

  DevBuf labels = upload(data.labels.data(), static_cast<size_t>(data.count));
  DevBuf correct(2 * sizeof(unsigned long long));  // [0] right predictions, [1] non-finite outputs
  CUDA_CHECK(cudaMemset(correct.get(), 0, 2 * sizeof(unsigned long long)));

  // The first block once through every layer before the clock starts: auto's search when a conv
  // needs it, otherwise a warm-up (CUDA loads kernels lazily, cuBLASLt/cuDNN plan on first use).
  warm(*slots_[0], data, block, &r.notes);
  if (may_use("cudnn"))
    for (auto& sp : slots_)
      if (!sp->cudnn) sp->cudnn = std::make_unique<CudnnHandle>();
  for (const Step& st : steps_)
    if (st.op == Op::kConv && !st.conv->tune_note.empty() && st.conv->chosen == st.conv->tuned &&
        std::find(r.notes.begin(), r.notes.end(), st.conv->tune_note) == r.notes.end())
      r.notes.push_back(st.conv->tune_note + " (tuned earlier)");
  CUDA_CHECK(cudaDeviceSynchronize());
  const BlockOut bo{out_buf, out_size, opt.want_probs, correct.as<unsigned long long>()};
  std::string graph_note = "gpu: CUDA graphs off (CNNRUN_GPU_OFF=graph)";
  for (auto& sp : slots_) sp->drop_graph();
  if (graphs_) {
    try {
      for (auto& sp : slots_) capture(*sp, block, bo);
      // One trial launch per slot (on whatever its buffers hold) proves the graphs and their
      // timing events work here before the clock starts; the count it adds is reset.
      for (auto& sp : slots_) CUDA_CHECK(cudaGraphLaunch(sp->exec, sp->stream));
      for (auto& sp : slots_) {
        CUDA_CHECK(cudaStreamSynchronize(sp->stream));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, sp->ev[2], sp->ev[steps_.size() + 4]));
      }
      CUDA_CHECK(cudaMemset(correct.get(), 0, 2 * sizeof(unsigned long long)));
      graph_note = "gpu: each full block (" + std::to_string(block) +
                   " images) after its H2D copy is one CUDA graph launch (captured per stream)";
    } catch (const Error& e) {
      for (auto& sp : slots_) sp->drop_graph();
      graph_note = std::string("gpu: CUDA graph capture failed, launching directly: ") + e.what();
    }
  }
  r.notes.push_back(graph_note);
  const double setup_s = seconds_since(setup_t0);

  r.images = batch;
  r.predictions.assign(static_cast<size_t>(batch), 0);
  if (opt.want_probs) r.probs.assign(static_cast<size_t>(batch * out_size), 0.f);
  const size_t L = steps_.size();
  std::vector<double> layer_s(L, 0.0);
  double pre_s = 0, argmax_s = 0, h2d_s = 0, d2h_s = 0;
  std::vector<std::pair<double, double>> compute_iv, copy_iv;
  int64_t done = 0;

  cudaEvent_t start;
  CUDA_CHECK(cudaEventCreate(&start));
  struct EvGuard {
    cudaEvent_t e;
    ~EvGuard() { cudaEventDestroy(e); }
  } start_guard{start};

  auto harvest = [&](Slot& s) {
    if (s.first < 0) return;
    CUDA_CHECK(cudaEventSynchronize(s.ev[L + 4]));
    std::vector<double> t(L + 5);
    for (size_t i = 0; i < L + 5; ++i) {
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, start, s.ev[i]));
      t[i] = ms * 1e-3;
    }
    h2d_s += t[1] - t[0];
    pre_s += t[2] - t[1];
    for (size_t i = 0; i < L; ++i)  // steps that launch nothing show the events' own gap
      if (launches(steps_[i])) layer_s[i] += t[3 + i] - t[2 + i];
    argmax_s += t[L + 3] - t[L + 2];
    d2h_s += t[L + 4] - t[L + 3];
    compute_iv.push_back({t[1], t[L + 3]});
    copy_iv.push_back({t[0], t[1]});
    copy_iv.push_back({t[L + 3], t[L + 4]});
    std::memcpy(r.predictions.data() + s.first, s.pred_host.as<int32_t>(),
                static_cast<size_t>(s.n) * sizeof(int32_t));
    if (opt.want_probs)
      std::memcpy(r.probs.data() + s.first * out_size, s.probs_host.as<float>(),
                  static_cast<size_t>(s.n * out_size) * sizeof(float));
    done += s.n;
    s.first = -1;
    if (opt.progress) opt.progress(done, batch);
  };

  auto t0 = Clock::now();
  CUDA_CHECK(cudaEventRecord(start, slots_[0]->stream));
  for (int i = 1; i < S; ++i)
    CUDA_CHECK(cudaStreamWaitEvent(slots_[static_cast<size_t>(i)]->stream, start, 0));
  int64_t first = 0;
  for (int64_t b = 0; b < nblocks; ++b) {
    Slot& s = *slots_[static_cast<size_t>(b % S)];
    harvest(s);  // the slot's previous block: its buffers and events are free again
    const int64_t n = std::min(block, batch - first);
    CUDA_CHECK(cudaEventRecord(s.ev[0], s.stream));
    copy_in(s, data, first, n, staged, resident.as<uint8_t>());
    for (int64_t d = 0; d < n;) {  // the block's labels (the data set's, cycled)
      const int64_t idx = (first + d) % data.count, m = std::min(n - d, data.count - idx);
      CUDA_CHECK(cudaMemcpyAsync(s.labels.as<uint8_t>() + d, labels.as<uint8_t>() + idx,
                                 static_cast<size_t>(m), cudaMemcpyDeviceToDevice, s.stream));
      d += m;
    }
    CUDA_CHECK(cudaEventRecord(s.ev[1], s.stream));
    if (s.exec && s.exec_n == n)
      CUDA_CHECK(cudaGraphLaunch(s.exec, s.stream));
    else
      enqueue_compute(s, n, bo);
    s.first = first;
    s.n = n;
    first += n;
  }
  for (int64_t b = nblocks; b < nblocks + S; ++b) harvest(*slots_[static_cast<size_t>(b % S)]);
  r.forward_seconds = seconds_since(t0);

  unsigned long long good[2] = {0, 0};
  CUDA_CHECK(cudaMemcpy(good, correct.get(), sizeof(good), cudaMemcpyDeviceToHost));
  r.correct = static_cast<int64_t>(good[0]);
  r.nonfinite_images = static_cast<int64_t>(good[1]);

  auto cm = merge(compute_iv), cp = merge(copy_iv);
  r.transfer_seconds = length(cp) - overlap(cp, cm);

  r.engine = "gpu (" + std::string(prop_.name) + ", sm_" + std::to_string(prop_.major) +
             std::to_string(prop_.minor) + ", " + std::to_string(S) + (S == 1 ? " stream" : " streams") +
             ", blocks of " + std::to_string(block) + " images" +
             (opt.resident ? ", input resident on GPU)" : ")");
  for (size_t i = 0; i < L; ++i) {
    const Layer& l = *net_.layers[i];
    LayerTime lt;
    lt.name = l.name;
    lt.type = l.type;
    lt.algo = step_algo(steps_[i]);
    lt.seconds = layer_s[i];
    r.layers.push_back(lt);
  }
  double sum_layers = 0;
  for (double x : layer_s) sum_layers += x;
  // What the forward time covers, first, in the report and the JSON.
  const std::string back =
      "the predictions (4 bytes per image)" +
      (opt.want_probs ? " and the output values (" + std::to_string(out_size * 4) + " bytes per image)"
                      : std::string()) +
      " copied to host memory";
  r.notes.insert(r.notes.begin(),
                 opt.resident
                     ? "gpu: timed: forward, input resident on GPU: the " + std::to_string(resident_count) +
                           " distinct images' uint8 pixels (" + std::to_string(resident.bytes()) +
                           " bytes) were uploaded before the clock; each block's device-to-device copy "
                           "of its pixels, preprocess, every layer, argmax and " +
                           back + " are timed"
                     : "gpu: timed: end to end, from the uint8 pixels in host memory to " + back);
  r.notes.push_back("gpu: " + std::to_string(nblocks) + " blocks on " + std::to_string(S) + " streams; " +
                    cudnn_version_string() + "; pixels from " +
                    (opt.resident ? "device memory (--resident)"
                     : registered ? "the data set's buffer, page-locked in place (cudaHostRegister)"
                     : staged     ? "a pinned staging buffer (cudaHostRegister failed)"
                                  : "already page-locked memory"));
  r.notes.push_back(std::string("gpu: setup (weights, workspaces, algorithm search, ") +
                    (opt.resident ? "upload of the resident pixels" : "page-locking") + ") " +
                    fmt_ms(setup_s) + ", not in the forward time");
  r.notes.push_back("gpu: preprocess " + fmt_ms(pre_s) + ", argmax+accuracy " + fmt_ms(argmax_s) +
                    (opt.resident ? ", D2D pixels " : ", H2D ") + fmt_ms(h2d_s) + ", D2H " + fmt_ms(d2h_s) +
                    " (event intervals summed over blocks)");
  r.notes.push_back("gpu: per-layer times sum to " + fmt_ms(sum_layers) + "; GPU busy with compute " +
                    fmt_ms(length(cm)) + " of the " + fmt_ms(r.forward_seconds) +
                    " wall (with several streams, layers of different blocks overlap, so the sum can exceed "
                    "the busy time)");
  return r;
}

std::vector<Tensor> GpuExecutor::forward_layers(const Dataset& data, int64_t first, int64_t n) {
  check_ready(net_, data);
  check_range(data, first, n);
  upload_weights();
  std::vector<Tensor> outs(steps_.size());
  auto alloc = [&] {  // the layers this run materialises (fusions depend on the algorithms)
    for (size_t i = 0; i < steps_.size(); ++i)
      if (fused_into(static_cast<int>(i)).empty()) {
        const Shape& s = steps_[i].out_shape;
        outs[i] = Tensor({n, s.c, s.h, s.w});
      }
  };
  if (n == 0) {
    alloc();
    return outs;
  }
  int64_t block = std::min(n, kDefaultBlock);
  resolve_algos(forced_algo_, block, true);  // the last run's --conv-algo, so validation checks it
  ensure_slots(1, block, n, gpu_memory_, 0, nullptr);
  block = slot_block_;
  Slot& s = *slots_[0];
  if (any_auto_) tune(s, data, std::min(block, n), nullptr);  // else no warm-up: nothing is timed
  alloc();
  for (int64_t done = 0; done < n; done += block) {
    const int64_t m = std::min(block, n - done);
    copy_in(s, data, first + done, m, false);
    run_layers(s, m, false, 0);
    for (size_t i = 0; i < steps_.size(); ++i) {
      if (outs[i].data.empty()) continue;
      const size_t size = static_cast<size_t>(steps_[i].out_shape.size());
      CUDA_CHECK(cudaMemcpyAsync(
          outs[i].ptr() + static_cast<size_t>(done) * size, s.bufs[static_cast<size_t>(steps_[i].out)].get(),
          static_cast<size_t>(m) * size * sizeof(float), cudaMemcpyDeviceToHost, s.stream));
    }
    CUDA_CHECK(cudaStreamSynchronize(s.stream));
  }
  return outs;
}

}  // namespace

}  // namespace gpu

bool gpu_available(std::string* why) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (why)
      *why = std::string("no CUDA device: ") + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")";
    return false;
  }
  if (count == 0) {
    if (why) *why = "no CUDA device: the driver reports none";
    return false;
  }
  cudaDeviceProp p{};
  e = cudaGetDeviceProperties(&p, 0);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (why) *why = std::string("no CUDA device: ") + cudaGetErrorString(e);
    return false;
  }
  if (p.major < 9) {
    if (why)
      *why = std::string("CUDA device 0 (") + p.name + ") has compute capability " + std::to_string(p.major) +
             "." + std::to_string(p.minor) + "; this build's kernels are for sm_90 (Hopper) and newer";
    return false;
  }
  if (why) *why = "";
  return true;
}

std::unique_ptr<Executor> make_gpu_executor(const Network& net) {
  std::string why;
  if (!gpu_available(&why)) throw Error("--engine gpu: " + why);
  return std::make_unique<gpu::GpuExecutor>(net);
}

}  // namespace cnnrun
