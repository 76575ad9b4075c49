// The GPU executor: a facade over the planner (plan.h: steps, fusions, buffers), the device
// weights (device_weights.h), the conv-algorithm selector (conv_selector.h), the block pipeline
// (pipeline.h: memory budget, slots, copies, graphs) and the timeline (timeline.h). What it
// keeps itself is the launches: which kernel or library call runs each step.
//
// Every entry point takes its options explicitly: run(opt), forward_layers(opt) and
// fused_into(opt) each plan and launch for the RunOptions they are given, never for an earlier
// call's. What does carry over between calls is work that stays valid: the uploaded weights,
// auto's picks for a block size, the slots, and the library plans for one precision.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <thread>
#include <tuple>

#include "engine/core/clock.h"
#include "engine/core/memory.h"
#include "engine/gpu/activation.h"
#include "engine/gpu/check.h"
#include "engine/gpu/conv2d_1x1.h"
#include "engine/gpu/conv2d_cudnn.h"
#include "engine/gpu/conv2d_cudnn_3xtf32.h"
#include "engine/gpu/conv2d_cudnn_graph.h"
#include "engine/gpu/conv2d_cutlass.h"
#include "engine/gpu/conv2d_gemm.h"
#include "engine/gpu/conv2d_im2col.h"
#include "engine/gpu/conv2d_implicit.h"
#include "engine/gpu/conv2d_stem.h"
#include "engine/gpu/conv_selector.h"
#include "engine/gpu/device_weights.h"
#include "engine/gpu/gemm.h"
#include "engine/gpu/kernels.h"
#include "engine/gpu/mul.h"
#include "engine/gpu/nhwc.h"
#include "engine/gpu/pipeline.h"
#include "engine/gpu/plan.h"
#include "engine/gpu/pool2d.h"
#include "engine/gpu/timeline.h"
#include "engine/gpu/upsample.h"
#include "engine/gpu_api.h"
#include "engine/layers/fc.h"
#include "engine/layers/merge.h"
#include "engine/layers/pool.h"
#include "engine/layers/upsample.h"

namespace cnnrun {

namespace gpu {

namespace {

// The pooling kernel's arguments for a pool layer (its windows bound at shape inference).
Pool2dArgs pool_args(const PoolParams& p, const Shape& in, const Shape& out) {
  Pool2dArgs a;
  a.channels = static_cast<int>(in.c), a.in_h = static_cast<int>(in.h), a.in_w = static_cast<int>(in.w);
  a.out_h = static_cast<int>(out.h), a.out_w = static_cast<int>(out.w);
  a.is_max = p.mode == PoolMode::kMax;
  a.adaptive = p.adaptive;
  a.kernel_h = static_cast<int>(p.size_h), a.kernel_w = static_cast<int>(p.size_w);
  a.stride_h = static_cast<int>(p.stride_h), a.stride_w = static_cast<int>(p.stride_w);
  a.pad_h = static_cast<int>(p.pad_h), a.pad_w = static_cast<int>(p.pad_w);
  a.count_pad = p.count_pad;
  return a;
}

constexpr int kTuneRepeats = 3;
// --layout auto: channels last pays when some conv outside the implicit kernel's fused pools reads
// at least this many channels (LeNet-5's 6 and 16 ran faster NCHW; ResNet's 64 and more, NHWC).
constexpr int64_t kNhwcMinChannels = 32;

class GpuExecutor : public Executor {
 public:
  GpuExecutor(const Network& net, int device)
      : net_(net),
        plan_(make_plan(net)),
        nhwc_layout_(make_nhwc_layout(net, plan_)),
        selector_(plan_.steps.size()),
        fc_plans_(plan_.steps.size()) {
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaGetDeviceProperties(&prop_, device));
    CUBLAS_CHECK(cublasLtCreate(&lt_));
    weights_ = std::make_unique<DeviceWeights>();
    pipeline_ = std::make_unique<BlockPipeline>(prop_.name);
  }
  ~GpuExecutor() override {
    pipeline_.reset();
    fc_plans_.clear();
    weights_.reset();
    if (lt_) cublasLtDestroy(lt_);
  }

  std::string name() const override { return "gpu"; }

  std::string fused_into(int index, const RunOptions& opt) const override {
    if (index < 0 || index >= static_cast<int>(plan_.steps.size())) return "";
    const Step& s = step(index);
    if (s.op == Op::kIdentity && s.fused_consumer >= 0) {         // a folded layer before a fused activation
      const std::string via = fused_into(s.fused_consumer, opt);  // that activation's own (a pool)
      return via.empty() ? net_.layers[static_cast<size_t>(s.fused_consumer)]->name : via;
    }
    if (s.op == Op::kMul && s.scale_conv >= 0 &&  // folded into its conv's per-image filters
        selector_.would_choose(net_, step(s.scale_conv), opt.conv_algo) == ConvAlgo::kGemm)
      return net_.layers[static_cast<size_t>(s.scale_conv)]->name;
    if (s.op == Op::kPool && s.prepool_conv >= 0 &&  // taken by its conv's kernel as it stages
        takes_prepool(step(s.prepool_conv), selector_.would_choose(net_, step(s.prepool_conv), opt.conv_algo),
                      opt.tuning))
      return net_.layers[static_cast<size_t>(s.prepool_conv)]->name;
    const Step* conv = s.op == Op::kConv ? &s : nullptr;
    if (s.op == Op::kFused && step(s.fused_producer).op == Op::kConv) conv = &step(s.fused_producer);
    if (conv && fuses_pool(*conv, selector_.would_choose(net_, *conv, opt.conv_algo), opt.tuning))
      return net_.layers[static_cast<size_t>(conv->pool_layer)]->name;
    return s.fused_consumer >= 0 ? net_.layers[static_cast<size_t>(s.fused_consumer)]->name : "";
  }

  RunResult run(const Dataset& data, const RunOptions& opt) override;
  std::vector<Tensor> forward_layers(const Dataset& data, int64_t first, int64_t n,
                                     const RunOptions& opt) override;

 private:
  const Network& net_;
  cudaDeviceProp prop_{};
  cublasLtHandle_t lt_ = nullptr;
  Plan plan_;
  NhwcLayout nhwc_layout_;
  ConvSelector selector_;
  std::unique_ptr<DeviceWeights> weights_;
  std::unique_ptr<BlockPipeline> pipeline_;
  std::vector<std::map<int64_t, std::unique_ptr<LtGemm>>> fc_plans_;  // per step, by images
  Precision prec_ = Precision::kFp32;  // the format the library plans are made for
  bool nhwc_ = false;                  // ... and the layout (--layout nhwc)
  GpuTuning tuning_;                   // the call in progress's (run or forward_layers)
  CudnnConv::GraphUse graph_use_ = CudnnConv::GraphUse::kTimed;  // the call's (begin: per conv)
  std::vector<std::unique_ptr<CudnnHandle>> prep_handles_;       // prepare_graphs' threads'
  // The call's data set holds float32 values, already preprocessed (a float .npy): they are
  // copied in as they are and no conv reads uint8 pixels.
  bool float_input_ = false;

  const Step& step(int i) const { return plan_.steps[static_cast<size_t>(i)]; }

  // Whether a call with `opt` stores its activations channels last (RunOptions::layout); *why:
  // the error for an explicit --layout nhwc the network or --conv-algo cannot have.
  bool nhwc_for(const RunOptions& opt, std::string* why) const {
    const bool cudnn_only = opt.conv_algo == ConvAlgo::kAuto || opt.conv_algo == ConvAlgo::kCudnn;
    const bool nchw_algo = opt.conv_algo == ConvAlgo::kImplicit || opt.conv_algo == ConvAlgo::kIm2col;
    if (opt.layout == Layout::kNchw) return false;
    const bool nhwc_algo = opt.conv_algo == ConvAlgo::kCutlass || opt.conv_algo == ConvAlgo::kStem ||
                           opt.conv_algo == ConvAlgo::kGemm || opt.conv_algo == ConvAlgo::kCudnn3xTf32 ||
                           opt.conv_algo == ConvAlgo::kConv1x1;
    if (opt.layout == Layout::kNhwc || (nhwc_algo && nhwc_layout_.ok)) {
      if (!nhwc_layout_.ok)
        *why = "--layout nhwc: " + nhwc_layout_.why;
      else if (nchw_algo)
        *why = std::string("--layout nhwc runs convolutions through ") + nhwc_conv_algos() +
               "; --conv-algo " + conv_algo_name(opt.conv_algo) + " needs --layout nchw";
      return why->empty();
    }
    // auto: the rule Layout's comment gives (engine/executor.h), measured on the model zoo.
    if (!nhwc_layout_.ok || !cudnn_only) return false;
    if (opt.precision == Precision::kFp32 && !cutlass_missing().empty()) return false;
    bool wide = false;
    for (const Step& st : plan_.steps) {
      if (st.op != Op::kConv) continue;
      const ConvAlgo pin = net_.layers[static_cast<size_t>(st.layer)]->algo;
      if (pin == ConvAlgo::kImplicit || pin == ConvAlgo::kIm2col) return false;  // the netdef wants NCHW
      wide = wide || (!st.pool_implicit && st.conv.in_c >= kNhwcMinChannels);
    }
    return wide;
  }
  bool nhwc_for(const RunOptions& opt) const {
    std::string why;
    return nhwc_for(opt, &why);
  }
  Storage storage() const { return nhwc_ ? storage_of(prec_) : Storage::kF32; }
  // Buffer b holds channels-last values this call.
  bool is_nhwc(int b) const {
    return nhwc_ && static_cast<size_t>(b) < nhwc_layout_.nhwc.size() &&
           nhwc_layout_.nhwc[static_cast<size_t>(b)];
  }
  // The most images a block may hold so that every tensor of a conv cuDNN may run holds fewer
  // than 2^31 values (its descriptors count in int); *layer: the conv that sets the limit.
  int64_t cudnn_block_limit(std::string* layer) const {
    int64_t most = std::numeric_limits<int64_t>::max();
    for (const Step& st : plan_.steps) {
      if (st.op != Op::kConv) continue;
      // cudnn-3xtf32 runs cuDNN on its split input, three times the input's values.
      const bool split = selector_.may_use_at(plan_, st.layer, ConvAlgo::kCudnn3xTf32);
      if (!split && !selector_.may_use_at(plan_, st.layer, ConvAlgo::kCudnn)) continue;
      const int64_t big = std::max(st.in_shape.size() * (split ? 3 : 1), st.out_shape.size());
      const int64_t fit = std::max<int64_t>(1, std::numeric_limits<int32_t>::max() / big);
      if (fit < most) most = fit, *layer = net_.layers[static_cast<size_t>(st.layer)]->name;
    }
    return most;
  }
  // The buffer argmax and the host read the network output from (FP32 NCHW).
  int output_buf() const {
    return nhwc_ && nhwc_layout_.out_f32 >= 0 ? nhwc_layout_.out_f32 : step(net_.output).out;
  }
  ConvWeights& conv_weights(int i) const { return *weights_->step(i).conv; }
  // The cuDNN convolution conv step `st` runs with `algo`: cudnn's own, cudnn-3xtf32's stacked
  // one; null for the other algorithms.
  CudnnConv* cudnn_conv(const Step& st, ConvAlgo algo) const {
    ConvWeights& c = conv_weights(st.layer);
    if (algo == ConvAlgo::kCudnn) return c.cudnn.get();
    if (algo == ConvAlgo::kCudnn3xTf32 && c.tf32x3) return &c.tf32x3->stacked_conv();
    return nullptr;
  }
  // Whether some conv may run through cuDNN (the slots then hold its workspace).
  bool may_use_cudnn() const {
    return selector_.may_use(plan_, ConvAlgo::kCudnn) || selector_.may_use(plan_, ConvAlgo::kCudnn3xTf32);
  }

  // The options of a call: weights up (the 3xTF32 fragments packed as it asks), the library
  // plans for its precision.
  void begin(const RunOptions& opt, const Dataset& data) {
    tuning_ = opt.tuning;
    if (data.preprocessed() != float_input_) {  // the graphs and warm-up were for the other input
      float_input_ = data.preprocessed();
      pipeline_->drop_graphs();
      warmed_gen_ = 0;
    }
    if (float_input_) tuning_.fuse_u8 = false;
    std::string why;
    const bool nhwc = nhwc_for(opt, &why);
    if (!why.empty()) throw Error(why);
    weights_->upload(net_, plan_, prec_, opt.tuning.pack_low);
    set_format(opt.precision, nhwc);
    // The convs conv1x1 would run with the max-pool before them: its one A buffer lets wider ones fit.
    for (const Step& st : plan_.steps)
      if (st.op == Op::kConv) selector_.set_pooled(st.layer, takes_prepool(st, ConvAlgo::kConv1x1, tuning_));
    if (nhwc_) weights_->upload_nhwc(net_, plan_, prec_);
    const CudnnConv::GraphUse use = !opt.tuning.cudnn_graph  ? CudnnConv::GraphUse::kOff
                                    : opt.tuning.graph_first ? CudnnConv::GraphUse::kFirst
                                                             : CudnnConv::GraphUse::kTimed;
    // At FP32 channels last, a conv that auto may give to cutlass does not time cuDNN's graph API:
    // its FP32 engines (no tensor cores) were 2-4x slower than cutlass's 3xTF32 on every zoo layer
    // both ran, and building their plans (NVRTC) took most of a run's setup (30-60 s at 224x224;
    // docs/performance.md, Session 12). cuDNN's legacy API is still timed.
    graph_use_ = use;
    bool changed = false;
    for (const Step& st : plan_.steps) {
      if (st.op != Op::kConv) continue;
      const bool to_cutlass = use == CudnnConv::GraphUse::kTimed && nhwc_ && prec_ == Precision::kFp32 &&
                              opt.conv_algo == ConvAlgo::kAuto &&
                              net_.layers[static_cast<size_t>(st.layer)]->algo == ConvAlgo::kAuto &&
                              conv_cannot_run(st.conv, ConvAlgo::kCutlass, 1, prec_, true).empty();
      changed = conv_weights(st.layer).cudnn->set_graph_use(to_cutlass ? CudnnConv::GraphUse::kOff : use,
                                                            opt.tuning.graph_plans) ||
                changed;
      if (conv_weights(st.layer).tf32x3)
        changed = conv_weights(st.layer).tf32x3->set_graph_use(use, opt.tuning.graph_plans) || changed;
      // A concat's input: cuDNN's graph API may write it at its channel offset (the same test
      // run_conv uses to hand find() the slice, which find() requires once the slice is set).
      const int64_t ld = slice_candidate(st) ? st.concat_ld : 0;
      changed = conv_weights(st.layer).cudnn->set_out_slice(ld) || changed;
      if (conv_weights(st.layer).tf32x3)
        changed = conv_weights(st.layer).tf32x3->stacked_conv().set_out_slice(ld) || changed;
    }
    if (changed) {  // cuDNN's search again, before any capture
      pipeline_->drop_graphs();
      warmed_gen_ = 0;
    }
  }
  // The operands' format and the activations' layout from now on: plans made for others are
  // dropped (cuBLASLt's, cuDNN's search, auto's picks, the captured graphs, the warm-up).
  void set_format(Precision p, bool nhwc) {
    if (p == prec_ && nhwc == nhwc_) return;
    if (p != prec_)
      for (auto& m : fc_plans_) m.clear();
    prec_ = p;
    nhwc_ = nhwc;
    selector_.set_format(p, nhwc);
    for (const Step& st : plan_.steps) {
      if (st.op != Op::kConv) continue;
      if (conv_weights(st.layer).im2col) conv_weights(st.layer).im2col->set_precision(p);
      conv_weights(st.layer).cudnn->set_format(p, nhwc);
    }
    pipeline_->drop_graphs();
    warmed_gen_ = 0;
  }

  // Whether conv step `st` run with `algo` reads the uint8 pixels this run (fuses_u8; the stem
  // where stem_bytes_ok and auto's timing, or a test, gave it the bytes).
  bool u8_fused(const Step& st, ConvAlgo algo) const {
    return fuses_u8(st, algo, tuning_) &&
           (algo != ConvAlgo::kStem ||
            (stem_bytes_ok(st) &&
             (tuning_.stem_bytes_first || conv_weights(st.layer).stem_input[static_cast<int>(prec_)] != 0)));
  }
  // Whether the stem could read the bytes this run, whichever input auto's search gives it: in FP32
  // storage as exact pixels (its weights allow it, GpuTuning::exact_pixels), in 16-bit storage
  // normalised as staged (a rows kernel runs it: stem_u8_cannot_run).
  bool stem_bytes_ok(const Step& st) const {
    if (!fuses_u8(st, ConvAlgo::kStem, tuning_) || !nhwc_ || !weights_->uploaded()) return false;
    if (storage() == Storage::kF32)
      return tuning_.exact_pixels && conv_weights(st.layer).stem_bytes.w_hi != nullptr;
    return tuning_.stem_rows && net_.pre.scale.size() == 3 && net_.pre.shift.size() == 3 &&
           stem_u8_cannot_run(st.conv, prec_, stem_pool_of(st, ConvAlgo::kStem)).empty();
  }
  // The pool conv step `st` computes run with `algo` (none: kernel_h 0).
  StemPool stem_pool_of(const Step& st, ConvAlgo algo) const {
    return stem_pool(net_, fuses_pool(st, algo, tuning_) ? st.pool_layer : -1);
  }
  bool uses_tc(const Step& st, ConvAlgo algo) const {  // needs the weights uploaded
    const ConvWeights& c = conv_weights(st.layer);
    return fuses_pool(st, algo, tuning_) && tuning_.tensor_cores && c.wt_tc[0].get() != nullptr &&
           (u8_fused(st, algo) ? c.tc_ok_u8 : c.tc_ok);
  }
  bool uses_exact(const Step& st, ConvAlgo algo) const {  // u8_exact this run
    return prec_ == Precision::kFp32 && tuning_.exact_pixels &&
           conv_weights(st.layer).wt_x16.get() != nullptr && u8_fused(st, algo) && uses_tc(st, algo);
  }
  // What the implicit kernel fuses for conv step `st` run with `algo`.
  ImplicitFusion implicit_fusion(const Step& st, ConvAlgo algo) const {
    ImplicitFusion f;
    f.pool = fuses_pool(st, algo, tuning_);
    f.avg_pool = f.pool && st.pool_avg;
    f.u8_input = u8_fused(st, algo);
    f.tensor_core = uses_tc(st, algo);
    f.precision = prec_;
    f.u8_exact = uses_exact(st, algo);
    f.row_copies = tuning_.row_copies;
    f.pack_low = tuning_.pack_low;
    return f;
  }
  // kConv: the partial sums an image of the whole-plane mean its channels-last depthwise kernel
  // would compute (0: none); whether it computes it run with `algo`.
  int mean_slots(const Step& st) const {
    return st.mean_layer >= 0 && nhwc_ && tuning_.fuse_mean
               ? depthwise_nhwc_mean_slots(conv_weights(st.layer).dw.args, storage(), dw_knobs())
               : 0;
  }
  // The channels-last depthwise kernels' knobs: the defaults, without the tile kernel --gpu-off
  // dwtile, without its half blocks for small tiles --gpu-off dwsmall, one output row a lane
  // --gpu-off dwrows.
  DepthwiseNhwcKnobs dw_knobs() const {
    DepthwiseNhwcKnobs k;
    if (!tuning_.dw_tile) k.set_tile_smem(0);
    if (!tuning_.dw_small) k.small_tile_strips = 0;
    if (!tuning_.dw_rows) k.tile_rows = 1;
    return k;
  }
  // The stride-1 max-pool's columns a thread (launch_pool2d_nhwc's row_cols): its own rule, or one
  // with --gpu-off poolcols.
  int pool_row_cols_arg() const { return tuning_.pool_cols ? 0 : 1; }
  // The tensor-core arithmetic of our kernels that follow the precision (stem, conv1x1) in their
  // reports: 3xTF32 at fp32, TF32 at tf32, the storage's own 16-bit products otherwise.
  const char* mma_words() const {
    return prec_ == Precision::kFp32   ? "3xTF32 tensor cores"
           : prec_ == Precision::kTf32 ? "TF32 tensor cores"
                                       : "tensor cores";
  }
  bool fuses_mean(const Step& st, ConvAlgo algo) const {
    return algo == ConvAlgo::kDepthwise && mean_slots(st) > 0;
  }
  // Pool step `ps`'s input plane, windows and output.
  Pool2dArgs pool_args_of(const Step& ps) const {
    return pool_args(layer_as<PoolLayer>(*net_.layers[static_cast<size_t>(ps.layer)]).p, ps.in_shape,
                     ps.out_shape);
  }
  // Conv step `st` run with `algo` takes the max-pool before it as it stages its input: the conv1x1
  // kernel where it can, GpuTuning::fuse_prepool (conv1x1 runs channels last only).
  bool takes_prepool(const Step& st, ConvAlgo algo, const GpuTuning& t) const {
    return st.prepool_layer >= 0 && t.fuse_prepool && algo == ConvAlgo::kConv1x1 &&
           conv1x1_pool_cannot_run(st.conv, pool_args_of(step(st.prepool_layer)), st.residual_buf >= 0)
               .empty();
  }
  // Step st's activation for our kernels: at tf32 SiLU and sigmoid take the approximate
  // exponential and reciprocal in FP32 storage as well (ActFn::fast: a few FP32 ulp, far under
  // TF32's rounding of the products; the accurate functions cost the depthwise and stem kernels'
  // epilogues most of their instructions), unless GpuTuning::fast_act is off.
  ActFn act_of(const Step& st) const {
    ActFn a = act_fn(st.act);
    a.fast = prec_ == Precision::kTf32 && tuning_.fast_act;
    return a;
  }
  bool pool_fused(const Step& st) const {  // kPool: computed by its conv this run
    return (st.pool_conv >= 0 && fuses_pool(step(st.pool_conv), selector_.chosen(st.pool_conv), tuning_)) ||
           (st.mean_conv >= 0 && fuses_mean(step(st.mean_conv), selector_.chosen(st.mean_conv))) ||
           (st.prepool_conv >= 0 &&
            takes_prepool(step(st.prepool_conv), selector_.chosen(st.prepool_conv), tuning_));
  }
  bool input_fused() const {  // no preprocess pass: the first conv reads the bytes
    for (const Step& st : plan_.steps)
      if (st.op == Op::kConv && u8_fused(st, selector_.chosen(st.layer))) return true;
    return false;
  }
  bool scale_folded(const Step& st) const {  // kMul: folded into its conv's filters this run
    return st.scale_conv >= 0 && selector_.chosen(st.scale_conv) == ConvAlgo::kGemm;
  }
  bool launches(const Step& st) const {
    return st.op != Op::kFused && st.op != Op::kIdentity && !(st.op == Op::kPool && pool_fused(st)) &&
           !(st.op == Op::kMul && scale_folded(st));
  }
  // Conv step `st` may write its output into its concat's buffer this call (Step::concat_step):
  // channels last, GpuTuning::concat_in_place.
  bool slice_candidate(const Step& st) const {
    return nhwc_ && tuning_.concat_in_place && st.concat_step >= 0;
  }
  // ... and does, run with `algo`: the gemm convolution with a ReLU or nothing after (cuBLASLt's
  // epilogue), conv1x1 without a residual where the slice is whole 16-byte pieces, cutlass with an
  // activation its epilogue applies, cuDNN (and cudnn-3xtf32's stacked conv) where its search
  // chose a graph-API engine that writes the slice.
  bool in_place(const Step& st, ConvAlgo algo) const {
    if (!slice_candidate(st)) return false;
    const ActFn act = act_fn(st.act);
    const ConvWeights& c = conv_weights(st.layer);
    switch (algo) {
      case ConvAlgo::kGemm:
        return act.kind == Act::kRelu || act.kind == Act::kIdentity;
      case ConvAlgo::kConv1x1:  // its 16-byte stores: a slice of whole 16-byte pieces
        return st.residual_buf < 0 && st.concat_offset % 8 == 0 && st.concat_ld % 8 == 0;
      case ConvAlgo::kCutlass:
        return cutlass_fuses(act);
      case ConvAlgo::kCudnn:
        return c.cudnn->writes_slice();
      case ConvAlgo::kCudnn3xTf32:
        return c.tf32x3 && c.tf32x3->stacked_conv().writes_slice();
      default:
        return false;
    }
  }
  // Concat step `cat`: which of its inputs their convs wrote in place this call.
  std::vector<char> written_in_place(const Step& cat) const {
    std::vector<char> written(cat.ins.size(), 0);
    for (const Step& cs : plan_.steps)
      if (cs.op == Op::kConv && cs.concat_step == cat.layer && in_place(cs, selector_.chosen(cs.layer)))
        for (size_t k = 0; k < cat.ins.size(); ++k)
          if (cat.ins[k] == cs.out) written[k] = 1;
    return written;
  }
  // Where conv step `st` writes in place: its channels in its concat's buffer.
  void* slice_ptr(const Step& st, Slot& s) const {
    return static_cast<char*>(s.bufs[static_cast<size_t>(step(st.concat_step).out)].get()) +
           st.concat_offset * storage_bytes(storage());
  }
  // The concat's copy of conv step `st`'s output, which writing in place saves.
  void copy_into_concat(const Step& st, Slot& s, int64_t n) const {
    launch_concat_nhwc(s.bufs[static_cast<size_t>(st.out)].get(), static_cast<int>(st.out_shape.c),
                       s.bufs[static_cast<size_t>(step(st.concat_step).out)].get(),
                       static_cast<int>(st.concat_ld), static_cast<int>(st.concat_offset), storage(),
                       n * st.out_shape.h * st.out_shape.w, s.stream);
  }
  // cuDNN's search with an output slice (CudnnConv::OutSlice): the slice, and the copy's time.
  CudnnConv::OutSlice out_slice(const Step& st, Slot& s, int64_t n) const {
    CudnnConv::OutSlice o;
    o.y = slice_ptr(st, s);
    copy_into_concat(st, s, n);
    o.copy_ms = least_ms(s.stream, kTuneRepeats, [&] { copy_into_concat(st, s, n); });
    return o;
  }

  // Each conv's algorithm for blocks of `block`, then slots for them.
  // share: buffers never in use at once share memory (run() with GpuTuning::share_buffers; never
  // forward_layers, which reads every layer's buffer after the last step).
  SlotNeeds slot_needs(bool share) const;
  void preprocess(Slot& s, int64_t n) const;
  void run_layers(Slot& s, int64_t n, bool events, int ev_base);
  void run_step(const Step& st, Slot& s, int64_t n);
  void run_step_nhwc(const Step& st, Slot& s, int64_t n);
  void run_conv(const Step& st, Slot& s, int64_t n, ConvAlgo algo);
  void time_conv(const Step& st, Slot& s, int64_t n, ConvAlgo algo);
  float time_ms(const Step& st, Slot& s, int64_t n, ConvAlgo algo);
  void pick_stem_input(const Step& st, Slot& s, int64_t n);
  void pick_pinned_stem_inputs(Slot& s, int64_t n);
  struct BlockOut {  // what a block's launches after its H2D copy write to
    int out_buf;
    int64_t out_size;
    bool want_probs;
    unsigned long long* correct;
  };
  void enqueue_compute(Slot& s, int64_t n, const BlockOut& o);
  void search(Slot& s, const Dataset& data, int64_t n, std::vector<ConvTuning>* searched);
  void warm(Slot& s, const Dataset& data, int64_t n, std::vector<ConvTuning>* searched);
  void prepare_graphs(int64_t n, size_t ws_bytes);
  std::string step_algo(const Step& st) const;
  std::string step_algo_base(const Step& st) const;  // step_algo without the concat's in-place writes
  // The slots and block size the last warm-up ran (RunOptions::warm_up false skips it for them).
  uint64_t warmed_gen_ = 0;  // BlockPipeline::generation() of those slots (0: none)
  int64_t warmed_block_ = -1;
  // The cuDNN workspace the chosen algorithms need for blocks of n and last images: the largest
  // of the convs that run cuDNN (the search's size when one cannot say), and the slots
  // (generation), block and last block the slots' workspaces were last sized for.
  size_t cudnn_ws_need(const CudnnHandle& h, int64_t n, int64_t last) const;
  std::tuple<uint64_t, int64_t, int64_t> ws_sized_{0, -1, -1};
};

SlotNeeds GpuExecutor::slot_needs(bool share) const {
  SlotNeeds needs;
  needs.input_bytes = net_.input.size() * (float_input_ ? int64_t{sizeof(float)} : 1);
  needs.buf_floats = plan_.buf_floats;
  if (nhwc_) {  // channels-last buffers in the storage format, then the FP32 NCHW copies
    const int64_t bytes = storage_bytes(storage());
    for (size_t b = 0; b < needs.buf_floats.size(); ++b)
      if (is_nhwc(static_cast<int>(b))) needs.buf_floats[b] = (needs.buf_floats[b] * bytes + 3) / 4;
    for (int64_t f : nhwc_layout_.copy_floats) needs.buf_floats.push_back(f);
  }
  for (const Step& st : plan_.steps) {  // per-image filters only where the gemm convolution may run
    if (st.scale_w_buf >= 0 && !selector_.may_use_at(plan_, st.layer, ConvAlgo::kGemm))
      needs.buf_floats[static_cast<size_t>(st.scale_w_buf)] = 0;
    // ... and a split input only where cudnn-3xtf32 may
    if (st.split_buf >= 0 && !selector_.may_use_at(plan_, st.layer, ConvAlgo::kCudnn3xTf32))
      needs.buf_floats[static_cast<size_t>(st.split_buf)] = 0;
    // ... and the mean's partial sums where the depthwise kernel may compute it (0 in the plan)
    if (st.mean_buf >= 0 && selector_.may_use_at(plan_, st.layer, ConvAlgo::kDepthwise))
      needs.buf_floats[static_cast<size_t>(st.mean_buf)] = int64_t(mean_slots(st)) * st.conv.filters;
  }
  if (share)
    needs.share_group = share_groups(buffer_lifetimes(net_, plan_, nhwc_ ? &nhwc_layout_ : nullptr),
                                     needs.buf_floats, &needs.group_floats);
  for (const Step& st : plan_.steps)
    if (st.op == Op::kConv && conv_weights(st.layer).im2col)
      needs.max_col = std::max(needs.max_col, conv_weights(st.layer).im2col->col_bytes_per_image());
  needs.im2col = selector_.may_use(plan_, ConvAlgo::kIm2col);
  needs.cudnn = may_use_cudnn();
  return needs;
}

// ---------------------------------------------------------------------------------------------
// Launches.

void GpuExecutor::preprocess(Slot& s, int64_t n) const {
  if (nhwc_) {
    const int C = static_cast<int>(net_.input.c);
    const int64_t plane = net_.input.h * net_.input.w;
    if (float_input_)
      launch_nchw_to_nhwc(static_cast<const float*>(s.input()), s.bufs[0].get(), storage(), n, C, plane,
                          s.stream);
    else
      launch_preprocess_nhwc(static_cast<const uint8_t*>(s.input()), s.bufs[0].get(), storage(), n, C, plane,
                             weights_->pre_scale().as<float>(), weights_->pre_shift().as<float>(), s.stream);
    return;
  }
  if (float_input_) {  // the user's values are the network's input
    CUDA_CHECK(cudaMemcpyAsync(s.bufs[0].get(), s.input(),
                               static_cast<size_t>(n * net_.input.size()) * sizeof(float),
                               cudaMemcpyDeviceToDevice, s.stream));
    return;
  }
  launch_preprocess(static_cast<const uint8_t*>(s.input()), s.bufs[0].as<float>(), n,
                    static_cast<int>(net_.input.c), net_.input.h * net_.input.w,
                    weights_->pre_scale().as<float>(), weights_->pre_shift().as<float>(), s.stream);
}

void GpuExecutor::run_conv(const Step& st, Slot& s, int64_t n, ConvAlgo algo) {
  ConvWeights& c = conv_weights(st.layer);
  const float* x = s.bufs[static_cast<size_t>(st.ins[0])].as<float>();
  float* y = s.bufs[static_cast<size_t>(st.out)].as<float>();
  // A residual add in this epilogue (Step::residual_buf): cuDNN adds it itself; the other
  // algorithms run with no activation, then one pass y = act(y + z).
  const bool residual = st.residual_buf >= 0;
  const void* z = residual ? s.bufs[static_cast<size_t>(st.residual_buf)].get() : nullptr;
  const ActFn conv_act = residual ? ActFn{} : act_of(st);
  auto add_residual = [&] {
    if (residual)
      launch_add_storage({y, z}, y, nhwc_ ? storage() : Storage::kF32, n * st.out_shape.size(), act_of(st),
                         s.stream);
  };
  switch (algo) {
    case ConvAlgo::kImplicit: {
      const ImplicitFusion f = implicit_fusion(st, algo);
      ImplicitConfig cfg = implicit_config(st.conv, n, f);
      ImplicitIo io;
      io.x = x;
      if (f.u8_input)
        io.x_u8 = static_cast<const uint8_t*>(s.input()), io.scale = weights_->pre_scale().as<float>(),
        io.shift = weights_->pre_shift().as<float>();
      if (f.u8_exact)
        io.scale = weights_->exact_scale().as<float>(), io.shift = weights_->exact_shift().as<float>(),
        io.out_scale = c.x16_scale;
      io.y = f.pool ? s.bufs[static_cast<size_t>(step(st.pool_layer).out)].as<float>() : y;
      const DevBuf& wt = f.u8_exact ? c.wt_x16 : f.tensor_core ? c.wt_tc[static_cast<int>(prec_)] : c.wt;
      // The kernel's epilogue applies a ReLU (its tuned paths stay as they are), or with the
      // average pool any activation; otherwise the activation is one in-place pass after it.
      const bool in_kernel = conv_act.kind == Act::kRelu || f.avg_pool;
      launch_conv_implicit(cfg, st.conv, io, wt.as<float>(), c.bias.as<float>(), n,
                           in_kernel ? conv_act : ActFn{}, s.stream);
      if (!in_kernel && conv_act.kind != Act::kIdentity)
        launch_act(y, y, n * st.conv.filters * st.conv.out_h * st.conv.out_w, conv_act, s.stream);
      add_residual();
      return;
    }
    case ConvAlgo::kDepthwise:
      if (nhwc_) {
        DepthwiseMean mean;  // with its whole-plane mean: the pool's output too
        if (fuses_mean(st, algo))
          mean.partial = s.bufs[static_cast<size_t>(st.mean_buf)].as<float>(),
          mean.out = s.bufs[static_cast<size_t>(step(st.mean_layer).out)].get();
        launch_conv_depthwise_nhwc(c.dw.args, s.bufs[static_cast<size_t>(st.ins[0])].get(), storage(),
                                   c.w_taps.as<float>(), c.bias.as<float>(),
                                   s.bufs[static_cast<size_t>(st.out)].get(), n, conv_act, s.stream,
                                   dw_knobs(), mean);
      } else
        launch_conv_depthwise(c.dw.cfg, c.dw.args, x, c.w.as<float>(), c.bias.as<float>(), y, n, conv_act,
                              s.stream);
      add_residual();
      return;
    case ConvAlgo::kCutlass: {
      // The residual and a clamp-shaped activation in its epilogue; any other activation after.
      const ActFn act = act_of(st);
      const ActFn epi = cutlass_fuses(act) ? act : ActFn{};
      const float* w = c.w_nhwc[static_cast<int>(prec_)].as<float>();
      const float* zf = static_cast<const float*>(z);
      // Written in place: its channels of the concat's pixels.
      const bool into = in_place(st, algo);
      if (into) y = static_cast<float*>(slice_ptr(st, s));
      const int64_t ld = into ? st.concat_ld : 0;
      if (c.centre_split > 0) {  // the centre-only filters as a 1x1 conv, the rest: two channel slices
        const int64_t e = c.centre_split, K = into ? ld : st.conv.filters;
        const ConvParams p1 = cutlass_centre_part(st.conv, e), p3 = cutlass_rest_part(st.conv, e);
        const float* w3 = w + e * st.conv.kernel_h * st.conv.kernel_w * st.conv.in_c;
        const float *b1 = c.bias.as<float>(), *b3 = b1 + e, *z3 = zf ? zf + e : nullptr;
        if (c.cutlass_tile_centre < 0)
          c.cutlass_tile_centre =
              cutlass_pick_tile(p1, n, x, c.w_centre.as<float>(), b1, zf, y, epi, s.stream, K);
        if (c.cutlass_tile < 0)
          c.cutlass_tile = cutlass_pick_tile(p3, n, x, w3, b3, z3, y + e, epi, s.stream, K);
        launch_conv_cutlass(c.cutlass_tile_centre, p1, n, x, c.w_centre.as<float>(), b1, zf, y, epi, s.stream,
                            K);
        launch_conv_cutlass(c.cutlass_tile, p3, n, x, w3, b3, z3, y + e, epi, s.stream, K);
      } else {
        if (c.cutlass_tile < 0)
          c.cutlass_tile = cutlass_pick_tile(st.conv, n, x, w, c.bias.as<float>(), zf, y, epi, s.stream, ld);
        launch_conv_cutlass(c.cutlass_tile, st.conv, n, x, w, c.bias.as<float>(), zf, y, epi, s.stream, ld);
      }
      if (epi != act) launch_act(y, y, n * st.out_shape.size(), act, s.stream);
      return;
    }
    case ConvAlgo::kGemm: {
      // The bias, the residual and a ReLU in cuBLASLt's epilogue; any other activation after.
      const ActFn act = act_of(st);
      const bool relu = act.kind == Act::kRelu;
      GemmIo io;
      io.x = s.bufs[static_cast<size_t>(st.ins[0])].get();
      io.w = c.w_nhwc[static_cast<int>(prec_)].get();
      io.bias = c.bias_nhwc[static_cast<int>(prec_)].get();
      io.z = z;
      io.y = s.bufs[static_cast<size_t>(st.out)].get();
      if (in_place(st, algo)) io.y = slice_ptr(st, s), io.y_ld = st.concat_ld;
      if (st.scale_layer >= 0) {  // the mul folded into per-image filters: x is the mul's input
        io.x = s.bufs[static_cast<size_t>(st.scaled_buf)].get();
        io.w_f32 = c.w.as<float>();
        io.scale = s.bufs[static_cast<size_t>(st.scale_buf)].get();
        io.w_image = s.bufs[static_cast<size_t>(st.scale_w_buf)].get();
      }
      c.gemm.run(lt_, st.conv, n, prec_, io, relu, s.lt_ws.get(), s.lt_ws.bytes(), s.stream);
      if (!relu && act.kind != Act::kIdentity)
        launch_act_storage(io.y, io.y, storage(), n * st.out_shape.size(), act, s.stream);
      return;
    }
    case ConvAlgo::kConv1x1: {
      // The bias, the residual and any activation in its epilogue.
      Conv1x1Io io;
      io.x = s.bufs[static_cast<size_t>(st.ins[0])].get();
      io.w = c.w_nhwc[static_cast<int>(prec_)].get();
      io.bias = c.bias.as<float>();
      io.z = z;
      io.y = s.bufs[static_cast<size_t>(st.out)].get();
      if (in_place(st, algo)) io.y = slice_ptr(st, s), io.y_ld = st.concat_ld;
      Pool2dArgs pool;  // with the max-pool before it: x is the pool's input
      if (takes_prepool(st, algo, tuning_))
        pool = pool_args_of(step(st.prepool_layer)), io.pool = &pool,
        io.x = s.bufs[static_cast<size_t>(st.prepool_buf)].get();
      launch_conv1x1(st.conv, prec_, io, n, act_of(st), s.stream);
      return;
    }
    case ConvAlgo::kStem: {
      // With its pool: the pool's output only (the conv's and its activation's never exist).
      const bool pool = fuses_pool(st, algo, tuning_);
      const StemPool sp = stem_pool_of(st, algo);
      void* out = s.bufs[static_cast<size_t>(pool ? step(st.pool_layer).out : st.out)].get();
      const uint8_t* bytes = static_cast<const uint8_t*>(s.input());
      if (!u8_fused(st, algo)) {
        launch_conv_stem(st.conv, s.bufs[static_cast<size_t>(st.ins[0])].get(), prec_,
                         c.w_nhwc[static_cast<int>(prec_)].get(), c.bias.as<float>(), out, n, conv_act,
                         s.stream, sp, tuning_.stem_rows);
      } else if (storage() == Storage::kF32) {  // the exact pixels
        launch_conv_stem_bytes(st.conv, bytes, c.stem_bytes, static_cast<float*>(out), n, conv_act, s.stream,
                               sp, tuning_.stem_rows);
      } else {  // 16-bit: the bytes normalised as staged
        StemPixels pre;
        for (int ch = 0; ch < 3; ++ch)
          pre.scale[ch] = net_.pre.scale[static_cast<size_t>(ch)],
          pre.shift[ch] = net_.pre.shift[static_cast<size_t>(ch)];
        launch_conv_stem_u8(st.conv, bytes, pre, prec_, c.w_nhwc[static_cast<int>(prec_)].get(),
                            c.bias.as<float>(), out, n, conv_act, s.stream, sp);
      }
      add_residual();
      return;
    }
    case ConvAlgo::kIm2col:
      if (!c.im2col)
        throw Error("layer '" + net_.layers[static_cast<size_t>(st.layer)]->name + "': im2col cannot run it");
      c.im2col->forward(lt_, x, c.w.as<float>(), y, n, s.col.as<float>(), s.col.bytes(), s.lt_ws.get(),
                        s.lt_ws.bytes(), s.stream);
      add_residual();  // im2col was made with no activation when there is a residual
      return;
    case ConvAlgo::kCudnn3xTf32: {
      if (!s.cudnn) s.cudnn = std::make_unique<CudnnHandle>();
      if (!c.tf32x3)
        throw Error("layer '" + net_.layers[static_cast<size_t>(st.layer)]->name +
                    "': cudnn-3xtf32 cannot run it");
      CudnnConv::OutSlice slice;  // where the stacked conv may write in place (its search: the copy's time)
      if (slice_candidate(st))
        slice = c.tf32x3->stacked_conv().found() ? CudnnConv::OutSlice{slice_ptr(st, s), 0.f}
                                                 : out_slice(st, s, n);
      c.tf32x3->forward(*s.cudnn, s.stream, n, x, s.bufs[static_cast<size_t>(st.split_buf)].as<float>(),
                        c.w_nhwc[static_cast<int>(Precision::kFp32)].as<float>(), c.bias.as<float>(),
                        static_cast<const float*>(z), y, s.cudnn_ws.get(), s.cudnn_ws.bytes(),
                        slice_candidate(st) ? &slice : nullptr);
      return;
    }
    case ConvAlgo::kCudnn: {
      if (!s.cudnn) s.cudnn = std::make_unique<CudnnHandle>();
      const void* xs = s.bufs[static_cast<size_t>(st.ins[0])].get();
      void* ys = s.bufs[static_cast<size_t>(st.out)].get();
      const void* ws = nhwc_ ? c.w_nhwc[static_cast<int>(prec_)].get() : c.w.get();
      const void* bt = nhwc_ ? c.bias_nhwc[static_cast<int>(prec_)].get() : c.bias.get();
      if (!c.cudnn->found()) {
        CudnnConv::OutSlice slice;  // where the graph API may write in place
        if (slice_candidate(st)) slice = out_slice(st, s, n);
        c.cudnn->find(*s.cudnn, s.stream, n, xs, ws, c.bias.as<float>(), bt, z, ys, s.cudnn_ws.get(),
                      s.cudnn_ws.bytes(), slice_candidate(st) ? &slice : nullptr);
      }
      if (in_place(st, algo)) ys = slice_ptr(st, s);
      c.cudnn->forward(*s.cudnn, s.stream, n, xs, ws, c.bias.as<float>(), bt, z, ys, s.cudnn_ws.get(),
                       s.cudnn_ws.bytes());
      return;
    }
    case ConvAlgo::kAuto:
      break;
  }
  throw Error("layer '" + net_.layers[static_cast<size_t>(st.layer)]->name +
              "': no convolution algorithm chosen");
}

// For auto: the conv with `algo` plus the passes that the implicit, stem and depthwise kernels'
// fusions would save (the preprocess, the max-pool, the whole-plane mean), so that the
// algorithms are compared on the same work.
void GpuExecutor::time_conv(const Step& st, Slot& s, int64_t n, ConvAlgo algo) {
  if ((st.u8_input || st.u8_input_pool || stem_bytes_ok(st)) && tuning_.fuse_u8 && !u8_fused(st, algo))
    preprocess(s, n);
  // The mul the gemm convolution folds (it runs channels last only: NCHW, no candidate saves it).
  if (st.scale_layer >= 0 && nhwc_ && algo != ConvAlgo::kGemm) run_step_nhwc(step(st.scale_layer), s, n);
  // Pool layer `pool_layer` reading buffer `in_buf`, in that buffer's own layout and storage (an
  // FP32 NCHW pool over 16-bit channels-last buffers reads and writes past them), launched here
  // whatever this run chose so far (run_step_nhwc skips a pool fused this run).
  auto pool_pass = [&](int pool_layer, int in_buf) {
    const Step& ps = step(pool_layer);
    const Pool2dArgs a = pool_args_of(ps);
    void* in = s.bufs[static_cast<size_t>(in_buf)].get();
    void* out = s.bufs[static_cast<size_t>(ps.out)].get();
    if (is_nhwc(in_buf))
      launch_pool2d_nhwc(in, out, storage(), n, a, s.stream, pool_row_cols_arg());
    else
      launch_pool2d(static_cast<const float*>(in), static_cast<float*>(out), n, a, s.stream);
  };
  // The max-pool before it that the conv1x1 kernel takes.
  if (st.prepool_layer >= 0 && nhwc_ && !takes_prepool(st, algo, tuning_))
    pool_pass(st.prepool_layer, st.prepool_buf);
  run_conv(st, s, n, algo);
  // A concat's input not written in place: the concat's copy of it.
  if (slice_candidate(st) && !in_place(st, algo)) copy_into_concat(st, s, n);
  // A pool of the conv's output.
  if (mean_slots(st) > 0 && !fuses_mean(st, algo)) pool_pass(st.mean_layer, st.out);
  if (st.pool_layer >= 0 && tuning_.fuse_pool && !fuses_pool(st, algo, tuning_))
    pool_pass(st.pool_layer, st.out);
}

// Channels last: the storage-format passes of nhwc.h; a fully-connected layer or a softmax runs
// the FP32 NCHW step on a copy of its input (NhwcLayout::f32_in).
void GpuExecutor::run_step_nhwc(const Step& st, Slot& s, int64_t n) {
  auto buf = [&](int b) { return s.bufs[static_cast<size_t>(b)].get(); };
  const Layer& l = *net_.layers[static_cast<size_t>(st.layer)];
  const StepWeights& w = weights_->step(st.layer);
  const Storage t = storage();
  const bool in_nhwc = !st.ins.empty() && is_nhwc(st.ins[0]);
  const int C = static_cast<int>(st.out_shape.c);
  const int64_t pixels = n * st.out_shape.h * st.out_shape.w;
  switch (st.op) {
    case Op::kIdentity:
    case Op::kFused:
      return;
    case Op::kConv:
      return run_conv(st, s, n, selector_.chosen(st.layer));
    case Op::kFc:
    case Op::kSoftmax: {
      const int copy = nhwc_layout_.f32_in[static_cast<size_t>(st.layer)];
      if (copy < 0) break;  // its input is FP32 NCHW already
      const Shape& in = nhwc_layout_.shape[static_cast<size_t>(st.ins[0])];
      launch_nhwc_to_nchw(buf(st.ins[0]), t, s.bufs[static_cast<size_t>(copy)].as<float>(), n,
                          static_cast<int>(in.c), in.h * in.w, s.stream);
      Step from_copy = st;
      from_copy.ins[0] = copy;
      return run_step(from_copy, s, n);
    }
    case Op::kAct:
      if (!in_nhwc) break;
      return launch_act_storage(buf(st.ins[0]), buf(st.out), t, n * st.out_shape.size(), act_of(st),
                                s.stream);
    case Op::kPool:
      if (pool_fused(st)) return;  // its conv (the stem kernel) wrote it
      return launch_pool2d_nhwc(buf(st.ins[0]), buf(st.out), t, n, pool_args_of(st), s.stream,
                                pool_row_cols_arg());
    case Op::kAffine:
      if (!in_nhwc) break;
      return launch_affine_nhwc(buf(st.ins[0]), buf(st.out), t, pixels, C, w.scale.as<float>(),
                                w.shift.as<float>(), s.stream);
    case Op::kAdd: {
      if (!in_nhwc) break;
      std::vector<const void*> in;
      for (int b : st.ins) in.push_back(buf(b));
      return launch_add_storage(in, buf(st.out), t, n * st.out_shape.size(), ActFn{}, s.stream);
    }
    case Op::kMul: {
      if (scale_folded(st)) return;  // its conv reads its inputs
      if (!in_nhwc) break;
      const MulParams& p = layer_as<MulLayer>(l).p;
      std::vector<MulInputNhwc> in;
      for (size_t k = 0; k < st.ins.size(); ++k) in.push_back({buf(st.ins[k]), p.broadcast[k]});
      return launch_mul_nhwc(in, buf(st.out), t, n, C, st.out_shape.h * st.out_shape.w, s.stream);
    }
    case Op::kConcat: {
      const std::vector<char> written = written_in_place(st);
      int offset = 0;
      for (size_t k = 0; k < st.ins.size(); ++k) {
        const int ck = static_cast<int>(l.in_shapes[k].c);
        if (!written[k]) launch_concat_nhwc(buf(st.ins[k]), ck, buf(st.out), C, offset, t, pixels, s.stream);
        offset += ck;
      }
      return;
    }
    case Op::kUpsample:
      throw Error("layer '" + l.name + "': upsample has no channels-last kernel");  // NhwcLayout refuses it
  }
  run_step(st, s, n);  // FP32 NCHW operands
}

void GpuExecutor::run_step(const Step& st, Slot& s, int64_t n) {
  auto buf = [&](int b) { return s.bufs[static_cast<size_t>(b)].as<float>(); };
  const Layer& l = *net_.layers[static_cast<size_t>(st.layer)];
  const StepWeights& w = weights_->step(st.layer);
  switch (st.op) {
    case Op::kIdentity:
    case Op::kFused:
      return;
    case Op::kConv:
      return run_conv(st, s, n, selector_.chosen(st.layer));
    case Op::kFc: {
      const auto& p = layer_as<FcLayer>(l).p;
      auto& plan = fc_plans_[static_cast<size_t>(st.layer)][n];
      if (!plan) {
        plan = std::make_unique<LtGemm>();
        GemmSpec g;  // column-major: out (O x n) = W^T-stored (I x O)^T * x (I x n)
        g.m = p.outputs, g.n = n, g.k = p.inputs;
        g.trans_a = true;
        g.lda = p.inputs, g.ldb = p.inputs, g.ldd = p.outputs;
        g.epilogue = st.act.kind == ActKind::kRelu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
        g.bias = w.b.as<float>();
        g.precision = prec_;
        if (!plan->init(lt_, g, s.lt_ws.bytes()))
          throw Error("layer '" + l.name + "': cuBLASLt has no " + precision_name(prec_) +
                      " algorithm for its " + std::to_string(p.outputs) + "x" + std::to_string(p.inputs) +
                      " GEMM");
      }
      plan->run(lt_, w.w.as<float>(), buf(st.ins[0]), buf(st.out), s.lt_ws.get(), s.lt_ws.bytes(), s.stream);
      if (st.act.kind != ActKind::kNone && st.act.kind != ActKind::kRelu)  // no cuBLASLt epilogue for it
        launch_act(buf(st.out), buf(st.out), n * p.outputs, act_fn(st.act), s.stream);
      return;
    }
    case Op::kAct:
      return launch_act(buf(st.ins[0]), buf(st.out), n * st.out_shape.size(), act_fn(st.act), s.stream);
    case Op::kPool:
      if (pool_fused(st)) return;  // its conv wrote it
      return launch_pool2d(buf(st.ins[0]), buf(st.out), n, pool_args_of(st), s.stream);
    case Op::kMul: {
      const MulParams& p = layer_as<MulLayer>(l).p;
      std::vector<MulInput> in;
      for (size_t k = 0; k < st.ins.size(); ++k) in.push_back({buf(st.ins[k]), p.broadcast[k]});
      return launch_mul(in, buf(st.out), n, static_cast<int>(st.out_shape.c), st.out_shape.h * st.out_shape.w,
                        s.stream);
    }
    case Op::kUpsample: {
      const UpsampleParams& p = layer_as<UpsampleLayer>(l).p;
      UpsampleArgs a;
      a.channels = static_cast<int>(st.in_shape.c), a.in_h = static_cast<int>(st.in_shape.h);
      a.in_w = static_cast<int>(st.in_shape.w), a.out_h = static_cast<int>(st.out_shape.h);
      a.out_w = static_cast<int>(st.out_shape.w);
      a.bilinear = p.mode == UpsampleMode::kBilinear, a.align_corners = p.align_corners;
      a.factor_h = static_cast<int>(p.y.factor), a.factor_w = static_cast<int>(p.x.factor);
      a.ratio_h = p.y.ratio, a.ratio_w = p.x.ratio;
      return launch_upsample(buf(st.ins[0]), buf(st.out), n, a, s.stream);
    }
    case Op::kAffine:
      return launch_channel_affine(buf(st.ins[0]), buf(st.out), n, static_cast<int>(st.out_shape.c),
                                   st.out_shape.h * st.out_shape.w, w.scale.as<float>(), w.shift.as<float>(),
                                   s.stream);
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
        const size_t wb = static_cast<size_t>(l.in_shapes[k].size()) * sizeof(float);
        CUDA_CHECK(cudaMemcpy2DAsync(reinterpret_cast<char*>(buf(st.out)) + off, dpitch, buf(st.ins[k]), wb,
                                     wb, static_cast<size_t>(n), cudaMemcpyDeviceToDevice, s.stream));
        off += wb;
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
  if (!input_fused()) preprocess(s, n);
  if (events) record(s.ev[static_cast<size_t>(ev_base - 1)], s.stream);
  for (size_t i = 0; i < plan_.steps.size(); ++i) {
    if (nhwc_)
      run_step_nhwc(plan_.steps[i], s, n);
    else
      run_step(plan_.steps[i], s, n);
    if (nhwc_ && static_cast<int>(i) == net_.output && nhwc_layout_.out_f32 >= 0) {
      const int b = step(net_.output).out;
      const Shape& sh = nhwc_layout_.shape[static_cast<size_t>(b)];
      launch_nhwc_to_nchw(s.bufs[static_cast<size_t>(b)].get(), storage(),
                          s.bufs[static_cast<size_t>(nhwc_layout_.out_f32)].as<float>(), n,
                          static_cast<int>(sh.c), sh.h * sh.w, s.stream);
    }
    if (events) record(s.ev[static_cast<size_t>(ev_base) + i], s.stream);
  }
}

// A block's work after its H2D copy: every layer, argmax + accuracy against the slot's copy of
// the block's labels, the D2H copies, with the timing events between (ev[2..L+4]).
void GpuExecutor::enqueue_compute(Slot& s, int64_t n, const BlockOut& o) {
  const size_t L = plan_.steps.size();
  run_layers(s, n, true, 3);
  launch_argmax(s.bufs[static_cast<size_t>(o.out_buf)].as<float>(), n, static_cast<int>(o.out_size),
                s.pred.as<int32_t>(), s.labels.as<int32_t>(), 0, n, o.correct, s.stream);
  record(s.ev[L + 3], s.stream);
  CUDA_CHECK(cudaMemcpyAsync(s.pred_host.as<int32_t>(), s.pred.as<int32_t>(),
                             static_cast<size_t>(n) * sizeof(int32_t), cudaMemcpyDeviceToHost, s.stream));
  if (o.want_probs)
    CUDA_CHECK(cudaMemcpyAsync(s.probs_host.as<float>(), s.bufs[static_cast<size_t>(o.out_buf)].as<float>(),
                               static_cast<size_t>(n * o.out_size) * sizeof(float), cudaMemcpyDeviceToHost,
                               s.stream));
  record(s.ev[L + 4], s.stream);
}

// The stem's input, once per precision, where the stem could read the bytes: the bytes, or the
// floats after the preprocess pass (time_conv adds it), whichever is faster here (ResNet-18's 7x7
// stem at fp32 gains from the bytes, the 3x3 stems lose: docs/performance.md, Session 27): when
// auto's search times the stem, or before the first block of a pinned one.
void GpuExecutor::pick_stem_input(const Step& st, Slot& s, int64_t n) {
  ConvWeights& c = conv_weights(st.layer);
  int& pick = c.stem_input[static_cast<int>(prec_)];
  if (pick >= 0 || tuning_.stem_bytes_first || !stem_bytes_ok(st)) return;
  float(&ms)[2] = c.stem_input_ms[static_cast<int>(prec_)];
  for (int bytes : {1, 0}) {
    pick = bytes;
    time_conv(st, s, n, ConvAlgo::kStem);
    ms[bytes] = least_ms(s.stream, kTuneRepeats, [&] { time_conv(st, s, n, ConvAlgo::kStem); });
  }
  pick = ms[1] <= ms[0] ? 1 : 0;
}

// A stem the netdef or --conv-algo pins (auto's search does not time it) on the first block, before
// the layers run: it reads the network's input (fuses_u8), so nothing runs before it.
void GpuExecutor::pick_pinned_stem_inputs(Slot& s, int64_t n) {
  for (const Step& st : plan_.steps)
    if (st.op == Op::kConv && selector_.chosen(st.layer) == ConvAlgo::kStem) pick_stem_input(st, s, n);
}

// Auto: best of kTuneRepeats after a warm-up (the warm-up also runs cuDNN's own search).
float GpuExecutor::time_ms(const Step& st, Slot& s, int64_t n, ConvAlgo algo) {
  if (algo == ConvAlgo::kStem) pick_stem_input(st, s, n);
  time_conv(st, s, n, algo);
  return least_ms(s.stream, kTuneRepeats, [&] { time_conv(st, s, n, algo); });
}

// Auto's search on the first block: each conv left to auto is timed with every candidate on the
// real output of the layers before it (ConvSelector::search).
void GpuExecutor::search(Slot& s, const Dataset& data, int64_t n, std::vector<ConvTuning>* searched) {
  BlockPipeline::copy_in(s, data, 0, n, false);
  preprocess(s, n);
  pick_pinned_stem_inputs(s, n);
  selector_.search(
      net_, plan_, n,
      [&](int i, ConvAlgo a, std::string* note) {
        const float ms = time_ms(step(i), s, n, a);
        if (const CudnnConv* c = cudnn_conv(step(i), a)) *note = c->choice_note();
        return ms;
      },
      [&](int i) {
        if (nhwc_)
          run_step_nhwc(step(i), s, n);
        else
          run_step(step(i), s, n);
      },
      searched);
  CUDA_CHECK(cudaStreamSynchronize(s.stream));
}

// The first block once through every layer before the clock starts: auto's search when a conv
// needs it, otherwise a warm-up (CUDA loads kernels lazily, cuBLASLt/cuDNN plan on first use).
// cuDNN's graph API's host work for n images, every conv's at once (CudnnConv::prepare): its
// plan builds compile kernels (NVRTC), which one thread per layer overlaps: ResNet-18's search
// took 48 s on one thread (docs/performance.md, Session 8).
void GpuExecutor::prepare_graphs(int64_t n, size_t ws_bytes) {
  if (!nhwc_ || graph_use_ == CudnnConv::GraphUse::kOff || !CudnnGraphConv::built()) return;
  std::vector<CudnnConv*> convs;
  for (const Step& st : plan_.steps)
    if (st.op == Op::kConv) {
      convs.push_back(conv_weights(st.layer).cudnn.get());
      if (selector_.may_use_at(plan_, st.layer, ConvAlgo::kCudnn3xTf32))
        if (CudnnConv* c = cudnn_conv(st, ConvAlgo::kCudnn3xTf32)) convs.push_back(c);
    }
  if (convs.empty()) return;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  const size_t T = std::min<size_t>(convs.size(), std::max(1u, std::thread::hardware_concurrency()));
  // The handles outlive the plans built with them (a plan keeps its handle).
  while (prep_handles_.size() < T) prep_handles_.push_back(std::make_unique<CudnnHandle>());
  std::atomic<size_t> next{0};
  std::vector<std::exception_ptr> errors(T);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < T; ++t)
    threads.emplace_back([&, t] {
      try {
        CUDA_CHECK(cudaSetDevice(dev));
        for (size_t i = next++; i < convs.size(); i = next++)
          convs[i]->prepare(*prep_handles_[t], n, ws_bytes);
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  for (std::thread& th : threads) th.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

size_t GpuExecutor::cudnn_ws_need(const CudnnHandle& h, int64_t n, int64_t last) const {
  int64_t need = 0;
  for (const Step& st : plan_.steps) {
    const ConvAlgo a = st.op == Op::kConv ? selector_.chosen(st.layer) : ConvAlgo::kAuto;
    if (a != ConvAlgo::kCudnn && a != ConvAlgo::kCudnn3xTf32) continue;
    CudnnConv* c = cudnn_conv(st, a);
    for (const int64_t m : {n, last}) {
      const int64_t w = c ? c->workspace(h, m) : -1;
      if (w < 0) return pipeline_->cudnn_ws_max();
      need = std::max(need, w);
    }
  }
  return std::min(static_cast<size_t>(need), pipeline_->cudnn_ws_max());
}

void GpuExecutor::warm(Slot& s, const Dataset& data, int64_t n, std::vector<ConvTuning>* searched) {
  prepare_graphs(n, s.cudnn_ws.bytes());
  if (selector_.any_auto()) return search(s, data, n, searched);
  BlockPipeline::copy_in(s, data, 0, n, false);
  pick_pinned_stem_inputs(s, n);
  run_layers(s, n, false, 0);
  CUDA_CHECK(cudaStreamSynchronize(s.stream));
}

std::string GpuExecutor::step_algo(const Step& st) const {
  const std::string base = step_algo_base(st);
  if (st.op == Op::kConv && in_place(st, selector_.chosen(st.layer)))
    return base + ", written into " + net_.layers[static_cast<size_t>(st.concat_step)]->name +
           "'s channels " + std::to_string(st.concat_offset) + "-" +
           std::to_string(st.concat_offset + st.out_shape.c - 1);
  if (st.op == Op::kConcat && nhwc_) {
    const std::vector<char> written = written_in_place(st);
    const int64_t w = std::count(written.begin(), written.end(), 1);
    if (w > 0)
      return "copies " + std::to_string(written.size() - static_cast<size_t>(w)) + " of its " +
             std::to_string(written.size()) + " inputs (" + std::to_string(w) +
             " written in place by their convs)";
  }
  return base;
}

std::string GpuExecutor::step_algo_base(const Step& st) const {
  switch (st.op) {
    case Op::kConv: {
      const ConvAlgo a = selector_.chosen(st.layer);
      const ConvWeights& c = conv_weights(st.layer);
      // With a residual add, the activation is in the add's pass (cuDNN: in its own epilogue).
      const bool residual = st.residual_buf >= 0;
      const ActFn act = residual ? ActFn{} : act_fn(st.act);
      const std::string res =
          residual ? " + add" +
                         (st.act.kind == ActKind::kNone ? std::string() : "+" + act_fn_name(act_fn(st.act))) +
                         " pass"
                   : "";
      // The implicit kernel's average pool takes any activation into its epilogue.
      const bool pool = fuses_pool(st, a, tuning_), avg = pool && st.pool_avg;
      const bool relu = act.kind == Act::kRelu, other = !relu && !avg && act.kind != Act::kIdentity;
      std::string epi = relu ? "+relu" : avg && act.kind != Act::kIdentity ? "+" + act_fn_name(act) : "";
      if (pool) epi += avg ? "+avgpool" : "+maxpool";
      if (a == ConvAlgo::kImplicit) {
        const char* tc = "3xTF32 tensor cores, ";
        switch (prec_) {
          case Precision::kTf32:
            tc = "TF32 tensor cores, ";
            break;
          case Precision::kFp16:
            tc = "FP16 tensor cores, ";
            break;
          case Precision::kBf16:
            tc = "BF16 tensor cores, ";
            break;
          case Precision::kFp32:
            break;
        }
        return std::string("implicit(") +
               (uses_exact(st, a) ? "FP16 tensor cores on exact pixels, 2-part weights, "
                : uses_tc(st, a)  ? tc
                                  : "") +
               (u8_fused(st, a) ? "uint8 input, " : "") + "bias" + epi + " epilogue" +
               (other ? ", " + act_fn_name(act) + " pass)" : ")") + res;
      }
      if (a == ConvAlgo::kDepthwise && nhwc_) {
        const DepthwiseTile tile = depthwise_nhwc_tile(c.dw.args, storage(), dw_knobs());
        const DepthwiseStrip strip = depthwise_nhwc_strip(c.dw.args, storage());
        return "depthwise(bias" + (act.kind == Act::kIdentity ? std::string() : "+" + act_fn_name(act)) +
               (fuses_mean(st, a) ? "+mean" : "") + " epilogue, " + storage_name(storage()) + " NHWC, " +
               (tile.smem > 0
                    ? "2 filters x " + std::to_string(tile.pixels) + " pixels" +
                          (tile.rows > 1 ? " x " + std::to_string(tile.rows) + " rows" : std::string()) +
                          " a thread of " + std::to_string(tile.tile_h) + "x" + std::to_string(tile.tile_w) +
                          " tiles staged in shared memory" +
                          (tile.threads != DepthwiseTile{}.threads
                               ? ", blocks of " + std::to_string(tile.threads) + " threads"
                               : std::string())
                : strip.pixels > 0
                    ? std::to_string(strip.filters) + " filters x " + std::to_string(strip.pixels) +
                          " pixels a thread"
                    : std::to_string(depthwise_nhwc_vector(c.dw.args, storage())) + " filters a thread") +
               ")" + res;
      }
      if (a == ConvAlgo::kDepthwise)
        return "depthwise(bias" + (act.kind == Act::kIdentity ? std::string() : "+" + act_fn_name(act)) +
               " epilogue, " + std::to_string(c.dw.cfg.planes) + " planes x " +
               std::to_string(c.dw.cfg.rows) + " rows a block)" + res;
      if (a == ConvAlgo::kIm2col && c.im2col) return c.im2col->algo_name() + res;
      if (a == ConvAlgo::kStem) {
        const bool pooled = fuses_pool(st, a, tuning_);
        const bool rows = tuning_.stem_rows && stem_runs_rows(st.conv, prec_, stem_pool_of(st, a));
        return std::string("stem(") +
               (!u8_fused(st, a) ? std::string(mma_words()) + ", "
                : storage() == Storage::kF32
                    ? "FP16 tensor cores on exact pixels, 2-part weights, uint8 input, "
                    : std::string(mma_words()) + ", uint8 input, ") +
               (rows ? "A from the patch's rows, " : "") + "bias" +
               (act.kind == Act::kIdentity ? std::string() : "+" + act_fn_name(act)) +
               (pooled ? "+maxpool" : "") + " epilogue, " + storage_name(storage()) + " NHWC)" + res;
      }
      if (a == ConvAlgo::kGemm) {
        const ActFn full = act_fn(st.act);
        return std::string("gemm(cuBLASLt, ") +
               (st.scale_layer >= 0
                    ? "per-image filters with " + net_.layers[static_cast<size_t>(st.scale_layer)]->name +
                          "'s scale folded in, "
                    : std::string()) +
               "bias" + (residual ? "+add" : "") + (full.kind == Act::kRelu ? "+relu" : "") + " epilogue, " +
               storage_name(storage()) + " NHWC" +
               (full.kind != Act::kRelu && full.kind != Act::kIdentity ? ", " + act_fn_name(full) + " pass)"
                                                                       : ")") +
               precision_tag(prec_);
      }
      if (a == ConvAlgo::kCudnn3xTf32 && c.tf32x3) return c.tf32x3->algo_name();
      if (a == ConvAlgo::kConv1x1) {
        const ActFn full = act_fn(st.act);
        return std::string("conv1x1(") + mma_words() + ", " +
               (takes_prepool(st, a, tuning_)
                    ? "A the maxima of " + net_.layers[static_cast<size_t>(st.prepool_layer)]->name +
                          "'s windows, "
                    : std::string()) +
               "bias" + (residual ? "+add" : "") +
               (full.kind == Act::kIdentity ? std::string() : "+" + act_fn_name(full)) + " epilogue, " +
               storage_name(storage()) + " NHWC)";
      }
      if (a == ConvAlgo::kCutlass) {
        const ActFn full = act_fn(st.act);
        const bool fused = cutlass_fuses(full);
        return std::string("cutlass(3xTF32 tensor cores, ") +
               (c.cutlass_tile >= 0 ? cutlass_tile_name(c.cutlass_tile) + std::string(" tile, ") : "") +
               (c.centre_split > 0
                    ? "its first " + std::to_string(c.centre_split) + " filters as a 1x1 conv" +
                          (c.cutlass_tile_centre >= 0
                               ? std::string(" (") + cutlass_tile_name(c.cutlass_tile_centre) + " tile)"
                               : std::string()) +
                          ", "
                    : std::string()) +
               "bias" + (residual ? "+add" : "") +
               (fused && full.kind != Act::kIdentity ? "+" + act_fn_name(full) : std::string()) +
               " epilogue, fp32 NHWC" + (fused ? ")" : ", " + act_fn_name(full) + " pass)");
      }
      return c.cudnn->algo_name();
    }
    case Op::kFc:
      return std::string("cublasLt(epilogue bias") + (st.act.kind == ActKind::kRelu ? "+relu)" : ")") +
             (st.act.kind != ActKind::kNone && st.act.kind != ActKind::kRelu
                  ? "+" + act_fn_name(act_fn(st.act)) + " pass"
                  : std::string()) +
             precision_tag(prec_);
    case Op::kFused:
      return "fused into " + net_.layers[static_cast<size_t>(st.fused_producer)]->name;
    case Op::kPool:
      if (!pool_fused(st)) return "";
      return "fused into " + net_.layers[static_cast<size_t>(st.pool_conv >= 0   ? st.pool_conv
                                                             : st.mean_conv >= 0 ? st.mean_conv
                                                                                 : st.prepool_conv)]
                                 ->name;
    case Op::kMul:
      return scale_folded(st) ? "folded into " + net_.layers[static_cast<size_t>(st.scale_conv)]->name +
                                    "'s per-image filters"
                              : "";
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
  GpuRunFacts& facts = r.gpu.emplace();
  auto setup_t0 = Clock::now();
  begin(opt, data);
  r.precision = prec_;
  const BlockShape shape = block_shape(batch, opt, kDefaultBlock, kDefaultStreams);
  int64_t block = shape.block;
  facts.whole_batch = shape.whole_batch;
  {
    // Host memory the slots pin: each stream's predictions, the output values when asked, and
    // the staging copy of a block's images where they cannot be page-locked in place (counted
    // whenever they are not resident). The block is cut so that these fit in half of what this
    // process may still take (the data set and the results are held beside them).
    const int64_t out_values = net_.layers[static_cast<size_t>(net_.output)]->out_shape.size();
    const int64_t per_image = int64_t{sizeof(int32_t)} +
                              (opt.want_probs ? out_values * int64_t{sizeof(float)} : 0) +
                              (opt.resident ? 0 : data.bytes_per_image());
    const int streams = shape.streams;
    const HostMemory mem = host_memory();
    const bool capped = opt.pinned_memory > 0 && opt.pinned_memory < mem.available / 2;
    const int64_t budget = capped ? opt.pinned_memory : mem.available / 2;
    if (opt.pinned_memory < 0)
      throw Error("pinned_memory must not be negative, found " + std::to_string(opt.pinned_memory));
    const int64_t fit = images_fitting(per_image, streams, budget);
    if (fit < 1)
      throw Error("host memory: one image needs " + bytes_str(per_image) +
                  " of page-locked buffers on each of " + std::to_string(streams) + " streams, but " +
                  (capped ? "--pinned-memory allows " + bytes_str(budget)
                          : "half of the host memory is only " + bytes_str(budget) + " (" + mem.str() + ")"));
    if (block > fit) {
      facts.host_cut_from = block;
      facts.host_limited_by = capped ? "--pinned-memory" : mem.limited_by;
      block = fit;
      facts.host_pinned_bytes = block * per_image * streams;
    }
  }
  selector_.resolve(net_, plan_, opt.conv_algo, block, false);
  if (const int64_t most = cudnn_block_limit(&facts.cudnn_cut_layer); block > most) {
    facts.cudnn_cut_from = block;
    block = most;
    selector_.resolve(net_, plan_, opt.conv_algo, block, false);  // auto's picks are per block size
  }
  // --resident: the pixels every block reads, on the GPU before the clock (and before the slots,
  // which are then sized around them).
  // A --gpu-memory cap covers them too: the slots get what they leave of it.
  // A batch longer than the data set (--cycle) run as one block is uploaded whole, the data set
  // repeated, where that takes at most an eighth of the free GPU memory (and of a --gpu-memory
  // cap): its block then reads the pixels where they lie. Otherwise the distinct images only, and
  // each block copies its own from them.
  int64_t resident_count = std::min(batch, data.count);
  if (opt.resident && shape.whole_batch && batch > data.count) {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const int64_t whole = batch * data.bytes_per_image();
    if (whole <= static_cast<int64_t>(free_b / 8) && (opt.gpu_memory == 0 || whole <= opt.gpu_memory / 8))
      resident_count = batch;
  }
  const std::string resident_what =
      resident_count > data.count
          ? std::to_string(resident_count) + " images (" + std::to_string(data.count) + " distinct, repeated)"
          : std::to_string(resident_count) + " distinct images";
  const int64_t reserved = opt.resident && opt.gpu_memory > 0 ? resident_count * data.bytes_per_image() : 0;
  if (reserved > 0 && reserved >= opt.gpu_memory)
    throw Error("--resident: the " + resident_what + " take " + std::to_string(reserved) +
                " bytes of GPU memory, and --gpu-memory allows only " + std::to_string(opt.gpu_memory) +
                " bytes in all; raise --gpu-memory or run without --resident");
  DevBuf resident;
  if (opt.resident) resident = pipeline_->upload_resident(data, resident_count);
  try {
    pipeline_->ensure_slots(slot_needs(opt.tuning.share_buffers), shape.streams, block, batch, opt.gpu_memory,
                            reserved, &facts);
  } catch (const Error& e) {
    if (!opt.resident) throw;
    throw Error("--resident (the " + resident_what + " take " + std::to_string(resident.bytes()) +
                " bytes of GPU memory): " + e.what());
  }
  std::vector<std::unique_ptr<Slot>>& slots = pipeline_->slots();
  block = pipeline_->block();
  const int S = pipeline_->streams();
  // The buffers this run holds: not those sized 0 for an algorithm no conv may run (a split input
  // without cudnn-3xtf32, per-image filters without gemm).
  const int held = static_cast<int>(std::count_if(slots[0]->bufs.begin(), slots[0]->bufs.end(),
                                                  [](const DevBuf& b) { return b.bytes() > 0; }));
  facts.buffers = {pipeline_->buffer_bytes_per_image(), held, pipeline_->buffer_allocations()};
  // Equal blocks but the last; every full block runs the slot's captured graph, the last one
  // its own. (Not a short first block so that compute starts after a shorter copy: one more
  // block cost more than it saved; docs/performance.md.)
  const int64_t nblocks = (batch + block - 1) / block;
  // --resident, one block, the resident copy holding the batch in order: the block reads its
  // pixels there (Slot::in_view) instead of copying them first. Cleared when the run ends, with
  // the graphs captured on that address.
  const bool pixels_in_place = opt.resident && nblocks == 1 && resident_count >= batch;
  struct InView {
    BlockPipeline* p;
    bool on;
    ~InView() {
      if (!on) return;
      for (auto& sp : p->slots()) sp->in_view = nullptr;
      p->drop_graphs();
    }
  } in_view_guard{pipeline_.get(), pixels_in_place};
  if (pixels_in_place) slots[0]->in_view = resident.get();
  const Layer& out_layer = *net_.layers[static_cast<size_t>(net_.output)];
  const int64_t out_size = out_layer.out_shape.size();
  const int out_buf = output_buf();

  // Host memory the copies read: the data set's own pixels, page-locked in place (not with
  // --resident: the timed copies read device memory).
  const bool whole = opt.cycle || batch >= data.count;
  const size_t reg_bytes = static_cast<size_t>((whole ? data.count : batch) * data.bytes_per_image());
  void* reg_ptr = const_cast<uint8_t*>(data.image_bytes(0));
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

  const size_t L = plan_.steps.size();
  for (auto& sp : slots) {
    Slot& s = *sp;
    if (staged && s.staging.bytes() < s.in_u8.bytes()) s.staging.alloc(s.in_u8.bytes());
    if (opt.want_probs) s.probs_host.alloc(static_cast<size_t>(block * out_size) * sizeof(float));
    while (s.ev.size() < Timeline::events(L)) {
      cudaEvent_t e;
      CUDA_CHECK(cudaEventCreate(&e));
      s.ev.push_back(e);
    }
    s.first = -1;
  }

  // Unlabelled images count as labelled -1, which no prediction equals.
  const std::vector<int32_t> no_labels(data.labelled() ? 0 : static_cast<size_t>(data.count), -1);
  DevBuf labels = upload((data.labelled() ? data.labels : no_labels).data(), static_cast<size_t>(data.count));
  DevBuf correct(2 * sizeof(unsigned long long));  // [0] right predictions, [1] non-finite outputs
  CUDA_CHECK(cudaMemset(correct.get(), 0, 2 * sizeof(unsigned long long)));

  // A streamed data set's later blocks skip it when nothing changed since (same slots, same
  // block size, no search pending): the kernels are loaded and the plans made.
  // Both on slot 0 with the search's cuDNN workspace; then every slot gets what the chosen
  // algorithms need for the block and the last block (BlockPipeline::set_cudnn_ws).
  const bool warming =
      opt.warm_up || selector_.any_auto() || warmed_gen_ != pipeline_->generation() || warmed_block_ != block;
  const int64_t last = batch - (nblocks - 1) * block;
  const bool cudnn = may_use_cudnn();
  const bool size_ws =
      cudnn && (warming || ws_sized_ != std::make_tuple(pipeline_->generation(), block, last));
  if (size_ws) pipeline_->cudnn_ws_for_search();
  if (warming) {
    warm(*slots[0], data, block, &facts.tuning);
    warmed_gen_ = pipeline_->generation();
    warmed_block_ = block;
  }
  // The short last block's plans too, before the clock (its graph is captured from them, or it
  // launches directly).
  if (last != block) prepare_graphs(last, slots[0]->cudnn_ws.bytes());
  if (cudnn)
    for (auto& sp : slots)
      if (!sp->cudnn) sp->cudnn = std::make_unique<CudnnHandle>();
  if (size_ws) {
    pipeline_->set_cudnn_ws(cudnn_ws_need(*slots[0]->cudnn, block, last));
    ws_sized_ = std::make_tuple(pipeline_->generation(), block, last);
  }
  facts.cudnn_workspace_bytes = cudnn ? static_cast<int64_t>(slots[0]->cudnn_ws.bytes()) : -1;
  facts.cudnn_search_workspace_bytes = cudnn ? static_cast<int64_t>(pipeline_->cudnn_ws_max()) : -1;
  const size_t searched_now = facts.tuning.size();
  for (const Step& st : plan_.steps) {
    const ConvTuning* earlier = st.op == Op::kConv ? selector_.reused_search(st.layer) : nullptr;
    if (!earlier) continue;
    const auto now_end = facts.tuning.begin() + static_cast<std::ptrdiff_t>(searched_now);
    if (std::find_if(facts.tuning.begin(), now_end,
                     [&](const ConvTuning& t) { return t.layer == earlier->layer; }) != now_end)
      continue;
    facts.tuning.push_back(*earlier);
    facts.tuning.back().earlier = true;
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  const BlockOut bo{out_buf, out_size, opt.want_probs, correct.as<unsigned long long>()};
  facts.graphs = GpuRunFacts::Graphs::kOff;
  pipeline_->drop_graphs();
  if (opt.tuning.graphs) {
    try {
      for (auto& sp : slots)
        BlockPipeline::capture(*sp, block, [&](Slot& s) { enqueue_compute(s, block, bo); });
      // One trial launch per slot (on whatever its buffers hold) proves the graphs and their
      // timing events work here before the clock starts; the count it adds is reset.
      for (auto& sp : slots) CUDA_CHECK(cudaGraphLaunch(sp->exec, sp->stream));
      for (auto& sp : slots) {
        CUDA_CHECK(cudaStreamSynchronize(sp->stream));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, sp->ev[2], sp->ev[L + 4]));
      }
      facts.graphs = GpuRunFacts::Graphs::kCaptured;
      // The short last block: its own graph on the slot it runs on, tried the same way. If that
      // fails, the full blocks keep theirs and the short one launches directly (the report says).
      if (last != block) {
        Slot& ls = *slots[static_cast<size_t>((nblocks - 1) % S)];
        try {
          BlockPipeline::capture(
              ls, last, [&](Slot& s) { enqueue_compute(s, last, bo); }, true);
          CUDA_CHECK(cudaGraphLaunch(ls.exec_short, ls.stream));
          CUDA_CHECK(cudaStreamSynchronize(ls.stream));
          float ms = 0;
          CUDA_CHECK(cudaEventElapsedTime(&ms, ls.ev[2], ls.ev[L + 4]));
          facts.short_graph = last;
        } catch (const Error& e) {
          ls.drop_short_graph();
          facts.short_graph_error = e.what();
        }
      }
      CUDA_CHECK(cudaMemset(correct.get(), 0, 2 * sizeof(unsigned long long)));
    } catch (const Error& e) {
      pipeline_->drop_graphs();
      facts.graphs = GpuRunFacts::Graphs::kCaptureFailed;
      facts.graph_error = e.what();
    }
  }
  // A short last block without its own graph (graphs off, or its capture failed) runs once here
  // all the same, so that the first launches of the plans made for its size come before the
  // clock (with a short last block launched directly, the first timed run was 7-12x the others
  // at 32x32: docs/performance.md, Session 24). Its count of right predictions is reset after.
  if (last != block && facts.short_graph == 0) {
    Slot& ls = *slots[static_cast<size_t>((nblocks - 1) % S)];
    enqueue_compute(ls, last, bo);
    CUDA_CHECK(cudaStreamSynchronize(ls.stream));
    CUDA_CHECK(cudaMemset(correct.get(), 0, 2 * sizeof(unsigned long long)));
  }
  const double setup_s = seconds_since(setup_t0);

  r.images = batch;
  r.predictions.assign(static_cast<size_t>(batch), 0);
  if (opt.want_probs) r.probs.assign(static_cast<size_t>(batch * out_size), 0.f);
  Timeline timeline(L);
  std::vector<bool> launched(L);
  for (size_t i = 0; i < L; ++i) launched[i] = launches(plan_.steps[i]);
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
    std::vector<double> t(Timeline::events(L));
    for (size_t i = 0; i < t.size(); ++i) {
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, start, s.ev[i]));
      t[i] = ms * 1e-3;
    }
    timeline.add_block(t, launched);
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
  CUDA_CHECK(cudaEventRecord(start, slots[0]->stream));
  for (int i = 1; i < S; ++i)
    CUDA_CHECK(cudaStreamWaitEvent(slots[static_cast<size_t>(i)]->stream, start, 0));
  int64_t first = 0;
  for (int64_t b = 0; b < nblocks; ++b) {
    Slot& s = *slots[static_cast<size_t>(b % S)];
    harvest(s);  // the slot's previous block: its buffers and events are free again
    const int64_t n = std::min(block, batch - first);
    CUDA_CHECK(cudaEventRecord(s.ev[0], s.stream));
    if (!pixels_in_place) BlockPipeline::copy_in(s, data, first, n, staged, resident.as<uint8_t>());
    for_each_cycled_run(first, n, data.count, [&](int64_t d, int64_t idx, int64_t m) {  // the block's labels
      CUDA_CHECK(cudaMemcpyAsync(s.labels.as<int32_t>() + d, labels.as<int32_t>() + idx,
                                 static_cast<size_t>(m) * sizeof(int32_t), cudaMemcpyDeviceToDevice,
                                 s.stream));
    });
    CUDA_CHECK(cudaEventRecord(s.ev[1], s.stream));
    if (cudaGraphExec_t g = s.graph_for(n))
      CUDA_CHECK(cudaGraphLaunch(g, s.stream));
    else
      enqueue_compute(s, n, bo);
    s.first = first;
    s.n = n;
    first += n;
  }
  for (int64_t b = nblocks; b < nblocks + S; ++b) harvest(*slots[static_cast<size_t>(b % S)]);
  r.forward_seconds = seconds_since(t0);

  unsigned long long good[2] = {0, 0};
  CUDA_CHECK(cudaMemcpy(good, correct.get(), sizeof(good), cudaMemcpyDeviceToHost));
  r.correct = static_cast<int64_t>(good[0]);
  r.nonfinite_images = static_cast<int64_t>(good[1]);
  r.transfer_seconds = timeline.unhidden_copies();

  r.engine = "gpu (" + std::string(prop_.name) + ", sm_" + std::to_string(prop_.major) +
             std::to_string(prop_.minor) + ", " + std::to_string(S) + (S == 1 ? " stream" : " streams") +
             ", blocks of " + std::to_string(block) + " images" +
             (nhwc_ ? std::string(", ") + storage_name(storage()) + " NHWC activations" : std::string()) +
             (opt.resident ? ", input resident on GPU)" : ")");
  for (size_t i = 0; i < L; ++i) {
    const Layer& l = *net_.layers[i];
    LayerTime lt;
    lt.name = l.name;
    lt.type = l.type;
    lt.algo = step_algo(plan_.steps[i]);
    lt.seconds = timeline.layer_seconds()[i];
    r.layers.push_back(lt);
  }
  facts.resident = opt.resident;
  facts.resident_images = opt.resident ? resident_count : 0;
  facts.resident_distinct = opt.resident ? std::min(resident_count, data.count) : 0;
  facts.pixels_in_place = pixels_in_place;
  facts.resident_bytes = opt.resident ? static_cast<int64_t>(resident.bytes()) : 0;
  facts.float_input = float_input_;
  facts.probs_bytes = opt.want_probs ? out_size * 4 : 0;
  facts.block = block;
  facts.blocks = nblocks;
  facts.streams = S;
  facts.cudnn_version = cudnn_version_string();
  facts.pixels = opt.resident ? GpuRunFacts::Pixels::kResident
                 : registered ? GpuRunFacts::Pixels::kRegistered
                 : staged     ? GpuRunFacts::Pixels::kStaged
                              : GpuRunFacts::Pixels::kPinned;
  facts.setup_seconds = setup_s;
  facts.preprocess_seconds = timeline.preprocess();
  for (const Step& st : plan_.steps)  // the stem's measured input, where the stem ran
    if (st.op == Op::kConv && selector_.chosen(st.layer) == ConvAlgo::kStem && stem_bytes_ok(st) &&
        !tuning_.stem_bytes_first && conv_weights(st.layer).stem_input[static_cast<int>(prec_)] >= 0) {
      const ConvWeights& c = conv_weights(st.layer);
      const float(&ms)[2] = c.stem_input_ms[static_cast<int>(prec_)];
      facts.stem_input.layer = net_.layers[static_cast<size_t>(st.layer)]->name;
      facts.stem_input.bytes = c.stem_input[static_cast<int>(prec_)] == 1;
      facts.stem_input.bytes_seconds = 1e-3 * static_cast<double>(ms[1]);
      facts.stem_input.floats_seconds = 1e-3 * static_cast<double>(ms[0]);
    }
  for (const Step& st : plan_.steps)
    if (st.op == Op::kConv && u8_fused(st, selector_.chosen(st.layer)))
      facts.input_fused_into = net_.layers[static_cast<size_t>(st.layer)]->name;
  facts.argmax_seconds = timeline.argmax();
  facts.h2d_seconds = timeline.copy_in();
  facts.d2h_seconds = timeline.copy_out();
  for (double x : timeline.layer_seconds()) facts.layer_sum_seconds += x;
  facts.busy_seconds = timeline.busy();
  facts.wall_seconds = r.forward_seconds;
  return r;
}

std::vector<Tensor> GpuExecutor::forward_layers(const Dataset& data, int64_t first, int64_t n,
                                                const RunOptions& opt) {
  check_ready(net_, data);
  check_range(data, first, n);
  if (opt.gpu_memory < 0)
    throw Error("gpu_memory must not be negative, found " + std::to_string(opt.gpu_memory));
  begin(opt, data);
  std::vector<Tensor> outs(plan_.steps.size());
  int64_t block = std::min(n, kDefaultBlock);
  if (n > 0) selector_.resolve(net_, plan_, opt.conv_algo, block, true);
  std::string unused;
  if (const int64_t most = cudnn_block_limit(&unused); block > most) {
    block = most;
    selector_.resolve(net_, plan_, opt.conv_algo, block, true);
  }
  auto alloc = [&] {  // the layers this call materialises (fusions depend on the algorithms)
    for (size_t i = 0; i < plan_.steps.size(); ++i)
      if (fused_into(static_cast<int>(i), opt).empty()) {
        const Shape& s = plan_.steps[i].out_shape;
        outs[i] = Tensor({n, s.c, s.h, s.w});
      }
  };
  if (n == 0) {
    alloc();
    return outs;
  }
  pipeline_->ensure_slots(slot_needs(false), 1, block, n, opt.gpu_memory, 0, nullptr);
  pipeline_->cudnn_ws_for_search();
  ws_sized_ = {0, -1, -1};
  block = pipeline_->block();
  Slot& s = *pipeline_->slots()[0];
  prepare_graphs(std::min(block, n), s.cudnn_ws.bytes());
  if (n > block && n % block != 0) prepare_graphs(n % block, s.cudnn_ws.bytes());
  if (selector_.any_auto())
    search(s, data, std::min(block, n), nullptr);  // else no warm-up: nothing is timed
  alloc();
  DevBuf f32;  // channels last: a layer's FP32 NCHW copy on its way to the host
  for (int64_t done = 0; done < n; done += block) {
    const int64_t m = std::min(block, n - done);
    BlockPipeline::copy_in(s, data, first + done, m, false);
    run_layers(s, m, false, 0);
    // A conv that wrote its output into its concat's buffer: its own buffer gets those values back
    // (its layer's, and its fused activation's, are read from there).
    for (const Step& st : plan_.steps)
      if (st.op == Op::kConv && in_place(st, selector_.chosen(st.layer)))
        launch_slice_nhwc(s.bufs[static_cast<size_t>(step(st.concat_step).out)].get(),
                          static_cast<int>(st.concat_ld), static_cast<int>(st.concat_offset),
                          s.bufs[static_cast<size_t>(st.out)].get(), static_cast<int>(st.out_shape.c),
                          storage(), m * st.out_shape.h * st.out_shape.w, s.stream);
    for (size_t i = 0; i < plan_.steps.size(); ++i) {
      if (outs[i].data.empty()) continue;
      const size_t size = static_cast<size_t>(plan_.steps[i].out_shape.size());
      const int b = plan_.steps[i].out;
      const void* src = s.bufs[static_cast<size_t>(b)].get();
      if (is_nhwc(b)) {
        const Shape& sh = nhwc_layout_.shape[static_cast<size_t>(b)];
        if (f32.bytes() < static_cast<size_t>(m) * size * sizeof(float))
          f32.alloc(static_cast<size_t>(block) * size * sizeof(float));
        launch_nhwc_to_nchw(src, storage(), f32.as<float>(), m, static_cast<int>(sh.c), sh.h * sh.w,
                            s.stream);
        src = f32.get();
      }
      CUDA_CHECK(cudaMemcpyAsync(outs[i].ptr() + static_cast<size_t>(done) * size, src,
                                 static_cast<size_t>(m) * size * sizeof(float), cudaMemcpyDeviceToHost,
                                 s.stream));
      if (is_nhwc(b)) CUDA_CHECK(cudaStreamSynchronize(s.stream));  // f32 is reused by the next layer
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

int gpu_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::unique_ptr<Executor> make_gpu_executor(const Network& net, int device) {
  std::string why;
  if (!gpu_available(&why)) throw Error("--engine gpu: " + why);
  const int count = gpu_device_count();
  if (device < 0 || device >= count)
    throw Error("--engine gpu: CUDA device " + std::to_string(device) + " asked for; this process sees " +
                std::to_string(count));
  return std::make_unique<gpu::GpuExecutor>(net, device);
}

}  // namespace cnnrun
