// Issue 15's layers through netdefs on the GPU executor against the CPU reference, layer by layer:
// grouped, depthwise and dilated convolutions (odd sizes, stride and dilation together, channel
// multipliers) on every algorithm that can run them, and the refusal of those that cannot; every
// activation fused into a conv's and an fc's epilogue and run alone; ceil_mode and adaptive
// pooling, including a ceil_mode 2x2 max-pool after a conv + ReLU that the implicit kernel must not
// fuse; squeeze-and-excitation's broadcast mul; nearest and bilinear upsampling. The kernels alone
// against plain loops are in test_gpu_kernels.cpp. GPU cases skip without a GPU.
#include <sstream>

#include "engine/gpu_api.h"
#include "engine/network.h"
#include "reference/cpu_executor.h"
#include "tests/test_util.h"

using namespace cnnrun;
using test::algo_of;
using test::classes;
using test::compare_layers;
using test::gpu_present;
using test::gpu_random_data;
using test::MaxErr;
using test::random_weights;

namespace {

// The new activations as netdef layers, with their keys.
const char* const kActLayers[] = {"type: relu",
                                  "type: relu6",
                                  "type: leaky_relu",
                                  "type: leaky_relu, slope: 0.2",
                                  "type: hardswish",
                                  "type: hardsigmoid",
                                  "type: silu",
                                  "type: gelu",
                                  "type: gelu, approximate: tanh",
                                  "type: tanh",
                                  "type: sigmoid"};
constexpr int kNumActs = sizeof(kActLayers) / sizeof(kActLayers[0]);

struct GroupCase {
  int c, f, groups, kh, kw, sh, sw, ph, pw, dh, dw, h, w, n;
};

// Depthwise (MobileNet's 3x3 stride 1 and 2, EfficientNet's 5x5, a channel multiplier of 2, stride
// and dilation together), grouped (ResNeXt's 32 channels in 4 groups, 2 groups of odd sizes, groups
// with dilation) and dense dilated convolutions, non-square where it matters.
const GroupCase kGroupCases[] = {
    {32, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1, 16, 16, 3}, {24, 24, 24, 3, 3, 2, 2, 1, 1, 1, 1, 17, 15, 2},
    {40, 40, 40, 5, 5, 2, 2, 2, 2, 1, 1, 14, 14, 3}, {8, 16, 8, 3, 3, 1, 1, 1, 1, 1, 1, 9, 11, 2},
    {12, 12, 12, 3, 3, 2, 2, 2, 2, 2, 2, 23, 19, 3}, {16, 32, 4, 3, 3, 1, 1, 1, 1, 1, 1, 10, 10, 2},
    {6, 10, 2, 3, 3, 2, 2, 1, 1, 1, 1, 13, 11, 3},   {12, 12, 3, 3, 3, 1, 1, 2, 2, 2, 2, 15, 15, 2},
    {5, 7, 1, 3, 3, 1, 1, 2, 2, 2, 2, 16, 14, 3},    {6, 9, 3, 3, 5, 2, 1, 2, 4, 2, 3, 17, 21, 2},
    {96, 96, 96, 3, 3, 1, 1, 1, 1, 1, 1, 7, 7, 5},   {5, 5, 5, 3, 3, 1, 1, 1, 1, 1, 1, 70, 45, 1}};

std::string group_netdef(const GroupCase& k, int act) {
  std::ostringstream o;
  o << "name: grouped\ninput: {channels: " << k.c << ", height: " << k.h << ", width: " << k.w << "}\n"
    << "classes: " << classes(10) << "\nlayers:\n"
    << "  - {name: conv1, type: conv, filters: " << k.f << ", groups: " << k.groups << ", kernel: [" << k.kh
    << ", " << k.kw << "], stride: [" << k.sh << ", " << k.sw << "], pad: [" << k.ph << ", " << k.pw
    << "], dilation: [" << k.dh << ", " << k.dw << "]}\n"
    << "  - {name: act1, " << kActLayers[act % kNumActs] << "}\n"
    << "  - {name: gap, type: avgpool, global: true}\n"
    << "  - {name: fc, type: fc, outputs: 10}\n";
  return o.str();
}

bool is_depthwise(const GroupCase& k) { return k.groups == k.c && k.f % k.c == 0; }

}  // namespace

TEST_CASE(
    "gpu: grouped, depthwise and dilated conv vs reference, every "
    "algorithm that runs them" *
    doctest::skip(!gpu_present())) {
  MaxErr err;
  uint32_t seed = 300;
  int act = 0;
  for (const GroupCase& k : kGroupCases) {
    std::vector<std::string> algos = {"cudnn", ""};
    if (is_depthwise(k)) algos.push_back("depthwise");
    if (k.groups == 1) algos.push_back("im2col");  // im2col computes dilation, not groups
    for (const std::string& algo : algos) {
      Network net = parse_netdef_string(group_netdef(k, act), "grouped");
      net.layers[0]->algo = algo_of(algo);
      random_weights(net, seed);
      Dataset data = gpu_random_data(net.input, k.n + 2, 10, seed);
      auto gpu = make_gpu_executor(net);
      auto cpu = make_cpu_executor(net);
      std::ostringstream what;
      what << "algo '" << algo << "' C" << k.c << " F" << k.f << " groups " << k.groups << " k" << k.kh << "x"
           << k.kw << " s" << k.sh << "x" << k.sw << " p" << k.ph << "x" << k.pw << " d" << k.dh << "x"
           << k.dw << " in " << k.h << "x" << k.w << " n" << k.n << " " << kActLayers[act % kNumActs];
      compare_layers(net, *gpu, *cpu, data, 1, k.n, what.str(), err);
      // Every activation runs in the conv's epilogue, whichever algorithm ran it.
      CHECK(gpu->fused_into(0, RunOptions{}) == "act1");
    }
    // The dense algorithms refuse, with the reason, what they do not compute.
    for (const char* algo : {"implicit", "im2col"}) {
      if (std::string(algo) == "im2col" && k.groups == 1) continue;
      Network net = parse_netdef_string(group_netdef(k, act), "grouped");
      net.layers[0]->algo = algo_of(algo);
      random_weights(net, seed);
      Dataset data = gpu_random_data(net.input, 2, 10, seed);
      auto gpu = make_gpu_executor(net);
      RunOptions o;
      o.batch = 2;
      CHECK_THROWS_WITH_AS(gpu->run(data, o),
                           doctest::Contains(k.groups > 1 ? "grouped convolution" : "dilated convolution"),
                           Error);
    }
    ++seed, ++act;
  }
  MESSAGE("grouped/depthwise/dilated conv: max abs error " << err.abs << " (" << err.where << ")");
}

TEST_CASE("gpu: --conv-algo depthwise refuses a dense convolution" * doctest::skip(!gpu_present())) {
  Network net = parse_netdef_string(group_netdef({4, 8, 1, 3, 3, 1, 1, 1, 1, 1, 1, 8, 8, 1}, 0), "dense");
  random_weights(net, 1);
  Dataset data = gpu_random_data(net.input, 2, 10, 1);
  auto gpu = make_gpu_executor(net);
  RunOptions o;
  o.batch = 2;
  o.conv_algo = ConvAlgo::kDepthwise;
  CHECK_THROWS_WITH_AS(gpu->run(data, o), doctest::Contains("depthwise"), Error);
}

namespace {

// Every activation after a conv (fused into its epilogue), after an fc (fused into the GEMM's), and
// after an add: with `residual` the add and its activation run in c2's epilogue (c2 is read only by
// the add, whose other input came first); without it c2 ends in its own activation b2, so the add
// and a2 run as passes of their own.
std::string act_netdef(int act, bool residual) {
  std::ostringstream o;
  o << "name: acts\ninput: {channels: 3, height: 9, width: 11}\nclasses: " << classes(6) << "\nlayers:\n"
    << "  - {name: c1, type: conv, filters: 12, kernel: 3, pad: 1}\n"
    << "  - {name: a1, " << kActLayers[act] << "}\n"
    << "  - {name: c2, type: conv, filters: 12, kernel: 3, pad: 1}\n";
  if (!residual) o << "  - {name: b2, " << kActLayers[act] << "}\n";
  o << "  - {name: sum, type: add, inputs: [a1, " << (residual ? "c2" : "b2") << "]}\n"
    << "  - {name: a2, " << kActLayers[act] << "}\n"
    << "  - {name: flat, type: flatten}\n"
    << "  - {name: fc1, type: fc, outputs: 16}\n"
    << "  - {name: a3, " << kActLayers[act] << "}\n"
    << "  - {name: fc2, type: fc, outputs: 6}\n";
  return o.str();
}

}  // namespace

TEST_CASE(
    "gpu: every activation vs reference: fused into conv and fc "
    "epilogues, into a residual add's, and alone" *
    doctest::skip(!gpu_present())) {
  MaxErr err;
  for (int act = 0; act < kNumActs; ++act)
    for (const bool residual : {true, false})
      for (const char* algo : {"implicit", "im2col", "cudnn"}) {
        Network net = parse_netdef_string(act_netdef(act, residual), "acts");
        for (auto& l : net.layers)
          if (l->kind == LayerKind::kConv) l->algo = algo_of(algo);
        random_weights(net, 40 + static_cast<uint32_t>(act));
        Dataset data = gpu_random_data(net.input, 7, 6, 9);
        auto gpu = make_gpu_executor(net);
        auto cpu = make_cpu_executor(net);
        const std::string what = std::string(algo) + " " + kActLayers[act] + (residual ? " residual" : "");
        compare_layers(net, *gpu, *cpu, data, 0, 7, what, err);
        INFO(what);
        CHECK(gpu->fused_into(net.find("c1"), RunOptions{}) == "a1");
        CHECK(gpu->fused_into(net.find("fc1"), RunOptions{}) == "a3");
        if (residual) {
          CHECK(gpu->fused_into(net.find("c2"), RunOptions{}) == "a2");
          CHECK(gpu->fused_into(net.find("sum"), RunOptions{}) == "a2");
        } else {
          CHECK(gpu->fused_into(net.find("c2"), RunOptions{}) == "b2");
          CHECK(gpu->fused_into(net.find("sum"), RunOptions{}).empty());  // a2 runs alone
        }
      }
  MESSAGE("activations: max abs error " << err.abs << " (" << err.where << ")");
}

TEST_CASE("gpu: ceil_mode and adaptive pooling vs reference" * doctest::skip(!gpu_present())) {
  // GoogLeNet's 3/2 ceil_mode max-pools on odd and even sizes, a padded ceil_mode average pool
  // whose last window hangs past the padding (both count_pad), adaptive max and average pools to
  // sizes that do and do not divide the input and to a larger one, and a 2x2/2 ceil_mode max-pool
  // on a conv + ReLU's odd output: the implicit kernel's fused pool floors, so it must not take it.
  const char* text = R"(
name: pools
input: {channels: 3, height: 15, width: 13}
classes: [a, b, c, d, e]
layers:
  - {name: c1, type: conv, filters: 8, kernel: 3, pad: 1}
  - {name: r1, type: relu}
  - {name: mp2, type: maxpool, size: 2, stride: 2, ceil_mode: true}
  - {name: mp3, type: maxpool, size: 3, stride: 2, ceil_mode: true, inputs: r1}
  - {name: ap3, type: avgpool, size: 3, stride: 2, pad: 1, ceil_mode: true, inputs: r1}
  - {name: ap3x, type: avgpool, size: 3, stride: 2, pad: 1, ceil_mode: true, count_pad: false, inputs: r1}
  - {name: amax, type: maxpool, output: [4, 3], inputs: r1}
  - {name: aavg, type: avgpool, output: [5, 5], inputs: r1}
  - {name: abig, type: avgpool, output: [17, 14], inputs: r1}
  - {name: a1, type: avgpool, output: 1, inputs: mp3}
  - {name: f1, type: flatten, inputs: mp2}
  - {name: f2, type: flatten, inputs: ap3}
  - {name: f3, type: flatten, inputs: ap3x}
  - {name: f4, type: flatten, inputs: amax}
  - {name: f5, type: flatten, inputs: aavg}
  - {name: f6, type: flatten, inputs: abig}
  - {name: f7, type: flatten, inputs: a1}
  - {name: cat, type: concat, inputs: [f1, f2, f3, f4, f5, f6, f7]}
  - {name: fc, type: fc, outputs: 5}
)";
  MaxErr err;
  for (const char* algo : {"implicit", "im2col", "cudnn"}) {
    Network net = parse_netdef_string(text, "pools");
    net.layers[0]->algo = algo_of(algo);
    random_weights(net, 17);
    Dataset data = gpu_random_data(net.input, 6, 5, 4);
    auto gpu = make_gpu_executor(net);
    auto cpu = make_cpu_executor(net);
    compare_layers(net, *gpu, *cpu, data, 0, 6, algo, err);
    CHECK(net.layers[static_cast<size_t>(net.find("mp2"))]->out_shape.h == 8);  // ceil: 15 -> 8
    CHECK(gpu->fused_into(net.find("r1"), RunOptions{}).empty());  // several readers: materialised
  }
  // The 2x2 ceil_mode pool as the only reader of the ReLU: fusable shapes except for ceil_mode.
  const char* fused = R"(
name: ceil2
input: {channels: 3, height: 15, width: 13}
classes: [a, b, c, d, e]
layers:
  - {name: c1, type: conv, filters: 8, kernel: 3, pad: 1}
  - {name: r1, type: relu}
  - {name: mp2, type: maxpool, size: 2, stride: 2, ceil_mode: true}
  - {name: fc, type: fc, outputs: 5}
)";
  Network net = parse_netdef_string(fused, "ceil2");
  net.layers[0]->algo = ConvAlgo::kImplicit;
  random_weights(net, 18);
  Dataset data = gpu_random_data(net.input, 6, 5, 4);
  auto gpu = make_gpu_executor(net);
  auto cpu = make_cpu_executor(net);
  compare_layers(net, *gpu, *cpu, data, 0, 6, "ceil_mode 2x2 after implicit conv", err);
  CHECK(gpu->fused_into(net.find("c1"), RunOptions{}) == "r1");  // the ReLU fuses ...
  CHECK(gpu->fused_into(net.find("r1"), RunOptions{}).empty());  // ... the ceil_mode pool does not
  MESSAGE("pools: max abs error " << err.abs << " (" << err.where << ")");
}

TEST_CASE("gpu: squeeze-and-excitation mul and upsampling vs reference" * doctest::skip(!gpu_present())) {
  // MobileNetV3's SE block (global average, 1x1 conv, ReLU, 1x1 conv, hardsigmoid, then the channel
  // scale broadcast over the plane, with the broadcast input first and second), a mul of three full
  // tensors, and upsampling by [2, 3] and 2 in each mode.
  const char* text = R"(
name: se
input: {channels: 4, height: 7, width: 9}
classes: [a, b, c]
layers:
  - {name: c1, type: conv, filters: 16, kernel: 3, pad: 1}
  - {name: h1, type: hardswish}
  - {name: gap, type: avgpool, global: true}
  - {name: fc1, type: conv, filters: 4, kernel: 1}
  - {name: r, type: relu}
  - {name: fc2, type: conv, filters: 16, kernel: 1}
  - {name: hs, type: hardsigmoid}
  - {name: se, type: mul, inputs: [h1, hs]}
  - {name: se2, type: mul, inputs: [hs, se]}
  - {name: m3, type: mul, inputs: [se2, h1, se]}
  - {name: up1, type: upsample, scale: [2, 3], inputs: m3}
  - {name: up2, type: upsample, scale: 2, mode: bilinear, inputs: m3}
  - {name: up3, type: upsample, scale: [3, 2], mode: bilinear, align_corners: true, inputs: m3}
  - {name: g1, type: avgpool, global: true, inputs: up1}
  - {name: g2, type: avgpool, global: true, inputs: up2}
  - {name: g3, type: avgpool, global: true, inputs: up3}
  - {name: cat, type: concat, inputs: [g1, g2, g3]}
  - {name: fc, type: fc, outputs: 3}
)";
  MaxErr err;
  for (const char* algo : {"implicit", "im2col", "cudnn"}) {
    Network net = parse_netdef_string(text, "se");
    for (auto& l : net.layers)
      if (l->kind == LayerKind::kConv) l->algo = algo_of(algo);
    random_weights(net, 23);
    Dataset data = gpu_random_data(net.input, 5, 3, 8);
    auto gpu = make_gpu_executor(net);
    auto cpu = make_cpu_executor(net);
    compare_layers(net, *gpu, *cpu, data, 0, 5, algo, err);
    CHECK(gpu->fused_into(net.find("fc2"), RunOptions{}) == "hs");
  }
  MESSAGE("mul/upsample: max abs error " << err.abs << " (" << err.where << ")");
}
