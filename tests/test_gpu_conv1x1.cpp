// The conv1x1 kernel (engine/gpu/conv2d_1x1.h): 1x1 convs of few channels on tensor cores in
// channels-last storage (16-bit, or FP32 on TF32 / 3xTF32 products), the bias, a residual and any
// activation in its epilogue. What it
// refuses runs without a GPU; the networks run against the CPU reference on one ("gpu: ..."
// cases).
#ifdef CNNRUN_HAVE_GPU
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "engine/gpu/conv2d_1x1.h"
#include "engine/gpu/conv_selector.h"
#include "engine/gpu_api.h"
#include "engine/network.h"
#include "engine/validate.h"
#include "reference/cpu_executor.h"
#include "tests/test_util.h"

using namespace cnnrun;
using namespace cnnrun::gpu;
using test::gpu_present;

TEST_CASE(
    "conv1x1: runs 1x1 convs of stride 1 channels last at every precision, channels and filters in eights") {
  ConvParams p;
  p.filters = 96, p.kernel_h = p.kernel_w = 1, p.in_c = 16, p.in_h = p.in_w = 8, p.out_h = p.out_w = 8;
  for (Precision prec : {Precision::kFp16, Precision::kBf16, Precision::kTf32, Precision::kFp32}) {
    CHECK(conv1x1_cannot_run(p, prec, true).empty());
    CHECK(conv_cannot_run(p, ConvAlgo::kConv1x1, 64, prec, true).empty());
  }
  // FP32 storage stages twice the bytes: 16 -> 96 takes 32 + 16 + 2 x 8 values' pitch a row.
  CHECK(conv1x1_smem(p, Precision::kFp32) > conv1x1_smem(p, Precision::kFp16));
  CHECK(conv1x1_smem(p, Precision::kTf32) == conv1x1_smem(p, Precision::kFp32));
  CHECK(conv1x1_cannot_run(p, Precision::kFp16, false).find("channels last") != std::string::npos);
  ConvParams q = p;
  q.kernel_h = q.kernel_w = 3;
  CHECK(conv1x1_cannot_run(q, Precision::kFp16, true).find("1x1 windows only") != std::string::npos);
  q = p, q.stride_h = 2;
  CHECK(conv1x1_cannot_run(q, Precision::kFp16, true).find("stride 1 only") != std::string::npos);
  q = p, q.pad_w = 1;
  CHECK(conv1x1_cannot_run(q, Precision::kFp16, true).find("unpadded") != std::string::npos);
  q = p, q.dilation_w = 2;
  CHECK(conv1x1_cannot_run(q, Precision::kFp16, true).find("undilated") != std::string::npos);
  q = p, q.groups = 2;
  CHECK(conv1x1_cannot_run(q, Precision::kFp16, true).find("groups 1 only") != std::string::npos);
  q = p, q.in_c = 12;
  CHECK(conv1x1_cannot_run(q, Precision::kFp16, true).find("multiples of 8 (here 12 and 96)") !=
        std::string::npos);
  q = p, q.filters = 100;
  CHECK(conv1x1_cannot_run(q, Precision::kFp16, true).find("multiples of 8") != std::string::npos);
  // The filters stay in shared memory: 1024 filters of 64 channels do not fit, 512 do in 16-bit
  // storage and not in FP32 (4 x 512 x 68 bytes of filters), 256 do there.
  q = p, q.in_c = 64, q.filters = 512;
  CHECK(conv1x1_cannot_run(q, Precision::kFp16, true).empty());
  CHECK(conv1x1_smem(q, Precision::kFp16) <= kConv1x1MaxSmem);
  CHECK(conv1x1_cannot_run(q, Precision::kTf32, true).find("bytes of shared memory at tf32") !=
        std::string::npos);
  q.filters = 256;
  CHECK(conv1x1_cannot_run(q, Precision::kFp32, true).empty());
  q.filters = 1024;
  CHECK(conv1x1_smem(q, Precision::kFp16) > kConv1x1MaxSmem);
  CHECK(conv1x1_cannot_run(q, Precision::kFp16, true).find("bytes of shared memory at fp16") !=
        std::string::npos);
  CHECK(conv_algo_name(ConvAlgo::kConv1x1) == std::string("conv1x1"));
  CHECK(parse_conv_algo("conv1x1") == ConvAlgo::kConv1x1);
}

namespace {

// An MBConv-like chain of 1x1 convs: K 16 -> 96 filters (a 64-filter chunk and a 32 one), 96 -> 24
// (three n8 tiles: an odd count), 24 -> 40 (K padded to 32; 40 = 16 + 16 + 8 filters), 40 -> 24
// with a residual add and a hardswish after it (in its epilogue), then two 1x1 convs read only
// by a concat (written in place at channels 0 and 16 of 40) and one at channel 4 of 12 (not a
// 16-byte piece: the concat copies it). 9x7 maps: 63 pixels an image, never a whole tile of 128.
// `pin` the 1x1 convs' algorithm.
std::string chain_netdef(const std::string& pin) {
  const std::string a = ", algo: " + pin;
  return R"(
name: chain
input: {channels: 3, height: 9, width: 7}
classes: 10
layers:
  - {name: stem, type: conv, filters: 16, kernel: 3, pad: 1}
  - {name: s0, type: relu}
  - {name: e1, type: conv, filters: 96, kernel: 1)" +
         a + R"(}
  - {name: a1, type: silu}
  - {name: p1, type: conv, filters: 24, kernel: 1)" +
         a + R"(}
  - {name: e2, type: conv, filters: 40, kernel: 1)" +
         a + R"(}
  - {name: a2, type: relu6}
  - {name: p2, type: conv, filters: 24, kernel: 1, bias: false)" +
         a + R"(}
  - {name: add, type: add, inputs: [p2, p1]}
  - {name: hs, type: hardswish}
  - {name: b1, type: conv, filters: 16, kernel: 1)" +
         a + R"(}
  - {name: b2, type: conv, filters: 8, kernel: 1, inputs: hs)" +
         a + R"(}
  - {name: b3, type: conv, filters: 16, kernel: 3, pad: 1, inputs: hs}
  - {name: cat, type: concat, inputs: [b1, b2, b3]}
  - {name: c3, type: conv, filters: 4, kernel: 3, pad: 1, inputs: hs}
  - {name: c1, type: conv, filters: 8, kernel: 1, inputs: hs)" +
         a + R"(}
  - {name: cat2, type: concat, inputs: [c3, c1]}
  - {name: g1, type: avgpool, global: true, inputs: cat}
  - {name: g2, type: avgpool, global: true, inputs: cat2}
  - {name: gg, type: concat, inputs: [g1, g2]}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 10}
)";
}

}  // namespace

TEST_CASE("gpu: the conv1x1 kernel, with its bias, residual and activations, vs reference" *
          doctest::skip(!gpu_present())) {
  Network net = parse_netdef_string(chain_netdef("conv1x1"), "chain.yaml");
  test::random_weights(net, 41);
  auto gpu = make_gpu_executor(net);
  auto cpu = make_cpu_executor(net);
  const int64_t n = 37;  // blocks of 16, 16 and 5: 1008, 1008 and 315 pixels
  Dataset data = test::gpu_random_data(net.input, n, 10, 7);
  for (Precision prec : {Precision::kFp16, Precision::kBf16, Precision::kTf32, Precision::kFp32}) {
    INFO(std::string(precision_name(prec)));
    RunOptions o;
    o.batch = n;
    o.block = 16;
    o.layout = Layout::kNhwc;
    o.precision = prec;
    const RunResult r = gpu->run(data, o);
    const std::string stored = std::string(prec == Precision::kFp16   ? "fp16"
                                           : prec == Precision::kBf16 ? "bf16"
                                                                      : "fp32") +
                               " NHWC)";
    const std::string k = std::string("conv1x1(") +
                          (prec == Precision::kFp32   ? "3xTF32 "
                           : prec == Precision::kTf32 ? "TF32 "
                                                      : "") +
                          "tensor cores, ";
    const std::map<std::string, std::string> want = {
        {"e1", k + "bias+silu epilogue, " + stored},
        {"p1", k + "bias epilogue, " + stored},
        {"e2", k + "bias+relu6 epilogue, " + stored},
        {"p2", k + "bias+add+hardswish epilogue, " + stored},
        {"b1", k + "bias epilogue, " + stored + ", written into cat's channels 0-15"},
        {"b2", k + "bias epilogue, " + stored + ", written into cat's channels 16-23"},
        {"c1", k + "bias epilogue, " + stored}};  // at channel 4: copied
    size_t seen = 0;
    for (const LayerTime& t : r.layers) {
      INFO(t.name << ": " << t.algo);
      if (const auto it = want.find(t.name); it != want.end()) {
        ++seen;
        CHECK(t.algo == it->second);
      }
      if (t.name == "cat") CHECK(t.algo.find("written in place by their convs") != std::string::npos);
    }
    CHECK(seen == want.size());
    const Validation v = validate(*gpu, *cpu, net, data, n, o);
    for (const LayerCheck& c : v.layers) {
      INFO(c.name << ": " << c.max_rel << " (fused into '" << c.fused_into << "')");
      CHECK(c.pass);
    }
    CHECK(v.pass);
    CHECK(v.prediction_mismatches == 0);
  }
  // A 3x3 conv forced onto it: a one-line error naming the layer.
  RunOptions o;
  o.batch = 8;
  o.layout = Layout::kNhwc;
  o.precision = Precision::kFp16;
  o.conv_algo = ConvAlgo::kConv1x1;
  CHECK_THROWS_WITH_AS(gpu->run(data, o),
                       doctest::Contains("layer 'stem': the conv1x1 convolution cannot run it"), Error);
}

TEST_CASE("gpu: auto times the conv1x1 kernel on 1x1 convs and its choice validates" *
          doctest::skip(!gpu_present())) {
  std::string text = chain_netdef("auto");
  Network net = parse_netdef_string(text, "chain.yaml");
  test::random_weights(net, 43);
  auto gpu = make_gpu_executor(net);
  auto cpu = make_cpu_executor(net);
  const int64_t n = 64;
  Dataset data = test::gpu_random_data(net.input, n, 10, 11);
  for (Precision prec : {Precision::kBf16, Precision::kTf32}) {
    INFO(std::string(precision_name(prec)));
    RunOptions o;
    o.batch = n;
    o.layout = Layout::kNhwc;
    o.precision = prec;
    const RunResult r = gpu->run(data, o);
    REQUIRE(r.gpu.has_value());
    int timed = 0;
    for (const ConvTuning& t : r.gpu->tuning)
      for (const ConvTuning::Candidate& c : t.candidates)
        if (c.algo == std::string("conv1x1") && c.outcome == ConvTuning::Candidate::Outcome::kTimed) {
          INFO(t.layer);
          CHECK(std::string("e1 p1 e2 p2 b1 b2 c1").find(t.layer) != std::string::npos);
          ++timed;
        }
    CHECK(timed == 7);  // every 1x1 conv, none of the 3x3 ones
    CHECK(validate(*gpu, *cpu, net, data, n, o).pass);
  }
}

#endif  // CNNRUN_HAVE_GPU
