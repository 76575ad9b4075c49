// The gemm convolution (engine/gpu/conv2d_gemm.h): 1x1 convs as one cuBLASLt matmul channels
// last, and a squeeze-and-excitation mul folded into its filters per image. The planner's part
// (which muls fold, the buffers' lifetimes) and what the algorithm refuses run without a GPU;
// the networks run against the CPU reference at every precision on one ("gpu: ..." cases).
#ifdef CNNRUN_HAVE_GPU
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "engine/gpu/conv2d_gemm.h"
#include "engine/gpu/conv_selector.h"
#include "engine/gpu/plan.h"
#include "engine/gpu_api.h"
#include "engine/network.h"
#include "engine/passes.h"
#include "engine/validate.h"
#include "reference/cpu_executor.h"
#include "tests/test_util.h"

using namespace cnnrun;
using namespace cnnrun::gpu;
using test::gpu_present;

namespace {

// EfficientNet's MBConv with squeeze-and-excitation at 12x12, the projection's add and a ReLU
// after it (ResNet's order, so cuBLASLt's C and ReLU epilogue are both used), a plain 1x1 with a
// ReLU, and a second SE block on a 3x3 map whose projection has more filters (16) than pixels
// (9), so its mul is not folded. `pin` is the algorithm of the 1x1 convs (empty: auto).
std::string se_netdef(const std::string& pin) {
  const std::string a = pin.empty() ? "" : ", algo: " + pin;
  return R"(
name: se
input: {channels: 3, height: 12, width: 12}
classes: 10
layers:
  - {name: stem, type: conv, filters: 16, kernel: 3, pad: 1}
  - {name: s0, type: silu}
  - {name: expand, type: conv, filters: 48, kernel: 1)" +
         a + R"(}
  - {name: e1, type: silu}
  - {name: dw, type: conv, filters: 48, kernel: 3, pad: 1, groups: 48}
  - {name: d1, type: silu}
  - {name: gap, type: avgpool, output: 1}
  - {name: fc1, type: conv, filters: 8, kernel: 1}
  - {name: a1, type: silu}
  - {name: fc2, type: conv, filters: 48, kernel: 1}
  - {name: sig, type: sigmoid}
  - {name: scale, type: mul, inputs: [sig, d1]}
  - {name: project, type: conv, filters: 16, kernel: 1, bias: false)" +
         a + R"(}
  - {name: pbn, type: batchnorm}
  - {name: add, type: add, inputs: [pbn, s0]}
  - {name: ar, type: relu}
  - {name: c2, type: conv, filters: 24, kernel: 1)" +
         a + R"(}
  - {name: r2, type: relu}
  - {name: dw2, type: conv, filters: 24, kernel: 3, stride: 4, pad: 1, groups: 24}
  - {name: gp2, type: avgpool, output: 1}
  - {name: f21, type: conv, filters: 8, kernel: 1}
  - {name: f2r, type: relu}
  - {name: f22, type: conv, filters: 24, kernel: 1}
  - {name: sg2, type: sigmoid}
  - {name: sc2, type: mul, inputs: [dw2, sg2]}
  - {name: proj2, type: conv, filters: 16, kernel: 1)" +
         a + R"(}
  - {name: gap3, type: avgpool, global: true}
  - {name: fc, type: fc, outputs: 10}
)";
}

Network se_net(const std::string& pin) {
  Network net = parse_netdef_string(se_netdef(pin), "se.yaml");
  test::random_weights(net, 17);
  fold_batchnorms(net, "se.yaml");  // as loading weights does: pbn into project
  return net;
}

}  // namespace

TEST_CASE("gemm: the planner folds a per-channel mul into a 1x1 conv where the per-image filters fit") {
  Network net = parse_netdef_string(se_netdef(""), "se.yaml");
  net.layers[static_cast<size_t>(net.find("pbn"))]->folded = true;  // as fold_batchnorms does at load
  const Plan plan = make_plan(net);
  auto st = [&](const char* name) -> const Step& { return plan.steps[static_cast<size_t>(net.find(name))]; };
  // project: 16 filters x 48 channels an image, no more than its 12x12x48 input: folded.
  const Step& p = st("project");
  REQUIRE(p.scale_layer == net.find("scale"));
  CHECK(st("scale").scale_conv == net.find("project"));
  CHECK(p.scale_buf == st("sig").out);
  CHECK(p.scaled_buf == st("dw").out);  // d1 is computed in dw's epilogue, into its buffer
  REQUIRE(p.scale_w_buf > 0);
  CHECK(plan.buf_floats[static_cast<size_t>(p.scale_w_buf)] == 16 * 48);
  CHECK(p.residual_buf == st("s0").out);  // the add (and its ReLU) in its epilogue too
  // proj2: 16 filters on a 3x3 map: the mul's pass moves less than per-image filters would.
  CHECK(st("proj2").scale_layer == -1);
  CHECK(st("proj2").scale_w_buf == -1);
  CHECK(st("sc2").scale_conv == -1);
  CHECK(st("expand").scale_layer == -1);

  // The fold's reads are at the conv's step: the scale, the tensor scaled, the filters (channels
  // last: in the storage format, so the layout marks them).
  const std::vector<Lifetime> life = buffer_lifetimes(net, plan, nullptr);
  const int at = net.find("project");
  CHECK(life[static_cast<size_t>(p.scale_w_buf)].first == at);
  CHECK(life[static_cast<size_t>(p.scale_w_buf)].last == at);
  CHECK(life[static_cast<size_t>(p.scale_buf)].last == at);
  CHECK(life[static_cast<size_t>(p.scaled_buf)].last == at);
  const NhwcLayout lay = make_nhwc_layout(net, plan);
  REQUIRE(lay.ok);
  CHECK(lay.nhwc[static_cast<size_t>(p.scale_w_buf)] == 1);

  // The SE pools that read a depthwise conv's output: the conv's kernel may compute them, writing
  // the pool's buffer and its FP32 partial sums (sized by the executor) at the conv's own step.
  const Step& d = st("dw");
  REQUIRE(d.mean_layer == net.find("gap"));
  CHECK(st("gap").mean_conv == net.find("dw"));
  CHECK(st("dw2").mean_layer == net.find("gp2"));
  CHECK(st("gp2").mean_conv == net.find("dw2"));
  CHECK(st("proj2").mean_layer == -1);  // gap3 reads a dense conv
  CHECK(st("gap3").mean_conv == -1);
  CHECK(st("stem").mean_layer == -1);
  REQUIRE(d.mean_buf > 0);
  CHECK(plan.buf_floats[static_cast<size_t>(d.mean_buf)] == 0);
  CHECK(lay.nhwc[static_cast<size_t>(d.mean_buf)] == 0);  // FP32
  const int dw_at = net.find("dw");
  CHECK(life[static_cast<size_t>(d.mean_buf)].first == dw_at);
  CHECK(life[static_cast<size_t>(d.mean_buf)].last == dw_at);
  CHECK(life[static_cast<size_t>(st("gap").out)].first == dw_at);  // not the pool's own step
}

TEST_CASE("plan: which pools are a whole-plane mean") {
  Network net = test::parse_layers(R"(  - {name: c0, type: conv, filters: 4, kernel: 1}
  - {name: c, type: conv, filters: 8, kernel: 3, pad: 1, groups: 2}
  - {name: g, type: avgpool, global: true, inputs: c}
  - {name: a, type: avgpool, output: 1, inputs: c}
  - {name: w, type: avgpool, size: 8, inputs: c}
  - {name: p, type: avgpool, size: 8, pad: 1, inputs: c}
  - {name: m, type: maxpool, global: true, inputs: c}
  - {name: a2, type: avgpool, output: 2, inputs: c}
  - {name: g2, type: avgpool, global: true, inputs: a2}
  - {name: cat, type: concat, inputs: [g, a, w, p, m, g2]}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 4}
)");
  auto is = [&](const char* n) { return is_whole_plane_mean(*net.layers[static_cast<size_t>(net.find(n))]); };
  CHECK(is("g"));
  CHECK(is("a"));
  CHECK(is("w"));        // a window over the whole 8x8 plane, no padding
  CHECK_FALSE(is("p"));  // padded: its divisor counts the padding
  CHECK_FALSE(is("m"));
  CHECK_FALSE(is("a2"));
  // A grouped conv that is not depthwise: its pools run as passes.
  const Plan plan = make_plan(net);
  CHECK(plan.steps[1].mean_layer == -1);

  // A depthwise conv whose output a pool reads: the kernel may compute it, unless a residual add
  // runs in the conv's epilogue (a pass after the kernel: its sums would miss the add).
  Network res = test::parse_layers(R"(  - {name: c0, type: conv, filters: 8, kernel: 1}
  - {name: dw, type: conv, filters: 8, kernel: 3, pad: 1, groups: 8}
  - {name: sum, type: add, inputs: [dw, c0]}
  - {name: g, type: avgpool, global: true}
  - {name: dw2, type: conv, filters: 8, kernel: 3, pad: 1, groups: 8, inputs: sum}
  - {name: g2, type: avgpool, global: true}
  - {name: cat, type: concat, inputs: [g, g2]}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 4}
)");
  const Plan rp = make_plan(res);
  const Step& dw = rp.steps[static_cast<size_t>(res.find("dw"))];
  REQUIRE(dw.residual_layer == res.find("sum"));
  CHECK(dw.mean_layer == -1);
  CHECK(rp.steps[static_cast<size_t>(res.find("g"))].mean_conv == -1);
  CHECK(rp.steps[static_cast<size_t>(res.find("dw2"))].mean_layer == res.find("g2"));
}

TEST_CASE("plan: a squeeze-and-excitation pool on a 1x1 map aliases its input, with no pass and no mean") {
  // A stride-8 depthwise conv leaves a 1x1 map (EfficientNet's last stages at 32x32 input).
  Network net = test::parse_layers(R"(  - {name: c0, type: conv, filters: 8, kernel: 1}
  - {name: dw, type: conv, filters: 8, kernel: 3, pad: 1, stride: 8, groups: 8}
  - {name: g, type: avgpool, global: true}
  - {name: fc1, type: conv, filters: 2, kernel: 1}
  - {name: fc2, type: conv, filters: 8, kernel: 1}
  - {name: s, type: sigmoid}
  - {name: m, type: mul, inputs: [dw, s]}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 4}
)");
  const Plan plan = make_plan(net);
  const Step& dw = plan.steps[static_cast<size_t>(net.find("dw"))];
  const Step& g = plan.steps[static_cast<size_t>(net.find("g"))];
  REQUIRE(dw.out_shape == Shape{8, 1, 1});
  CHECK(g.op == Op::kIdentity);
  CHECK(g.out == dw.out);  // fc1 reads the conv's output itself
  CHECK(plan.steps[static_cast<size_t>(net.find("fc1"))].ins == std::vector<int>{dw.out});
  CHECK(dw.mean_layer == -1);
  // In channels last, the alias is no layout change.
  const NhwcLayout lay = make_nhwc_layout(net, plan);
  REQUIRE(lay.ok);
  CHECK(lay.nhwc[static_cast<size_t>(g.out)]);
}

TEST_CASE("gemm: runs 1x1 convs of stride 1, unpadded, groups 1, channels last only") {
  ConvParams p;
  p.filters = 16, p.kernel_h = p.kernel_w = 1, p.in_c = 32, p.in_h = p.in_w = 8, p.out_h = p.out_w = 8;
  CHECK(gemm_cannot_run(p, true).empty());
  CHECK(conv_cannot_run(p, ConvAlgo::kGemm, 64, Precision::kBf16, true).empty());
  CHECK(gemm_cannot_run(p, false).find("channels last") != std::string::npos);
  ConvParams q = p;
  q.kernel_h = q.kernel_w = 3;
  CHECK(gemm_cannot_run(q, true).find("1x1 windows only") != std::string::npos);
  q = p, q.stride_w = 2;
  CHECK(gemm_cannot_run(q, true).find("stride 1 only") != std::string::npos);
  q = p, q.pad_h = 1;
  CHECK(gemm_cannot_run(q, true).find("unpadded") != std::string::npos);
  q = p, q.dilation_h = 2;
  CHECK(gemm_cannot_run(q, true).find("undilated") != std::string::npos);
  q = p, q.groups = 2;
  CHECK(gemm_cannot_run(q, true).find("groups 1 only") != std::string::npos);
  CHECK(conv_algo_name(ConvAlgo::kGemm) == std::string("gemm"));
  CHECK(parse_conv_algo("gemm") == ConvAlgo::kGemm);
}

TEST_CASE("gpu: the gemm convolution, with a squeeze-and-excitation mul folded in, vs reference" *
          doctest::skip(!gpu_present())) {
  Network net = se_net("gemm");
  auto gpu = make_gpu_executor(net);
  auto cpu = make_cpu_executor(net);
  Dataset data = test::gpu_random_data(net.input, 37, 10, 5);
  for (Precision prec : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16}) {
    INFO(std::string(precision_name(prec)));
    RunOptions o;
    o.batch = 37;
    o.block = 16;  // blocks of 16 and a last one of 5: two matmul plans a conv
    o.layout = Layout::kNhwc;
    o.precision = prec;
    const RunResult r = gpu->run(data, o);
    const std::string stored = std::string(prec == Precision::kFp16   ? "fp16"
                                           : prec == Precision::kBf16 ? "bf16"
                                                                      : "fp32") +
                               " NHWC";
    const std::string tag = prec == Precision::kFp32 ? "" : std::string(" [") + precision_name(prec) + "]";
    const std::map<std::string, std::string> want = {
        {"project",
         "gemm(cuBLASLt, per-image filters with scale's scale folded in, bias+add+relu epilogue, " + stored +
             ")" + tag},
        {"scale", "folded into project's per-image filters"},
        {"expand", "gemm(cuBLASLt, bias epilogue, " + stored + ", silu pass)" + tag},
        {"c2", "gemm(cuBLASLt, bias+relu epilogue, " + stored + ")" + tag},
        {"proj2", "gemm(cuBLASLt, bias epilogue, " + stored + ")" + tag},
        {"sc2", ""}};  // runs: its conv reads its output
    size_t seen = 0;
    for (const LayerTime& t : r.layers) {
      INFO(t.name << ": " << t.algo);
      if (const auto it = want.find(t.name); it != want.end()) {
        ++seen;
        CHECK(t.algo == it->second);
      }
    }
    CHECK(seen == want.size());
    const Validation v = validate(*gpu, *cpu, net, data, 37, o);
    for (const LayerCheck& c : v.layers) {
      INFO(c.name << ": " << c.max_rel << " (fused into '" << c.fused_into << "')");
      CHECK(c.pass);
      if (c.name == "scale") CHECK(c.fused_into == "project");
      if (c.name == "project") CHECK(c.fused_into == "ar");  // its buffer holds the add's ReLU
      if (c.name == "sc2" || c.name == "proj2") CHECK(c.fused_into.empty());
    }
    CHECK(v.pass);
    CHECK(v.prediction_mismatches == 0);
  }
}

TEST_CASE("gpu: auto times the gemm convolution (with its fold) against the others plus the mul's pass" *
          doctest::skip(!gpu_present())) {
  Network net = se_net("");
  auto gpu = make_gpu_executor(net);
  auto cpu = make_cpu_executor(net);
  Dataset data = test::gpu_random_data(net.input, 64, 10, 9);
  for (Precision prec : {Precision::kFp32, Precision::kBf16}) {
    INFO(std::string(precision_name(prec)));
    RunOptions o;
    o.batch = 64;
    o.layout = Layout::kNhwc;
    o.precision = prec;
    const RunResult r = gpu->run(data, o);
    bool timed = false;
    REQUIRE(r.gpu.has_value());
    for (const ConvTuning& t : r.gpu->tuning)
      if (t.layer == "project")
        for (const ConvTuning::Candidate& c : t.candidates)
          if (c.algo == std::string("gemm")) timed = c.outcome == ConvTuning::Candidate::Outcome::kTimed;
    CHECK(timed);
    std::string project, scale;
    for (const LayerTime& t : r.layers) {
      if (t.name == "project") project = t.algo;
      if (t.name == "scale") scale = t.algo;
    }
    INFO(project);
    // Whichever auto picked, the mul is folded exactly when the gemm convolution runs.
    CHECK((project.rfind("gemm(", 0) == 0) == (scale == "folded into project's per-image filters"));
    CHECK(validate(*gpu, *cpu, net, data, 64, o).pass);
  }
  // The gemm convolution cannot run NCHW, nor a 3x3 conv: one-line errors naming the layer.
  RunOptions o;
  o.batch = 8;
  o.conv_algo = ConvAlgo::kGemm;
  CHECK_THROWS_WITH_AS(gpu->run(data, o),
                       doctest::Contains("layer 'stem': the gemm convolution cannot run it"), Error);
  Network pinned = se_net("gemm");
  auto nchw = make_gpu_executor(pinned);
  o.conv_algo = ConvAlgo::kAuto;
  o.layout = Layout::kNchw;
  CHECK_THROWS_WITH_AS(nchw->run(data, o), doctest::Contains("channels last"), Error);
}

#endif  // CNNRUN_HAVE_GPU
