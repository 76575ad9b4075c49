// The GPU planner: which step each layer becomes, which layers fuse into their producer's kernel
// and which buffers alias, decided once from the Network (no GPU work, no CUDA types). The graph
// half of the fusions comes from engine/passes.h; the planner keeps what the kernels accept.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/conv_algo.h"
#include "engine/executor.h"
#include "engine/layers/activation.h"
#include "engine/layers/conv.h"
#include "engine/network.h"
#include "engine/passes.h"

namespace cnnrun::gpu {

struct StemPool;  // engine/gpu/conv2d_stem.h

// What a step launches; the GpuOp column of CNNRUN_LAYER_TYPES (engine/layer_types.h) names one
// for every layer type. kFused: computed in its producer's epilogue.
enum class Op {
  kConv,
  kFc,
  kAct,
  kPool,
  kIdentity,
  kAffine,
  kAdd,
  kConcat,
  kSoftmax,
  kMul,
  kUpsample,
  kFused
};

struct Step {
  Op op = Op::kIdentity;
  int layer = 0;
  int out = 0;           // buffer index
  std::vector<int> ins;  // buffer indices
  Shape in_shape, out_shape;
  // kAct: the activation; kConv/kFc: the one fused into the epilogue (kind kNone: none)
  ActivationParams act{ActKind::kNone};
  // kConv/kFc: the activation layer computed in this epilogue; kIdentity: the activation a
  // conv/fc before it computes (this layer's value is never materialised)
  int fused_consumer = -1;
  int fused_producer = -1;  // kFused: the layer whose epilogue computes this one
  // kConv: the pool after the fused activation (Fusions::pool) that one of the conv's kernels
  // can compute too (then neither the conv's nor the activation's output exists): the implicit
  // kernel's 2x2/2 max-pool after a ReLU or, on its tensor cores, 2x2/2 average pool after any
  // activation (pool_implicit; pool_avg: the average), the stem kernel's max-pool of any window
  // of at most its tile (pool_stem); kPool: that conv.
  int pool_layer = -1;
  int pool_conv = -1;
  bool pool_implicit = false, pool_stem = false, pool_avg = false;
  // kConv: the only reader of the network input, and the implicit kernel can read the bytes
  // (with and without its pool fused); the stem kernel can (launch_conv_stem_bytes: FP32
  // storage, the executor's condition).
  bool u8_input = false, u8_input_pool = false, u8_input_stem = false;
  // kConv: the add computed in this epilogue (Fusions::residual), before `act`: y = act(conv +
  // bias + bufs[residual_buf]); the add, and its activation when fused too, are kFused.
  int residual_layer = -1;
  int residual_buf = -1;
  // kConv: the per-channel mul before it (Fusions::scale) that the gemm convolution folds into
  // its filters, one copy per image, where that is no larger than its input (filters <= H*W):
  // its two inputs' buffers (the per-channel scale, the tensor scaled) and the per-image
  // filters' own (filters x channels values an image). kMul: that conv. The mul runs (and its
  // output exists) only when the conv runs another algorithm.
  int scale_layer = -1;
  int scale_buf = -1, scaled_buf = -1, scale_w_buf = -1;
  int scale_conv = -1;
  // kConv: the max-pool before it (Fusions::prepool), not computed by its own producer's kernel,
  // that the conv1x1 kernel takes as it stages the conv's input (each window's maximum of the
  // pool's input, prepool_buf): then the pool does not run and its output never exists. kPool:
  // that conv. Whether it does is the executor's (the conv1x1 kernel chosen, GpuTuning::fuse_prepool).
  int prepool_layer = -1, prepool_buf = -1;
  int prepool_conv = -1;
  // kConv, one filter per channel (groups == channels == filters): the whole-plane average pool
  // (global, or adaptive to 1x1) that reads its output (no residual add in its epilogue: that
  // pass follows the kernel), a squeeze-and-excitation block's, which
  // its channels-last depthwise kernels can compute as they store (DepthwiseMean,
  // engine/gpu/conv2d_depthwise.h) into the pool's buffer, with their FP32 partial sums in
  // mean_buf (sized 0 here: the executor knows the storage format that sizes it). kPool: that
  // conv. The pool runs (reading the conv's output) only when the conv's kernel does not compute it.
  int mean_layer = -1, mean_buf = -1;
  int mean_conv = -1;
  // kConv, groups 1: the cudnn-3xtf32 convolution's split input (3x in_c channels, FP32 channels
  // last), written and read at this step only; sized 0 where that algorithm cannot run.
  int split_buf = -1;
  // kConv: the concat that alone reads this conv's output (after its fused activation), which the
  // conv may write straight into the concat's buffer at channel `concat_offset` of `concat_ld`
  // (the concat's channels; both multiples of 8, so every storage format's slice is 16-byte
  // aligned): no residual add, pool, mean or folded mul in its epilogue. Whether it does is the
  // executor's (channels last, GpuTuning::concat_in_place, an algorithm that writes a channel
  // slice); the conv's own buffer stays for the others, and the concat copies only the inputs not
  // written in place.
  int concat_step = -1;
  int64_t concat_offset = 0, concat_ld = 0;
  ConvParams conv;  // kConv
};

struct Plan {
  std::vector<Step> steps;          // one per layer, in execution order
  std::vector<int64_t> buf_floats;  // per image, by buffer index; buffer 0 = the network input
};

Plan make_plan(const Network& net);

// --layout nhwc: which buffers hold channels-last values in the run's storage format, and where
// an FP32 NCHW copy of one is made for a reader that needs it. Decided from the plan alone:
// - the network input (preprocessed as it is copied in), conv, pool and concat outputs are NHWC
//   (their inputs must be);
// - an activation, batchnorm affine, add or mul keeps its inputs' layout (all must agree);
// - a fully-connected layer or a softmax reads an FP32 NCHW copy of an NHWC input (made right
//   before it, into a buffer of its own) and writes FP32 NCHW;
// - an NHWC network output is copied to FP32 NCHW for the argmax and the host.
// Anything else (upsample, a conv reading an FP32 NCHW tensor) makes the network NCHW-only.
struct NhwcLayout {
  bool ok = false;
  std::string why;           // !ok: the layer and what it lacks
  std::vector<char> nhwc;    // per buffer of the plan
  std::vector<Shape> shape;  // per buffer: C x H x W as written (a flatten's reader sees it whole)
  std::vector<int> f32_in;   // per step: the buffer its input's FP32 NCHW copy goes to, or -1
  int out_f32 = -1;          // the network output's FP32 NCHW copy, or -1 (the output is FP32)
  // The copies' buffers, floats per image: buffer plan.buf_floats.size() + k.
  std::vector<int64_t> copy_floats;
};

NhwcLayout make_nhwc_layout(const Network& net, const Plan& plan);

// Buffer sharing (GpuTuning::share_buffers, with share_groups of engine/passes.h): when each
// buffer is in use during a block, in step indices, from the first step that may write it to the
// last that may read it. The network input is written at -1 (copied in before the first step);
// the network output (and its FP32 copy, made right after the output's step) is read at
// steps.size() (the argmax and the copy to the host). Over every algorithm a step may run: a
// conv whose implicit kernel may compute the 2x2 pool writes the pool's buffer at its own step,
// a residual input (and a folded mul's inputs and per-image filters, and the input of a max-pool
// the conv1x1 kernel may take, Step::prepool_buf) is read at its conv's step,
// a conv's split input (Step::split_buf) is written and read at its step, a concat's buffer is
// written at the step of each conv that may write into it (Step::concat_step),
// and a layer computed in its producer's epilogue
// (kFused) or aliasing its input (kIdentity) counts its reads at its own, later, step. With
// `layout` (may be null), its FP32 NCHW copies (buffers plan.buf_floats.size() and on) are
// written and read at the step that reads them.
std::vector<Lifetime> buffer_lifetimes(const Network& net, const Plan& plan, const NhwcLayout* layout);

// The stem kernel's view of max-pool layer `pool_layer` (a conv step's Step::pool_layer; -1:
// none, kernel_h 0).
StemPool stem_pool(const Network& net, int pool_layer);

// Whether pool layer `l` averages its whole input plane into one value a channel: a global or 1x1
// adaptive average pool, or an average pool whose one window covers the plane without padding.
bool is_whole_plane_mean(const Layer& l);

// Whether conv step `st` run with `algo` computes its pool / reads the uint8 input (the stem: if
// the storage allows it, which the executor checks: at FP32 its weights and GpuTuning::exact_pixels,
// at 16-bit a rows kernel).
bool fuses_pool(const Step& st, ConvAlgo algo, const GpuTuning& t);
bool fuses_u8(const Step& st, ConvAlgo algo, const GpuTuning& t);

}  // namespace cnnrun::gpu
