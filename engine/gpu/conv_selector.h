// Which algorithm each conv runs: RunOptions::conv_algo overrides all, then the netdef's pin,
// then auto: every candidate timed on the first block of a run, the fastest kept for later runs
// with the same block size. A new convolution algorithm is a ConvAlgo (engine/conv_algo.h), its
// file pair here in engine/gpu/, a case in GpuExecutor::run_conv and one in step_algo.
#pragma once

#include <functional>
#include <vector>

#include "engine/executor.h"
#include "engine/gpu/plan.h"

namespace cnnrun::gpu {

// The algorithms that run convolutions channels last (--layout nhwc), as the errors name them:
// "cuDNN, cudnn-3xtf32, the depthwise kernel, cutlass, the stem kernel, gemm or conv1x1".
const char* nhwc_conv_algos();

// "" when `algo` computes this convolution for blocks of n images, else why it does not: the
// search's "n/a", and the error for an algorithm pinned or forced on a layer it cannot run.
// implicit: dense undilated convs its tiles fit; im2col: dense ones; depthwise: groups ==
// channels; cudnn: every one; cutlass: dense ones at FP32 channels last (cutlass_cannot_run).
// channels_last (--layout nhwc): the algorithms nhwc_conv_algos() names, each where it can run.
// pooled: conv1x1 would take the max-pool before the conv (conv1x1_cannot_run's `pooled`).
std::string conv_cannot_run(const ConvParams& p, ConvAlgo algo, int64_t n, Precision prec, bool channels_last,
                            bool pooled = false);

class ConvSelector {
 public:
  explicit ConvSelector(size_t steps) : convs_(steps), pooled_(steps, 0) {}

  // The operands' precision and the activations' layout from now on (the candidates differ;
  // auto's picks are forgotten when either changes).
  void set_format(Precision prec, bool channels_last);
  // Whether conv step i, run by conv1x1, takes the max-pool before it (the executor's rule: the
  // plan's Step::prepool_layer, the tuning, the pool's windows), which lets conv1x1 run wider
  // convs (conv_cannot_run's `pooled`). A change forgets auto's pick for that conv.
  void set_pooled(int i, bool pooled);

  // Each conv's algorithm for a run of blocks of `block` images: `forced` (kAuto: none), else
  // the netdef's, else auto's pick timed on this block size (any earlier pick with
  // `any_tuning`: forward_layers only checks values). Throws when a pinned or forced algorithm
  // cannot run the conv (conv_cannot_run). Convs left to auto say so through any_auto().
  void resolve(const Network& net, const Plan& plan, ConvAlgo forced, int64_t block, bool any_tuning);
  // The algorithm conv step i runs (kAuto: auto's search has not run yet).
  ConvAlgo chosen(int i) const { return convs_[static_cast<size_t>(i)].chosen; }
  bool any_auto() const { return any_auto_; }
  // Whether some conv runs `algo`, or is left to auto and `algo` can run it.
  bool may_use(const Plan& plan, ConvAlgo algo) const;
  // Whether conv step i runs `algo`, or is left to auto and `algo` can run it.
  bool may_use_at(const Plan& plan, int i, ConvAlgo algo) const;
  // What resolve(forced, any_tuning) would choose for step i, without choosing (kAuto: auto's
  // search has not run for it).
  ConvAlgo would_choose(const Network& net, const Step& st, ConvAlgo forced) const;
  // Auto's picks no longer hold (the operands' format changed).
  void forget_picks();

  // Auto's search on a block of n images: walks the steps in order; a conv left to auto times
  // every candidate with `time_ms(step, algo, note)` (throws Error when the algorithm cannot run
  // it; *note may say how the algorithm chose within itself, e.g. cuDNN's graph API against its
  // legacy call) and keeps the fastest; then `run(step)` runs the step, so each conv is timed on
  // the real output of the layers before it. Each search is appended to *searched (may be null).
  using TimeFn = std::function<float(int step, ConvAlgo algo, std::string* note)>;
  using RunFn = std::function<void(int step)>;
  void search(const Network& net, const Plan& plan, int64_t n, const TimeFn& time_ms, const RunFn& run,
              std::vector<ConvTuning>* searched);
  // The search an earlier run made for conv step i, when this run reuses its pick (else null).
  const ConvTuning* reused_search(int i) const;

 private:
  struct Conv {
    ConvAlgo chosen = ConvAlgo::kAuto;  // for this run
    ConvAlgo tuned = ConvAlgo::kAuto;   // auto's pick, kept across runs with the same block size
    int64_t tuned_n = 0;                // the block size it was timed on
    ConvTuning search;                  // the search that picked `tuned` (layer empty: none yet)
    void forget() { tuned = ConvAlgo::kAuto, tuned_n = 0; }  // auto's pick no longer holds
  };
  // conv_cannot_run for conv step st with this selector's format and st's pooled_ flag
  std::string cannot_run(const Step& st, ConvAlgo algo, int64_t n) const;
  std::vector<Conv> convs_;
  std::vector<char> pooled_;  // per step: set_pooled
  bool any_auto_ = false;
  Precision prec_ = Precision::kFp32;
  bool channels_last_ = false;
};

}  // namespace cnnrun::gpu
