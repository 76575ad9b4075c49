// The cudnn-3xtf32 convolution (engine/gpu/conv2d_cudnn_3xtf32.h): FP32 operands split into TF32
// parts and stacked along the reduction, run by cuDNN's TF32 tensor cores. What it refuses and
// the planner's split buffers run without a GPU; the split pass and the networks against the CPU
// reference need one ("gpu: ..." cases).
#ifdef CNNRUN_HAVE_GPU
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/gpu/conv2d_cudnn_3xtf32.h"
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

// Dense convs of every shape the stacked conv sees: 3 input channels (the split pass's
// one-value path), 3x3, strided, dilated and 1x1 windows, a residual add with a ReLU after it, a
// SiLU (not a cuDNN-fused activation), and enough channels (288 products a sum and more) that TF32
// alone would be well off FP32. A depthwise conv (groups) is left to the others.
std::string split_netdef(const std::string& pin) {
  const std::string a = pin.empty() ? "" : ", algo: " + pin;
  return R"(
name: split
input: {channels: 3, height: 16, width: 16}
classes: 10
layers:
  - {name: c1, type: conv, filters: 32, kernel: 3, pad: 1)" +
         a + R"(}
  - {name: r1, type: relu}
  - {name: c2, type: conv, filters: 64, kernel: 3, pad: 1)" +
         a + R"(}
  - {name: r2, type: relu}
  - {name: c3, type: conv, filters: 64, kernel: 3, pad: 1, bias: false)" +
         a + R"(}
  - {name: bn3, type: batchnorm}
  - {name: add, type: add, inputs: [bn3, r2]}
  - {name: ar, type: relu}
  - {name: c4, type: conv, filters: 48, kernel: 3, stride: 2, pad: 2, dilation: 2)" +
         a + R"(}
  - {name: s4, type: silu}
  - {name: dw, type: conv, filters: 48, kernel: 3, pad: 1, groups: 48}
  - {name: c5, type: conv, filters: 40, kernel: 1)" +
         a + R"(}
  - {name: gap, type: avgpool, global: true}
  - {name: fc, type: fc, outputs: 10}
)";
}

Network split_net(const std::string& pin) {
  Network net = parse_netdef_string(split_netdef(pin), "split.yaml");
  test::random_weights(net, 23);
  fold_batchnorms(net, "split.yaml");
  return net;
}

// fp32 channels last, where cudnn-3xtf32 runs, for `batch` images.
RunOptions fp32_nhwc(int64_t batch) {
  RunOptions o;
  o.batch = batch;
  o.layout = Layout::kNhwc;
  o.precision = Precision::kFp32;
  return o;
}

bool tf32_exact(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return (u & 0x1fffu) == 0;
}

}  // namespace

TEST_CASE("cudnn-3xtf32: runs ungrouped convs at fp32 channels last only") {
  ConvParams p;
  p.filters = 16, p.kernel_h = p.kernel_w = 3, p.pad_h = p.pad_w = 1, p.in_c = 8, p.in_h = p.in_w = 8;
  p.out_h = p.out_w = 8;
  CHECK(cudnn_3xtf32_cannot_run(p, Precision::kFp32, true).empty());
  CHECK(conv_cannot_run(p, ConvAlgo::kCudnn3xTf32, 64, Precision::kFp32, true).empty());
  CHECK(cudnn_3xtf32_cannot_run(p, Precision::kTf32, true).find("--precision fp32") != std::string::npos);
  CHECK(cudnn_3xtf32_cannot_run(p, Precision::kFp16, true).find("--precision fp32") != std::string::npos);
  CHECK(cudnn_3xtf32_cannot_run(p, Precision::kFp32, false).find("channels last") != std::string::npos);
  ConvParams q = p;
  q.groups = 8, q.filters = 8;
  CHECK(cudnn_3xtf32_cannot_run(q, Precision::kFp32, true).find("groups 1") != std::string::npos);
  CHECK(Cudnn3xTf32Conv::stacked(p).in_c == 24);
  CHECK(Cudnn3xTf32Conv::stacked(p).filters == 16);
  CHECK(conv_algo_name(ConvAlgo::kCudnn3xTf32) == std::string("cudnn-3xtf32"));
  CHECK(parse_conv_algo("cudnn-3xtf32") == ConvAlgo::kCudnn3xTf32);
}

TEST_CASE("cudnn-3xtf32: the planner gives each ungrouped conv a split input alive at its step alone") {
  Network net = parse_netdef_string(split_netdef(""), "split.yaml");
  net.layers[static_cast<size_t>(net.find("bn3"))]->folded = true;  // as fold_batchnorms does at load
  const Plan plan = make_plan(net);
  const std::vector<Lifetime> life = buffer_lifetimes(net, plan, nullptr);
  const NhwcLayout lay = make_nhwc_layout(net, plan);
  REQUIRE(lay.ok);
  int convs = 0;
  for (const Step& st : plan.steps) {
    if (st.op != Op::kConv) {
      CHECK(st.split_buf == -1);
      continue;
    }
    const std::string& name = net.layers[static_cast<size_t>(st.layer)]->name;
    INFO(name);
    if (name == "dw") {
      CHECK(st.split_buf == -1);
      continue;
    }
    ++convs;
    REQUIRE(st.split_buf > 0);
    CHECK(plan.buf_floats[static_cast<size_t>(st.split_buf)] ==
          3 * st.conv.in_c * st.conv.in_h * st.conv.in_w);
    CHECK(life[static_cast<size_t>(st.split_buf)].first == st.layer);
    CHECK(life[static_cast<size_t>(st.split_buf)].last == st.layer);
    CHECK(lay.nhwc[static_cast<size_t>(st.split_buf)] == 1);
    CHECK(st.split_buf != st.out);
  }
  CHECK(convs == 5);
}

TEST_CASE("gpu: the split pass writes exact TF32 parts in each operand's order" *
          doctest::skip(!gpu_present())) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t c : {3, 8}) {  // the one-value and the four-value paths
    INFO("channels " << c);
    const int64_t rows = 37;
    std::vector<float> v(static_cast<size_t>(rows * c));
    for (size_t i = 0; i < v.size(); ++i) v[i] = nd(rng) * std::ldexp(1.f, static_cast<int>(i % 40) - 20);
    v[1] = std::numeric_limits<float>::infinity();
    v[2] = 0.f;
    DevBuf in = upload(v.data(), v.size());
    for (bool filters : {false, true}) {
      INFO("filters " << filters);
      DevBuf out(v.size() * 3 * sizeof(float));
      launch_split_tf32(in.as<float>(), out.as<float>(), rows, c, filters, nullptr);
      std::vector<float> got(v.size() * 3);
      CUDA_CHECK(cudaMemcpy(got.data(), out.get(), got.size() * sizeof(float), cudaMemcpyDeviceToHost));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < c; ++k) {
          const float x = v[static_cast<size_t>(r * c + k)];
          const float* o = &got[static_cast<size_t>(r * 3 * c + k)];
          const float hi = filters ? o[c] : o[0], lo = filters ? o[0] : o[c];
          CHECK(o[2 * c] == hi);  // the third copy is the high part in both orders
          CHECK(tf32_exact(hi));
          CHECK(tf32_exact(lo));
          if (!std::isfinite(x)) {
            CHECK(hi == x);
            CHECK(lo == 0.f);
            continue;
          }
          // Round to nearest twice: hi within half a TF32 step of x, lo within half a step of the rest.
          CHECK(std::fabs(static_cast<double>(x) - hi) <= std::ldexp(std::fabs(static_cast<double>(x)), -11));
          CHECK(std::fabs(static_cast<double>(x) - hi - lo) <=
                std::ldexp(std::fabs(static_cast<double>(x)), -22));
        }
    }
  }
}

TEST_CASE("gpu: cudnn-3xtf32 vs the reference, at FP32's tolerance and far inside TF32's error" *
          doctest::skip(!gpu_present())) {
  Network net = split_net("cudnn-3xtf32");
  auto gpu = make_gpu_executor(net);
  auto cpu = make_cpu_executor(net);
  Dataset data = test::gpu_random_data(net.input, 37, 10, 3);
  RunOptions o = fp32_nhwc(37);
  o.block = 16;  // blocks of 16 and a last one of 5
  const RunResult r = gpu->run(data, o);
  int seen = 0;
  for (const LayerTime& t : r.layers) {
    INFO(t.name << ": " << t.algo);
    if (t.name.size() == 2 && t.name[0] == 'c') {
      ++seen;
      CHECK(t.algo.rfind("cudnn-3xtf32(cudnn", 0) == 0);
      CHECK(t.algo.find(", TF32 parts [x_hi, x_lo, x_hi] x [w_lo, w_hi, w_hi])") != std::string::npos);
    }
  }
  CHECK(seen == 5);
  const Validation v = validate(*gpu, *cpu, net, data, 37, o);
  CHECK(v.pass);
  CHECK(v.prediction_mismatches == 0);
  // The same network on TF32 alone: the split must recover most of the difference, else it did
  // nothing (a dropped or misplaced low part leaves TF32's error).
  Network plain = split_net("cudnn");
  auto gpu_tf32 = make_gpu_executor(plain);
  RunOptions t = o;
  t.precision = Precision::kTf32;
  const Validation vt = validate(*gpu_tf32, *cpu, plain, data, 37, t);
  for (const LayerCheck& c : v.layers) {
    INFO(c.name << ": " << c.max_rel);
    CHECK(c.pass);
  }
  // The largest error of a 3x3 conv (c2), a residual block's output (ar) and a 1x1 conv (c5).
  auto worst = [](const Validation& w) {
    double e = 0;
    for (const LayerCheck& c : w.layers)
      if (c.name == "c2" || c.name == "ar" || c.name == "c5") e = std::max(e, c.max_rel);
    return e;
  };
  const double split_err = worst(v), tf32_err = worst(vt);
  MESSAGE("largest error relative to the layer's scale: 3xTF32 " << split_err << ", TF32 alone " << tf32_err);
  CHECK(tf32_err > 0);
  CHECK(split_err * 20 < tf32_err);
  CHECK(split_err < 1e-5);
}

TEST_CASE("gpu: auto times cudnn-3xtf32 at fp32 channels last, and refuses it elsewhere" *
          doctest::skip(!gpu_present())) {
  Network net = split_net("");
  auto gpu = make_gpu_executor(net);
  auto cpu = make_cpu_executor(net);
  Dataset data = test::gpu_random_data(net.input, 48, 10, 8);
  const RunOptions o = fp32_nhwc(48);
  const RunResult r = gpu->run(data, o);
  REQUIRE(r.gpu.has_value());
  int timed = 0;
  for (const ConvTuning& t : r.gpu->tuning)
    for (const ConvTuning::Candidate& c : t.candidates)
      if (c.algo == std::string("cudnn-3xtf32")) {
        INFO(t.layer);
        CHECK((t.layer == "dw") == (c.outcome == ConvTuning::Candidate::Outcome::kNotApplicable));
        timed += c.outcome == ConvTuning::Candidate::Outcome::kTimed;
      }
  CHECK(timed == 5);
  CHECK(validate(*gpu, *cpu, net, data, 48, o).pass);
  // Pinned where it cannot run: at fp16, and NCHW: one-line errors naming the layer.
  Network pinned = split_net("cudnn-3xtf32");
  auto g2 = make_gpu_executor(pinned);
  RunOptions h = o;
  h.precision = Precision::kFp16;
  CHECK_THROWS_WITH_AS(g2->run(data, h),
                       doctest::Contains("layer 'c1': the cudnn-3xtf32 convolution cannot run it"), Error);
  RunOptions n = o;
  n.layout = Layout::kNchw;
  CHECK_THROWS_WITH_AS(g2->run(data, n), doctest::Contains("channels last"), Error);
}

#endif  // CNNRUN_HAVE_GPU
