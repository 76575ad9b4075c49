// The GPU planner's buffer sharing (engine/gpu/plan.h): when each buffer is in use, and which
// buffers may share memory; and how the block pipeline splits a cycled range of images. Pure planning, no
// GPU: these run with the CPU tests wherever the GPU executor is built; tests/test_gpu_layers.cpp runs
// networks with and without sharing on a GPU.
#ifdef CNNRUN_HAVE_GPU
#include <doctest/doctest.h>

#include <array>
#include <vector>

#include "engine/gpu/conv2d_implicit.h"
#include "engine/gpu/conv2d_stem.h"
#include "engine/gpu/pipeline.h"
#include "engine/gpu/plan.h"
#include "engine/network.h"
#include "tests/test_util.h"

using namespace cnnrun;
using namespace cnnrun::gpu;

namespace {

int64_t all_floats(const std::vector<int64_t>& sizes) {
  int64_t t = 0;
  for (int64_t f : sizes) t += f;
  return t;
}

}  // namespace

TEST_CASE("plan: buffer lifetimes run from the first write to the last read, fused layers included") {
  Network net = test::parse_layers(R"(  - {name: c1, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: r1, type: relu}
  - {name: c2, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: r2, type: relu}
  - {name: c3, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: sum, type: add, inputs: [c3, r1]}
  - {name: r3, type: relu}
  - {name: p, type: maxpool, size: 2}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 4}
)");
  const Plan plan = make_plan(net);
  auto out = [&](const char* name) { return plan.steps[static_cast<size_t>(net.find(name))].out; };
  // c3 takes the residual add and its ReLU into its epilogue, reading r1's buffer there.
  REQUIRE(plan.steps[4].residual_buf == out("r1"));
  const std::vector<Lifetime> life = buffer_lifetimes(net, plan, nullptr);
  REQUIRE(life.size() == plan.buf_floats.size());
  auto check = [&](int b, int first, int last) {
    CAPTURE(b);
    CHECK(life[static_cast<size_t>(b)].first == first);
    CHECK(life[static_cast<size_t>(b)].last == last);
  };
  check(0, -1, 0);          // the input: copied in before step 0, read by c1
  check(out("c1"), 0, 5);   // c1 (r1 fused): read by c2, by c3's residual add, and the fused add
  check(out("c2"), 2, 4);   // c2 (r2 fused): read by c3
  check(out("c3"), 4, 7);   // c3 + add + r3: read by the pool
  check(out("p"), 7, 9);    // the pool: the flatten aliases it, the fc reads it
  check(out("fc"), 9, 10);  // the output: read after the last step
  // Each conv's split input for cudnn-3xtf32: written and read at its own step, 3x its input.
  for (const char* c : {"c1", "c2", "c3"}) {
    const Step& st = plan.steps[static_cast<size_t>(net.find(c))];
    CAPTURE(c);
    REQUIRE(st.split_buf > out("fc"));  // after the layers' own buffers
    check(st.split_buf, st.layer, st.layer);
    CHECK(plan.buf_floats[static_cast<size_t>(st.split_buf)] == 3 * st.in_shape.size());
  }
  // The layers' own buffers, as a run sizes them where cudnn-3xtf32 cannot run (NCHW, or not fp32).
  std::vector<int64_t> floats = plan.buf_floats;
  for (const Step& st : plan.steps)
    if (st.split_buf >= 0) floats[static_cast<size_t>(st.split_buf)] = 0;
  const std::vector<int> group = share_groups(life, floats);
  const int64_t shared = test::check_share_groups(life, floats, group);
  // input+c2+p share one allocation, c1+fc another, c3 the third.
  CHECK(group[0] == group[static_cast<size_t>(out("c2"))]);
  CHECK(group[0] == group[static_cast<size_t>(out("p"))]);
  CHECK(group[static_cast<size_t>(out("c1"))] == group[static_cast<size_t>(out("fc"))]);
  CHECK(shared == 3 * 4 * 8 * 8);

  // Channels last: the fc reads an FP32 NCHW copy, made and read at the fc's step.
  const NhwcLayout lay = make_nhwc_layout(net, plan);
  REQUIRE(lay.ok);
  const int copy = lay.f32_in[static_cast<size_t>(net.find("fc"))];
  REQUIRE(copy == static_cast<int>(plan.buf_floats.size()));
  const std::vector<Lifetime> life_nhwc = buffer_lifetimes(net, plan, &lay);
  REQUIRE(life_nhwc.size() == plan.buf_floats.size() + lay.copy_floats.size());
  CHECK(life_nhwc[static_cast<size_t>(copy)].first == 9);
  CHECK(life_nhwc[static_cast<size_t>(copy)].last == 9);
}

TEST_CASE("plan: a conv that may compute its pool writes the pool's buffer at its own step") {
  Network net = test::parse_layers(R"(  - {name: c1, type: conv, filters: 8, kernel: 3, pad: 1}
  - {name: r1, type: relu}
  - {name: p1, type: maxpool, size: 2}
  - {name: c2, type: conv, filters: 8, kernel: 3, pad: 1}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 4}
)");
  const Plan plan = make_plan(net);
  const Step& c1 = plan.steps[0];
  REQUIRE(c1.pool_layer == 2);
  const std::vector<Lifetime> life = buffer_lifetimes(net, plan, nullptr);
  const int pool_buf = plan.steps[2].out;
  CHECK(life[static_cast<size_t>(pool_buf)].first == 0);  // not 2: the implicit kernel writes it at c1
  CHECK(life[static_cast<size_t>(c1.out)].first == 0);
  CHECK(life[static_cast<size_t>(c1.out)].last == 2);
  // So c1's and the pool's buffers never share, though the pool's own step comes later.
  const std::vector<int> group = share_groups(life, plan.buf_floats);
  test::check_share_groups(life, plan.buf_floats, group);
  CHECK(group[static_cast<size_t>(c1.out)] != group[static_cast<size_t>(pool_buf)]);
}

TEST_CASE("plan: a max-pool that only a 1x1 conv reads can be taken by that conv, its input read there") {
  // SqueezeNet's pool -> squeeze (p1 -> s1), GoogLeNet's branch4 (p2 -> b4, into a concat); not a
  // pool that two layers read (p3), one before a 3x3 conv or a strided 1x1 (p4 -> c5, p5 -> c6),
  // nor a 2x2/2 max-pool that the implicit kernel may compute after its producer's ReLU (p6 after
  // c6b).
  Network net = parse_netdef_string(R"(name: pp
input: {channels: 3, height: 32, width: 32}
classes: 4
layers:
  - {name: c1, type: conv, filters: 16, kernel: 3, pad: 1}
  - {name: r1, type: relu}
  - {name: p1, type: maxpool, size: 3, stride: 2, ceil_mode: true}
  - {name: s1, type: conv, filters: 8, kernel: 1}
  - {name: s1r, type: relu}
  - {name: b1, type: conv, filters: 8, kernel: 1, inputs: s1r}
  - {name: p2, type: maxpool, size: 3, stride: 1, pad: 1, inputs: s1r}
  - {name: b4, type: conv, filters: 8, kernel: 1}
  - {name: cat, type: concat, inputs: [b1, b4]}
  - {name: p3, type: maxpool, size: 2}
  - {name: c3, type: conv, filters: 8, kernel: 1}
  - {name: c4, type: conv, filters: 8, kernel: 1, inputs: p3}
  - {name: sum, type: add, inputs: [c3, c4]}
  - {name: p4, type: maxpool, size: 2, stride: 1}
  - {name: c5, type: conv, filters: 8, kernel: 3, pad: 1}
  - {name: p5, type: maxpool, size: 2, stride: 1}
  - {name: c6, type: conv, filters: 8, kernel: 1, stride: 2}
  - {name: c6b, type: conv, filters: 8, kernel: 3, pad: 1}
  - {name: r6, type: relu}
  - {name: p6, type: maxpool, size: 2}
  - {name: c7, type: conv, filters: 8, kernel: 1}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 4}
)",
                                    "pp.yaml");
  const Fusions f = find_fusions(net);
  const Plan plan = make_plan(net);
  auto idx = [&](const char* name) {
    for (size_t i = 0; i < net.layers.size(); ++i)
      if (net.layers[i]->name == name) return static_cast<int>(i);
    FAIL("no layer " << name);
    return -1;
  };
  auto st = [&](const char* name) -> const Step& { return plan.steps[static_cast<size_t>(idx(name))]; };
  CHECK(f.prepool[static_cast<size_t>(idx("s1"))] == idx("p1"));
  CHECK(st("s1").prepool_layer == idx("p1"));
  CHECK(st("s1").prepool_buf == st("p1").ins[0]);
  CHECK(st("p1").prepool_conv == idx("s1"));
  CHECK(st("b4").prepool_layer == idx("p2"));
  CHECK(st("b4").prepool_buf == st("p2").ins[0]);
  CHECK(st("b4").concat_step == idx("cat"));  // and it may still write into the concat
  for (const char* c : {"c3", "c4", "c5", "c6", "b1"}) {
    INFO(c);
    CHECK(f.prepool[static_cast<size_t>(idx(c))] == -1);
    CHECK(st(c).prepool_layer == -1);
  }
  // p6 goes to c6b's implicit kernel (2x2/2 after its ReLU), so c7 does not take it.
  CHECK(f.prepool[static_cast<size_t>(idx("c7"))] == idx("p6"));
  CHECK(st("c6b").pool_layer == idx("p6"));
  CHECK(st("c7").prepool_layer == -1);
  CHECK(st("p6").prepool_conv == -1);
  // The pool's input is read at the conv's step: it lives until then, whatever the pool's step.
  const std::vector<Lifetime> life = buffer_lifetimes(net, plan, nullptr);
  CHECK(life[static_cast<size_t>(st("s1").prepool_buf)].last >= idx("s1"));
  CHECK(life[static_cast<size_t>(st("b4").prepool_buf)].last >= idx("b4"));
  const std::vector<int> group = share_groups(life, plan.buf_floats);
  test::check_share_groups(life, plan.buf_floats, group);
  CHECK(group[static_cast<size_t>(st("s1").prepool_buf)] != group[static_cast<size_t>(st("s1").out)]);
}

TEST_CASE("plan: the max-pool after a conv's activation goes to the kernels that can compute it") {
  Network net = parse_netdef_string(R"(name: p
input: {channels: 3, height: 32, width: 32}
classes: 10
layers:
  - {name: c1, type: conv, filters: 64, kernel: 7, stride: 2, pad: 3}
  - {name: r1, type: relu}
  - {name: p1, type: maxpool, size: 2}
  - {name: c2, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: r2, type: relu}
  - {name: p2, type: maxpool, size: 2}
  - {name: c3, type: conv, filters: 8, kernel: 3, pad: 1}
  - {name: h3, type: hardswish}
  - {name: p3, type: maxpool, size: 2}
  - {name: c4, type: conv, filters: 16, kernel: 3, pad: 1}
  - {name: r4, type: relu}
  - {name: p4, type: maxpool, size: 3, stride: 2, pad: 1}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 10}
)",
                                    "p.yaml");
  const Plan plan = make_plan(net);
  const Step &c1 = plan.steps[0], &c2 = plan.steps[3], &c3 = plan.steps[6], &c4 = plan.steps[9];
  // 3 channels, a stride-2 conv, a 2x2/2 pool: the stem kernel's, not the implicit kernel's.
  CHECK(c1.pool_layer == 2);
  CHECK(c1.pool_stem);
  CHECK_FALSE(c1.pool_implicit);
  CHECK(plan.steps[2].pool_conv == 0);
  const StemPool sp = stem_pool(net, c1.pool_layer);
  CHECK(sp.kernel_h == 2);
  CHECK(sp.stride_w == 2);
  CHECK(sp.pad_h == 0);
  CHECK(sp.out_h == 8);
  CHECK(sp.out_w == 8);
  GpuTuning t;
  CHECK(fuses_pool(c1, ConvAlgo::kStem, t));
  CHECK_FALSE(fuses_pool(c1, ConvAlgo::kImplicit, t));
  CHECK_FALSE(fuses_pool(c1, ConvAlgo::kCudnn, t));
  // c1 reads the network input alone: the stem can read its bytes (u8 switches it off; exact
  // only the FP32-storage form, which the executor checks with the storage); the other convs read
  // other layers.
  CHECK(c1.u8_input_stem);
  CHECK(fuses_u8(c1, ConvAlgo::kStem, t));
  CHECK_FALSE(fuses_u8(c1, ConvAlgo::kCudnn, t));
  CHECK_FALSE(c3.u8_input_stem);
  GpuTuning no_exact;
  no_exact.exact_pixels = false;
  CHECK(fuses_u8(c1, ConvAlgo::kStem, no_exact));
  GpuTuning no_u8;
  no_u8.fuse_u8 = false;
  CHECK_FALSE(fuses_u8(c1, ConvAlgo::kStem, no_u8));
  // 64 channels, ReLU, 2x2/2, stride-1 conv: the implicit kernel's only.
  CHECK(c2.pool_layer == 5);
  CHECK(c2.pool_implicit);
  CHECK_FALSE(c2.pool_stem);
  CHECK(fuses_pool(c2, ConvAlgo::kImplicit, t));
  CHECK_FALSE(fuses_pool(c2, ConvAlgo::kStem, t));
  // 4 channels, a hardswish: the stem kernel's only (the implicit kernel's pool is after a ReLU).
  CHECK(c3.pool_layer == 8);
  CHECK(c3.pool_stem);
  CHECK_FALSE(c3.pool_implicit);
  // 8 channels, overlapping windows: neither, so the pool is its own step.
  CHECK(c4.pool_layer == -1);
  CHECK(plan.steps[11].pool_conv == -1);
  // ResNet's 3x3/2 pool after c1: overlapping windows, which the stem kernel leaves to the pool.
  CHECK(stem_pool_cannot_run(c1.conv, StemPool{3, 3, 2, 2, 1, 1, 8, 8}).find("overlap") != std::string::npos);
  CHECK(stem_pool_cannot_run(c1.conv, StemPool{2, 4, 2, 4, 0, 0, 8, 4}).empty());
  t.fuse_pool = false;
  CHECK_FALSE(fuses_pool(c1, ConvAlgo::kStem, t));
}

TEST_CASE("plan: LeNet-5's average pools go to the implicit kernel's tensor cores, after its tanh") {
  Network net = parse_netdef_file(std::string(CNNRUN_SOURCE_DIR) + "/netdefs/lenet5.yaml");
  const Plan plan = make_plan(net);
  const Step &c1 = plan.steps[0], &c2 = plan.steps[3], &fc1 = plan.steps[6];
  GpuTuning t;
  for (const Step* c : {&c1, &c2}) {
    INFO(net.layers[static_cast<size_t>(c->layer)]->name);
    CHECK(c->pool_layer == c->layer + 2);
    CHECK(c->pool_implicit);
    CHECK(c->pool_avg);
    CHECK_FALSE(c->pool_stem);  // the stem kernel's pool is a max
    CHECK(plan.steps[static_cast<size_t>(c->pool_layer)].pool_conv == c->layer);
    CHECK(fuses_pool(*c, ConvAlgo::kImplicit, t));
    CHECK_FALSE(fuses_pool(*c, ConvAlgo::kCudnn, t));
  }
  // conv1 reads the bytes with its pool fused (one channel of 28, a multiple of 4).
  CHECK(c1.u8_input_pool);
  CHECK(fc1.pool_layer == -1);
  // Without tensor cores the FFMA kernel has no average pool: the pool is a pass again.
  t.tensor_cores = false;
  CHECK_FALSE(fuses_pool(c1, ConvAlgo::kImplicit, t));
  t = GpuTuning{};
  t.fuse_pool = false;
  CHECK_FALSE(fuses_pool(c2, ConvAlgo::kImplicit, t));
  // The kernel's planner: the average pool needs its tensor cores (at most 32 filters).
  ImplicitFusion f;
  f.pool = f.avg_pool = true;
  CHECK(implicit_config(c1.conv, 64, f).why.find("tensor-core") != std::string::npos);
  f.tensor_core = true;
  CHECK(implicit_config(c1.conv, 64, f).ok);
  ConvParams wide = c2.conv;
  wide.filters = 40;
  CHECK_FALSE(implicit_config(wide, 64, f).ok);
}

TEST_CASE("plan: ResNet-18's buffers in use at once are a fraction of all its buffers") {
  Network net = parse_netdef_file(std::string(CNNRUN_SOURCE_DIR) + "/netdefs/torchvision/resnet18.yaml");
  const Plan plan = make_plan(net);
  const NhwcLayout nhwc = make_nhwc_layout(net, plan);
  REQUIRE(nhwc.ok);
  for (const NhwcLayout* lay : {static_cast<const NhwcLayout*>(nullptr), &nhwc}) {
    std::vector<int64_t> sizes = plan.buf_floats;
    if (lay) sizes.insert(sizes.end(), lay->copy_floats.begin(), lay->copy_floats.end());
    const std::vector<Lifetime> life = buffer_lifetimes(net, plan, lay);
    const std::vector<int> group = share_groups(life, sizes);
    const int64_t shared = test::check_share_groups(life, sizes, group), all = all_floats(sizes);
    MESSAGE("ResNet-18 at 224x224" << std::string(lay ? " NHWC" : "") << ": " << all
                                   << " floats per image in " << sizes.size() << " buffers, " << shared
                                   << " shared");
    CHECK(shared * 4 < all);
  }
}

TEST_CASE(
    "plan: a conv read only by a concat may write its output at its channel offset in the concat's buffer") {
  Network net = test::parse_layers(R"(  - {name: c0, type: conv, filters: 32, kernel: 3, pad: 1}
  - {name: r0, type: relu}
  - {name: b1, type: conv, filters: 16, kernel: 1}
  - {name: b1r, type: relu}
  - {name: b2, type: conv, filters: 24, kernel: 3, pad: 1, inputs: r0}
  - {name: b2r, type: relu}
  - {name: b3p, type: maxpool, size: 3, stride: 1, pad: 1, inputs: r0}
  - {name: b3, type: conv, filters: 8, kernel: 1}
  - {name: b4, type: conv, filters: 16, kernel: 3, pad: 1, inputs: r0}
  - {name: b5, type: conv, filters: 32, kernel: 1, inputs: r0}
  - {name: b5sum, type: add, inputs: [b5, r0]}
  - {name: b6, type: conv, filters: 4, kernel: 1, inputs: r0}
  - {name: b7, type: conv, filters: 12, kernel: 1, inputs: r0}
  - {name: cat, type: concat, inputs: [b1r, b2r, b3, b4, r0, b5sum, b6, b7]}
  - {name: d, type: conv, filters: 8, kernel: 3, stride: 2, pad: 1, inputs: cat}
  - {name: odd, type: conv, filters: 4, kernel: 3, stride: 2, pad: 1, inputs: b4}
  - {name: cat2, type: concat, inputs: [d, odd]}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 4}
)");
  const Plan plan = make_plan(net);
  auto st = [&](const char* name) -> const Step& { return plan.steps[static_cast<size_t>(net.find(name))]; };
  const int cat = net.find("cat");
  REQUIRE(st("cat").out_shape.c == 144);
  REQUIRE(st("b5").residual_layer == net.find("b5sum"));
  // b1 and b2 (their ReLUs fused), b3 and b6 (4 channels at
  // offset 128): read by the concat alone, at offsets that are multiples of 8.
  for (const auto& [c, offset] :
       {std::pair{"b1", 0}, std::pair{"b2", 16}, std::pair{"b3", 40}, std::pair{"b6", 128}}) {
    INFO(c);
    CHECK(st(c).concat_step == cat);
    CHECK(st(c).concat_offset == offset);
    CHECK(st(c).concat_ld == 144);
  }
  // Not: b4 (odd reads it too), c0 (every branch reads r0), b5 (its residual add runs in its
  // epilogue), b7 (at offset 132), d and odd (cat2's 12 channels: no multiple of 8).
  for (const char* c : {"b4", "c0", "b5", "b7", "d", "odd"}) {
    INFO(c);
    CHECK(st(c).concat_step == -1);
  }
  // The concat's buffer is written from the first conv that may write into it; b1's own buffer
  // keeps its lifetime (the algorithms that cannot write a slice write it).
  const std::vector<Lifetime> life = buffer_lifetimes(net, plan, nullptr);
  CHECK(life[static_cast<size_t>(st("cat").out)].first == net.find("b1"));
  CHECK(life[static_cast<size_t>(st("cat").out)].last == net.find("d"));
  CHECK(life[static_cast<size_t>(st("b1").out)].first == net.find("b1"));
  CHECK(life[static_cast<size_t>(st("b1").out)].last == cat);
  const std::vector<int> group = share_groups(life, plan.buf_floats);
  test::check_share_groups(life, plan.buf_floats, group);
  for (const char* c : {"b1", "b2", "b3", "b6", "r0"}) {  // never in the concat's memory
    INFO(c);
    CHECK(group[static_cast<size_t>(st(c).out)] != group[static_cast<size_t>(st("cat").out)]);
  }
}

// The block pipeline's cycled runs (resident upload, a block's pixels and labels): images
// first..first+n-1 of a data set of `count`, as runs of consecutive data set images.
TEST_CASE("for_each_cycled_run splits a cycled range into runs of consecutive images") {
  using Run = std::array<int64_t, 3>;
  auto runs = [](int64_t first, int64_t n, int64_t count) {
    std::vector<Run> out;
    cnnrun::gpu::for_each_cycled_run(first, n, count, [&](int64_t done, int64_t idx, int64_t run) {
      out.push_back({done, idx, run});
    });
    return out;
  };
  CHECK(runs(5, 12, 7) == std::vector<Run>{{0, 5, 2}, {2, 0, 7}, {9, 0, 3}});
  CHECK(runs(15, 3, 7) == std::vector<Run>{{0, 1, 3}});
  CHECK(runs(0, 7, 7) == std::vector<Run>{{0, 0, 7}});
  CHECK(runs(0, 20, 1).size() == 20);
  CHECK(runs(3, 0, 7).empty());
}

#endif  // CNNRUN_HAVE_GPU
