// The CPU executor's bookkeeping around the layers: counting, predictions, probabilities,
// cycling through a data set, blocks and threads, progress and the errors it must raise.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "engine/network.h"
#include "engine/report.h"
#include "reference/cpu_executor.h"
#include "tests/test_util.h"

namespace cnnrun::test {
namespace {

// A small CIFAR-10-like network (conv, relu, pool, dropout, fc, softmax) with random weights.
Network small_net() {
  Network net = parse_netdef_string(
      "input: {channels: 3, height: 12, width: 10}\n"
      "classes: [a, b, c, d, e]\n"
      "layers:\n"
      "  - {name: conv1, type: conv, filters: 6, kernel: 5, pad: 2}\n"
      "  - {name: relu1, type: relu}\n"
      "  - {name: pool1, type: maxpool, size: 2}\n"
      "  - {name: conv2, type: conv, filters: 8, kernel: 3, stride: 2, pad: 1}\n"
      "  - {name: relu2, type: tanh}\n"
      "  - {name: drop, type: dropout, rate: 0.3}\n"
      "  - {name: fc, type: fc, outputs: 5}\n"
      "  - {name: prob, type: softmax}\n",
      "small");
  test::uniform_weights(net, 1, -0.3f, 0.3f);
  return net;
}

Dataset random_data(const Network& net, int64_t count, uint32_t seed) {
  Dataset d;
  d.count = count;
  d.shape = net.input;
  d.description = "random";
  for (float v : random_floats(static_cast<size_t>(count * d.shape.size()), seed, 0.f, 255.99f))
    d.pixels.push_back(static_cast<uint8_t>(v));
  d.labels.assign(static_cast<size_t>(count), 0);
  return d;
}

int32_t argmax(const float* v, int64_t n) {
  int32_t best = 0;
  for (int32_t k = 1; k < n; ++k)
    if (v[k] > v[best]) best = k;
  return best;
}

}  // namespace

TEST_CASE("cpu run: predictions are the argmax of forward_layers' output, correct counts labels") {
  Network net = small_net();
  Dataset data = random_data(net, 50, 7);
  auto ex = make_cpu_executor(net);
  std::vector<Tensor> outs = ex->forward_layers(data, 0, data.count, RunOptions{});
  const Tensor& y = outs[static_cast<size_t>(net.output)];
  REQUIRE(y.dims == std::vector<int64_t>{50, 5, 1, 1});
  // Labels right for every third image and wrong for the others.
  std::vector<int32_t> want(50);
  int64_t want_correct = 0;
  for (int64_t i = 0; i < 50; ++i) {
    want[static_cast<size_t>(i)] = argmax(y.ptr() + i * 5, 5);
    const bool right = i % 3 == 0;
    data.labels[static_cast<size_t>(i)] =
        static_cast<uint8_t>(right ? want[static_cast<size_t>(i)] : (want[static_cast<size_t>(i)] + 1) % 5);
    want_correct += right;
  }
  RunOptions opt;
  opt.batch = 50;
  opt.want_probs = true;
  opt.block = 16;
  RunResult r = ex->run(data, opt);
  CHECK(r.images == 50);
  CHECK(r.correct == want_correct);
  CHECK(r.predictions == want);
  REQUIRE(r.probs.size() == 250);
  Compare c = compare(r.probs.data(), y.ptr(), 250, 1e-6, 1e-5);
  CHECK(c.ok);
  // The predictions are not all one class (else the argmax check above would prove little).
  CHECK(std::count(want.begin(), want.end(), want[0]) < 50);

  REQUIRE(r.layers.size() == net.layers.size());
  for (size_t i = 0; i < net.layers.size(); ++i) {
    CHECK(r.layers[i].name == net.layers[i]->name);
    CHECK(r.layers[i].type == net.layers[i]->type);
    CHECK(r.layers[i].seconds >= 0);
  }
  CHECK(r.layers[0].algo == "im2col+gemm");
  CHECK(r.layers[5].algo == "identity");
  CHECK(r.engine.rfind("cpu (eigen 3.", 0) == 0);
  CHECK(r.forward_seconds > 0);
}

TEST_CASE("cpu run: cycling repeats the data set; without cycle a larger batch is an error") {
  Network net = small_net();
  Dataset data = random_data(net, 13, 9);
  for (int64_t i = 0; i < 13; ++i) data.labels[static_cast<size_t>(i)] = static_cast<uint8_t>(i % 5);
  auto ex = make_cpu_executor(net);
  RunOptions opt;
  opt.batch = 13;
  RunResult once = ex->run(data, opt);

  opt.batch = 13 * 2 + 6;
  opt.cycle = true;
  opt.block = 5;
  RunResult r = ex->run(data, opt);
  REQUIRE(r.predictions.size() == 32);
  for (size_t i = 0; i < 32; ++i) CHECK(r.predictions[i] == once.predictions[i % 13]);
  int64_t first6 = 0;
  for (size_t i = 0; i < 6; ++i) first6 += once.predictions[i] == data.labels[i];
  CHECK(r.correct == 2 * once.correct + first6);

  opt.cycle = false;
  CHECK_THROWS_WITH_AS(ex->run(data, opt), doctest::Contains("exceeds the data set's 13 images"), Error);
}

TEST_CASE("cpu run: one thread and two threads give identical outputs") {
  Network net = small_net();
  Dataset data = random_data(net, 100, 3);
  auto ex = make_cpu_executor(net);
  RunOptions opt;
  opt.batch = 100;
  opt.want_probs = true;
  opt.block = 8;
  opt.threads = 1;
  RunResult a = ex->run(data, opt);
  opt.threads = 2;
  RunResult b = ex->run(data, opt);
  CHECK(a.engine.find("1 thread)") != std::string::npos);
  CHECK(b.engine.find("2 threads)") != std::string::npos);
  REQUIRE(a.probs.size() == b.probs.size());
  CHECK(std::memcmp(a.probs.data(), b.probs.data(), a.probs.size() * sizeof(float)) == 0);
  CHECK(a.predictions == b.predictions);
  CHECK(a.correct == b.correct);
}

TEST_CASE("cpu run: a block size that does not divide the batch") {
  Network net = small_net();
  Dataset data = random_data(net, 50, 4);
  auto ex = make_cpu_executor(net);
  RunOptions opt;
  opt.batch = 50;
  opt.want_probs = true;
  opt.block = 10;
  RunResult a = ex->run(data, opt);
  std::vector<std::pair<int64_t, int64_t>> calls;
  opt.block = 7;
  opt.progress = [&](int64_t done, int64_t total) { calls.emplace_back(done, total); };
  RunResult b = ex->run(data, opt);
  CHECK(b.images == 50);
  CHECK(b.predictions == a.predictions);
  Compare c = compare(b.probs.data(), a.probs.data(), a.probs.size(), 1e-6, 1e-5);
  CHECK(c.ok);
  // One call per block (8 blocks of 7, the last of 1), increasing, ending at the total.
  REQUIRE(calls.size() == 8);
  for (size_t i = 1; i < calls.size(); ++i) CHECK(calls[i].first > calls[i - 1].first);
  CHECK(calls.back() == std::make_pair<int64_t, int64_t>(50, 50));
}

TEST_CASE("cpu forward_layers: a range inside the data set, every layer's output") {
  Network net = small_net();
  Dataset data = random_data(net, 20, 5);
  auto ex = make_cpu_executor(net);
  std::vector<Tensor> all = ex->forward_layers(data, 0, 20, RunOptions{});
  std::vector<Tensor> part = ex->forward_layers(data, 5, 11, RunOptions{});
  REQUIRE(part.size() == net.layers.size());
  for (size_t i = 0; i < part.size(); ++i) {
    const Shape s = net.layers[i]->out_shape;
    CAPTURE(net.layers[i]->name);
    REQUIRE(part[i].dims == std::vector<int64_t>{11, s.c, s.h, s.w});
    Compare c =
        compare(part[i].ptr(), all[i].ptr() + 5 * s.size(), static_cast<size_t>(11 * s.size()), 1e-6, 1e-5);
    CHECK(c.ok);
  }
  // dropout is identity: its output equals its input's.
  CHECK(all[5].data == all[4].data);
  CHECK_THROWS_WITH_AS(ex->forward_layers(data, 15, 6, RunOptions{}),
                       doctest::Contains("outside the data set's 20 images"), Error);
}

TEST_CASE("cpu executor: wrong image shape and missing weights are errors") {
  Network net = small_net();
  Dataset data = random_data(net, 4, 5);
  data.shape = Shape{1, 12, 10};
  auto ex = make_cpu_executor(net);
  RunOptions opt;
  opt.batch = 4;
  CHECK_THROWS_WITH_AS(ex->run(data, opt), doctest::Contains("takes 3x12x10"), Error);
  data.shape = net.input;
  net.layers[3]->weights.erase("bias");
  CHECK_THROWS_WITH_AS(ex->run(data, opt), doctest::Contains("layer 'conv2': weight 'bias' was not loaded"),
                       Error);
}

TEST_CASE("cpu run: layer outputs share memory by lifetime, with forward_layers' exact values") {
  // Branches that stay in use across other layers (a residual add, a concat, a squeeze-and-
  // excitation product), identities in between and an identity as the output.
  Network net = parse_netdef_string(
      "input: {channels: 3, height: 10, width: 9}\n"
      "classes: [a, b, c, d, e, f]\n"
      "layers:\n"
      "  - {name: c1, type: conv, filters: 8, kernel: 3, pad: 1}\n"
      "  - {name: r1, type: relu}\n"
      "  - {name: c2, type: conv, filters: 8, kernel: 3, pad: 1}\n"
      "  - {name: bn2, type: batchnorm}\n"
      "  - {name: c3, type: conv, filters: 8, kernel: 3, pad: 1}\n"
      "  - {name: sum, type: add, inputs: [c3, r1]}\n"
      "  - {name: r3, type: relu}\n"
      "  - {name: gap, type: avgpool, global: true}\n"
      "  - {name: s1, type: conv, filters: 8, kernel: 1}\n"
      "  - {name: sg, type: sigmoid}\n"
      "  - {name: se, type: mul, inputs: [r3, sg]}\n"
      "  - {name: b1, type: conv, filters: 4, kernel: 1, inputs: bn2}\n"
      "  - {name: cat, type: concat, inputs: [se, b1, r1]}\n"
      "  - {name: p, type: maxpool, size: 2}\n"
      "  - {name: f, type: flatten}\n"
      "  - {name: fc, type: fc, outputs: 6}\n"
      "  - {name: drop, type: dropout, rate: 0.2}\n",
      "branchy");
  test::uniform_weights(net, 3, -0.3f, 0.3f);
  Dataset data = random_data(net, 11, 9);
  auto ex = make_cpu_executor(net);
  const std::vector<Tensor> outs = ex->forward_layers(data, 0, data.count, RunOptions{});
  const Tensor& y = outs[static_cast<size_t>(net.output)];
  for (int threads : {1, 2}) {
    RunOptions o;
    o.batch = 11;
    o.block = 3;  // blocks of 3, 3, 3 and 2
    o.threads = threads;
    o.want_probs = true;
    const RunResult r = ex->run(data, o);
    CAPTURE(threads);
    REQUIRE(r.cpu);
    CHECK(r.cpu->buffers.count == 15);  // every layer but the flatten and the dropout
    CHECK(r.cpu->buffers.allocations < r.cpu->buffers.count);
    REQUIRE(r.probs.size() == y.data.size());
    CHECK(std::memcmp(r.probs.data(), y.data.data(), y.data.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("cpu run: the report names each conv's algorithm (depthwise ones computed directly)") {
  Network net = parse_netdef_string(
      "input: {channels: 3, height: 8, width: 8}\n"
      "classes: 4\n"
      "layers:\n"
      "  - {name: dense, type: conv, filters: 8, kernel: 3, pad: 1}\n"
      "  - {name: dw, type: conv, filters: 16, kernel: 3, stride: 2, pad: 1, groups: 8}\n"
      "  - {name: grouped, type: conv, filters: 8, kernel: 1, groups: 4}\n"
      "  - {name: gap, type: avgpool, global: true}\n"
      "  - {name: fc, type: fc, outputs: 4}\n",
      "algos");
  test::uniform_weights(net, 5, -0.3f, 0.3f);
  Dataset data = random_data(net, 3, 4);
  RunOptions o;
  o.batch = 3;
  const RunResult r = make_cpu_executor(net)->run(data, o);
  REQUIRE(r.layers.size() == 5);
  CHECK(r.layers[0].algo == "im2col+gemm");
  CHECK(r.layers[1].algo == "depthwise");    // one input channel per group, a multiplier of 2
  CHECK(r.layers[2].algo == "im2col+gemm");  // 2 channels per group
  CHECK(r.layers[4].algo == "gemm");
}

TEST_CASE("block_shape: --block and --streams as given; --resident without them, the batch on one stream") {
  RunOptions o;
  auto shape = [&](int64_t batch) { return block_shape(batch, o, 4096, 3); };
  // Host pixels: blocks near 4096, equal but the last, on the default streams.
  BlockShape s = shape(10000);
  CHECK(s.block == 3334);
  CHECK(s.streams == 3);
  CHECK_FALSE(s.whole_batch);
  CHECK(shape(4096).block == 4096);
  CHECK(shape(4097).block == 2049);
  CHECK(shape(7).block == 7);
  CHECK(shape(0).block == 0);
  // Resident pixels: no copy to hide, so one block of the whole batch on one stream.
  o.resident = true;
  s = shape(10000);
  CHECK(s.block == 10000);
  CHECK(s.streams == 1);
  CHECK(s.whole_batch);
  CHECK(shape(50000).block == 50000);
  // Either option given keeps the other's usual default.
  o.block = 500;
  s = shape(10000);
  CHECK(s.block == 500);
  CHECK(s.streams == 3);
  CHECK_FALSE(s.whole_batch);
  o.block = 0;
  o.streams = 2;
  s = shape(10000);
  CHECK(s.block == 3334);
  CHECK(s.streams == 2);
  CHECK_FALSE(s.whole_batch);
  // A block larger than the batch is the batch.
  o.resident = false;
  o.streams = 0;
  o.block = 20000;
  CHECK(shape(10000).block == 10000);
}

TEST_CASE("median_run: the median forward time, the run nearest it, and the first run's GPU setup") {
  auto make = [](double fwd, double setup, int32_t tag) {
    RunResult r;
    r.forward_seconds = fwd;
    r.predictions = {tag};
    r.gpu = GpuRunFacts{};
    r.gpu->setup_seconds = setup;
    return r;
  };
  // Odd count: the middle run itself; its setup replaced by the first run's (the search).
  RunResult r = median_run({make(0.5, 9.0, 0), make(0.1, 0.01, 1), make(0.3, 0.02, 2)});
  CHECK(r.forward_seconds == 0.3);
  CHECK(r.predictions == std::vector<int32_t>{2});
  CHECK(r.gpu->setup_seconds == 9.0);
  // Even count: the mean of the middle two, the run nearest it (the first of equals).
  r = median_run({make(0.4, 5.0, 0), make(0.1, 0.01, 1), make(0.2, 0.02, 2), make(0.9, 0.03, 3)});
  CHECK(r.forward_seconds == doctest::Approx(0.3));
  CHECK(r.predictions == std::vector<int32_t>{0});
  CHECK(r.gpu->setup_seconds == 5.0);
  // One run: itself; no GPU facts stay none.
  RunResult cpu;
  cpu.forward_seconds = 0.7;
  r = median_run({cpu});
  CHECK(r.forward_seconds == 0.7);
  CHECK_FALSE(r.gpu.has_value());
  CHECK_THROWS_AS(median_run({}), Error);
  // Warm-up runs (--warmup): out of the median and never picked, though the first one's setup
  // is kept. Counted, the 9.0 s run would make the median 0.5 and pick it.
  r = median_run(
      {make(9.0, 7.0, 0), make(0.5, 0.01, 1), make(0.1, 0.02, 2), make(0.3, 0.03, 3), make(0.2, 0.04, 4)}, 2);
  CHECK(r.forward_seconds == 0.2);
  CHECK(r.predictions == std::vector<int32_t>{4});
  CHECK(r.gpu->setup_seconds == 7.0);
  CHECK_THROWS_AS(median_run({make(0.1, 1.0, 0), make(0.2, 1.0, 1)}, 2), Error);
}

TEST_CASE("report: --warmup and --repeat list every run's time, and on the GPU its busy time") {
  Report rep;
  rep.run.forward_seconds = 0.002;
  rep.warmup_seconds = {0.009, 0.003};
  rep.repeat_seconds = {0.001, 0.002, 0.004};
  auto note = [&](const std::string& prefix) {
    for (const std::string& n : report_notes(rep))
      if (n.rfind(prefix, 0) == 0) return n;
    return std::string();
  };
  CHECK(note("--warmup") ==
        "--warmup 2: forward times (ms) 9.000000 3.000000; run before the timed runs, not in "
        "the median");
  CHECK(note("--repeat") ==
        "--repeat 3: forward times (ms) 1.000000 2.000000 4.000000; the report shows the run "
        "nearest the median, with forward time = median 2.000000 ms");
  // GPU runs: the busy times after the forward times (which bench/zoo_bench.py reads up to the ';').
  rep.warmup_busy_seconds = {0.0025, 0.0028};
  rep.repeat_busy_seconds = {0.0009, 0.0019, 0.0021};
  CHECK(note("--warmup") ==
        "--warmup 2: forward times (ms) 9.000000 3.000000; GPU busy with compute (ms) "
        "2.500000 2.800000; run before the timed runs, not in the median");
  CHECK(note("--repeat") ==
        "--repeat 3: forward times (ms) 1.000000 2.000000 4.000000; GPU busy with compute (ms) "
        "0.900000 1.900000 2.100000; the report shows the run nearest the median, with forward "
        "time = median 2.000000 ms");
}

TEST_CASE("report: the CUDA graph note names the short last block's graph, or why it launched directly") {
  Report rep;
  GpuRunFacts& g = rep.run.gpu.emplace();
  g.graphs = GpuRunFacts::Graphs::kCaptured;
  g.block = 3334;
  auto graph_note = [&] {
    for (const std::string& n : report_notes(rep))
      if (n.find("CUDA graph") != std::string::npos) return n;
    return std::string();
  };
  // Equal blocks: the full blocks' graphs only.
  CHECK(
      graph_note() ==
      "gpu: each full block (3334 images) after its H2D copy is one CUDA graph launch (captured per stream)");
  g.short_graph = 3332;
  CHECK(
      graph_note() ==
      "gpu: each full block (3334 images) after its H2D copy is one CUDA graph launch (captured per stream), "
      "the short last block (3332 images) one more (captured on its stream)");
  g.short_graph = 0;
  g.short_graph_error = "CUDA error: operation not permitted when stream is capturing";
  CHECK(
      graph_note() ==
      "gpu: each full block (3334 images) after its H2D copy is one CUDA graph launch (captured per stream); "
      "the short last block launches directly, its capture failed: CUDA error: operation not permitted when "
      "stream is capturing");
  g.graphs = GpuRunFacts::Graphs::kCaptureFailed;
  g.graph_error = "out of memory";
  CHECK(graph_note() == "gpu: CUDA graph capture failed, launching directly: out of memory");
}

TEST_CASE("report: the stem's measured input, and the timed note when the stem read the pixels itself") {
  Report rep;
  GpuRunFacts& g = rep.run.gpu.emplace();
  g.resident = true;
  g.resident_images = 256;
  g.resident_distinct = 256;
  g.resident_bytes = 38535168;
  auto note = [&](const std::string& part) {
    for (const std::string& n : report_notes(rep))
      if (n.find(part) != std::string::npos) return n;
    return std::string();
  };
  // No search of the stem's input: no note; the preprocess pass is timed.
  CHECK(note("stem reads").empty());
  CHECK(note("gpu: timed:") ==
        "gpu: timed: forward, input resident on GPU: the 256 distinct images' uint8 pixels (38535168 bytes) "
        "were uploaded before the clock; each block's device-to-device copy of its uint8 pixels, preprocess, "
        "every layer, argmax and the predictions (4 bytes per image) copied to host memory are timed");
  CHECK(note("gpu: preprocess ").find("gpu: preprocess 0.000 ms, ") == 0);
  CHECK(note("gpu: preprocess ").find(", D2D pixels 0.000 ms, ") != std::string::npos);
  // A batch of 1000 uploaded whole from 256 distinct images and read in place by its one block.
  g.resident_images = 1000;
  g.pixels_in_place = true;
  CHECK(note("gpu: timed:") ==
        "gpu: timed: forward, input resident on GPU: the 1000 images' uint8 pixels (256 distinct, repeated; "
        "38535168 bytes) were uploaded before the clock; read where they lie (no copy), preprocess, every "
        "layer, argmax and the predictions (4 bytes per image) copied to host memory are timed");
  CHECK(note("gpu: preprocess ").find(", labels 0.000 ms, ") != std::string::npos);
  g.resident_images = 256;
  g.pixels_in_place = false;
  // The search kept the bytes: the faster time first, the pass named fused, not timed.
  g.stem_input.layer = "conv1";
  g.stem_input.bytes = true;
  g.stem_input.bytes_seconds = 4.3144e-3;
  g.stem_input.floats_seconds = 5.1201e-3;
  g.input_fused_into = "conv1";
  CHECK(note("stem reads") ==
        "gpu: conv1's stem reads the uint8 pixels: 4.314 ms against 5.120 ms for the floats and the "
        "preprocess pass, timed at setup");
  CHECK(note("gpu: timed:") ==
        "gpu: timed: forward, input resident on GPU: the 256 distinct images' uint8 pixels (38535168 bytes) "
        "were uploaded before the clock; each block's device-to-device copy of its uint8 pixels, every layer "
        "(conv1 reads the uint8 pixels itself: no preprocess pass), argmax and the predictions (4 bytes per "
        "image) copied to host memory are timed");
  CHECK(note("gpu: preprocess ").find("gpu: preprocess fused into conv1 (it reads the uint8 pixels), ") == 0);
  // The search kept the floats: their time first, the pass timed.
  g.stem_input.bytes = false;
  g.stem_input.floats_seconds = 2.4108e-3;
  g.stem_input.bytes_seconds = 2.6171e-3;
  g.input_fused_into.clear();
  CHECK(note("stem reads") ==
        "gpu: conv1's stem reads the floats after the preprocess pass: 2.411 ms against 2.617 ms reading the "
        "uint8 pixels, timed at setup");
  CHECK(note("gpu: timed:").find("uint8 pixels, preprocess, every layer, argmax") != std::string::npos);
}

}  // namespace cnnrun::test
