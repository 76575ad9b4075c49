// --layout nhwc (issue 13): activations stored channels last in the precision's format, every conv
// through cuDNN or (depthwise) the channels-last depthwise kernel, the passes of engine/gpu/nhwc.h
// around them. Layer by layer against the CPU
// reference at every precision, on networks that use every step the layout runs (dense, grouped,
// depthwise, strided and dilated convs, fused and standalone activations, max/avg/ceil/adaptive
// pools, add, concat, squeeze-and-excitation's mul, an unfolded batchnorm, fc and softmax on FP32
// copies) and on one whose output is itself channels last; the layout auto picks; the errors for
// what it cannot run. GPU cases skip without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <utility>

#include "engine/gpu_api.h"
#include "engine/layers/conv.h"
#include "engine/network.h"
#include "engine/passes.h"
#include "engine/validate.h"
#include "reference/cpu_executor.h"
#include "tests/test_util.h"

using namespace cnnrun;
using test::gpu_present;
using test::gpu_random_data;
using test::random_weights;

namespace {

// Built with the cuDNN frontend's headers (scripts/fetch_headers.sh): the graph API exists.
#if defined(CNNRUN_HAVE_CUDNN_FE) && CNNRUN_HAVE_CUDNN_FE
constexpr bool kHaveGraphApi = true;
#else
constexpr bool kHaveGraphApi = false;
#endif
// ... and with CUTLASS's: the cutlass convolution exists.
#if defined(CNNRUN_HAVE_CUTLASS) && CNNRUN_HAVE_CUTLASS
constexpr bool kHaveCutlass = true;
#else
constexpr bool kHaveCutlass = false;
#endif

// Ends in fc + softmax (FP32 NCHW), reading a flattened channels-last tensor.
const char* const kMixed = R"(
name: mixed
input: {channels: 3, height: 19, width: 17}
classes: [a, b, c, d, e, f, g, h, i, j]
layers:
  - {name: c1, type: conv, filters: 16, kernel: 3, pad: 1}
  - {name: r1, type: relu}
  - {name: mp, type: maxpool, size: 3, stride: 2, ceil_mode: true}
  - {name: c2, type: conv, filters: 16, kernel: 3, pad: 1, groups: 4}
  - {name: h2, type: hardswish}
  - {name: dw, type: conv, filters: 16, kernel: 3, pad: 2, dilation: 2, groups: 16, inputs: mp}
  - {name: sum, type: add, inputs: [mp, h2, dw]}
  - {name: bn, type: batchnorm}
  - {name: gap, type: avgpool, global: true}
  - {name: s1, type: conv, filters: 4, kernel: 1}
  - {name: s1r, type: relu}
  - {name: s2, type: conv, filters: 16, kernel: 1}
  - {name: sig, type: sigmoid}
  - {name: se, type: mul, inputs: [bn, sig]}
  - {name: t, type: tanh}
  - {name: cat, type: concat, inputs: [t, mp]}
  - {name: c3, type: conv, filters: 24, kernel: 3, stride: 2, pad: 1}
  - {name: ap, type: avgpool, size: 3, stride: 2, pad: 1, ceil_mode: true, count_pad: false}
  - {name: aa, type: maxpool, output: [3, 3], inputs: c3}
  - {name: cat2, type: concat, inputs: [aa, ap]}
  - {name: flat, type: flatten}
  - {name: fc1, type: fc, outputs: 32}
  - {name: g, type: gelu}
  - {name: fc2, type: fc, outputs: 10}
  - {name: sm, type: softmax}
)";

// Ends channels last (SqueezeNet's head: conv, ReLU, global average): the output is copied to
// FP32 NCHW for the argmax and the host.
const char* const kHead = R"(
name: head
input: {channels: 3, height: 16, width: 16}
classes: [a, b, c, d, e, f, g, h, i, j]
layers:
  - {name: c1, type: conv, filters: 24, kernel: 3, stride: 2}
  - {name: r1, type: relu}
  - {name: dw, type: conv, filters: 24, kernel: 3, pad: 1, groups: 24}
  - {name: r6, type: relu6}
  - {name: c3, type: conv, filters: 10, kernel: 1}
  - {name: r3, type: relu}
  - {name: gap, type: avgpool, global: true}
)";

double max_rel(const Validation& v, std::string* where) {
  double e = 0;
  for (const LayerCheck& c : v.layers)
    if (c.max_rel > e) e = c.max_rel, *where = c.name;
  return e;
}

// The largest |got[i] - want[i]| and the largest |want[i]| over the first n values: two runs'
// outputs agree within a precision's tolerance when worst <= tolerance * top.
struct OutputGap {
  double worst = 0, top = 0;
};
OutputGap output_gap(const std::vector<float>& got, const std::vector<float>& want, size_t n) {
  OutputGap g;
  for (size_t i = 0; i < n; ++i) {
    g.worst = std::max(g.worst, static_cast<double>(std::fabs(got[i] - want[i])));
    g.top = std::max(g.top, static_cast<double>(std::fabs(want[i])));
  }
  return g;
}

// `net`, rewritten by load-time passes from `plain` (same weights), gives plain's CPU reference
// outputs within each precision's tolerance in each of `formats` (default: both layouts at every
// precision), and validates layer by layer against its own reference; `each` (may be empty)
// checks each run's report too.
void rewritten_matches(const Network& plain, const Network& net, const char* label,
                       const std::vector<std::pair<Layout, Precision>>& formats = {},
                       const std::function<void(const RunResult&)>& each = {}) {
  std::vector<std::pair<Layout, Precision>> all = formats;
  if (all.empty())
    for (Layout layout : {Layout::kNchw, Layout::kNhwc})
      for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16})
        all.emplace_back(layout, p);
  const int64_t n = 37;
  Dataset data = gpu_random_data(net.input, n, 10, 5);
  std::vector<Tensor> ref = make_cpu_executor(plain)->forward_layers(data, 0, n, RunOptions{});
  const std::vector<float>& want = ref[static_cast<size_t>(plain.output)].data;
  auto gpu = make_gpu_executor(net);
  auto cpu = make_cpu_executor(net);
  for (const auto& [layout, p] : all) {
    INFO(label << " " << precision_name(p) << (layout == Layout::kNhwc ? " nhwc" : " nchw"));
    RunOptions o;
    o.batch = n;
    o.block = 16;
    o.want_probs = true;
    o.layout = layout;
    o.precision = p;
    const RunResult r = gpu->run(data, o);
    if (each) each(r);
    REQUIRE(r.probs.size() == want.size());
    const OutputGap gap = output_gap(r.probs, want, want.size());
    MESSAGE(label << " " << precision_name(p) << (layout == Layout::kNhwc ? " nhwc" : " nchw")
                  << ": max |gpu - reference before the rewrite| / max |value| " << gap.worst / gap.top);
    CHECK(gap.worst <= validation_tolerance(p) * gap.top);
    CHECK(validate(*gpu, *cpu, net, data, n, o).pass);
  }
}

// A netdef of a channels x h x w input whose first layer is conv `s`, pinned to the stem kernel,
// followed by the layer lines `rest`.
std::string stem_netdef(const std::string& name, int channels, int h, int w, int filters, int kernel,
                        int stride, int pad, int dilation, const std::string& rest) {
  return "name: " + name + "\ninput: {channels: " + std::to_string(channels) +
         ", height: " + std::to_string(h) + ", width: " + std::to_string(w) +
         "}\nclasses: 10\nlayers:\n  - {name: s, type: conv, filters: " + std::to_string(filters) +
         ", kernel: " + std::to_string(kernel) + ", stride: " + std::to_string(stride) +
         ", pad: " + std::to_string(pad) + ", dilation: " + std::to_string(dilation) + ", algo: stem}\n" +
         rest;
}

// How the report's stem entry starts at precision p: the FP32-storage products named.
std::string stem_tag(Precision p) {
  return std::string("stem(") + (p == Precision::kFp32 ? "3xTF32 " : p == Precision::kTf32 ? "TF32 " : "");
}

// Whether the stem's rows kernel (A from the patch's rows) computes a stem of these channels,
// window, stride and dilation at precision p, with or without a pool in its epilogue: three
// channels, no dilation; 3x3 or 7x7 at stride 2 without a pool at any precision; at 16-bit
// storage 3x3 at stride 1 too, pooled or not.
bool stem_rows_expected(int channels, int kernel, int stride, int dilation, bool pooled, Precision p) {
  const bool x16 = p == Precision::kFp16 || p == Precision::kBf16;
  if (channels != 3 || dilation != 1) return false;
  if (stride == 1) return x16 && kernel == 3;
  return stride == 2 && (kernel == 3 || kernel == 7) && !pooled;
}

// How the report names channels-last activations at precision p ("fp16 NHWC"): FP16 and BF16
// stored as such, the others in FP32.
std::string stored_nhwc(Precision p) {
  return std::string(p == Precision::kFp16 ? "fp16" : p == Precision::kBf16 ? "bf16" : "fp32") + " NHWC";
}

// One run of `net` channels last at precision p (o's batch and block as given): the report names
// the storage format, and the layers match the CPU reference within p's tolerance. Returns the
// largest relative error, printed under `label`.
double nhwc_validated(Executor& gpu, Executor& cpu, const Network& net, const Dataset& data, int64_t n,
                      RunOptions o, Precision p, const std::string& label) {
  o.precision = p;
  o.layout = Layout::kNhwc;
  const RunResult r = gpu.run(data, o);
  CHECK(r.engine.find(stored_nhwc(p) + " activations") != std::string::npos);
  const Validation v = validate(gpu, cpu, net, data, n, o);
  std::string where;
  const double err = max_rel(v, &where);
  MESSAGE(label << " " << std::string(precision_name(p)) << " NHWC: max rel error " << err << " (" << where
                << ")");
  CHECK(v.pass);
  return err;
}

}  // namespace

TEST_CASE("gpu: --layout nhwc at every precision vs reference, layer by layer" *
          doctest::skip(!gpu_present())) {
  int all_decided = 0;  // over both networks and every precision
  for (const char* text : {kMixed, kHead}) {
    Network net = parse_netdef_string(text, "nhwc");
    random_weights(net, 77);
    const int64_t n = 37;
    Dataset data = gpu_random_data(net.input, n, 10, 5);
    auto gpu = make_gpu_executor(net);
    auto cpu = make_cpu_executor(net);
    RunOptions nchw;
    nchw.batch = n;
    nchw.want_probs = true;
    nchw.layout = Layout::kNchw;
    const RunResult base = gpu->run(data, nchw);
    // cuDNN's graph API as the search picks it (timed against the legacy API), and wherever it
    // runs (graph_first), so that its fused epilogues are checked whatever the timings.
    for (bool first : {false, true})
      for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16}) {
        INFO(net.name << " at " << precision_name(p) << std::string(first ? ", graph API first" : ""));
        RunOptions o = nchw;
        o.layout = Layout::kNhwc;
        o.precision = p;
        o.tuning.graph_first = first;
        o.block = 16;  // three blocks, the last short (it runs outside the CUDA graphs)
        const RunResult r = gpu->run(data, o);
        const std::string stored = stored_nhwc(p);
        CHECK(r.engine.find(stored + " activations") != std::string::npos);
        int graphs = 0;
        for (const LayerTime& t : r.layers)
          if (t.type == "conv") {
            INFO(t.name << ": " << t.algo);
            // cuDNN, or for a depthwise conv the channels-last depthwise kernel if auto timed it
            // faster, at fp32 cutlass if auto timed it faster, for c1 and s2 (3 and 4 input
            // channels) the stem kernel if auto timed it faster, for a 1x1 conv gemm or conv1x1
            const ConvParams& cp = layer_as<ConvLayer>(*net.layers[static_cast<size_t>(net.find(t.name))]).p;
            CHECK((t.algo.find("cudnn:") == 0 || t.algo.find("cudnn graph:") == 0 ||
                   (t.name == "dw" && t.algo.find("depthwise(") == 0) ||
                   (p == Precision::kFp32 && t.algo.find("cutlass(") == 0) ||
                   ((t.name == "c1" || t.name == "s2") && t.algo.find("stem(") == 0) ||
                   (cp.kernel_h == 1 && cp.kernel_w == 1 &&
                    (t.algo.find("gemm(") == 0 || t.algo.find("conv1x1(") == 0))));
            CHECK(t.algo.find(stored) != std::string::npos);
            graphs += t.algo.find("cudnn graph:") == 0;
            if (first && kHaveGraphApi && t.name == "c1" && t.algo.find("stem(") != 0)
              CHECK(t.algo.find("cudnn graph:") == 0);  // conv + bias + relu
          }
        // Timed (not first): where the graph API ran, find's final alternating medians of it and
        // of the legacy call decided, and the search's note says which was faster.
        int decided = 0;
        if (!first && kHaveGraphApi)
          for (const LayerTime& t : r.layers) {
            if (t.type != "conv" || (t.algo.find("cudnn:") != 0 && t.algo.find("cudnn graph:") != 0))
              continue;
            INFO(t.name << ": " << t.algo);
            const auto tune = std::find_if(r.gpu->tuning.begin(), r.gpu->tuning.end(),
                                           [&](const ConvTuning& u) { return u.layer == t.name; });
            if (tune == r.gpu->tuning.end()) continue;  // pinned, not searched
            const auto cand = std::find_if(tune->candidates.begin(), tune->candidates.end(),
                                           [](const ConvTuning::Candidate& c) { return c.algo == "cudnn"; });
            REQUIRE(cand != tune->candidates.end());
            std::smatch m;
            const std::regex times("^graph API .* ([0-9.]+) ms, legacy call ([0-9.]+) ms");
            if (!std::regex_search(cand->note, m, times)) continue;  // the graph API could not run it
            INFO(cand->note);
            // Rounded as printed: a tie goes either way.
            const double g = std::stod(m[1]), l = std::stod(m[2]);
            if (g != l) CHECK((g < l) == (t.algo.find("cudnn graph:") == 0));
            ++decided;
          }
        MESSAGE(net.name << " " << std::string(precision_name(p)) << std::string(first ? " graph first" : "")
                         << ": " << graphs << " convs on cuDNN's graph API, " << decided
                         << " decided by alternating timings");
        all_decided += decided;
        CHECK((kHaveGraphApi || graphs == 0));
        const Validation v = validate(*gpu, *cpu, net, data, n, o);
        std::string where;
        const double err = max_rel(v, &where);
        MESSAGE(net.name << " " << std::string(precision_name(p)) << " NHWC: max rel error " << err << " ("
                         << where << ")");
        CHECK(v.pass);
        // The output values the run hands back are the validated ones (within the tolerance of
        // the NCHW FP32 run's), in NCHW order.
        REQUIRE(r.probs.size() == base.probs.size());
        const OutputGap gap = output_gap(r.probs, base.probs, r.probs.size());
        CHECK(gap.worst <= validation_tolerance(p) * gap.top);
        if (p == Precision::kFp32) {
          CHECK(err < 1e-5);  // FMA math on FP32 tensors: only the order of the sums differs
          CHECK(r.predictions == base.predictions);
        }
        if (p == Precision::kFp16 || p == Precision::kBf16)
          CHECK(err > unit_roundoff(p) / 4);  // the activations really are stored in the format
      }
  }
  // Some conv's graph API and legacy call were timed against each other.
  CHECK((!kHaveGraphApi || all_decided > 0));
}

// --cudnn-plans (GpuTuning::graph_plans): the graph API's search builds and times 1 or 6 of
// cuDNN's candidates a conv; with the graph API taken wherever it runs (graph_first) both counts
// give validated outputs, and changing the count searches again on the same executor.
TEST_CASE("gpu: cuDNN's graph API with 1 and 6 candidate plans a conv, vs reference" *
          doctest::skip(!gpu_present())) {
  Network net = parse_netdef_string(kMixed, "nhwc");
  random_weights(net, 78);
  const int64_t n = 21;
  Dataset data = gpu_random_data(net.input, n, 10, 6);
  auto gpu = make_gpu_executor(net);
  auto cpu = make_cpu_executor(net);
  for (int plans : {1, 6, 1}) {
    INFO(plans << " plans");
    RunOptions o;
    o.batch = n;
    o.layout = Layout::kNhwc;
    o.precision = Precision::kFp16;
    o.conv_algo = ConvAlgo::kCudnn;
    o.tuning.graph_first = true;
    o.tuning.graph_plans = plans;
    const RunResult r = gpu->run(data, o);
    int graphs = 0;
    for (const LayerTime& t : r.layers) graphs += t.type == "conv" && t.algo.find("cudnn graph:") == 0;
    CHECK((kHaveGraphApi ? graphs > 0 : graphs == 0));
    CHECK(validate(*gpu, *cpu, net, data, n, o).pass);
  }
}

// VGG's head at 32x32: the features end at 1x1, the adaptive pool makes 7x7 copies of it, the fc
// reads 49 times the values it needs; a 3x3 conv on the 1x1 map reads padding with 8 of its 9
// taps. Folded at load (fold_pools_into_fcs, drop_padding_taps), the fc reads the 1x1 features
// directly and the conv is a 1x1 one: at every precision and both layouts the GPU's outputs of
// the folded network are the unfolded network's CPU reference outputs within the precision's
// tolerance, and the folded network validates layer by layer.
TEST_CASE("gpu: an average pool folded into its fc gives the unfolded network's outputs" *
          doctest::skip(!gpu_present())) {
  const char* const text = R"(
name: vgghead
input: {channels: 3, height: 16, width: 16}
classes: [a, b, c, d, e, f, g, h, i, j]
layers:
  - {name: c1, type: conv, filters: 16, kernel: 3, pad: 1}
  - {name: r1, type: relu}
  - {name: p1, type: maxpool, size: 2, stride: 2}
  - {name: c2, type: conv, filters: 32, kernel: 3, pad: 1}
  - {name: r2, type: relu}
  - {name: p2, type: maxpool, size: 8, stride: 8}
  - {name: c3, type: conv, filters: 32, kernel: 3, pad: 1}
  - {name: r4, type: relu}
  - {name: avgpool, type: avgpool, output: 7}
  - {name: fc1, type: fc, outputs: 64}
  - {name: r3, type: relu}
  - {name: d, type: dropout}
  - {name: fc2, type: fc, outputs: 10}
)";
  Network plain = parse_netdef_string(text, "vgghead"), net = parse_netdef_string(text, "vgghead");
  random_weights(plain, 31);
  random_weights(net, 31);
  REQUIRE(drop_padding_taps(net).size() == 1);  // c3 on 32x1x1: a 1x1 conv
  REQUIRE(fold_pools_into_fcs(net, "t").size() == 1);
  REQUIRE(net.find("avgpool") < 0);
  REQUIRE(net.layers[static_cast<size_t>(net.find("fc1"))]->weight("weight").dims ==
          std::vector<int64_t>{64, 32});
  rewritten_matches(plain, net, "folded head");
}

// SqueezeNet's fire modules (a 1x1 and a 3x3 expand conv, each with its ReLU, concatenated; the
// second on a 1x1 map, where the 3x3's padding taps are dropped first), after a 3-channel conv
// and its overlapping max-pool: merge_concat_convs makes each one conv of both filters, whose
// outputs are the unmerged network's at every precision and layout.
TEST_CASE("gpu: a fire module's expand convs merged into one conv give the unmerged network's outputs" *
          doctest::skip(!gpu_present())) {
  const char* const text = R"(
name: fire
input: {channels: 3, height: 33, width: 31}
classes: [a, b, c, d, e, f, g, h, i, j]
layers:
  - {name: c0, type: conv, filters: 16, kernel: 3, stride: 2}
  - {name: r0, type: relu}
  - {name: p0, type: maxpool, size: 3, stride: 2, ceil_mode: true}
  - {name: sq, type: conv, filters: 16, kernel: 1}
  - {name: sqr, type: relu}
  - {name: e1, type: conv, filters: 32, kernel: 1}
  - {name: e1r, type: relu}
  - {name: e3, type: conv, filters: 32, kernel: 3, pad: 1, inputs: sqr}
  - {name: e3r, type: relu}
  - {name: cat, type: concat, inputs: [e1r, e3r]}
  - {name: p1, type: maxpool, size: [8, 7], stride: [8, 7]}
  - {name: sq2, type: conv, filters: 8, kernel: 1}
  - {name: sq2r, type: relu}
  - {name: f1, type: conv, filters: 16, kernel: 1}
  - {name: f1r, type: relu}
  - {name: f3, type: conv, filters: 16, kernel: 3, pad: 1, inputs: sq2r}
  - {name: f3r, type: relu}
  - {name: cat2, type: concat, inputs: [f1r, f3r]}
  - {name: head, type: conv, filters: 10, kernel: 1}
  - {name: hr, type: relu}
  - {name: gap, type: avgpool, global: true}
)";
  Network plain = parse_netdef_string(text, "fire"), net = parse_netdef_string(text, "fire");
  random_weights(plain, 17);
  random_weights(net, 17);
  REQUIRE(drop_padding_taps(net).size() == 1);  // f3 on 8x1x1
  REQUIRE(merge_concat_convs(net).size() == 2);
  REQUIRE(net.find("cat") < 0);
  REQUIRE(net.find("e3") < 0);
  REQUIRE(net.layers[static_cast<size_t>(net.find("e1"))]->out_shape.c == 64);
  rewritten_matches(plain, net, "merged fire modules");
}

// An inception block (GoogLeNet's four branches, each a conv with its ReLU, concatenated with the
// block's input) and a second concat of two strided convs: channels last, the convs read only by a
// concat write their outputs at their channel offsets in its buffer (b1, b2, b3, d, e), the
// concat copies the others (b4, read by d too, and r0, read by every branch). Pinned to the gemm
// convolution or the conv1x1 kernel (1x1) and cutlass, cuDNN or cudnn-3xtf32 (the rest), and left to auto, at
// every precision each can run: outputs within the precision's tolerance of the same run with
// `--gpu-off concat` and of the reference, layer by layer (validate reads each in-place conv's
// values back from the concat's buffer), and the report says which convs wrote in place: gemm,
// conv1x1 and cutlass always; cuDNN wherever its graph API has an engine that writes the slice, else the
// report says why none does.
TEST_CASE("gpu: convs read only by a concat write into its buffer at their channel offsets" *
          doctest::skip(!gpu_present())) {
  const std::string text = R"(
name: inception
input: {channels: 16, height: 15, width: 13}
classes: 10
layers:
  - {name: c0, type: conv, filters: 32, kernel: 3, pad: 1}
  - {name: r0, type: relu}
  - {name: b1, type: conv, filters: 16, kernel: 1, algo: ONE}
  - {name: b1r, type: relu}
  - {name: b2a, type: conv, filters: 24, kernel: 1, inputs: r0, algo: ONE}
  - {name: b2ar, type: relu}
  - {name: b2, type: conv, filters: 32, kernel: 3, pad: 1, algo: THREE}
  - {name: b2r, type: relu}
  - {name: b3p, type: maxpool, size: 3, stride: 1, pad: 1, inputs: r0}
  - {name: b3, type: conv, filters: 8, kernel: 1, algo: ONE}
  - {name: b3r, type: relu}
  - {name: b4, type: conv, filters: 16, kernel: 3, pad: 1, inputs: r0, algo: THREE}
  - {name: cat, type: concat, inputs: [b1r, b2r, b3r, b4, r0]}
  - {name: d, type: conv, filters: 8, kernel: 3, stride: 2, pad: 1, inputs: b4, algo: THREE}
  - {name: e, type: conv, filters: 16, kernel: 3, stride: 2, pad: 1, inputs: cat, algo: THREE}
  - {name: cat2, type: concat, inputs: [d, e]}
  - {name: gap, type: avgpool, global: true}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 10}
)";
  struct Way {
    std::string one, three;
    std::vector<Precision> precisions;
  };
  const std::vector<Precision> all = {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16};
  std::vector<Way> ways = {{"gemm", "cudnn", all}, {"auto", "auto", all}, {"conv1x1", "cudnn", all}};
  if (kHaveCutlass) ways.push_back({"gemm", "cutlass", {Precision::kFp32}});
  ways.push_back({"cudnn", "cudnn-3xtf32", {Precision::kFp32}});
  const int64_t n = 37;
  for (const Way& way : ways) {
    std::string t = text;
    for (const auto& [key, algo] :
         {std::pair{std::string("ONE"), way.one}, std::pair{std::string("THREE"), way.three}})
      for (size_t at = t.find(key); at != std::string::npos; at = t.find(key))
        t.replace(at, key.size(), algo);
    Network net = parse_netdef_string(t, "inception");
    random_weights(net, 29);
    Dataset data = gpu_random_data(net.input, n, 10, 5);
    std::vector<Tensor> ref = make_cpu_executor(net)->forward_layers(data, 0, n, RunOptions{});
    const std::vector<float>& want = ref[static_cast<size_t>(net.output)].data;
    auto gpu = make_gpu_executor(net);
    auto cpu = make_cpu_executor(net);
    for (Precision p : way.precisions) {
      INFO(way.one << " + " << way.three << " at " << std::string(precision_name(p)));
      RunOptions o;
      o.batch = n;
      o.block = 16;
      o.want_probs = true;
      o.layout = Layout::kNhwc;
      o.precision = p;
      RunOptions off = o;
      off.tuning.concat_in_place = false;
      const RunResult apart = gpu->run(data, off);
      const RunResult r = gpu->run(data, o);
      REQUIRE(r.probs.size() == want.size());
      REQUIRE(apart.probs.size() == want.size());
      const OutputGap gap = output_gap(r.probs, want, want.size()),
                      self = output_gap(r.probs, apart.probs, want.size());
      CHECK(gap.worst <= validation_tolerance(p) * gap.top);
      CHECK(self.worst <= validation_tolerance(p) * self.top);
      CHECK(validate(*gpu, *cpu, net, data, n, o).pass);
      std::map<std::string, std::string> algo;
      for (const LayerTime& lt : r.layers) algo[lt.name] = lt.algo;
      for (const LayerTime& lt : apart.layers) {
        INFO(lt.name << " with --gpu-off concat: " << lt.algo);
        CHECK(lt.algo.find("written into") == std::string::npos);
      }
      auto into = [&](const std::string& layer) {
        return algo[layer].find("written into") != std::string::npos;
      };
      int written = 0, cat_written = 0;
      for (const char* layer : {"b1", "b2", "b3", "d", "e"}) {
        const std::string a = algo[layer];
        INFO(std::string(layer) << ": " << a);
        if (a.rfind("gemm", 0) == 0 || a.rfind("cutlass", 0) == 0 || a.rfind("conv1x1", 0) == 0)
          CHECK(into(layer));  // conv1x1: b1 and b3 start at channels 0 and 48 of 104, 16-byte pieces
        else if (a.find("cudnn graph") != std::string::npos)  // the graph API: in place, or why not
          CHECK((into(layer) || a.find("no engine writes the concat's slice") != std::string::npos));
        else
          CHECK_FALSE(into(layer));  // cuDNN's legacy call writes packed tensors only
        written += into(layer);
        cat_written += into(layer) && std::string("b1 b2 b3").find(layer) != std::string::npos;
      }
      MESSAGE(way.one << " + " << way.three << " at " << std::string(precision_name(p)) << ": " << written
                      << " of 5 convs wrote into their concat");
      for (const char* layer : {"b4", "c0", "b2a"}) {
        INFO(std::string(layer) << ": " << algo[layer]);
        CHECK_FALSE(into(layer));
      }
      if (cat_written > 0) {
        INFO("cat: " << algo["cat"]);
        CHECK(algo["cat"] == "copies " + std::to_string(5 - cat_written) + " of its 5 inputs (" +
                                 std::to_string(cat_written) + " written in place by their convs)");
      }
      if (way.three == "cutlass") CHECK(written == 5);
    }
  }
}

// The same fire modules with their expand convs pinned to cutlass (FP32 channels last): the merged
// conv runs its centred 1x1 branch as a 1x1 conv and its 3x3 branch as a 3x3 conv, two launches
// into channel slices of one output, which match the unmerged network's outputs (and the
// report says so).
TEST_CASE("gpu: cutlass runs a merged fire module's centred 1x1 filters as a 1x1 conv" *
          doctest::skip(!gpu_present() || !kHaveCutlass)) {
  const char* const text = R"(
name: fire
input: {channels: 4, height: 23, width: 21}
classes: 20
layers:
  - {name: sq, type: conv, filters: 16, kernel: 1, algo: cutlass}
  - {name: sqr, type: relu}
  - {name: e1, type: conv, filters: 32, kernel: 1, algo: cutlass}
  - {name: e1r, type: relu}
  - {name: e3, type: conv, filters: 24, kernel: 3, pad: 1, inputs: sqr, algo: cutlass}
  - {name: e3r, type: relu}
  - {name: cat, type: concat, inputs: [e1r, e3r]}
  - {name: f1, type: conv, filters: 8, kernel: 1, stride: 2, algo: cutlass}
  - {name: f3, type: conv, filters: 12, kernel: 3, stride: 2, pad: 1, inputs: cat, algo: cutlass}
  - {name: cat2, type: concat, inputs: [f1, f3]}
  - {name: gap, type: avgpool, global: true}
)";
  Network plain = parse_netdef_string(text, "fire"), net = parse_netdef_string(text, "fire");
  random_weights(plain, 23);
  random_weights(net, 23);
  REQUIRE(merge_concat_convs(net).size() == 2);
  rewritten_matches(plain, net, "cutlass split fire modules", {{Layout::kNhwc, Precision::kFp32}},
                    [](const RunResult& r) {
                      int split = 0;
                      for (const LayerTime& t : r.layers) {
                        INFO(t.name << ": " << t.algo);
                        if (t.name == "e1")
                          split += t.algo.find("its first 32 filters as a 1x1 conv") != std::string::npos;
                        if (t.name == "f1")
                          split += t.algo.find("its first 8 filters as a 1x1 conv") != std::string::npos;
                      }
                      CHECK(split == 2);
                    });
}

// cuDNN's workspace: the search runs with the large one on one slot; then every stream holds what
// the chosen algorithms need for the block and the short last block, smaller than the search's.
// A later run of another batch size on the same slots without a warm-up (a streamed data set's
// next part) sizes it again for its own last block. Each run's values are the FP32 NCHW run's
// within the precision's tolerance, legacy API and graph API (channels last) alike.
TEST_CASE("gpu: every stream's cuDNN workspace is what the chosen algorithms need, after the search" *
          doctest::skip(!gpu_present())) {
  Network net = parse_netdef_string(kMixed, "ws");
  random_weights(net, 78);
  const int64_t n = 37;
  Dataset data = gpu_random_data(net.input, n, 10, 6);
  auto gpu = make_gpu_executor(net);
  RunOptions base_o;
  base_o.batch = n;
  base_o.want_probs = true;
  base_o.layout = Layout::kNchw;
  base_o.conv_algo = ConvAlgo::kCudnn;
  const RunResult base = gpu->run(data, base_o);
  auto close = [&](const RunResult& r, Precision p, int64_t images) {
    const size_t k = static_cast<size_t>(images * 10);
    REQUIRE(r.probs.size() == k);
    const OutputGap gap = output_gap(r.probs, base.probs, k);
    CHECK(gap.worst <= validation_tolerance(p) * gap.top);
  };
  for (Layout layout : {Layout::kNchw, Layout::kNhwc})
    for (Precision p : {Precision::kFp32, Precision::kFp16}) {
      INFO(std::string(layout_name(layout)) << " at " << std::string(precision_name(p)));
      RunOptions o = base_o;
      o.layout = layout;
      o.precision = p;
      o.block = 16;  // blocks of 16, 16 and 5 on three streams
      o.streams = 3;
      const RunResult r = gpu->run(data, o);
      REQUIRE(r.gpu);
      CHECK(r.gpu->streams == 3);
      CHECK(r.gpu->cudnn_search_workspace_bytes > 0);
      CHECK(r.gpu->cudnn_workspace_bytes >= 0);
      CHECK(r.gpu->cudnn_workspace_bytes < r.gpu->cudnn_search_workspace_bytes);
      MESSAGE(std::string(layout_name(layout))
              << " " << std::string(precision_name(p)) << ": cuDNN workspace " << r.gpu->cudnn_workspace_bytes
              << " bytes a stream, the search's " << r.gpu->cudnn_search_workspace_bytes);
      close(r, p, n);
      RunOptions next = o;
      next.batch = 35;  // a last block of 3 on the same slots, no warm-up
      next.warm_up = false;
      const RunResult r2 = gpu->run(data, next);
      REQUIRE(r2.gpu);
      CHECK(r2.gpu->cudnn_workspace_bytes < r2.gpu->cudnn_search_workspace_bytes);
      close(r2, p, 35);
      // The full blocks run the same algorithms on the same images: the same bits.
      CHECK(std::equal(r2.probs.begin(), r2.probs.begin() + 32 * 10, r.probs.begin()));
      // One block (new slots: one stream), then three streams again, no warm-up asked: new slots
      // (which may reuse the old ones' addresses) get their workspaces sized again.
      RunOptions one = next;
      one.batch = 10;
      close(gpu->run(data, one), p, 10);
      RunOptions again = next;
      again.batch = n;
      const RunResult r3 = gpu->run(data, again);
      REQUIRE(r3.gpu);
      CHECK(r3.gpu->streams == 3);
      CHECK(r3.gpu->cudnn_workspace_bytes < r3.gpu->cudnn_search_workspace_bytes);
      close(r3, p, n);
      CHECK(std::equal(r3.probs.begin(), r3.probs.begin() + 32 * 10, r.probs.begin()));
    }
}

// The stem kernel (few input channels, channels last), pinned: ResNet's 7x7/2 stem, a 3x3/2
// and a 3x3/1 one, a dilated 5x5, 1 to 4 input channels, 8 to 96 filters (96: a second block of
// filters half empty), odd sizes (partial tiles at the right and bottom), images smaller than a
// tile's patch, its bias and activation epilogue, both of its kernels where the rows one runs (A
// from the patch's rows, A gathered through tables); then the rest of the network on the other kernels.
// Validated layer by layer at every precision (16-bit storage on FP16/BF16 products, FP32 storage on TF32 or
// 3xTF32 products: fp32 at its own tolerance); the report names it; and what it cannot run is a one-line
// error naming the layer.
TEST_CASE("gpu: the stem kernel runs convolutions of 1 to 4 input channels at every precision, vs reference" *
          doctest::skip(!gpu_present())) {
  struct Case {
    int channels, h, w, filters, kernel, stride, pad, dilation;
    const char* act;
  };
  const Case cases[] = {
      {3, 37, 29, 64, 7, 2, 3, 1, "relu"},     {3, 33, 35, 32, 3, 2, 1, 1, "silu"},
      {1, 28, 28, 24, 3, 1, 1, 1, "relu6"},    {4, 19, 41, 96, 3, 1, 1, 1, "none"},
      {2, 23, 17, 8, 5, 1, 4, 2, "hardswish"}, {3, 224, 224, 64, 7, 2, 3, 1, "relu"},
      {3, 31, 31, 64, 3, 2, 0, 1, "relu"},     {3, 45, 50, 96, 7, 2, 3, 1, "gelu"},
      {3, 32, 32, 64, 7, 2, 3, 1, "relu"},     {3, 9, 40, 32, 7, 2, 2, 1, "none"},
      {3, 21, 37, 64, 3, 1, 1, 1, "relu"},     {3, 6, 7, 96, 3, 1, 0, 1, "silu"},
  };
  for (const Case& k : cases) {
    const std::string act =
        std::string(k.act) == "none" ? "" : "  - {name: a, type: " + std::string(k.act) + "}\n";
    const std::string text =
        stem_netdef("stem", k.channels, k.h, k.w, k.filters, k.kernel, k.stride, k.pad, k.dilation,
                    act +
                        "  - {name: c2, type: conv, filters: 16, kernel: 3, pad: 1}\n"
                        "  - {name: gap, type: avgpool, global: true}\n"
                        "  - {name: fc, type: fc, outputs: 10}\n");
    Network net = parse_netdef_string(text, "stem.yaml");
    random_weights(net, 31);
    const int64_t n = k.h == 224 ? 5 : 37;
    Dataset data = gpu_random_data(net.input, n, 10, 9);
    auto gpu = make_gpu_executor(net);
    auto cpu = make_cpu_executor(net);
    // The shapes of stem_rows_expected run the kernels reading A from the patch's rows; --gpu-off
    // stemrows (and every other shape) the ones gathering it.
    for (Precision p : {Precision::kFp16, Precision::kBf16, Precision::kTf32, Precision::kFp32})
      for (bool rows : {true, false}) {
        const bool rows_shape = stem_rows_expected(k.channels, k.kernel, k.stride, k.dilation, false, p);
        if (!rows && !rows_shape) continue;  // the same kernel as with rows on
        INFO(text << " at " << std::string(precision_name(p)) << (rows ? "" : ", --gpu-off stemrows"));
        RunOptions o;
        o.batch = n;
        o.block = 16;
        o.precision = p;
        o.layout = Layout::kNhwc;
        o.tuning.fuse_u8 = false;  // the floats after the preprocess pass (the bytes: the tests below)
        o.tuning.stem_rows = rows;
        const RunResult r = gpu->run(data, o);
        bool saw = false;
        for (const LayerTime& t : r.layers)
          if (t.name == "s") {
            saw = true;
            CHECK(t.algo == stem_tag(p) + "tensor cores, " +
                                (rows && rows_shape ? "A from the patch's rows, " : "") + "bias" +
                                (std::string(k.act) == "none" ? std::string() : "+" + std::string(k.act)) +
                                " epilogue, " + stored_nhwc(p) + ")");
          }
        CHECK(saw);
        nhwc_validated(*gpu, *cpu, net, data, n, o, p, rows ? "stem" : "stem (tables)");
      }
    // What it cannot run: channels first, and a conv of more channels.
    RunOptions o;
    o.batch = n;
    o.layout = Layout::kNchw;
    o.precision = Precision::kFp16;
    CHECK_THROWS_WITH_AS(gpu->run(data, o),
                         doctest::Contains("layer 's': the stem convolution cannot run it: "
                                           "the stem kernel runs channels last"),
                         Error);
  }
  Network wide = parse_netdef_string(
      "name: w\ninput: {channels: 8, height: 9, width: 9}\nclasses: 10\nlayers:\n"
      "  - {name: s, type: conv, filters: 16, kernel: 3, algo: stem}\n  - {name: fc, type: fc, outputs: "
      "10}\n",
      "w.yaml");
  random_weights(wide, 3);
  auto gpu = make_gpu_executor(wide);
  RunOptions o;
  o.batch = 4;
  o.layout = Layout::kNhwc;
  o.precision = Precision::kFp16;
  CHECK_THROWS_WITH_AS(gpu->run(gpu_random_data(wide.input, 4, 10, 1), o),
                       doctest::Contains("input channels (8) are not 1 to 4"), Error);
}

namespace {

// A 3-channel stem (64 filters, kernel x kernel at stride 2, ReLU, then a global mean and an fc)
// under the preprocessing `pre`, pinned (`algo: stem`) or left to auto, run at precision p on n
// images (weights and images from the two seeds): where the stem runs, the setup timed it on the bytes and on
// the floats plus the preprocess pass and kept the faster (the report gives both times and the pick, and the
// stem's entry and the fused input agree with it); the run validates.
void stem_input_picked(bool pinned, int h, int w, int kernel, int pad, const std::string& pre, Precision p,
                       int64_t n, uint32_t weight_seed, uint32_t data_seed) {
  std::string text = stem_netdef(pinned ? "pinned" : "auto", 3, h, w, 64, kernel, 2, pad, 1,
                                 "  - {name: a, type: relu}\n  - {name: gap, type: avgpool, global: true}\n"
                                 "  - {name: fc, type: fc, outputs: 10}\n");
  if (!pinned) text.replace(text.find(", algo: stem"), 12, "");
  text.insert(text.find("classes:"), "preprocess: " + pre + "\n");
  INFO(text << " at " << std::string(precision_name(p)));
  Network net = parse_netdef_string(text, "pick.yaml");
  random_weights(net, weight_seed);
  Dataset data = gpu_random_data(net.input, n, 10, data_seed);
  auto gpu = make_gpu_executor(net);
  auto cpu = make_cpu_executor(net);
  RunOptions o;
  o.batch = n;
  o.precision = p;
  o.layout = Layout::kNhwc;
  const RunResult r = gpu->run(data, o);
  REQUIRE(r.gpu);
  const GpuRunFacts::StemInput& si = r.gpu->stem_input;
  MESSAGE((pinned ? "pinned " : "auto ")
          << std::string(precision_name(p)) << " stem input: " << (si.bytes ? "bytes" : "floats")
          << ", bytes " << si.bytes_seconds * 1e3 << " ms, floats + preprocess " << si.floats_seconds * 1e3
          << " ms");
  const std::string& s_algo = r.layers[0].algo;
  if (s_algo.find("stem(") != 0) {  // auto gave the conv to another algorithm: no such note
    CHECK_FALSE(pinned);
    CHECK(si.layer.empty());
  } else {
    CHECK(si.layer == "s");
    CHECK(si.bytes_seconds > 0);
    CHECK(si.floats_seconds > 0);
    CHECK((si.bytes ? si.bytes_seconds <= si.floats_seconds : si.floats_seconds < si.bytes_seconds));
    CHECK((s_algo.find("uint8 input") != std::string::npos) == si.bytes);
    CHECK(r.gpu->input_fused_into == (si.bytes ? "s" : ""));
  }
  CHECK(validate(*gpu, *cpu, net, data, n, o).pass);
}

// n images at p channels last on blocks of 16, the probabilities kept, the stem on the bytes
// wherever it can read them, untimed (the timed pick: stem_input_picked).
RunOptions stem_bytes_options(int64_t n, Precision p) {
  RunOptions o;
  o.batch = n;
  o.block = 16;
  o.precision = p;
  o.layout = Layout::kNhwc;
  o.want_probs = true;
  o.tuning.stem_bytes_first = true;
  return o;
}

}  // namespace

// The stem reading the uint8 pixels (launch_conv_stem_bytes: FP32 storage, the first conv, its
// preprocessing folded into offsets, two-part FP16 weights and a table of its border sums): under
// mean/std normalisations whose offsets are not whole bytes (the table's residual terms differ
// at every border), one channel to four, a dilated window wider than the image's edge, a fused
// 2x2/2 pool, ResNet's 3x3/2 pool as its own pass, odd sizes. At tf32 and fp32: the report names
// it, no preprocess pass runs (the first conv fused the input), the layers match the CPU
// reference at FP32's tolerance (also at tf32: its products are exact), a fused pool gives the
// bits of the pool run as its own pass, and the float path (--gpu-off exact) gives the same
// predictions within FP32 rounding; where the rows kernel runs (three channels, 7x7/2, no fused
// pool), the gather kernel (--gpu-off stemrows) on the same bytes gives the same predictions
// within FP32 rounding and validates too. At fp16 only the 16-bit rows kernels read the bytes (the
// test below).
TEST_CASE("gpu: the stem reads the uint8 pixels at FP32 storage: exact pixels, border table, vs reference" *
          doctest::skip(!gpu_present())) {
  struct Case {
    int channels, h, w, filters, kernel, stride, pad, dilation;
    const char* pre;   // the preprocess line
    const char* rest;  // the layers after the stem's
    bool pooled;
  };
  const char* const head =
      "  - {name: a, type: relu}\n  - {name: gap, type: avgpool, global: true}\n  - {name: fc, type: fc, "
      "outputs: 10}\n";
  const char* const resnet =
      "  - {name: a, type: relu}\n  - {name: mp, type: maxpool, size: 3, stride: 2, pad: 1}\n"
      "  - {name: gap, type: avgpool, global: true}\n  - {name: fc, type: fc, outputs: 10}\n";
  const Case cases[] = {
      {3, 37, 29, 64, 7, 2, 3, 1, "{mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}", head, false},
      {3, 45, 38, 64, 7, 2, 3, 1, "{mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}", resnet, false},
      {1, 21, 26, 16, 5, 1, 4, 2, "{mean: [0.3], std: [0.7]}", head, false},
      {4, 19, 23, 32, 3, 1, 1, 1, "{mean: [0.1, 0.9, 0.5, 0.25], std: [0.5, 0.25, 2, 1]}", head, false},
      {3, 19, 21, 32, 3, 1, 1, 1, "{mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}",
       "  - {name: a, type: relu}\n  - {name: mp, type: maxpool, size: 2, stride: 2}\n"
       "  - {name: gap, type: avgpool, global: true}\n  - {name: fc, type: fc, outputs: 10}\n",
       true},
      {3, 224, 224, 64, 7, 2, 3, 1, "{mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}", head, false},
  };
  for (const Case& k : cases) {
    std::string text =
        stem_netdef("bytes", k.channels, k.h, k.w, k.filters, k.kernel, k.stride, k.pad, k.dilation, k.rest);
    const size_t at = text.find("classes:");
    text.insert(at, "preprocess: " + std::string(k.pre) + "\n");
    Network net = parse_netdef_string(text, "bytes.yaml");
    random_weights(net, 17);
    const int64_t n = k.h == 224 ? 5 : 37;
    Dataset data = gpu_random_data(net.input, n, 10, 23);
    auto gpu = make_gpu_executor(net);
    auto cpu = make_cpu_executor(net);
    const std::string epi = std::string("bias+relu") + (k.pooled ? "+maxpool" : "") + " epilogue, ";
    for (Precision p : {Precision::kTf32, Precision::kFp32}) {
      INFO(text << " at " << std::string(precision_name(p)));
      const RunOptions o = stem_bytes_options(n, p);
      const RunResult r = gpu->run(data, o);
      std::string s_algo;
      for (const LayerTime& t : r.layers)
        if (t.name == "s") s_algo = t.algo;
      const bool rows = k.channels == 3 && k.stride == 2 && !k.pooled;  // 7x7/2: the rows kernel
      CHECK(s_algo == std::string("stem(FP16 tensor cores on exact pixels, 2-part weights, uint8 input, ") +
                          (rows ? "A from the patch's rows, " : "") + epi + "fp32 NHWC)");
      REQUIRE(r.gpu);
      CHECK(r.gpu->input_fused_into == "s");
      const Validation v = validate(*gpu, *cpu, net, data, n, o);
      CHECK(v.pass);
      // The stem's own layer (its activation's or pool's, which it computed) at FP32 accuracy, also
      // at tf32 (its products are exact; TF32's would be about 1e-3 off).
      bool seen = false;
      for (const LayerCheck& c : v.layers)
        if (c.name == (k.pooled ? "mp" : "a")) {
          seen = true;
          MESSAGE("stem bytes " << std::string(precision_name(p)) << ": " << c.name << " max rel error "
                                << c.max_rel);
          CHECK(c.max_rel < 1e-5);
        }
      CHECK(seen);
      if (k.pooled) {
        RunOptions apart = o;
        apart.tuning.fuse_pool = false;
        const RunResult r3 = gpu->run(data, apart);
        REQUIRE(r3.probs.size() == r.probs.size());
        CHECK(std::equal(r.probs.begin(), r.probs.end(), r3.probs.begin()));
      }
      if (rows) {  // the gather kernel on the same bytes: the same sums in another order
        RunOptions gather = o;
        gather.tuning.stem_rows = false;
        const RunResult rg = gpu->run(data, gather);
        for (const LayerTime& t : rg.layers)
          if (t.name == "s")
            CHECK(t.algo == "stem(FP16 tensor cores on exact pixels, 2-part weights, uint8 input, " + epi +
                                "fp32 NHWC)");
        REQUIRE(rg.probs.size() == r.probs.size());
        double most = 0;
        for (size_t i = 0; i < r.probs.size(); ++i)
          most = std::max(most, static_cast<double>(std::fabs(r.probs[i] - rg.probs[i])));
        CHECK(most < 1e-5);
        CHECK(validate(*gpu, *cpu, net, data, n, gather).pass);
      }
      RunOptions floats = o;
      floats.tuning.exact_pixels = false;
      const RunResult r2 = gpu->run(data, floats);
      for (const LayerTime& t : r2.layers)
        if (t.name == "s")
          CHECK(t.algo ==
                stem_tag(p) + "tensor cores, " +
                    (k.channels == 3 && k.stride == 2 && !k.pooled ? "A from the patch's rows, " : "") + epi +
                    "fp32 NHWC)");
      REQUIRE(r2.gpu);
      CHECK(r2.gpu->input_fused_into.empty());
      REQUIRE(r.probs.size() == r2.probs.size());
      double most = 0;
      for (size_t i = 0; i < r.probs.size(); ++i)
        most = std::max(most, static_cast<double>(std::fabs(r.probs[i] - r2.probs[i])));
      CHECK(most < (p == Precision::kFp32 ? 1e-5 : 1e-2));
    }
    // At fp16 the bytes go to the 16-bit rows kernels only (the test below): the others read the
    // preprocess pass's output.
    RunOptions o;
    o.batch = n;
    o.block = 16;
    o.precision = Precision::kFp16;
    o.layout = Layout::kNhwc;
    o.tuning.stem_bytes_first = true;
    const bool rows16 = stem_rows_expected(k.channels, k.kernel, k.stride, k.dilation, k.pooled, o.precision);
    for (const LayerTime& t : gpu->run(data, o).layers)
      if (t.name == "s") CHECK((t.algo.find("uint8 input") != std::string::npos) == rows16);
  }
}

// The 16-bit stem reading the uint8 pixels (launch_conv_stem_u8: the rows kernels normalise the
// bytes as they stage them, no preprocess pass): ResNet's 7x7/2, MobileNetV2's 3x3/2 with SiLU,
// SqueezeNet's unpadded 3x3/2 before a 3x3/2 pool of its own, VGG's 3x3/1 with and without its
// fused 2x2/2 pool, odd sizes (partial tiles), a normalisation per channel. At fp16 and bf16: the
// report names the bytes, no preprocess pass runs, the predictions' probabilities are bit for bit
// the floats' (the preprocess pass's values are the ones it stages; the layers after are
// deterministic), and the layers validate; with --gpu-off stemrows (the gather kernel) and u8 the
// preprocess pass runs again. (The setup's timed choice between bytes and floats: the test after.)
TEST_CASE("gpu: the 16-bit stem reads the uint8 pixels: the preprocess pass's bits, without the pass" *
          doctest::skip(!gpu_present())) {
  struct Case {
    int h, w, filters, kernel, stride, pad;
    const char* act;
    const char* pool;  // a maxpool's keys after the activation, or ""
    bool fused;        // ... computed in the stem's epilogue
  };
  const Case cases[] = {
      {37, 29, 64, 7, 2, 3, "relu", "", false},
      {33, 35, 32, 3, 2, 1, "silu", "", false},
      {31, 31, 64, 3, 2, 0, "relu", "size: 3, stride: 2, ceil_mode: true", false},
      {19, 21, 32, 3, 1, 1, "relu", "size: 2, stride: 2", true},
      {21, 37, 64, 3, 1, 1, "relu6", "", false},
      {224, 224, 64, 7, 2, 3, "relu", "size: 3, stride: 2, pad: 1", false},
  };
  for (const Case& k : cases) {
    const std::string pool =
        *k.pool ? "  - {name: mp, type: maxpool, " + std::string(k.pool) + "}\n" : std::string();
    std::string text = stem_netdef("bytes16", 3, k.h, k.w, k.filters, k.kernel, k.stride, k.pad, 1,
                                   "  - {name: a, type: " + std::string(k.act) + "}\n" + pool +
                                       "  - {name: gap, type: avgpool, global: true}\n"
                                       "  - {name: fc, type: fc, outputs: 10}\n");
    text.insert(text.find("classes:"),
                "preprocess: {mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}\n");
    Network net = parse_netdef_string(text, "bytes16.yaml");
    random_weights(net, 29);
    const int64_t n = k.h == 224 ? 5 : 37;
    Dataset data = gpu_random_data(net.input, n, 10, 31);
    auto gpu = make_gpu_executor(net);
    auto cpu = make_cpu_executor(net);
    const std::string epi = "bias+" + std::string(k.act) + (k.fused ? "+maxpool" : "") + " epilogue, ";
    for (Precision p : {Precision::kFp16, Precision::kBf16}) {
      INFO(text << " at " << std::string(precision_name(p)));
      const RunOptions o = stem_bytes_options(n, p);
      const RunResult r = gpu->run(data, o);
      auto stem_algo = [](const RunResult& run) {
        for (const LayerTime& t : run.layers)
          if (t.name == "s") return t.algo;
        return std::string();
      };
      CHECK(stem_algo(r) ==
            "stem(tensor cores, uint8 input, A from the patch's rows, " + epi + stored_nhwc(p) + ")");
      REQUIRE(r.gpu);
      CHECK(r.gpu->input_fused_into == "s");
      nhwc_validated(*gpu, *cpu, net, data, n, o, p, "16-bit stem on the bytes");

      RunOptions floats = o;
      floats.tuning.fuse_u8 = false;
      const RunResult rf = gpu->run(data, floats);
      CHECK(stem_algo(rf) == "stem(tensor cores, A from the patch's rows, " + epi + stored_nhwc(p) + ")");
      REQUIRE(rf.gpu);
      CHECK(rf.gpu->input_fused_into.empty());
      CHECK(rf.gpu->preprocess_seconds > 0);
      REQUIRE(rf.probs.size() == r.probs.size());
      CHECK(std::equal(r.probs.begin(), r.probs.end(), rf.probs.begin()));

      RunOptions gather = o;  // no rows kernel: the floats
      gather.tuning.stem_rows = false;
      const RunResult rg = gpu->run(data, gather);
      CHECK(stem_algo(rg) == "stem(tensor cores, " + epi + stored_nhwc(p) + ")");
      REQUIRE(rg.gpu);
      CHECK(rg.gpu->input_fused_into.empty());
    }
  }
}

// Which input the stem reads is measured: left to auto, the search times the stem on the bytes and
// on the floats plus the preprocess pass and keeps the faster; pinned (`algo: stem`), the setup
// times the two the same way. In FP32 storage (ResNet's 7x7/2, exact pixels) and at fp16 (a 3x3/2
// on the 16-bit rows kernel).
TEST_CASE("gpu: the stem's input is timed: the bytes, or the floats and the preprocess pass" *
          doctest::skip(!gpu_present())) {
  for (const bool pinned : {false, true}) {
    stem_input_picked(pinned, 45, 38, 7, 3, "{mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}",
                      Precision::kFp32, 64, 5, 2);
    stem_input_picked(pinned, 67, 61, 3, 1, "{mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25]}",
                      Precision::kFp16, 96, 7, 4);
  }
}

// The stem kernel with the max-pool after its activation in its epilogue where the pool's
// windows tile the kernel's 8 x 16 outputs (VGG's 3x3 conv + 2x2/2 pool, unrolled where its
// windows are inside the output, a ceil_mode 2x2/2 whose last windows are not, a 2x4 window, a
// ceil_mode 4x4/4 whose last windows are cut by the edge, after ReLU and other activations, odd
// sizes: partial tiles): validated layer by layer at every precision, named in the report, and bit
// for bit the outputs of the same kernel with the pool run as its own pass (--gpu-off pool; the
// layers after it are deterministic: a global average and an fc). Windows that overlap
// (ResNet's 3x3/2), a stride-1 pool and one taller than the tile run as their own pass.
TEST_CASE("gpu: the stem kernel computes the max-pool after it, as the separate pool does" *
          doctest::skip(!gpu_present())) {
  struct Case {
    int channels, h, w, filters, kernel, stride, pad;
    const char* act;
    const char* pool;  // the pool layer's keys
    bool fused;
  };
  const Case cases[] = {
      {3, 37, 29, 64, 7, 2, 3, "relu", "size: 3, stride: 2, pad: 1", false},
      {3, 35, 33, 64, 7, 2, 3, "relu", "size: 3, stride: 2, ceil_mode: true", false},
      {3, 19, 21, 32, 3, 1, 1, "relu", "size: 2, stride: 2", true},
      {1, 28, 27, 16, 5, 1, 2, "hardswish", "size: 2, stride: 1", false},
      {2, 30, 29, 24, 5, 2, 2, "silu", "size: [2, 4], stride: [2, 4]", true},
      {4, 25, 31, 24, 3, 1, 1, "relu6", "size: 4, stride: 4, ceil_mode: true", true},
      {3, 224, 224, 64, 3, 1, 1, "relu", "size: 2, stride: 2", true},
      {3, 23, 40, 8, 3, 1, 1, "relu", "size: [16, 2], stride: [16, 2]", false},
      {3, 37, 41, 64, 7, 2, 3, "relu", "size: 2, stride: 2", true},
      {3, 23, 25, 16, 3, 1, 1, "relu", "size: 2, stride: 2, ceil_mode: true", true},
  };
  for (const Case& k : cases) {
    const std::string text = stem_netdef(
        "stempool", k.channels, k.h, k.w, k.filters, k.kernel, k.stride, k.pad, 1,
        "  - {name: a, type: " + std::string(k.act) + "}\n  - {name: mp, type: maxpool, " + k.pool +
            "}\n"
            "  - {name: gap, type: avgpool, global: true}\n"
            "  - {name: fc, type: fc, outputs: 10}\n");
    Network net = parse_netdef_string(text, "stempool.yaml");
    random_weights(net, 41);
    const int64_t n = k.h == 224 ? 5 : 37;
    Dataset data = gpu_random_data(net.input, n, 10, 3);
    auto gpu = make_gpu_executor(net);
    auto cpu = make_cpu_executor(net);
    for (Precision p : {Precision::kFp16, Precision::kBf16, Precision::kTf32, Precision::kFp32}) {
      INFO(text << " at " << std::string(precision_name(p)));
      RunOptions o;
      o.batch = n;
      o.block = 16;
      o.precision = p;
      o.layout = Layout::kNhwc;
      o.want_probs = true;
      o.tuning.fuse_u8 = false;  // the floats after the preprocess pass (the bytes: the tests above)
      const RunResult r = gpu->run(data, o);
      std::string s_algo, mp_algo;
      for (const LayerTime& t : r.layers) {
        if (t.name == "s") s_algo = t.algo;
        if (t.name == "mp") mp_algo = t.algo;
      }
      const bool rows = stem_rows_expected(k.channels, k.kernel, k.stride, 1, k.fused, p);
      CHECK(s_algo == stem_tag(p) + "tensor cores, " + (rows ? "A from the patch's rows, " : "") + "bias+" +
                          std::string(k.act) + (k.fused ? "+maxpool" : "") + " epilogue, " + stored_nhwc(p) +
                          ")");
      CHECK(mp_algo == (k.fused ? "fused into s" : ""));
      CHECK(gpu->fused_into(0, o) == (k.fused ? "mp" : "a"));
      nhwc_validated(*gpu, *cpu, net, data, n, o, p, "stem+pool");
      if (rows) {  // the gather kernel with the same pool
        RunOptions gather = o;
        gather.tuning.stem_rows = false;
        nhwc_validated(*gpu, *cpu, net, data, n, gather, p, "stem+pool (tables)");
      }
      RunOptions apart = o;
      apart.tuning.fuse_pool = false;
      apart.tuning.stem_rows = rows;  // the same kernel (pooled, the stride-2 stems gather A)
      const RunResult r2 = gpu->run(data, apart);
      for (const LayerTime& t : r2.layers)
        if (t.name == "mp") CHECK(t.algo.empty());
      REQUIRE(r.probs.size() == r2.probs.size());
      CHECK(std::equal(r.probs.begin(), r.probs.end(), r2.probs.begin()));
    }
  }
}

// VGG's blocks: stride-1 convs whose ReLU a 2x2 max-pool follows, which auto times together with
// that pool (the implicit kernel fuses it in NCHW). Channels last, that pool must run in the
// buffers' own layout and storage: the FP32 NCHW pool it once ran there read and wrote past the
// 16-bit buffers and corrupted other layers' tensors (VGG-11-BN at bf16 failed its validation;
// compute-sanitizer named the pool). Validated layer by layer at every precision, on blocks of
// two sizes (auto times on the first).
TEST_CASE("gpu: --layout nhwc: auto times a conv with the 2x2 max-pool after it in channels-last storage" *
          doctest::skip(!gpu_present())) {
  const char* const vgg = R"(
name: vggish
input: {channels: 3, height: 16, width: 16}
classes: 10
layers:
  - {name: c1, type: conv, filters: 32, kernel: 3, pad: 1}
  - {name: r1, type: relu}
  - {name: p1, type: maxpool, size: 2, stride: 2}
  - {name: c2, type: conv, filters: 64, kernel: 3, pad: 1}
  - {name: b2, type: batchnorm}
  - {name: r2, type: relu}
  - {name: p2, type: maxpool, size: 2, stride: 2}
  - {name: c3, type: conv, filters: 64, kernel: 3, pad: 1}
  - {name: r3, type: relu}
  - {name: p3, type: maxpool, size: 2, stride: 2}
  - {name: fc, type: fc, outputs: 10}
)";
  Network net = parse_netdef_string(vgg, "vggish");
  random_weights(net, 13);
  const int64_t n = 300;
  Dataset data = gpu_random_data(net.input, n, 10, 9);
  auto cpu = make_cpu_executor(net);
  RunOptions o;
  o.batch = n;
  o.block = 128;  // two full blocks and a short one
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16}) {
    auto gpu = make_gpu_executor(net);
    INFO(precision_name(p));
    nhwc_validated(*gpu, *cpu, net, data, n, o, p, "vggish");
  }
}

// Squeeze-and-excitation as EfficientNet runs it, and the whole-plane pools: a global average and
// a 1x1 adaptive max over a 40 x 36 plane (the whole-plane pool kernel: one block per image and
// tile of 32 channel vectors), the per-channel scale multiplied back (the vectorised mul), at
// channel counts that take 16-byte, 2-value and 1-value vectors and several tiles of them.
TEST_CASE(
    "gpu: --layout nhwc: whole-plane pools and squeeze-and-excitation's mul at every width, vs reference" *
    doctest::skip(!gpu_present())) {
  for (int filters : {7, 6, 40, 1288}) {
    const std::string f = std::to_string(filters);
    const std::string text = R"(
name: se
input: {channels: 3, height: 40, width: 36}
classes: 10
layers:
  - {name: c1, type: conv, filters: )" +
                             f + R"(, kernel: 3, pad: 1}
  - {name: s1, type: silu}
  - {name: gap, type: avgpool, global: true}
  - {name: q, type: conv, filters: 4, kernel: 1}
  - {name: qr, type: silu}
  - {name: e, type: conv, filters: )" +
                             f + R"(, kernel: 1}
  - {name: sig, type: sigmoid}
  - {name: se, type: mul, inputs: [s1, sig]}
  - {name: gmp, type: maxpool, output: [1, 1]}
  - {name: flat, type: flatten}
  - {name: fc, type: fc, outputs: 10}
)";
    Network net = parse_netdef_string(text, "se");
    random_weights(net, 21);
    const int64_t n = 24;
    Dataset data = gpu_random_data(net.input, n, 10, 2);
    auto cpu = make_cpu_executor(net);
    auto gpu = make_gpu_executor(net);
    RunOptions o;
    o.batch = n;
    for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16}) {
      INFO(filters << " filters at " << precision_name(p));
      const double err = nhwc_validated(*gpu, *cpu, net, data, n, o, p, "se " + f);
      if (p == Precision::kFp32) CHECK(err < 1e-5);  // only the order of the sums differs
    }
  }
}

TEST_CASE("gpu: --layout nhwc runs the channels-last depthwise kernel where it is pinned or timed faster" *
          doctest::skip(!gpu_present())) {
  // MobileNetV2's inverted residual (expand, depthwise, project, add) and a stride-2 one with a
  // channel multiplier of 2; 40 channels (16-byte vectors at fp16/bf16) and 20 (8 bytes); between
  // them a 5x5 depthwise conv of 128 channels (the tile kernel) and its SiLU.
  const char* const text = R"(
name: inverted
input: {channels: 3, height: 20, width: 20}
classes: 10
layers:
  - {name: stem, type: conv, filters: 20, kernel: 3, pad: 1}
  - {name: r0, type: relu6}
  - {name: expand, type: conv, filters: 40, kernel: 1}
  - {name: r1, type: relu6}
  - {name: dw, type: conv, filters: 40, kernel: 3, pad: 1, groups: 40, algo: depthwise}
  - {name: r2, type: relu6}
  - {name: project, type: conv, filters: 20, kernel: 1}
  - {name: sum, type: add, inputs: [project, r0]}
  - {name: wide, type: conv, filters: 128, kernel: 1}
  - {name: dw4, type: conv, filters: 128, kernel: 5, pad: 2, groups: 128, algo: depthwise}
  - {name: s4, type: silu}
  - {name: narrow, type: conv, filters: 20, kernel: 1}
  - {name: dw2, type: conv, filters: 40, kernel: 5, stride: 2, pad: 2, groups: 20, algo: depthwise}
  - {name: h2, type: hardswish}
  - {name: dw3, type: conv, filters: 40, kernel: 3, pad: 1, groups: 40}
  - {name: gap, type: avgpool, global: true}
  - {name: fc, type: fc, outputs: 10}
)";
  Network net = parse_netdef_string(text, "inverted.yaml");
  random_weights(net, 21);
  auto gpu = make_gpu_executor(net);
  auto cpu = make_cpu_executor(net);
  Dataset data = gpu_random_data(net.input, 37, 10, 3);
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16}) {
    INFO(std::string(precision_name(p)));
    RunOptions o;
    o.batch = 37;
    o.block = 16;
    o.layout = Layout::kNhwc;
    o.precision = p;
    const RunResult r = gpu->run(data, o);
    const std::string stored = stored_nhwc(p);
    bool saw_dw3 = false;
    for (const LayerTime& t : r.layers) {
      INFO(t.name << ": " << t.algo);
      const bool half = p == Precision::kFp16 || p == Precision::kBf16;
      if (t.name == "dw")  // 3x3 of stride 1 on 20-wide rows: FP32 strips of 4 pixels, a 16-bit tile
                           // of two output rows a lane
        CHECK(t.algo ==
              "depthwise(bias+relu6 epilogue, " + stored + ", " +
                  (half ? "2 filters x 4 pixels x 2 rows a thread of 20x20 tiles staged in shared memory"
                        : "2 filters x 4 pixels a thread") +
                  ")");
      if (t.name == "dw2")
        CHECK(t.algo == "depthwise(bias+hardswish epilogue, " + stored + ", 1 filters a thread)");
      if (t.name == "dw4")  // 128 channels of 5x5 on 20-wide rows: the tile kernel at every storage
        CHECK(t.algo.find("tiles staged in shared memory") != std::string::npos);
      if (t.name == "dw3") {  // auto: cuDNN or the kernel, whichever was faster
        saw_dw3 = true;
        CHECK((t.algo.find("depthwise(") == 0 || t.algo.find("cudnn") == 0));
      }
      if (t.type == "conv") CHECK(t.algo.find(stored) != std::string::npos);
    }
    CHECK(saw_dw3);
    const Validation v = validate(*gpu, *cpu, net, data, 37, o);
    CHECK(v.pass);
  }
  // NCHW keeps the NCHW kernel; implicit cannot run channels last.
  RunOptions o;
  o.batch = 37;
  o.layout = Layout::kNchw;
  for (const LayerTime& t : gpu->run(data, o).layers)
    if (t.name == "dw") CHECK(t.algo.find("planes x") != std::string::npos);
  o.layout = Layout::kNhwc;
  o.conv_algo = ConvAlgo::kImplicit;
  CHECK_THROWS_WITH_AS(gpu->run(data, o), doctest::Contains("--conv-algo implicit needs --layout nchw"),
                       Error);
}

TEST_CASE("gpu: the depthwise kernel computes a squeeze-and-excitation pool's whole-plane mean as it stores" *
          doctest::skip(!gpu_present())) {
  // EfficientNet's MBConv: a 3x3 depthwise conv (48 channels, 20x20: the strip kernel at FP32, the
  // tile kernel at 16-bit storage) with its
  // SiLU, the SE pool, its two 1x1 convs and the mul; a 5x5 one of 128 channels on 20-wide rows
  // (the tile kernel at every storage; --gpu-off dwtile, the strip kernel) whose pool is a plain avgpool
  // window over the plane; then a 3x3 stride-10 one (24 channels on a 2x2 map: the vector kernel).
  // By default only the tile kernel computes the mean (where it runs by default); the others'
  // mean kernels run in "gpu: channels-last depthwise kernel vs plain loops".
  const char* const text = R"(
name: se
input: {channels: 3, height: 20, width: 20}
classes: 10
layers:
  - {name: stem, type: conv, filters: 48, kernel: 3, pad: 1}
  - {name: s0, type: silu}
  - {name: dw, type: conv, filters: 48, kernel: 3, pad: 1, groups: 48, algo: depthwise}
  - {name: d1, type: silu}
  - {name: gap, type: avgpool, output: 1}
  - {name: fc1, type: conv, filters: 8, kernel: 1}
  - {name: a1, type: silu}
  - {name: fc2, type: conv, filters: 48, kernel: 1}
  - {name: sig, type: sigmoid}
  - {name: scale, type: mul, inputs: [sig, d1]}
  - {name: up, type: conv, filters: 128, kernel: 1}
  - {name: dw4, type: conv, filters: 128, kernel: 5, pad: 2, groups: 128, algo: depthwise}
  - {name: gp4, type: avgpool, size: 20}
  - {name: f41, type: conv, filters: 128, kernel: 1}
  - {name: sg4, type: sigmoid}
  - {name: sc4, type: mul, inputs: [dw4, sg4]}
  - {name: c2, type: conv, filters: 24, kernel: 1}
  - {name: dw2, type: conv, filters: 24, kernel: 3, stride: 10, pad: 1, groups: 24, algo: depthwise}
  - {name: gp2, type: avgpool, global: true}
  - {name: f21, type: conv, filters: 24, kernel: 1}
  - {name: sg2, type: sigmoid}
  - {name: sc2, type: mul, inputs: [dw2, sg2]}
  - {name: fc, type: fc, outputs: 10}
)";
  Network net = parse_netdef_string(text, "se.yaml");
  random_weights(net, 23);
  auto gpu = make_gpu_executor(net);
  auto cpu = make_cpu_executor(net);
  Dataset data = gpu_random_data(net.input, 37, 10, 3);
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16}) {
    const bool half = p == Precision::kFp16 || p == Precision::kBf16;
    INFO(std::string(precision_name(p)));
    RunOptions o;
    o.batch = 37;
    o.block = 16;
    o.layout = Layout::kNhwc;
    o.precision = p;
    o.want_probs = true;
    const RunResult fused = gpu->run(data, o);
    std::map<std::string, std::string> algo;
    for (const LayerTime& t : fused.layers) algo[t.name] = t.algo;
    INFO("dw: " << algo["dw"] << "; dw4: " << algo["dw4"] << "; dw2: " << algo["dw2"]);
    // dw (48 channels, 3x3 on 20x20): the tile kernel and its mean at 16-bit storage (tiled
    // everywhere since Session 36), the strip kernel without it at FP32.
    CHECK(algo["dw"].find(half ? "depthwise(bias+silu+mean epilogue" : "depthwise(bias+silu epilogue") == 0);
    CHECK(algo["gap"] == (half ? "fused into dw" : ""));
    // dw4 (128 channels, 5x5 on 20x20): the tile kernel at every storage since Session 36, the
    // mean in its epilogue.
    CHECK(algo["dw4"].find("depthwise(bias+mean epilogue") == 0);
    CHECK(algo["dw4"].find("tiles staged in shared memory") != std::string::npos);
    CHECK(algo["gp4"] == "fused into dw4");
    CHECK(algo["dw2"].find("+mean") == std::string::npos);
    CHECK(algo["gp2"] == "");
    const Validation v = validate(*gpu, *cpu, net, data, 37, o);  // the pools' outputs among the layers
    CHECK(v.pass);
    // --gpu-off mean: the pools as passes, the same network within the precision's tolerance.
    RunOptions apart = o;
    apart.tuning.fuse_mean = false;
    const RunResult passes = gpu->run(data, apart);
    for (const LayerTime& t : passes.layers) {
      INFO(t.name << ": " << t.algo);
      CHECK(t.algo.find("mean") == std::string::npos);
      if (t.type == "avgpool") CHECK(t.algo == "");
    }
    REQUIRE(passes.probs.size() == fused.probs.size());
    double worst = 0;
    for (size_t k = 0; k < fused.probs.size(); ++k)
      worst = std::max(worst, std::abs(double(fused.probs[k]) - passes.probs[k]));
    CHECK(worst < (half ? 2e-2 : 1e-4));
    CHECK(validate(*gpu, *cpu, net, data, 37, apart).pass);
    // --gpu-off dwtile: no tile kernel, so no mean where only it has one (the defaults); the same
    // network within the precision's tolerance (the other convs' algorithms are timed again).
    RunOptions untiled = o;
    untiled.tuning.dw_tile = false;
    const RunResult plain = gpu->run(data, untiled);
    for (const LayerTime& t : plain.layers) {
      INFO(t.name << ": " << t.algo);
      CHECK(t.algo.find("tiles staged") == std::string::npos);
      CHECK(t.algo.find("mean") == std::string::npos);
      if (t.name == "dw4") CHECK(t.algo.find("depthwise(bias epilogue") == 0);
      if (t.type == "avgpool") CHECK(t.algo == "");
    }
    REQUIRE(plain.probs.size() == passes.probs.size());
    worst = 0;
    for (size_t k = 0; k < plain.probs.size(); ++k)
      worst = std::max(worst, std::abs(double(plain.probs[k]) - passes.probs[k]));
    CHECK(worst < (half ? 2e-2 : 1e-4));
    CHECK(validate(*gpu, *cpu, net, data, 37, untiled).pass);
  }
}

namespace {

// Wide convs (32 channels in) with nothing to fuse, optionally a depthwise one among them.
std::string wide_netdef(bool grouped) {
  return std::string("name: wide\ninput: {channels: 3, height: 12, width: 12}\nclasses: 10\nlayers:\n") +
         "  - {name: c1, type: conv, filters: 32, kernel: 3, pad: 1}\n  - {name: r1, type: relu}\n" +
         (grouped ? "  - {name: dw, type: conv, filters: 32, kernel: 3, pad: 1, groups: 32}\n" : "") +
         "  - {name: c2, type: conv, filters: 32, kernel: 3, pad: 1}\n  - {name: r2, type: relu}\n" +
         "  - {name: gap, type: avgpool, global: true}\n  - {name: fc, type: fc, outputs: 10}\n";
}

// Whether a run with `o` stored its activations channels last.
bool ran_nhwc(Executor& gpu, const Dataset& data, const RunOptions& o) {
  return gpu.run(data, o).engine.find("NHWC activations") != std::string::npos;
}

}  // namespace

TEST_CASE(
    "gpu: --layout auto: channels last for wide convs (fp32 with CUTLASS), NCHW where it measured faster" *
    doctest::skip(!gpu_present())) {
  const Precision kAll[] = {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16};
  Dataset data = gpu_random_data(Shape{3, 12, 12}, 8, 10, 1);
  RunOptions o;
  o.batch = 8;
  for (bool grouped : {false, true}) {
    Network net = parse_netdef_string(wide_netdef(grouped), "wide");
    random_weights(net, 3);
    auto gpu = make_gpu_executor(net);
    for (Precision p : kAll) {
      o.precision = p;
      INFO((grouped ? "grouped " : "dense ") << std::string(precision_name(p)));
      // Dense and grouped (the channels-last depthwise kernel, or cuDNN's grouped kernels): every
      // precision, FP32 where the build has CUTLASS's 3xTF32 kernels.
      CHECK(ran_nhwc(*gpu, data, o) == (kHaveCutlass || p != Precision::kFp32));
    }
    if (grouped) {  // a depthwise pin runs channels last too
      net.layers[2]->algo = ConvAlgo::kDepthwise;
      auto dw = make_gpu_executor(net);
      o.precision = Precision::kBf16;
      CHECK(ran_nhwc(*dw, data, o));
      net.layers[2]->algo = ConvAlgo::kAuto;
    }
    // A netdef's algorithm pin of implicit or im2col keeps NCHW.
    net.layers[0]->algo = ConvAlgo::kIm2col;
    auto pinned = make_gpu_executor(net);
    o.precision = Precision::kFp16;
    CHECK_FALSE(ran_nhwc(*pinned, data, o));
  }
  // Narrow convs (LeNet-5's), and convs that all fuse a 2x2 max-pool (the thesis network's),
  // stay NCHW; asked for, channels last runs them.
  const char* const narrow = R"(
name: narrow
input: {channels: 3, height: 12, width: 12}
classes: 10
layers:
  - {name: c1, type: conv, filters: 16, kernel: 3, pad: 1}
  - {name: t1, type: tanh}
  - {name: a1, type: avgpool, size: 2, stride: 2}
  - {name: c2, type: conv, filters: 16, kernel: 3, pad: 1}
  - {name: fc, type: fc, outputs: 10}
)";
  const char* const pooled = R"(
name: pooled
input: {channels: 3, height: 12, width: 12}
classes: 10
layers:
  - {name: c1, type: conv, filters: 64, kernel: 5, pad: 2}
  - {name: r1, type: relu}
  - {name: p1, type: maxpool, size: 2, stride: 2}
  - {name: c2, type: conv, filters: 64, kernel: 5, pad: 2}
  - {name: r2, type: relu}
  - {name: p2, type: maxpool, size: 2, stride: 2}
  - {name: fc, type: fc, outputs: 10}
)";
  for (const char* text : {narrow, pooled}) {
    Network net = parse_netdef_string(text, "stays");
    random_weights(net, 4);
    auto gpu = make_gpu_executor(net);
    INFO(net.name);
    for (Precision p : kAll) {
      o.precision = p;
      o.layout = Layout::kAuto;
      CHECK_FALSE(ran_nhwc(*gpu, data, o));
    }
    o.layout = Layout::kNhwc;
    CHECK(ran_nhwc(*gpu, data, o));
    // --conv-algo other than cudnn is an error with --layout nhwc, and keeps NCHW under auto.
    o.conv_algo = ConvAlgo::kIm2col;
    CHECK_THROWS_WITH_AS(gpu->run(data, o), doctest::Contains("--conv-algo im2col needs --layout nchw"),
                         Error);
    o.layout = Layout::kAuto;
    CHECK_FALSE(ran_nhwc(*gpu, data, o));
    o.conv_algo = ConvAlgo::kAuto;
  }
}

TEST_CASE("gpu: buffers shared by lifetime give a buffer per layer's results, in less memory" *
          doctest::skip(!gpu_present())) {
  // A residual block (the add and its ReLU in the conv's epilogue, its other input live across
  // the conv), convs the implicit kernel fuses with their pools (NCHW), and the networks above.
  const char* const residual = R"(
name: residual
input: {channels: 3, height: 16, width: 16}
classes: 10
layers:
  - {name: c0, type: conv, filters: 32, kernel: 3, pad: 1}
  - {name: r0, type: relu}
  - {name: c1, type: conv, filters: 32, kernel: 3, pad: 1}
  - {name: b1, type: batchnorm}
  - {name: r1, type: relu}
  - {name: c2, type: conv, filters: 32, kernel: 3, pad: 1}
  - {name: b2, type: batchnorm}
  - {name: sum, type: add, inputs: [b2, r0]}
  - {name: r2, type: relu}
  - {name: c3, type: conv, filters: 32, kernel: 3, pad: 1}
  - {name: r3, type: relu}
  - {name: p3, type: maxpool, size: 2, stride: 2}
  - {name: c4, type: conv, filters: 32, kernel: 3, pad: 1}
  - {name: r4, type: relu}
  - {name: p4, type: maxpool, size: 2, stride: 2}
  - {name: gap, type: avgpool, global: true}
  - {name: fc, type: fc, outputs: 10}
)";
  for (const char* text : {residual, kMixed, kHead}) {
    Network net = parse_netdef_string(text, "t.yaml");
    random_weights(net, 11);
    auto gpu = make_gpu_executor(net);
    auto cpu = make_cpu_executor(net);
    Dataset data = gpu_random_data(net.input, 37, 10, 5);
    for (Layout layout : {Layout::kNchw, Layout::kNhwc})
      for (Precision p : {Precision::kFp32, Precision::kFp16}) {
        INFO(net.name << " " << std::string(layout_name(layout)) << " " << std::string(precision_name(p)));
        RunOptions o;
        o.batch = 37;  // blocks of 16, 16 and 5 on two streams
        o.block = 16;
        o.streams = 2;
        o.want_probs = true;
        o.layout = layout;
        o.precision = p;
        o.tuning.share_buffers = false;  // --gpu-off share
        const RunResult own = gpu->run(data, o);
        o.tuning.share_buffers = true;  // the default
        const RunResult shared = gpu->run(data, o);
        REQUIRE(own.gpu);
        REQUIRE(shared.gpu);
        CHECK(own.gpu->buffers.allocations == own.gpu->buffers.count);
        // The first run sized its slots before auto's search, with a split input for every conv
        // cudnn-3xtf32 might take (fp32 channels last); the second holds only the picks' own.
        CHECK(shared.gpu->buffers.count <= own.gpu->buffers.count);
        if (layout == Layout::kNchw || p != Precision::kFp32)
          CHECK(shared.gpu->buffers.count == own.gpu->buffers.count);
        CHECK(shared.gpu->buffers.allocations < own.gpu->buffers.count);
        CHECK(shared.gpu->buffers.bytes_per_image < own.gpu->buffers.bytes_per_image);
        // Same algorithms (auto's picks are kept for the block size); a buffer overwritten while
        // in use would be far off.
        REQUIRE(shared.probs.size() == own.probs.size());
        double worst = 0;
        for (size_t i = 0; i < own.probs.size(); ++i)
          worst = std::max(worst, static_cast<double>(std::fabs(shared.probs[i] - own.probs[i])));
        CHECK(worst <= (p == Precision::kFp32 ? 1e-5 : 1e-2));
        if (p == Precision::kFp32) CHECK(shared.predictions == own.predictions);
        // forward_layers (validation) keeps a buffer per layer, after a shared run.
        const Validation v = validate(*gpu, *cpu, net, data, 4, o);
        CHECK(v.pass);
      }
  }
}

TEST_CASE("gpu: --layout nhwc on ResNet's strided block, 128 channels, vs reference" *
          doctest::skip(!gpu_present())) {
  // torchvision's BasicBlock with a projection shortcut (convs without bias, batchnorms folded),
  // at the sizes ResNet-18's layer2 sees at 32x32 and 224x224 inputs.
  for (int hw : {8, 56}) {
    std::ostringstream o;
    o << "name: down\ninput: {channels: 64, height: " << hw << ", width: " << hw
      << "}\nclasses: 10\nlayers:\n"
      << "  - {name: conv1, type: conv, filters: 128, kernel: 3, stride: 2, pad: 1, bias: false}\n"
      << "  - {name: bn1, type: batchnorm}\n"
      << "  - {name: relu1, type: relu}\n"
      << "  - {name: conv2, type: conv, filters: 128, kernel: 3, pad: 1, bias: false}\n"
      << "  - {name: bn2, type: batchnorm}\n"
      << "  - {name: ds, type: conv, filters: 128, kernel: 1, stride: 2, bias: false, inputs: input}\n"
      << "  - {name: dsbn, type: batchnorm}\n"
      << "  - {name: add, type: add, inputs: [bn2, dsbn]}\n"
      << "  - {name: relu, type: relu}\n"
      << "  - {name: c3, type: conv, filters: 128, kernel: 3, pad: 1}\n"
      << "  - {name: gap, type: avgpool, global: true}\n"
      << "  - {name: fc, type: fc, outputs: 10}\n";
    Network net = parse_netdef_string(o.str(), "down");
    random_weights(net, 9);
    fold_batchnorms(net, "down");
    Dataset data = gpu_random_data(net.input, 40, 10, 2);
    auto gpu = make_gpu_executor(net);
    auto cpu = make_cpu_executor(net);
    // The shortcut conv `ds` computes add + relu in its epilogue (Fusions::residual): in cuDNN's
    // graph API's fused kernel, after the legacy call in one pass, or after our own kernels.
    struct Way {
      const char* what;
      Layout layout;
      ConvAlgo algo;
      bool graph, first;
      const char* ds_algo;  // what ds's algorithm name must contain
    };
    const Way ways[] = {
        {"nhwc", Layout::kNhwc, ConvAlgo::kAuto, true, false, "add+relu"},
        // cuDNN's two APIs (at fp32, auto may take cutlass instead).
        {"nhwc, graph API first", Layout::kNhwc, ConvAlgo::kCudnn, true, true, "cudnn graph:"},
        {"nhwc, legacy API", Layout::kNhwc, ConvAlgo::kCudnn, false, false, "+add+relu"},
        {"nchw im2col", Layout::kNchw, ConvAlgo::kIm2col, true, false, " + add+relu pass"},
        {"nchw cudnn", Layout::kNchw, ConvAlgo::kCudnn, true, false, "+add+relu kernel"},
        {"nhwc cutlass", Layout::kNhwc, ConvAlgo::kCutlass, true, false, "3xTF32 tensor cores"}};
    for (const Way& way : ways)
      for (Precision p : {Precision::kFp32, Precision::kFp16, Precision::kBf16}) {
        if ((way.layout == Layout::kNchw || way.algo == ConvAlgo::kCutlass) && p != Precision::kFp32)
          continue;
        if (way.algo == ConvAlgo::kCutlass && !kHaveCutlass) {
          MESSAGE("skipped (" << way.what << "): built without CUTLASS's headers");
          continue;
        }
        if (way.first && !kHaveGraphApi) {
          MESSAGE("skipped (" << way.what << "): built without the cuDNN frontend's headers");
          continue;
        }
        INFO(std::string(way.what) << " at " << precision_name(p));
        RunOptions r;
        r.batch = 3000;  // cycled: cuDNN's search runs on blocks of 1000, the validation on 40 images
        r.cycle = true;
        r.block = 1000;
        r.layout = way.layout;
        r.conv_algo = way.algo;
        r.precision = p;
        r.tuning.cudnn_graph = way.graph;
        r.tuning.graph_first = way.first;
        const RunResult res = gpu->run(data, r);
        for (const LayerTime& t : res.layers) {
          INFO(t.name << ": " << t.algo);
          // Graph API first: its fused kernel, or at FP32, where no engine of cuDNN's runs it (on
          // some machines every candidate uses tensor cores), the legacy call with the graph API's
          // one-line reason in the report.
          const bool graph_refused =
              way.first && p == Precision::kFp32 && t.algo.find("cudnn:") == 0 &&
              t.algo.find("(graph API: no engine of cuDNN's supports it") != std::string::npos &&
              t.algo.find('\n') == std::string::npos;
          if (graph_refused)
            MESSAGE("down " << hw << " " << std::string(precision_name(p)) << ": " << t.algo);
          if (t.name == "ds") CHECK((t.algo.find(way.ds_algo) != std::string::npos || graph_refused));
          if (t.name == "add" || t.name == "relu") CHECK(t.algo == "fused into ds");
          if (t.name == "ds" && way.first) CHECK(t.algo.find("+add+relu") != std::string::npos);
          if (t.type == "conv" && way.algo == ConvAlgo::kCutlass)
            CHECK(t.algo.find(t.name == "ds" ? "bias+add+relu epilogue" : "fp32 NHWC") != std::string::npos);
        }
        const Validation v = validate(*gpu, *cpu, net, data, 40, r);
        std::string where, per;
        const double err = max_rel(v, &where);
        for (const LayerCheck& c : v.layers) per += " " + c.name + "=" + std::to_string(c.max_rel);
        std::string algos;
        for (const LayerTime& t : res.layers)
          if (t.type == "conv") algos += " " + t.name + ":" + t.algo;
        MESSAGE("down " << hw << " " << std::string(way.what) << " " << std::string(precision_name(p))
                        << ": max rel " << err << " (" << where << ");" << per << ";" << algos);
        CHECK(v.pass);
      }
  }
}

TEST_CASE("gpu: --layout nhwc refuses what it cannot run, naming the layer" * doctest::skip(!gpu_present())) {
  const char* up = R"(
name: up
input: {channels: 3, height: 8, width: 8}
classes: [a, b]
layers:
  - {name: c1, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: u, type: upsample, scale: 2}
  - {name: gap, type: avgpool, global: true}
  - {name: fc, type: fc, outputs: 2}
)";
  const char* flat = R"(
name: flat
input: {channels: 3, height: 8, width: 8}
classes: [a, b]
layers:
  - {name: c1, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: f1, type: flatten}
  - {name: c2, type: conv, filters: 4, kernel: 3, pad: 1, inputs: input}
  - {name: f2, type: flatten}
  - {name: cat, type: concat, inputs: [f1, f2]}
  - {name: fc, type: fc, outputs: 2}
)";
  for (auto [text, msg] :
       {std::pair<const char*, const char*>{up, "layer 'u' (upsample) has no channels-last kernel"},
        {flat, "layer 'cat' reads a flattened 4x8x8 tensor"}}) {
    Network net = parse_netdef_string(text, "refused");
    random_weights(net, 1);
    Dataset data = gpu_random_data(net.input, 4, 2, 1);
    auto gpu = make_gpu_executor(net);
    RunOptions o;
    o.batch = 4;
    o.precision = Precision::kFp16;
    o.layout = Layout::kNhwc;
    CHECK_THROWS_WITH_AS(gpu->run(data, o), doctest::Contains(msg), Error);
    o.layout = Layout::kAuto;  // auto runs it NCHW
    CHECK(gpu->run(data, o).engine.find("NHWC") == std::string::npos);
  }
}

TEST_CASE("--layout: names round-trip; nhwc on the CPU engine and unknown names are one-line errors") {
  for (Layout l : {Layout::kAuto, Layout::kNchw, Layout::kNhwc}) CHECK(parse_layout(layout_name(l)) == l);
  CHECK_FALSE(parse_layout("NHWC").has_value());
  CHECK_FALSE(parse_layout("").has_value());
  const std::string cli = std::string(CNNRUN_BINARY) + " " + CNNRUN_SOURCE_DIR + "/netdefs/cifar10.yaml";
  std::string out;
  CHECK(test::run_command(cli + " --engine cpu --layout nhwc --batch 1", &out) == 2);
  CHECK(out == "cnnrun: --layout nhwc needs --engine gpu: the CPU reference is FP32 NCHW\n");
  CHECK(test::run_command(cli + " --layout sideways --batch 1", &out) == 2);
  CHECK(out.find("--layout") != std::string::npos);
  CHECK(std::count(out.begin(), out.end(), '\n') == 1);
}

TEST_CASE("the CPU executor refuses --layout nhwc") {
  Network net = parse_netdef_string(kHead, "head");
  random_weights(net, 3);
  Dataset data = gpu_random_data(net.input, 2, 10, 1);
  auto cpu = make_cpu_executor(net);
  RunOptions o;
  o.batch = 2;
  o.layout = Layout::kNhwc;
  CHECK_THROWS_WITH_AS(cpu->run(data, o), doctest::Contains("--layout nhwc needs --engine gpu"), Error);
  o.layout = Layout::kNchw;
  CHECK(cpu->run(data, o).images == 2);
}
