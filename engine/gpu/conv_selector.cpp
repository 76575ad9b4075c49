#include "engine/gpu/conv_selector.h"

#include "engine/core/error.h"
#include "engine/gpu/conv2d_1x1.h"
#include "engine/gpu/conv2d_cudnn_3xtf32.h"
#include "engine/gpu/conv2d_cutlass.h"
#include "engine/gpu/conv2d_depthwise.h"
#include "engine/gpu/conv2d_gemm.h"
#include "engine/gpu/conv2d_im2col.h"
#include "engine/gpu/conv2d_implicit.h"
#include "engine/gpu/conv2d_stem.h"
#include "engine/report.h"

namespace cnnrun::gpu {

const char* nhwc_conv_algos() {
  return "cuDNN, cudnn-3xtf32, the depthwise kernel, cutlass, the stem kernel, gemm or conv1x1";
}

std::string conv_cannot_run(const ConvParams& p, ConvAlgo algo, int64_t n, Precision prec, bool channels_last,
                            bool pooled) {
  std::string why;
  if (channels_last && (algo == ConvAlgo::kImplicit || algo == ConvAlgo::kIm2col))
    return std::string("channels last (--layout nhwc) runs convolutions through ") + nhwc_conv_algos();
  switch (algo) {
    case ConvAlgo::kImplicit: {
      const ImplicitConfig cfg = implicit_config(p, n);
      return cfg.ok ? "" : cfg.why;
    }
    case ConvAlgo::kIm2col:
      return im2col_can_run(p, &why) ? "" : why;
    case ConvAlgo::kDepthwise: {
      const DepthwisePlan d = depthwise_plan(p);
      if (channels_last) return d.nhwc_ok ? "" : d.cfg.why;
      return d.cfg.ok ? "" : d.cfg.why;
    }
    case ConvAlgo::kCudnn:
      return "";
    case ConvAlgo::kCutlass:
      return cutlass_cannot_run(p, prec, channels_last, n);
    case ConvAlgo::kStem:
      return stem_cannot_run(p, prec, channels_last);
    case ConvAlgo::kGemm:
      return gemm_cannot_run(p, channels_last);
    case ConvAlgo::kCudnn3xTf32:
      return cudnn_3xtf32_cannot_run(p, prec, channels_last);
    case ConvAlgo::kConv1x1:
      return conv1x1_cannot_run(p, prec, channels_last, pooled);
    case ConvAlgo::kAuto:
      break;
  }
  return "auto is not an algorithm";
}

void ConvSelector::resolve(const Network& net, const Plan& plan, ConvAlgo forced, int64_t block,
                           bool any_tuning) {
  any_auto_ = false;
  for (const Step& st : plan.steps) {
    if (st.op != Op::kConv) continue;
    const Layer& l = *net.layers[static_cast<size_t>(st.layer)];
    Conv& c = convs_[static_cast<size_t>(st.layer)];
    ConvAlgo a = forced != ConvAlgo::kAuto ? forced : l.algo;
    if (a != ConvAlgo::kAuto) {
      if (const std::string why = cannot_run(st, a, block); !why.empty())
        throw Error(l.loc.str() + ": layer '" + l.name + "': the " + conv_algo_name(a) +
                    " convolution cannot run it: " + why);
    }
    if (a == ConvAlgo::kAuto) {
      if (c.tuned_n == block || (any_tuning && c.tuned != ConvAlgo::kAuto)) a = c.tuned;
      if (a == ConvAlgo::kAuto) any_auto_ = true;
    }
    c.chosen = a;
  }
}

void ConvSelector::set_format(Precision prec, bool channels_last) {
  if (prec != prec_ || channels_last != channels_last_) forget_picks();
  prec_ = prec;
  channels_last_ = channels_last;
}

void ConvSelector::set_pooled(int i, bool pooled) {
  char& f = pooled_[static_cast<size_t>(i)];
  if (f == static_cast<char>(pooled)) return;
  f = static_cast<char>(pooled);
  convs_[static_cast<size_t>(i)].forget();
}

std::string ConvSelector::cannot_run(const Step& st, ConvAlgo algo, int64_t n) const {
  return conv_cannot_run(st.conv, algo, n, prec_, channels_last_,
                         pooled_[static_cast<size_t>(st.layer)] != 0);
}

bool ConvSelector::may_use_at(const Plan& plan, int i, ConvAlgo algo) const {
  if (chosen(i) == algo) return true;
  // Any block size: whether auto may pick it, not whether it fits this block.
  return chosen(i) == ConvAlgo::kAuto && cannot_run(plan.steps[static_cast<size_t>(i)], algo, 1).empty();
}

bool ConvSelector::may_use(const Plan& plan, ConvAlgo algo) const {
  for (const Step& st : plan.steps)
    if (st.op == Op::kConv && may_use_at(plan, st.layer, algo)) return true;
  return false;
}

ConvAlgo ConvSelector::would_choose(const Network& net, const Step& st, ConvAlgo forced) const {
  if (forced != ConvAlgo::kAuto) return forced;
  const ConvAlgo pinned = net.layers[static_cast<size_t>(st.layer)]->algo;
  return pinned != ConvAlgo::kAuto ? pinned : convs_[static_cast<size_t>(st.layer)].tuned;
}

void ConvSelector::forget_picks() {
  for (Conv& c : convs_) c.forget();
}

// The margin by which auto wants cudnn-3xtf32 faster than the best other algorithm: SqueezeNet
// 1.1 at 32x32 FP32 took it for four convs timed 4 % faster alone and ran 17 % slower as a
// whole (docs/performance.md, Session 19).
constexpr float kSplitMargin = 1.05f;

void ConvSelector::search(const Network& net, const Plan& plan, int64_t n, const TimeFn& time_ms,
                          const RunFn& run, std::vector<ConvTuning>* searched) {
  using Outcome = ConvTuning::Candidate::Outcome;
  for (const Step& st : plan.steps) {
    Conv& c = convs_[static_cast<size_t>(st.layer)];
    if (st.op == Op::kConv && c.chosen == ConvAlgo::kAuto) {
      ConvTuning t;
      t.layer = net.layers[static_cast<size_t>(st.layer)]->name;
      t.images = n;
      float best_ms = 0;
      ConvAlgo best = ConvAlgo::kAuto;
      for (ConvAlgo a : kConvAlgoCandidates) {
        ConvTuning::Candidate cand;
        cand.algo = conv_algo_name(a);
        if (!cannot_run(st, a, n).empty()) {
          cand.outcome = Outcome::kNotApplicable;
        } else {
          try {
            const float ms = time_ms(st.layer, a, &cand.note);
            cand.ms = ms;
            // cudnn-3xtf32 must win by kSplitMargin: its split pass moves 4x its input's bytes,
            // which the other streams' blocks compete for in a run but not in this timing.
            const float eff = a == ConvAlgo::kCudnn3xTf32 ? ms * kSplitMargin : ms;
            if (best == ConvAlgo::kAuto || eff < best_ms) best = a, best_ms = eff;
          } catch (const Error& e) {
            // An algorithm the libraries refuse for this shape is not a candidate; real CUDA
            // failures surface again when the chosen algorithm runs.
            cand.outcome = Outcome::kFailed;
            cand.error = e.what();
          }
        }
        t.candidates.push_back(cand);
      }
      if (best == ConvAlgo::kAuto)
        throw Error("layer '" + t.layer + "': no convolution algorithm can run it:" + tuning_note(t));
      t.chosen = conv_algo_name(best);
      c.tuned = c.chosen = best;
      c.tuned_n = n;
      c.search = t;
      if (searched) searched->push_back(t);
    }
    run(st.layer);
  }
  any_auto_ = false;
}

const ConvTuning* ConvSelector::reused_search(int i) const {
  const Conv& c = convs_[static_cast<size_t>(i)];
  return !c.search.layer.empty() && c.chosen == c.tuned ? &c.search : nullptr;
}

}  // namespace cnnrun::gpu
