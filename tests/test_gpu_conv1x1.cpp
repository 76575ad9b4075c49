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
#include "engine/gpu/nhwc.h"
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
  // Taking the max-pool before it, the kernel stages one A buffer, not two: SqueezeNet's
  // features.9.squeeze (256 -> 48) fits in 16-bit storage only so, its features.6.squeeze
  // (128 -> 32) in FP32 storage.
  q = p, q.in_c = 256, q.filters = 48;
  CHECK(conv1x1_smem(q, Precision::kFp16, true) < conv1x1_smem(q, Precision::kFp16));
  CHECK(conv1x1_smem(q, Precision::kFp16, true) + size_t(2) * 128 * 264 == conv1x1_smem(q, Precision::kFp16));
  CHECK(conv1x1_cannot_run(q, Precision::kFp16, true).find("bytes of shared memory at fp16") !=
        std::string::npos);
  CHECK(conv1x1_cannot_run(q, Precision::kFp16, true, true).empty());
  CHECK_FALSE(conv_cannot_run(q, ConvAlgo::kConv1x1, 64, Precision::kBf16, true).empty());
  CHECK(conv_cannot_run(q, ConvAlgo::kConv1x1, 64, Precision::kBf16, true, true).empty());
  q.in_c = 128, q.filters = 32;
  CHECK_FALSE(conv1x1_cannot_run(q, Precision::kFp32, true).empty());
  CHECK(conv1x1_cannot_run(q, Precision::kFp32, true, true).empty());
  CHECK(conv1x1_cannot_run(q, Precision::kFp32, false, true).find("channels last") != std::string::npos);
  CHECK(conv_algo_name(ConvAlgo::kConv1x1) == std::string("conv1x1"));
  CHECK(parse_conv_algo("conv1x1") == ConvAlgo::kConv1x1);
}

namespace {

// The reports' words: the storage that ends an algo string, and the kernel's opening words.
std::string stored_words(Precision prec) {
  return std::string(prec == Precision::kFp16   ? "fp16"
                     : prec == Precision::kBf16 ? "bf16"
                                                : "fp32") +
         " NHWC)";
}
std::string kernel_words(Precision prec) {
  return std::string("conv1x1(") +
         (prec == Precision::kFp32   ? "3xTF32 "
          : prec == Precision::kTf32 ? "TF32 "
                                     : "") +
         "tensor cores, ";
}

// n images channels last at prec in blocks of 16 (the last one partial where 16 does not divide n).
RunOptions blocks_of_16(int64_t n, Precision prec) {
  RunOptions o;
  o.batch = n;
  o.block = 16;
  o.layout = Layout::kNhwc;
  o.precision = prec;
  return o;
}

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
    RunOptions o = blocks_of_16(n, prec);
    const RunResult r = gpu->run(data, o);
    const std::string stored = stored_words(prec), k = kernel_words(prec);
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

TEST_CASE("conv1x1: takes a max-pool of square 2x2 or 3x3 windows giving its input, without a residual") {
  ConvParams p;
  p.filters = 16, p.kernel_h = p.kernel_w = 1, p.in_c = 64, p.in_h = p.in_w = 55, p.out_h = p.out_w = 55;
  Pool2dArgs a;  // SqueezeNet's features.2: 3x3/2 ceil_mode, 111 -> 55
  a.channels = 64, a.in_h = a.in_w = 111, a.out_h = a.out_w = 55, a.kernel_h = a.kernel_w = 3;
  a.stride_h = a.stride_w = 2;
  CHECK(conv1x1_pool_cannot_run(p, a, false).empty());
  CHECK(conv1x1_pool_cannot_run(p, a, true).find("without a residual") != std::string::npos);
  Pool2dArgs b = a;
  b.is_max = false;
  CHECK(conv1x1_pool_cannot_run(p, b, false).find("max-pool of fixed windows") != std::string::npos);
  b = a, b.adaptive = true;
  CHECK(conv1x1_pool_cannot_run(p, b, false).find("max-pool of fixed windows") != std::string::npos);
  b = a, b.kernel_h = b.kernel_w = 5;
  CHECK(conv1x1_pool_cannot_run(p, b, false).find("2x2 or 3x3 windows only (here 5x5)") != std::string::npos);
  b = a, b.kernel_w = 2;
  CHECK(conv1x1_pool_cannot_run(p, b, false).find("(here 3x2)") != std::string::npos);
  b = a, b.channels = 32;
  CHECK(conv1x1_pool_cannot_run(p, b, false).find("not the conv's input") != std::string::npos);
  b = a, b.out_w = 56;
  CHECK(conv1x1_pool_cannot_run(p, b, false).find("not the conv's input") != std::string::npos);
  b = a, b.kernel_h = b.kernel_w = 2, b.pad_h = 1, b.pad_w = 1;
  CHECK(conv1x1_pool_cannot_run(p, b, false).empty());
  // Its taps are clamped onto the input: a window wholly in the padding would take a neighbour's.
  b = a, b.pad_h = 2;
  CHECK(conv1x1_pool_cannot_run(p, b, false).find("a window outside its input") != std::string::npos);
  b = a, b.in_w = 108;  // the last window (columns 108-110) starts past the input
  CHECK(conv1x1_pool_cannot_run(p, b, false).find("a window outside its input") != std::string::npos);
}

namespace {

// Max-pools that only a 1x1 conv reads: SqueezeNet's 3x3/2 ceil_mode pool before a squeeze (p1 ->
// s1: K 16 -> 8 filters), GoogLeNet's branch4 3x3/1 padded pool before a 1x1 conv written into a
// concat (p2 -> b4, at channel 16 of 32), a 2x2/2 pool of a concat before a 1x1 conv of 24 filters
// with a hardswish (p3 -> c3, K 32). 23x19 inputs: odd planes, ceil_mode's last windows cut.
std::string prepool_netdef() {
  return R"(
name: prepool
input: {channels: 3, height: 23, width: 19}
classes: 10
layers:
  - {name: c1, type: conv, filters: 16, kernel: 3, pad: 1}
  - {name: r1, type: relu}
  - {name: p1, type: maxpool, size: 3, stride: 2, ceil_mode: true}
  - {name: s1, type: conv, filters: 8, kernel: 1, algo: conv1x1}
  - {name: s1r, type: relu}
  - {name: e1, type: conv, filters: 16, kernel: 1, algo: conv1x1}
  - {name: e1r, type: relu}
  - {name: e3, type: conv, filters: 16, kernel: 3, pad: 1, inputs: s1r}
  - {name: e3r, type: relu}
  - {name: cat, type: concat, inputs: [e1r, e3r]}
  - {name: b1, type: conv, filters: 16, kernel: 1, algo: conv1x1}
  - {name: p2, type: maxpool, size: 3, stride: 1, pad: 1, ceil_mode: true, inputs: cat}
  - {name: b4, type: conv, filters: 16, kernel: 1, algo: conv1x1}
  - {name: b4r, type: relu}
  - {name: cat2, type: concat, inputs: [b1, b4r]}
  - {name: p3, type: maxpool, size: 2}
  - {name: c3, type: conv, filters: 24, kernel: 1, algo: conv1x1}
  - {name: h3, type: hardswish}
  - {name: g, type: avgpool, global: true}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 10}
)";
}

}  // namespace

TEST_CASE("gpu: the conv1x1 kernel takes the max-pool before it: the separate pool's bits, no pool pass" *
          doctest::skip(!gpu_present())) {
  Network net = parse_netdef_string(prepool_netdef(), "prepool.yaml");
  test::random_weights(net, 47);
  auto gpu = make_gpu_executor(net);
  auto cpu = make_cpu_executor(net);
  const int64_t n = 37;  // blocks of 16, 16 and 5
  Dataset data = test::gpu_random_data(net.input, n, 10, 13);
  for (Precision prec : {Precision::kFp16, Precision::kBf16, Precision::kTf32, Precision::kFp32}) {
    INFO(std::string(precision_name(prec)));
    RunOptions o = blocks_of_16(n, prec);
    o.want_probs = true;
    const RunResult r = gpu->run(data, o);
    RunOptions apart_o = o;
    apart_o.tuning.fuse_prepool = false;
    const RunResult apart = gpu->run(data, apart_o);
    const std::string stored = stored_words(prec), k = kernel_words(prec);
    const std::map<std::string, std::string> want = {
        {"s1", k + "A the maxima of p1's windows, bias+relu epilogue, " + stored},
        {"p1", "fused into s1"},
        {"b4", k + "A the maxima of p2's windows, bias+relu epilogue, " + stored +
                   ", written into cat2's channels 16-31"},
        {"p2", "fused into b4"},
        {"c3", k + "A the maxima of p3's windows, bias+hardswish epilogue, " + stored},
        {"p3", "fused into c3"},
        {"e1", k + "bias+relu epilogue, " + stored + ", written into cat's channels 0-15"}};
    const std::map<std::string, std::string> want_apart = {
        {"s1", k + "bias+relu epilogue, " + stored},
        {"p1", ""},
        {"b4", k + "bias+relu epilogue, " + stored + ", written into cat2's channels 16-31"},
        {"p2", ""},
        {"c3", k + "bias+hardswish epilogue, " + stored},
        {"p3", ""}};
    for (const auto& [run, w] : {std::make_pair(&r, &want), std::make_pair(&apart, &want_apart)}) {
      size_t seen = 0;
      for (const LayerTime& t : run->layers) {
        INFO(t.name << ": " << t.algo);
        if (const auto it = w->find(t.name); it != w->end()) {
          ++seen;
          CHECK(t.algo == it->second);
          // A pool taken by its conv launches nothing.
          if (t.name[0] == 'p' && !it->second.empty()) CHECK(t.seconds == 0);
        }
      }
      CHECK(seen == w->size());
    }
    // The maxima are the separate pool's, so every probability is the same bits.
    REQUIRE(r.probs.size() == apart.probs.size());
    REQUIRE(r.probs.size() == static_cast<size_t>(n) * 10);
    CHECK(std::equal(r.probs.begin(), r.probs.end(), apart.probs.begin()));
    const Validation v = validate(*gpu, *cpu, net, data, n, o);
    for (const LayerCheck& c : v.layers) {
      INFO(c.name << ": " << c.max_rel << " (fused into '" << c.fused_into << "')");
      CHECK(c.pass);
      if (c.name == "p1") CHECK(c.fused_into == "s1");
      if (c.name == "p3") CHECK(c.fused_into == "c3");
    }
    CHECK(v.pass);
    CHECK(v.prediction_mismatches == 0);
  }
}

TEST_CASE(
    "gpu: a conv1x1 that fits only with the max-pool's one A buffer runs with the pool, else is refused" *
    doctest::skip(!gpu_present())) {
  // SqueezeNet's features.9.squeeze in 16-bit storage (256 -> 48) and its features.6.squeeze in
  // FP32 storage (128 -> 32): conv1x1's two A buffers do not fit, the pooled form's one does.
  for (Precision prec : {Precision::kFp16, Precision::kBf16, Precision::kTf32, Precision::kFp32}) {
    INFO(std::string(precision_name(prec)));
    const bool wide = storage_bytes(storage_of(prec)) == 2;
    const std::string k_in = wide ? "256" : "128", filters = wide ? "48" : "32";
    Network net = parse_netdef_string(R"(
name: wide_prepool
input: {channels: 3, height: 13, width: 11}
classes: 10
layers:
  - {name: c1, type: conv, filters: )" + k_in +
                                          R"(, kernel: 3, pad: 1}
  - {name: r1, type: relu}
  - {name: p, type: maxpool, size: 3, stride: 2, ceil_mode: true}
  - {name: s, type: conv, filters: )" + filters +
                                          R"(, kernel: 1, algo: conv1x1}
  - {name: sr, type: relu}
  - {name: g, type: avgpool, global: true}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 10}
)",
                                      "wide_prepool.yaml");
    test::random_weights(net, 59);
    auto gpu = make_gpu_executor(net);
    auto cpu = make_cpu_executor(net);
    const int64_t n = 21;  // blocks of 16 and 5
    Dataset data = test::gpu_random_data(net.input, n, 10, 19);
    RunOptions o = blocks_of_16(n, prec);
    ConvParams sp;
    sp.filters = std::stoi(filters), sp.kernel_h = sp.kernel_w = 1, sp.in_c = std::stoi(k_in);
    sp.in_h = sp.out_h = 6, sp.in_w = sp.out_w = 5;
    REQUIRE_FALSE(conv1x1_cannot_run(sp, prec, true).empty());
    REQUIRE(conv1x1_cannot_run(sp, prec, true, true).empty());
    const RunResult r = gpu->run(data, o);
    std::map<std::string, std::string> algo;
    for (const LayerTime& t : r.layers) algo[t.name] = t.algo;
    CHECK(algo["s"] ==
          kernel_words(prec) + "A the maxima of p's windows, bias+relu epilogue, " + stored_words(prec));
    CHECK(algo["p"] == "fused into s");
    const Validation v = validate(*gpu, *cpu, net, data, n, o);
    for (const LayerCheck& c : v.layers) {
      INFO(c.name << ": " << c.max_rel);
      CHECK(c.pass);
    }
    CHECK(v.pass);
    // Without the pool the pinned kernel cannot hold the conv, and says so.
    RunOptions apart = o;
    apart.tuning.fuse_prepool = false;
    try {
      gpu->run(data, apart);
      FAIL("a conv1x1 too wide for two A buffers ran without its pool");
    } catch (const Error& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(what.find("layer 's': the conv1x1 convolution cannot run it") != std::string::npos);
      CHECK(what.find("bytes of shared memory at " + std::string(precision_name(prec))) != std::string::npos);
    }
  }
}

TEST_CASE(
    "gpu: auto times the conv1x1 kernel with the max-pool before it against the pool and the libraries" *
    doctest::skip(!gpu_present())) {
  std::string text = prepool_netdef();
  for (size_t at = text.find(", algo: conv1x1"); at != std::string::npos; at = text.find(", algo: conv1x1"))
    text.erase(at, std::string(", algo: conv1x1").size());
  Network net = parse_netdef_string(text, "prepool.yaml");
  test::random_weights(net, 53);
  auto gpu = make_gpu_executor(net);
  auto cpu = make_cpu_executor(net);
  const int64_t n = 64;
  Dataset data = test::gpu_random_data(net.input, n, 10, 17);
  RunOptions o;
  o.batch = n;
  o.layout = Layout::kNhwc;
  o.precision = Precision::kFp16;
  const RunResult r = gpu->run(data, o);
  REQUIRE(r.gpu.has_value());
  std::map<std::string, std::string> algo;
  for (const LayerTime& t : r.layers) algo[t.name] = t.algo;
  int timed = 0;
  for (const ConvTuning& t : r.gpu->tuning) {
    if (t.layer != "s1" && t.layer != "b4" && t.layer != "c3") continue;
    INFO(t.layer << ": " << algo[t.layer]);
    bool conv1x1 = false, other = false;
    for (const ConvTuning::Candidate& c : t.candidates)
      if (c.outcome == ConvTuning::Candidate::Outcome::kTimed)
        (c.algo == std::string("conv1x1") ? conv1x1 : other) = true;
    CHECK(conv1x1);
    CHECK(other);
    ++timed;
    // Whichever won, the pool's report agrees with its conv's.
    const std::string pool = t.layer == "s1" ? "p1" : t.layer == "b4" ? "p2" : "p3";
    const bool taken = algo[t.layer].find("A the maxima of " + pool + "'s windows") != std::string::npos;
    CHECK(taken == (algo[t.layer].rfind("conv1x1(", 0) == 0));
    CHECK(algo[pool] == (taken ? "fused into " + t.layer : std::string()));
  }
  CHECK(timed == 3);
  CHECK(validate(*gpu, *cpu, net, data, n, o).pass);
}

#endif  // CNNRUN_HAVE_GPU
