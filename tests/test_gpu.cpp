// The GPU executor against the CPU reference: every convolution algorithm and every layer type
// on random shapes (strides 1 and 2, pads 0-2, kernels 1/3/5 and non-square, channel counts
// that are not multiples of 4 or 32, batch 1 and odd batches), run() with blocks that do not
// divide the batch, several streams and cycling, the implicit kernel's fused ReLU + max-pool
// epilogue and uint8 input (odd sizes included), the real CIFAR-10 network on the sample, and
// the out-of-memory error. GPU cases are named "gpu: ..." and skip visibly without a GPU.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <sstream>

#include "engine/core/memory.h"
#include "engine/gpu_api.h"
#include "engine/io/dataset.h"
#include "engine/network.h"
#include "engine/report.h"
#include "engine/validate.h"
#include "reference/cpu_executor.h"
#include "tests/test_util.h"

using namespace cnnrun;

namespace {

using test::gpu_present;
using test::sanitizer_mode;

constexpr double kAtol = 1e-4, kRtol = 1e-3;

using test::algo_of;
using test::classes;
using test::compare_layers;
using test::gpu_random_data;
using test::MaxErr;
using test::random_weights;

struct ConvCase {
  int c, f, kh, kw, sh, sw, ph, pw, h, w, n;
};

// Shapes chosen to hit every path of the three algorithms: the CIFAR layers, filters past one
// implicit tile (33, 40), outputs larger than one implicit tile (34x34), stride 2, 1x1, tiny;
// whole images with widths that are multiples of 4 take the implicit kernel's row copies (pad 1
// and 2, stride 1 and 2).
const ConvCase kConvCases[] = {
    {3, 16, 5, 5, 1, 1, 2, 2, 32, 32, 3}, {16, 20, 5, 5, 1, 1, 2, 2, 16, 16, 5},
    {20, 20, 5, 5, 1, 1, 2, 2, 8, 8, 7},  {5, 17, 3, 3, 2, 2, 1, 1, 13, 11, 1},
    {17, 5, 1, 1, 1, 1, 0, 0, 9, 7, 3},   {20, 33, 3, 3, 1, 1, 1, 1, 10, 12, 5},
    {3, 8, 5, 5, 2, 2, 2, 2, 15, 17, 9},  {5, 20, 1, 1, 2, 2, 0, 0, 11, 9, 1},
    {17, 3, 3, 3, 1, 1, 0, 0, 6, 7, 11},  {3, 40, 5, 5, 1, 1, 2, 2, 34, 34, 2},
    {1, 4, 3, 3, 1, 1, 1, 1, 5, 5, 1},    {20, 12, 5, 5, 2, 2, 1, 1, 9, 10, 3},
    {5, 7, 3, 5, 1, 2, 1, 2, 12, 14, 5},  {17, 24, 3, 3, 2, 1, 2, 0, 8, 9, 3},
    {8, 6, 3, 3, 2, 2, 1, 1, 16, 12, 4},  {4, 10, 5, 5, 1, 1, 2, 2, 8, 4, 5},
};

std::string conv_netdef(const ConvCase& k) {
  std::ostringstream o;
  o << "name: convtest\ninput: {channels: " << k.c << ", height: " << k.h << ", width: " << k.w << "}\n"
    << "classes: " << classes(10) << "\nlayers:\n"
    << "  - {name: conv1, type: conv, filters: " << k.f << ", kernel: [" << k.kh << ", " << k.kw
    << "], stride: [" << k.sh << ", " << k.sw << "], pad: [" << k.ph << ", " << k.pw << "]}\n"
    << "  - {name: relu1, type: relu}\n"
    << "  - {name: conv2, type: conv, filters: 6, kernel: 3, pad: 1, bias: false}\n"
    << "  - {name: act2, type: tanh}\n"
    << "  - {name: gap, type: avgpool, global: true}\n"
    << "  - {name: fc, type: fc, outputs: 10}\n"
    << "  - {name: softmax, type: softmax}\n";
  return o.str();
}

void conv_algo_against_reference(const std::string& algo) {
  MaxErr err;
  uint32_t seed = 100;
  for (const ConvCase& k : kConvCases) {
    Network net = parse_netdef_string(conv_netdef(k), "convtest");
    for (auto& l : net.layers)
      if (l->kind == LayerKind::kConv) l->algo = algo_of(algo);
    random_weights(net, seed);
    Dataset data = gpu_random_data(net.input, k.n + 3, 10, seed++);
    auto gpu = make_gpu_executor(net);
    auto cpu = make_cpu_executor(net);
    std::ostringstream what;
    what << algo << " C" << k.c << " F" << k.f << " k" << k.kh << "x" << k.kw << " s" << k.sh << "x" << k.sw
         << " p" << k.ph << "x" << k.pw << " in " << k.h << "x" << k.w << " n" << k.n;
    compare_layers(net, *gpu, *cpu, data, 2, k.n, what.str(), err);
    CHECK(gpu->fused_into(0, RunOptions{}) == "relu1");  // conv1's ReLU runs in its epilogue
    CHECK(gpu->fused_into(2, RunOptions{}) == "act2");   // so does conv2's tanh (any activation fuses)
  }
  MESSAGE("conv " << algo << ": max abs error " << err.abs << " (" << err.where << ")");
}

}  // namespace

TEST_CASE("gpu_available says why it is false, and make_gpu_executor throws that") {
  std::string why = "unset";
  bool ok = gpu_available(&why);
  if (ok) {
    CHECK(why.empty());
  } else {
    CHECK(!why.empty());
    CHECK(why != "unset");
    Network net = parse_netdef_string(
        "input: {channels: 1, height: 2, width: 2}\nclasses: [a, b]\n"
        "layers:\n  - {name: f, type: fc, outputs: 2}\n");
    CHECK_THROWS_WITH_AS(make_gpu_executor(net), doctest::Contains(why.c_str()), Error);
  }
}

TEST_CASE("gpu: conv im2col vs reference" * doctest::skip(!gpu_present())) {
  conv_algo_against_reference("im2col");
}
TEST_CASE("gpu: conv implicit vs reference" * doctest::skip(!gpu_present())) {
  conv_algo_against_reference("implicit");
}
TEST_CASE("gpu: conv cudnn vs reference" * doctest::skip(!gpu_present())) {
  conv_algo_against_reference("cudnn");
}
TEST_CASE("gpu: conv auto vs reference" * doctest::skip(!gpu_present())) { conv_algo_against_reference(""); }

TEST_CASE("gpu: every layer type vs reference" * doctest::skip(!gpu_present())) {
  // Branches (add of three, concat), unfolded batchnorm, sigmoid, padded max and average pools
  // (with and without count_pad), dropout, flatten, softmax over channels at every position,
  // fc with a fused ReLU and fc without bias.
  const char* text = R"(
name: layers
input: {channels: 5, height: 11, width: 9}
preprocess: {mean: [0.4, 0.5, 0.6, 0.5, 0.5], std: [0.2, 0.25, 0.3, 0.5, 1.0]}
classes: [a, b, c, d, e, f, g]
layers:
  - {name: c1, type: conv, filters: 17, kernel: 3, pad: 1}
  - {name: bn1, type: batchnorm, inputs: c1}
  - {name: s1, type: sigmoid}
  - {name: c2, type: conv, filters: 17, kernel: 1, inputs: s1}
  - {name: c3, type: conv, filters: 17, kernel: 3, pad: 1, inputs: s1}
  - {name: sum, type: add, inputs: [s1, c2, c3]}
  - {name: r2, type: relu}
  - {name: mp, type: maxpool, size: 3, stride: 2, pad: 1}
  - {name: ap, type: avgpool, size: 3, stride: 2, pad: 1, inputs: sum}
  - {name: apx, type: avgpool, size: 3, stride: 2, pad: 1, count_pad: false, inputs: sum}
  - {name: cat, type: concat, inputs: [mp, ap, apx]}
  - {name: sm, type: softmax}
  - {name: c4, type: conv, filters: 3, kernel: 3, stride: 2}
  - {name: t4, type: tanh}
  - {name: drop, type: dropout, rate: 0.3}
  - {name: flat, type: flatten}
  - {name: fc1, type: fc, outputs: 20}
  - {name: r3, type: relu}
  - {name: fc2, type: fc, outputs: 7, bias: false}
)";
  MaxErr err;
  for (const char* algo : {"implicit", "im2col", "cudnn"}) {
    Network net = parse_netdef_string(text, "layers");
    for (auto& l : net.layers)
      if (l->kind == LayerKind::kConv) l->algo = algo_of(algo);
    random_weights(net, 7);
    Dataset data = gpu_random_data(net.input, 9, 7, 3);
    auto gpu = make_gpu_executor(net);
    auto cpu = make_cpu_executor(net);
    compare_layers(net, *gpu, *cpu, data, 0, 9, algo, err);
    compare_layers(net, *gpu, *cpu, data, 4, 1, algo, err);
    CHECK(gpu->fused_into(net.find("fc1"), RunOptions{}) == "r3");
    CHECK(gpu->fused_into(net.find("c3"), RunOptions{}).empty());  // read by the add, not by a relu
    CHECK(gpu->fused_into(net.find("c1"), RunOptions{}).empty());  // followed by a batchnorm
  }
  MESSAGE("layer types: max abs error " << err.abs << " (" << err.where << ")");
}

namespace {

const char* kSmallNet = R"(
name: small
input: {channels: 3, height: 12, width: 12}
classes: [a, b, c, d, e, f, g, h, i, j]
layers:
  - {name: conv1, type: conv, filters: 16, kernel: 5, pad: 2}
  - {name: relu1, type: relu}
  - {name: pool1, type: maxpool, size: 2}
  - {name: conv2, type: conv, filters: 20, kernel: 3, pad: 1}
  - {name: relu2, type: relu}
  - {name: pool2, type: maxpool, size: 2}
  - {name: fc, type: fc, outputs: 10}
  - {name: softmax, type: softmax}
)";

// The CPU's top-two margin for each image: predictions only have to agree where it is clear.
std::vector<float> margins(const RunResult& r, int classes) {
  std::vector<float> m(static_cast<size_t>(r.images));
  for (int64_t i = 0; i < r.images; ++i) {
    std::vector<float> v(r.probs.begin() + i * classes, r.probs.begin() + (i + 1) * classes);
    std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
    m[static_cast<size_t>(i)] = v[0] - v[1];
  }
  return m;
}

// One run() configuration of the GPU cases: its options (output values wanted) and a description.
struct RunVariant {
  int64_t batch, block;
  int streams;
  bool cycle;
  std::string algo;
  RunOptions options() const {
    RunOptions o;
    o.batch = batch;
    o.block = block;
    o.streams = streams;
    o.cycle = cycle;
    o.conv_algo = algo_of(algo);
    o.want_probs = true;
    return o;
  }
  std::string what() const {
    std::ostringstream s;
    s << "batch " << batch << " block " << block << " streams " << streams << " cycle " << cycle << " algo '"
      << algo << "'";
    return s.str();
  }
};

}  // namespace

TEST_CASE("gpu: run() over blocks, streams and cycling matches the reference" *
          doctest::skip(!gpu_present())) {
  Network net = parse_netdef_string(kSmallNet, "small");
  random_weights(net, 11);
  const int64_t count = 37;
  Dataset data = gpu_random_data(net.input, count, 10, 5);
  auto cpu = make_cpu_executor(net);
  RunOptions co;
  co.batch = count;
  co.want_probs = true;
  RunResult ref = cpu->run(data, co);
  std::vector<float> margin = margins(ref, 10);

  const RunVariant variants[] = {
      {37, 5, 2, false, "implicit"}, {37, 0, 0, false, ""},          {1, 0, 0, false, "im2col"},
      {37, 8, 3, false, "cudnn"},    {100, 16, 3, true, "implicit"}, {101, 7, 4, true, "im2col"},
      {37, 37, 1, false, "cudnn"},   {23, 6, 2, false, ""},
  };
  auto gpu = make_gpu_executor(net);
  for (const RunVariant& v : variants) {
    INFO(v.what());
    RunOptions o = v.options();
    int64_t last_progress = 0;
    o.progress = [&](int64_t done, int64_t total) {
      CHECK(total == v.batch);
      CHECK(done > last_progress);
      last_progress = done;
    };
    RunResult r = gpu->run(data, o);
    CHECK(last_progress == v.batch);
    REQUIRE(r.images == v.batch);
    REQUIRE(r.predictions.size() == static_cast<size_t>(v.batch));
    REQUIRE(r.probs.size() == static_cast<size_t>(v.batch * 10));
    int64_t good = 0, unclear = 0;
    for (int64_t i = 0; i < v.batch; ++i) {
      const size_t j = static_cast<size_t>(i % count);
      if (r.predictions[static_cast<size_t>(i)] == data.labels[j]) ++good;
      test::Compare cmp = test::compare(r.probs.data() + i * 10, ref.probs.data() + j * 10, 10, kAtol, kRtol);
      CHECK_MESSAGE(cmp.ok, "image " << i << " max abs error " << cmp.max_abs);
      if (margin[j] > 1e-4f)
        CHECK(r.predictions[static_cast<size_t>(i)] == ref.predictions[j]);
      else
        ++unclear;
    }
    CHECK(r.correct == good);  // the GPU's accuracy count agrees with its own predictions
    if (!v.cycle && v.batch == count && unclear == 0) CHECK(r.correct == ref.correct);
    // The report: every layer, the algorithm that ran, the fused ReLUs, sane times.
    REQUIRE(r.layers.size() == net.layers.size());
    CHECK(r.layers[1].algo == "fused into conv1");
    CHECK(r.layers[1].seconds == 0.0);
    if (!v.algo.empty()) CHECK(r.layers[0].algo.find(v.algo) != std::string::npos);
    CHECK(!r.layers[0].algo.empty());
    CHECK(r.layers[0].seconds > 0.0);
    CHECK(r.forward_seconds > 0.0);
    CHECK(r.transfer_seconds >= 0.0);
    CHECK(r.transfer_seconds <= r.forward_seconds);
    CHECK(r.engine.find("gpu (") == 0);
    // Full blocks run as captured CUDA graphs (a capture failure falls back to direct launches
    // and says so: it must not happen for these layers and algorithms).
    REQUIRE(r.gpu);
    CHECK_MESSAGE(r.gpu->graphs == GpuRunFacts::Graphs::kCaptured, r.gpu->graph_error);
    // A short last block runs its own graph (every image above was checked, so it computed
    // the right thing); with equal blocks there is none.
    const int64_t short_n = v.batch % r.gpu->block;
    CHECK_MESSAGE(r.gpu->short_graph == short_n, r.gpu->short_graph_error);
    // CUDA graphs off: every block launches directly (a short one also once before the clock,
    // whose count must not reach the result); the same outputs and a count that agrees with them.
    RunOptions direct = o;
    direct.tuning.graphs = false;
    direct.progress = {};
    RunResult d = gpu->run(data, direct);
    REQUIRE(d.gpu);
    CHECK(d.gpu->graphs == GpuRunFacts::Graphs::kOff);
    CHECK(d.gpu->short_graph == 0);
    REQUIRE(d.probs.size() == r.probs.size());
    int64_t good_direct = 0;
    for (int64_t i = 0; i < v.batch; ++i) {
      const size_t j = static_cast<size_t>(i % count);
      if (d.predictions[static_cast<size_t>(i)] == data.labels[j]) ++good_direct;
      test::Compare cmp = test::compare(d.probs.data() + i * 10, ref.probs.data() + j * 10, 10, kAtol, kRtol);
      CHECK_MESSAGE(cmp.ok, "graphs off, image " << i << " max abs error " << cmp.max_abs);
    }
    CHECK(d.correct == good_direct);
  }

  RunOptions bad;
  bad.batch = count + 1;
  CHECK_THROWS_WITH_AS(gpu->run(data, bad), doctest::Contains("cycle"), Error);
}

namespace {

// conv1 -> relu -> 2x2/2 max-pool -> conv2 -> relu -> 2x2/2 max-pool -> fc: the implicit kernel
// computes each conv+relu+pool in one pass, and the first conv reads the uint8 pixels, where
// the shapes allow (expect_pool1 / expect_u8 say whether they do for conv1).
struct FusedCase {
  int c, h, w, f1, k1, s1, p1, f2, k2, p2, n;
  bool expect_pool1, expect_u8;
};
const FusedCase kFusedCases[] = {
    {3, 32, 32, 16, 5, 1, 2, 20, 5, 2, 5, true, true},  // CIFAR; conv2 4 images/tile, last one partial
    {1, 28, 28, 8, 5, 1, 2, 12, 3, 1, 7, true, true},   // MNIST-like
    {3, 13, 11, 7, 3, 1, 1, 5, 3, 0, 3, true, false},   // odd conv outputs (13x11 -> 6x5), W % 4 != 0
    {2, 15, 12, 33, 3, 1, 1, 7, 2, 0, 3, true, true},   // 2 filter tiles, even kernel (runtime width)
    {4, 20, 24, 20, 1, 1, 0, 24, 5, 2, 9, true, true},  // 1x1 first conv, odd 10x12 -> 5x6 second pool
    {1, 9, 600, 4, 3, 1, 1, 6, 3, 1, 2, false, false},  // pooled rows of 300 > one tile: no pool fusion
    {3, 16, 16, 8, 3, 2, 1, 8, 3, 1, 4, false, true},   // stride-2 conv: no pool fusion; 5 images a tile
    {5, 7, 8, 12, 3, 1, 0, 6, 1, 0, 11, true, true},    // 5x6 -> 2x3 (odd last row dropped), 11 images
};

std::string fused_netdef(const FusedCase& k) {
  std::ostringstream o;
  o << "name: fusetest\ninput: {channels: " << k.c << ", height: " << k.h << ", width: " << k.w << "}\n"
    << "preprocess: {mean: [";
  for (int i = 0; i < k.c; ++i) o << (i ? ", " : "") << 0.3 + 0.1 * i;
  o << "], std: [";
  for (int i = 0; i < k.c; ++i) o << (i ? ", " : "") << 0.2 + 0.05 * i;
  o << "]}\nclasses: " << classes(10) << "\nlayers:\n"
    << "  - {name: conv1, type: conv, filters: " << k.f1 << ", kernel: " << k.k1 << ", stride: " << k.s1
    << ", pad: " << k.p1 << "}\n"
    << "  - {name: relu1, type: relu}\n"
    << "  - {name: pool1, type: maxpool, size: 2, stride: 2}\n"
    << "  - {name: conv2, type: conv, filters: " << k.f2 << ", kernel: " << k.k2 << ", pad: " << k.p2 << "}\n"
    << "  - {name: relu2, type: relu}\n"
    << "  - {name: pool2, type: maxpool, size: 2, stride: 2}\n"
    << "  - {name: fc, type: fc, outputs: 10}\n";
  return o.str();
}

// run() over small blocks (3 images) on two streams with cycling (2n + 1 images), so tiles past
// the end of a block and the uint8 staging of every block are exercised; the values kept.
RunOptions small_blocks(int64_t n, const char* algo, const std::string& gpu_off) {
  RunOptions o;
  o.batch = 2 * n + 1;
  o.cycle = true;
  o.block = 3;
  o.streams = 2;
  o.conv_algo = algo_of(algo);
  o.tuning = parse_gpu_off(gpu_off);
  o.want_probs = true;
  return o;
}

// run() with `o` (want_probs), each image's 10 probabilities against the reference's (cycled).
RunResult run_vs_reference(Executor& gpu, Executor& cpu, const Dataset& data, const RunOptions& o) {
  RunResult r = gpu.run(data, o);
  RunOptions co;
  co.batch = data.count;
  co.want_probs = true;
  const RunResult ref = cpu.run(data, co);
  for (int64_t i = 0; i < o.batch; ++i) {
    const test::Compare cmp =
        test::compare(r.probs.data() + i * 10, ref.probs.data() + (i % data.count) * 10, 10, kAtol, kRtol);
    CHECK_MESSAGE(cmp.ok, "image " << i << " max abs error " << cmp.max_abs);
  }
  return r;
}

}  // namespace

TEST_CASE("gpu: conv+relu+maxpool and uint8 input fused into the implicit kernel, vs reference" *
          doctest::skip(!gpu_present())) {
  MaxErr err;
  uint32_t seed = 500;
  for (const FusedCase& k : kFusedCases) {
    // The implicit algorithm with each of its kernels for the fused pool: the tensor-core one
    // wherever it can run (the default; conv1 reading bytes takes exact pixels with FP16
    // products, as every mean/std here has exact offsets), the same with 3xTF32 for conv1 too
    // ("implicit-3xtf32"), and the FFMA one ("implicit-ffma").
    for (const char* variant : {"implicit", "implicit-3xtf32", "implicit-ffma", "cudnn"}) {
      const std::string v = variant;
      const char* algo = v == "cudnn" ? "cudnn" : "implicit";
      Network net = parse_netdef_string(fused_netdef(k), "fusetest");
      random_weights(net, seed);
      Dataset data = gpu_random_data(net.input, k.n + 2, 10, seed);
      auto gpu = make_gpu_executor(net);
      auto cpu = make_cpu_executor(net);
      std::ostringstream what;
      what << variant << " C" << k.c << " " << k.h << "x" << k.w << " F" << k.f1 << " k" << k.k1 << " s"
           << k.s1 << " p" << k.p1 << " / F" << k.f2 << " k" << k.k2 << " p" << k.p2 << " n" << k.n;
      INFO(what.str());
      // run()'s output values must match the reference's; forward_layers then runs with the same
      // options.
      const RunOptions o = small_blocks(k.n, algo,
                                        v == "implicit-ffma"     ? "tc"
                                        : v == "implicit-3xtf32" ? "exact"
                                                                 : "");
      const RunResult r = run_vs_reference(*gpu, *cpu, data, o);
      const bool implicit = std::string(algo) == "implicit";
      const bool pool1 = implicit && k.expect_pool1, u8 = implicit && k.expect_u8;
      CHECK(gpu->fused_into(0, o) == (pool1 ? "pool1" : "relu1"));
      CHECK(gpu->fused_into(1, o) == (pool1 ? "pool1" : ""));
      CHECK(gpu->fused_into(2, o).empty());
      CHECK(r.layers[2].algo == (pool1 ? "fused into conv1" : ""));
      CHECK((r.layers[0].algo.find("uint8 input") != std::string::npos) == u8);
      CHECK((r.layers[0].algo.find("maxpool") != std::string::npos) == pool1);
      const bool tc1 = pool1 && k.f1 <= 32 && v != "implicit-ffma";
      CHECK((r.layers[0].algo.find("exact pixels") != std::string::npos) == (tc1 && u8 && v == "implicit"));
      CHECK((r.layers[0].algo.find("3xTF32") != std::string::npos) == (tc1 && !(u8 && v == "implicit")));
      if (pool1) CHECK(r.layers[2].seconds == 0.0);
      compare_layers(net, *gpu, *cpu, data, 1, k.n, what.str(), err, o);
      // fused_into answers for the options it is given, not for the last run's: with the pool
      // fusion off, conv1 computes its ReLU only, and the pool's input exists.
      RunOptions no_pool = o;
      no_pool.tuning.fuse_pool = false;
      CHECK(gpu->fused_into(0, no_pool) == "relu1");
      CHECK(gpu->fused_into(1, no_pool).empty());
      seed += 3;
    }
  }
  MESSAGE("fused conv+relu+pool / uint8 input: max abs error " << err.abs << " (" << err.where << ")");
}

namespace {

// conv1 -> act -> 2x2/2 average pool -> conv2 -> act -> 2x2/2 average pool -> fc, as LeNet-5
// (tanh) and with other activations: the implicit kernel's tensor cores average act(conv + bias)
// over each window where the shape allows (expect_pool1: for conv1).
struct AvgCase {
  int c, h, w, f1, k1, s1, p1, f2, k2, p2, n;
  const char* act;
  bool expect_pool1;
  bool exact = false;  // preprocessing with exact offsets: conv1 on exact pixels (FP16 products)
};
const AvgCase kAvgCases[] = {
    {1, 28, 28, 6, 5, 1, 2, 16, 5, 0, 5, "tanh", true},                            // LeNet-5
    {1, 28, 28, 6, 5, 1, 2, 16, 5, 0, 5, "tanh", true, true},                      // ... on exact pixels
    {3, 13, 11, 7, 3, 1, 1, 5, 3, 0, 3, "sigmoid", true},                          // odd outputs, W % 4 != 0
    {2, 12, 16, 12, 3, 1, 1, 8, 3, 1, 4, "{type: leaky_relu, slope: 0.2}", true},  // negative values kept
    {1, 20, 20, 9, 5, 1, 2, 24, 3, 1, 3, "silu", true},                            // 24 filters: 3 n-tiles
    {1, 20, 20, 40, 3, 1, 1, 8, 3, 1, 3, "tanh", false},  // 40 filters: no tensor cores
    {3, 16, 16, 8, 3, 2, 1, 8, 3, 1, 4, "relu", false},   // stride-2 conv: no fusion
};

std::string avg_netdef(const AvgCase& k) {
  const std::string act = k.act[0] == '{' ? std::string(k.act).substr(1, std::string(k.act).size() - 2)
                                          : "type: " + std::string(k.act);
  std::ostringstream o;
  o << "name: avgtest\ninput: {channels: " << k.c << ", height: " << k.h << ", width: " << k.w << "}\n"
    << "preprocess: {mean: " << (k.exact ? "0.3" : "0.1307") << ", std: " << (k.exact ? "0.2" : "0.3081")
    << "}\nclasses: " << classes(10) << "\nlayers:\n"
    << "  - {name: conv1, type: conv, filters: " << k.f1 << ", kernel: " << k.k1 << ", stride: " << k.s1
    << ", pad: " << k.p1 << "}\n"
    << "  - {name: act1, " << act << "}\n"
    << "  - {name: pool1, type: avgpool, size: 2, stride: 2}\n"
    << "  - {name: conv2, type: conv, filters: " << k.f2 << ", kernel: " << k.k2 << ", pad: " << k.p2 << "}\n"
    << "  - {name: act2, " << act << "}\n"
    << "  - {name: pool2, type: avgpool, size: 2, stride: 2}\n"
    << "  - {name: fc, type: fc, outputs: 10}\n";
  return o.str();
}

}  // namespace

TEST_CASE(
    "gpu: conv + any activation + 2x2 average pool fused into the implicit kernel's tensor cores, vs "
    "reference" *
    doctest::skip(!gpu_present())) {
  MaxErr err;
  uint32_t seed = 900;
  for (const AvgCase& k : kAvgCases) {
    // The default (tensor cores: the pool fused), and the FFMA kernel ("tc" off: it has no
    // average pool, so the activation and the pool are passes after it).
    for (const char* variant : {"implicit", "implicit-ffma"}) {
      const std::string v = variant;
      Network net = parse_netdef_string(avg_netdef(k), "avgtest");
      random_weights(net, seed);
      Dataset data = gpu_random_data(net.input, k.n + 2, 10, seed);
      auto gpu = make_gpu_executor(net);
      auto cpu = make_cpu_executor(net);
      std::ostringstream what;
      what << variant << " " << k.act << " C" << k.c << " " << k.h << "x" << k.w << " F" << k.f1 << " k"
           << k.k1 << " s" << k.s1 << " p" << k.p1 << " / F" << k.f2 << " k" << k.k2 << " p" << k.p2;
      INFO(what.str());
      const RunOptions o = small_blocks(k.n, "implicit", v == "implicit-ffma" ? "tc" : "");
      const RunResult r = run_vs_reference(*gpu, *cpu, data, o);
      const bool pool1 = k.expect_pool1 && v == "implicit";
      CHECK(gpu->fused_into(0, o) == (pool1 ? "pool1" : "act1"));
      CHECK(gpu->fused_into(1, o) == (pool1 ? "pool1" : ""));
      CHECK(r.layers[2].algo == (pool1 ? "fused into conv1" : ""));
      CHECK((r.layers[0].algo.find("avgpool epilogue") != std::string::npos) == pool1);
      // Exact offsets: conv1 reads the bytes and multiplies exact pixels (FP16 products).
      CHECK((r.layers[0].algo.find("exact pixels") != std::string::npos) == (pool1 && k.exact));
      // Fused, the activation is in the epilogue, not a pass after it.
      CHECK((r.layers[0].algo.find(" pass") != std::string::npos) ==
            (!pool1 && std::string(k.act) != "relu"));
      if (pool1) CHECK(r.layers[2].seconds == 0.0);
      compare_layers(net, *gpu, *cpu, data, 1, k.n, what.str(), err, o);
      // TF32, FP16 and BF16: the same fusion (their tanh is the hardware's tanh.approx.f32), every
      // layer within the precision's tolerance of the reference.
      if (v == "implicit")
        for (Precision prec : {Precision::kTf32, Precision::kFp16, Precision::kBf16}) {
          INFO(precision_name(prec));
          RunOptions p = o;
          p.precision = prec;
          const RunResult rp = gpu->run(data, p);
          CHECK((rp.layers[0].algo.find("avgpool epilogue") != std::string::npos) == pool1);
          const Validation val = validate(*gpu, *cpu, net, data, k.n, p);
          for (const LayerCheck& c : val.layers) {
            INFO(c.name << ": max rel " << c.max_rel << " (fused into '" << c.fused_into << "')");
            CHECK(c.pass);
          }
          CHECK(val.pass);
        }
      seed += 3;
    }
  }
  MESSAGE("fused conv+act+avgpool: max abs error " << err.abs << " (" << err.where << ")");
}

TEST_CASE("gpu: an image that cannot fit in GPU memory is a clear error" * doctest::skip(!gpu_present())) {
  // A 1x1 conv to `filters` x 512 x 512, then `tanhs` tanh layers of that size, with almost no
  // weights; `branches`: each tanh reads the conv and their sum reads them all.
  auto huge = [](int filters, int tanhs, bool branches) {
    std::ostringstream t;
    t << "input: {channels: 1, height: 512, width: 512}\nclasses: " << classes(10) << "\nlayers:\n"
      << "  - {name: c1, type: conv, filters: " << filters << ", kernel: 1}\n";
    for (int i = 0; i < tanhs; ++i)
      t << "  - {name: t" << i << ", type: tanh" << (branches ? ", inputs: c1" : "") << "}\n";
    if (branches) {
      t << "  - {name: sum, type: add, inputs: [t0";
      for (int i = 1; i < tanhs; ++i) t << ", t" << i;
      t << "]}\n";
    }
    t << "  - {name: gap, type: avgpool, global: true}\n  - {name: fc, type: fc, outputs: 10}\n";
    Network net = parse_netdef_string(t.str(), "huge");
    random_weights(net, 1);
    return net;
  };
  RunOptions o;
  o.batch = 1;
  // 250 branches of 1000 x 512 x 512 (just under the netdef's per-layer limit of 2^28 values),
  // 1 GiB each and all alive until their sum: about 250 GiB for a single image even with buffers
  // shared by lifetime, more than any GPU has.
  {
    Network net = huge(1000, 250, true);
    Dataset data = gpu_random_data(net.input, 1, 10, 1);
    auto gpu = make_gpu_executor(net);
    CHECK_THROWS_WITH_AS(gpu->run(data, o), doctest::Contains("GPU memory: one image needs"), Error);
  }
  // A chain of 1000 tanh layers of 256 MiB: a buffer per layer (--gpu-off share) is 250 GiB;
  // shared by lifetime, two buffers alternate and the image fits in well under 1 GiB.
  {
    Network net = huge(256, 1000, false);
    Dataset data = gpu_random_data(net.input, 1, 10, 1);
    auto gpu = make_gpu_executor(net);
    o.tuning.share_buffers = false;
    CHECK_THROWS_WITH_AS(gpu->run(data, o), doctest::Contains("GPU memory: one image needs"), Error);
    o.tuning.share_buffers = true;
    const RunResult r = gpu->run(data, o);
    REQUIRE(r.gpu);
    CHECK(r.gpu->buffers.count >= 1000);
    CHECK(r.gpu->buffers.allocations <= 3);
    CHECK(r.gpu->buffers.bytes_per_image <= 3 * (int64_t(256) * 512 * 512 * 4));
  }
}

namespace {

// 2000 images cycled from the data set as one block, on the implicit kernel, whose results do not
// depend on the block: runs cut into other blocks or streams give the same predictions.
RunOptions one_block_run(bool want_probs) {
  RunOptions o;
  o.batch = 2000;
  o.cycle = true;
  o.block = 2000;
  o.want_probs = want_probs;
  o.conv_algo = ConvAlgo::kImplicit;
  return o;
}

}  // namespace

TEST_CASE("gpu: a pinned_memory cap cuts the block to the page-locked host buffers it allows" *
          doctest::skip(!gpu_present())) {
  Network net = parse_netdef_string(kSmallNet, "small");
  random_weights(net, 17);
  Dataset data = gpu_random_data(net.input, 37, 10, 5);
  auto gpu = make_gpu_executor(net);
  const RunOptions free_run = one_block_run(true);
  RunResult a = gpu->run(data, free_run);
  REQUIRE(a.gpu);
  CHECK(a.gpu->host_cut_from == 0);
  // Per image: its prediction (4 bytes), its output values and its pixels' staging copy, on each
  // of the 3 streams.
  const int64_t out = net.layers[static_cast<size_t>(net.output)]->out_shape.size();
  const int64_t per_image = 4 + out * 4 + data.shape.size();
  RunOptions capped = free_run;
  capped.pinned_memory = 64 << 10;
  RunResult b = gpu->run(data, capped);
  REQUIRE(b.gpu);
  CHECK(b.gpu->host_cut_from == 2000);
  CHECK(b.gpu->block == (64 << 10) / per_image / 3);
  CHECK(b.gpu->host_pinned_bytes <= capped.pinned_memory);
  CHECK(b.gpu->host_limited_by == "--pinned-memory");
  CHECK(a.predictions == b.predictions);
  REQUIRE(a.probs.size() == b.probs.size());
  CHECK(test::compare(b.probs.data(), a.probs.data(), a.probs.size(), 1e-6, 1e-5).ok);
  capped.pinned_memory = 1000;  // not one image on each of 3 streams
  std::string what;
  try {
    gpu->run(data, capped);
  } catch (const Error& e) {
    what = e.what();
  }
  CHECK_MESSAGE(what.find("host memory: one image needs " + bytes_str(per_image)) != std::string::npos, what);
  CHECK_MESSAGE(what.find("but --pinned-memory allows " + bytes_str(1000)) != std::string::npos, what);
  RunResult c = gpu->run(data, free_run);  // the cap is gone with the options
  CHECK(c.gpu->host_cut_from == 0);
  CHECK(c.predictions == a.predictions);
}

TEST_CASE("gpu: a gpu_memory cap cuts the block, with the same predictions; too small a cap is an error" *
          doctest::skip(!gpu_present())) {
  Network net = parse_netdef_string(kSmallNet, "small");
  random_weights(net, 13);
  Dataset data = gpu_random_data(net.input, 37, 10, 3);
  auto gpu = make_gpu_executor(net);
  auto cut_from = [](const RunResult& r) {
    REQUIRE(r.gpu);
    return r.gpu->block_cut_from;
  };
  const RunOptions free_run = one_block_run(false);
  RunResult a = gpu->run(data, free_run);
  CHECK(cut_from(a) == 0);
  // About 17 KB per image: 40 MiB less the 32 MiB cuBLASLt workspace holds a few hundred images.
  RunOptions capped = free_run;
  capped.gpu_memory = int64_t{40} << 20;
  RunResult b = gpu->run(data, capped);
  CHECK(cut_from(b) == 2000);
  CHECK(b.gpu->block < 2000);
  CHECK(b.gpu->cap_bytes == 41943040);
  CHECK(b.gpu->cap_total_bytes == 41943040);
  MESSAGE("block cut to " << b.gpu->block);
  REQUIRE(b.predictions.size() == 2000);
  CHECK(a.predictions == b.predictions);
  CHECK(a.correct == b.correct);
  CHECK(gpu->forward_layers(data, 0, 37, capped).size() == net.layers.size());  // under the cap
  capped.gpu_memory = int64_t{1} << 20;  // less than the workspace alone
  std::string what;
  try {
    gpu->run(data, capped);
  } catch (const Error& e) {
    what = e.what();
  }
  CHECK(what.find("GPU memory: one image needs") != std::string::npos);
  CHECK_MESSAGE(what.find("but --gpu-memory allows only 1048576 bytes") != std::string::npos, what);
  RunResult c = gpu->run(data, free_run);  // the slots are made again without the cap
  CHECK(cut_from(c) == 0);
  CHECK(a.predictions == c.predictions);
  // --resident: the 37 images count against the cap, and the blocks get what they leave.
  const int64_t resident_bytes = 37 * data.shape.size();
  RunOptions res = free_run;
  res.resident = true;
  res.gpu_memory = (int64_t{40} << 20) + resident_bytes;
  RunResult d = gpu->run(data, res);
  CHECK(cut_from(d) == 2000);
  CHECK(d.gpu->cap_bytes == 41943040);
  CHECK(d.gpu->cap_total_bytes == res.gpu_memory);
  CHECK(d.predictions == a.predictions);
  res.gpu_memory = resident_bytes;  // nothing left for a block
  CHECK_THROWS_WITH_AS(
      gpu->run(data, res),
      ("--resident: the 37 distinct images take " + std::to_string(resident_bytes) +
       " bytes of GPU memory, and --gpu-memory allows only " + std::to_string(resident_bytes) +
       " bytes in all; raise --gpu-memory or run without --resident")
          .c_str(),
      Error);
}

TEST_CASE("gpu: a block larger than GPU memory is cut to fit, with the same predictions" *
          doctest::skip(!gpu_present())) {
  // 256 x 512 x 512 floats = 256 MiB per image after the conv: a block of 1000 would need
  // 256 GiB, more than any GPU has, so the executor must cut it and still run every image.
  // Under the sanitizer, 150 GiB of activations take far too long: the same layers on 64x64
  // images (8 MiB of activations each) under a 512 MiB gpu_memory cap run the same kernels and
  // the same cut.
  const bool shrink = sanitizer_mode();
  const int side = shrink ? 64 : 512;
  if (shrink)
    MESSAGE(
        "shrunk for CNNRUN_TEST_SANITIZER: 64x64 images under a 512 MiB gpu_memory cap instead of "
        "512x512 images against all free GPU memory (too slow under compute-sanitizer)");
  std::ostringstream t;
  t << "input: {channels: 1, height: " << side << ", width: " << side << "}\nclasses: " << classes(10)
    << "\nlayers:\n"
    << "  - {name: c1, type: conv, filters: 256, kernel: 1}\n  - {name: t, type: tanh}\n"
    << "  - {name: t2, type: tanh}\n"  // t runs in c1's epilogue: t2 keeps a second big buffer
    << "  - {name: gap, type: avgpool, global: true}\n  - {name: fc, type: fc, outputs: 10}\n";
  Network net = parse_netdef_string(t.str(), "big");
  random_weights(net, 7);
  Dataset data = gpu_random_data(net.input, 300, 10, 7);
  auto gpu = make_gpu_executor(net);
  RunOptions big;
  big.batch = 300;
  big.block = 1000;
  big.conv_algo = ConvAlgo::kIm2col;  // cuDNN would cut the block first (below)
  if (shrink) big.gpu_memory = int64_t{512} << 20;
  RunResult a = gpu->run(data, big);
  REQUIRE(a.gpu);
  // The block asked for is first held to the batch (300), then cut to what fits.
  CHECK_MESSAGE(a.gpu->block_cut_from == 300, "the block was not cut");
  CHECK(a.gpu->block < 300);
  CHECK(a.gpu->cudnn_cut_from == 0);
  if (shrink) CHECK(a.gpu->cap_bytes > 0);
  if (!shrink) {
    // Through cuDNN, whose tensors hold fewer than 2^31 values: 256 x 512 x 512 a image allows
    // 31 images a block, fewer than memory would.
    RunOptions dnn = big;
    dnn.conv_algo = ConvAlgo::kCudnn;
    RunResult c = gpu->run(data, dnn);
    CHECK(c.gpu->cudnn_cut_from == 300);
    CHECK(c.gpu->cudnn_cut_layer == "c1");
    CHECK(c.gpu->block <= 31);
    CHECK(c.predictions.size() == 300);
  }
  RunOptions small = big;
  small.block = 8;
  small.gpu_memory = 0;
  RunResult b = gpu->run(data, small);
  REQUIRE(a.predictions.size() == 300);
  CHECK(a.predictions == b.predictions);
  CHECK(a.correct == b.correct);
}

TEST_CASE("gpu: the CIFAR-10 network on the sample, every algorithm, 50000 images cycled" *
          doctest::skip(!gpu_present())) {
  Network net;
  Dataset data;
  if (!test::load_cifar_sample(net, data, "this case")) return;
  REQUIRE(data.count == 2000);
  // Every algorithm over the benchmark's 50000 images (shrunk under the sanitizer).
  const test::CifarBatch cb = test::cifar_batch(data);
  const Dataset& gdata = cb.data;
  const int64_t images = cb.images;

  auto cpu = make_cpu_executor(net);
  RunOptions co;
  co.batch = 2000;
  RunResult ref = cpu->run(data, co);
  int64_t ref_1200 = 0;
  for (int64_t i = 0; i < 1200; ++i)
    ref_1200 += ref.predictions[static_cast<size_t>(i)] == data.labels[static_cast<size_t>(i)];
  CHECK(ref_1200 == 939);  // 78.25 %, the thesis figure

  auto gpu = make_gpu_executor(net);
  MaxErr err;
  compare_layers(net, *gpu, *cpu, data, 0, 64, "cifar10", err);
  MESSAGE("cifar10 layers: max abs error " << err.abs << " (" << err.where << ")");

  for (const char* algo : {"im2col", "implicit", "cudnn", ""}) {
    INFO("algo '" << algo << "'");
    RunOptions o;
    o.batch = images;
    o.cycle = true;
    o.block = cb.block;
    o.conv_algo = algo_of(algo);
    RunResult r = gpu->run(gdata, o);
    int64_t differ = 0, correct = 0;
    for (int64_t i = 0; i < images; ++i) {
      const size_t j = static_cast<size_t>(i % gdata.count);
      differ += r.predictions[static_cast<size_t>(i)] != ref.predictions[j];
      correct += ref.predictions[j] == gdata.labels[j];
    }
    CHECK(differ == 0);
    CHECK(r.correct == correct);
    std::ostringstream o2;
    o2 << "cifar10 " << images << " images, conv " << (*algo ? algo : "auto") << ": forward "
       << r.forward_seconds * 1e3 << " ms, copies not hidden " << r.transfer_seconds * 1e3 << " ms, accuracy "
       << 100.0 * static_cast<double>(r.correct) / static_cast<double>(images) << " %; layers:";
    for (const LayerTime& t : r.layers)
      o2 << " " << t.name << "=" << t.seconds * 1e3 << "ms[" << t.algo << "]";
    Report rep;
    rep.run = r;
    for (const std::string& n : report_notes(rep)) o2 << "\n    " << n;
    MESSAGE(o2.str());
  }
}

namespace {

// One run with RunOptions::resident against the same run copying from host memory, on one
// executor: everything after each block's copy is the same launches, so the predictions, the
// count of correct ones and the output values must be identical.
void check_resident_same(Executor& gpu, const Dataset& data, RunOptions o) {
  RunResult host = gpu.run(data, o);
  o.resident = true;
  RunResult dev = gpu.run(data, o);
  REQUIRE(dev.images == o.batch);
  REQUIRE(host.images == o.batch);
  CHECK(dev.predictions == host.predictions);
  CHECK(dev.correct == host.correct);
  REQUIRE(dev.probs.size() == host.probs.size());
  if (!dev.probs.empty()) {
    test::Compare cmp = test::compare(dev.probs.data(), host.probs.data(), dev.probs.size(), 0.0, 0.0);
    CHECK_MESSAGE(cmp.ok, "output value " << cmp.worst << " differs by " << cmp.max_abs);
  }
  CHECK(dev.engine.find(", input resident on GPU)") != std::string::npos);
  CHECK(host.engine.find("resident") == std::string::npos);
  REQUIRE(dev.gpu);
  REQUIRE(host.gpu);
  CHECK(dev.gpu->resident);
  CHECK(dev.gpu->resident_images == std::min(o.batch, data.count));
  CHECK(dev.gpu->pixels == GpuRunFacts::Pixels::kResident);
  CHECK_FALSE(host.gpu->resident);
  CHECK(host.gpu->pixels != GpuRunFacts::Pixels::kResident);
  CHECK(dev.gpu->graphs != GpuRunFacts::Graphs::kCaptureFailed);
  CHECK(dev.forward_seconds > 0.0);
}

}  // namespace

TEST_CASE("gpu: --resident gives the same predictions as copying from host memory" *
          doctest::skip(!gpu_present())) {
  // Small blocks on several streams, cycling (blocks that wrap past the last distinct image,
  // copied in pieces) and not (only the batch's images on the GPU), every algorithm: with
  // implicit conv1 reads the uint8 pixels itself, the others run the preprocess pass first.
  Network net = parse_netdef_string(kSmallNet, "small");
  random_weights(net, 23);
  Dataset data = gpu_random_data(net.input, 37, 10, 9);
  const RunVariant variants[] = {
      {100, 7, 3, true, "implicit"}, {101, 16, 2, true, "im2col"},  {90, 8, 4, true, "cudnn"},
      {100, 9, 3, true, ""},         {23, 5, 2, false, "implicit"}, {37, 37, 1, false, ""},
  };
  auto gpu = make_gpu_executor(net);
  for (const RunVariant& v : variants) {
    INFO(v.what());
    check_resident_same(*gpu, data, v.options());
  }

  // The CIFAR-10 network at the size the benchmark times (default blocks, three streams,
  // graphs), when the sample is there.
  Network cifar;
  Dataset cdata;
  if (!test::load_cifar_sample(cifar, cdata, "the 50000-image part")) return;
  auto cgpu = make_gpu_executor(cifar);
  const test::CifarBatch cb = test::cifar_batch(cdata);
  for (const char* algo : {"implicit", ""}) {
    INFO("cifar10 " << cb.images << " images, algo '" << algo << "'");
    RunOptions o;
    o.batch = cb.images;
    o.block = cb.block;
    o.cycle = true;
    o.conv_algo = algo_of(algo);
    check_resident_same(*cgpu, cb.data, o);
  }
}

TEST_CASE("gpu: --resident without --block or --streams runs the batch as one block on one stream" *
          doctest::skip(!gpu_present())) {
  // The same launches as an explicit block of the batch on one stream from host memory, so the
  // same predictions and output values; under a gpu_memory cap the block is cut, one stream kept.
  Network net = parse_netdef_string(kSmallNet, "small");
  random_weights(net, 29);
  Dataset data = gpu_random_data(net.input, 37, 10, 11);
  auto gpu = make_gpu_executor(net);
  RunOptions host = one_block_run(true);
  host.streams = 1;
  const RunResult a = gpu->run(data, host);
  RunOptions res = one_block_run(true);
  res.block = 0;  // the executor's choice
  res.resident = true;
  const RunResult b = gpu->run(data, res);
  REQUIRE(b.gpu);
  CHECK(b.gpu->whole_batch);
  CHECK(b.gpu->streams == 1);
  CHECK(b.gpu->blocks == 1);
  CHECK(b.gpu->block == 2000);
  CHECK(b.gpu->block_cut_from == 0);
  // The 37 images repeated to the batch's 2000 on the GPU, read there by the one block (no copy).
  CHECK(b.gpu->pixels_in_place);
  CHECK(b.gpu->resident_images == 2000);
  CHECK(b.gpu->resident_distinct == 37);
  CHECK(b.gpu->resident_bytes == 2000 * data.shape.size());
  CHECK(b.predictions == a.predictions);
  REQUIRE(b.probs.size() == a.probs.size());
  test::Compare cmp = test::compare(b.probs.data(), a.probs.data(), a.probs.size(), 0.0, 0.0);
  CHECK_MESSAGE(cmp.ok, "output value " << cmp.worst << " differs by " << cmp.max_abs);
  Report rep;
  rep.run = b;
  const std::vector<std::string> notes = report_notes(rep);
  CHECK(std::count_if(notes.begin(), notes.end(), [](const std::string& n) {
          return n.find("--resident without --block or --streams: the batch as one block on one stream") !=
                 std::string::npos;
        }) == 1);
  // About 17 KB per image: 40 MiB less the 32 MiB cuBLASLt workspace holds a few hundred images.
  res.gpu_memory = (int64_t{40} << 20) + 37 * data.shape.size();
  const RunResult c = gpu->run(data, res);
  REQUIRE(c.gpu);
  CHECK(c.gpu->whole_batch);
  CHECK(c.gpu->streams == 1);
  CHECK(c.gpu->block_cut_from == 2000);
  CHECK(c.gpu->blocks > 1);
  CHECK_FALSE(c.gpu->pixels_in_place);  // several blocks: each copies its pixels
  CHECK(c.predictions == a.predictions);
  // A batch within the data set: its images on the GPU as they are, read in place; afterwards the
  // layers' values (forward_layers reads the slot's own copy again) are the reference's.
  RunOptions part = res;
  part.gpu_memory = 0;
  part.batch = 30;
  part.cycle = false;
  const RunResult e = gpu->run(data, part);
  REQUIRE(e.gpu);
  CHECK(e.gpu->pixels_in_place);
  CHECK(e.gpu->resident_images == 30);
  REQUIRE(e.predictions.size() == 30);
  CHECK(std::equal(e.predictions.begin(), e.predictions.end(), a.predictions.begin()));
  auto cpu = make_cpu_executor(net);
  CHECK(validate(*gpu, *cpu, net, data, 30, part).pass);
  // Host pixels keep blocks near 4096 images on several streams: 9000 images are 3 of 3000.
  RunOptions plain = res;
  plain.resident = false;
  plain.gpu_memory = 0;
  plain.batch = 9000;
  const RunResult d = gpu->run(data, plain);
  REQUIRE(d.gpu);
  CHECK_FALSE(d.gpu->whole_batch);
  CHECK(d.gpu->streams == 3);
  CHECK(d.gpu->blocks == 3);
  CHECK(d.gpu->block == 3000);
  REQUIRE(d.predictions.size() == 9000);
  CHECK(std::equal(a.predictions.begin(), a.predictions.end(), d.predictions.begin()));
}

TEST_CASE("gpu: float32 values (a float .npy) run as given: the uint8 run's results, and the reference's" *
          doctest::skip(!gpu_present())) {
  // The same images twice: as uint8 pixels (preprocessed on the GPU, or by the implicit kernel
  // reading the bytes), and as the float32 values preprocess_images makes of them, which the GPU
  // engine copies in as they are. Every algorithm, blocks that do not divide the batch, several
  // streams, cycling, --resident; the float runs alternate with uint8 runs on one executor, so
  // slots and graphs made for one kind of input are never used for the other.
  Network net = parse_netdef_string(kSmallNet, "small");
  random_weights(net, 41);
  const Dataset u8 = gpu_random_data(net.input, 37, 10, 13);
  Dataset f32 = u8;
  f32.pixels.clear();
  f32.values.resize(static_cast<size_t>(u8.count * u8.shape.size()));
  preprocess_images(net, u8.pixels.data(), u8.count, f32.values.data());
  REQUIRE(f32.preprocessed());

  auto gpu = make_gpu_executor(net);
  auto cpu = make_cpu_executor(net);
  MaxErr err;
  compare_layers(net, *gpu, *cpu, f32, 3, 30, "float32 input", err);
  MESSAGE("float32 input, every layer against the CPU reference: max abs error " << err.abs << " ("
                                                                                 << err.where << ")");
  RunOptions co;
  co.batch = u8.count;
  co.want_probs = true;
  const RunResult ref = cpu->run(f32, co);

  const RunVariant variants[] = {
      {100, 7, 3, true, "implicit"}, {101, 16, 2, true, "im2col"}, {90, 8, 4, true, "cudnn"},
      {100, 9, 3, true, ""},         {37, 37, 1, false, ""},
  };
  for (const RunVariant& v : variants)
    for (bool resident : {false, true}) {
      INFO(v.what() << " resident " << resident);
      RunOptions o = v.options();
      o.resident = resident;
      const RunResult rf = gpu->run(f32, o);
      const RunResult ru = gpu->run(u8, o);
      REQUIRE(rf.gpu);
      CHECK(rf.gpu->float_input);
      CHECK_FALSE(ru.gpu->float_input);
      REQUIRE(rf.predictions.size() == static_cast<size_t>(v.batch));
      REQUIRE(rf.probs.size() == static_cast<size_t>(v.batch * 10));
      int64_t unclear = 0, differ = 0;
      for (int64_t i = 0; i < v.batch; ++i) {
        const size_t j = static_cast<size_t>(i % u8.count), k = static_cast<size_t>(i);
        test::Compare vs_u8 =
            test::compare(rf.probs.data() + k * 10, ru.probs.data() + k * 10, 10, kAtol, kRtol);
        test::Compare vs_ref =
            test::compare(rf.probs.data() + k * 10, ref.probs.data() + j * 10, 10, kAtol, kRtol);
        CHECK(vs_u8.ok);
        CHECK(vs_ref.ok);
        // A prediction may differ only where the two best classes are within the tolerance.
        std::vector<float> p(ref.probs.begin() + static_cast<std::ptrdiff_t>(j * 10),
                             ref.probs.begin() + static_cast<std::ptrdiff_t>(j * 10 + 10));
        std::sort(p.begin(), p.end());
        const bool close = p[9] - p[8] < 1e-4f;
        unclear += close;
        differ += !close && rf.predictions[k] != ref.predictions[j];
      }
      CHECK(differ == 0);
      MESSAGE(v.what() << " resident " << resident << ": " << unclear << " near-ties");
    }
  // Data that is neither: values of the wrong count are refused before anything runs.
  Dataset short_values = f32;
  short_values.values.resize(10);
  RunOptions o;
  o.batch = 2;
  CHECK_THROWS_AS(gpu->run(short_values, o), Error);
}

TEST_CASE("the CPU executor refuses RunOptions::resident") {
  Network net = parse_netdef_string(kSmallNet, "small");
  random_weights(net, 1);
  Dataset data = gpu_random_data(net.input, 3, 10, 1);
  RunOptions o;
  o.resident = true;
  CHECK_THROWS_WITH_AS(make_cpu_executor(net)->run(data, o),
                       "--resident needs --engine gpu: the CPU executor has no device memory", Error);
}
