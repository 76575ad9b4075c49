// The layer-type list (engine/layer_types.h) and the graph passes (engine/passes.h): every
// kind has a name, a factory that makes a layer of that kind and a CPU forward function; the
// passes find readers, identities, fusions and batchnorm folds from the graph alone.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "engine/layers/conv.h"
#include "engine/layers/fc.h"
#include "engine/network.h"
#include "engine/passes.h"
#include "reference/cpu_executor.h"
#include "reference/cpu_layers.h"
#include "tests/test_util.h"

using namespace cnnrun;

namespace {

Network parse(const std::string& layers) { return test::parse_layers(layers); }

int idx(const Network& net, const char* name) {
  const int i = net.find(name);
  REQUIRE(i >= 0);
  return i;
}

}  // namespace

TEST_CASE("layer types: one list, every kind named once, made with its kind, with a CPU forward") {
  const auto& types = layer_types();
  REQUIRE(static_cast<int>(types.size()) == kLayerKinds);
  std::set<std::string> names;
  for (int k = 0; k < kLayerKinds; ++k) {
    const LayerType& t = types[static_cast<size_t>(k)];
    CAPTURE(t.name);
    CHECK(index_of(t.kind) == k);
    CHECK(names.insert(t.name).second);
    CHECK(find_layer_type(t.name) == &t);
    CHECK(std::string(layer_type_name(t.kind)) == t.name);
    std::unique_ptr<Layer> l = t.make();
    REQUIRE(l);
    CHECK(l->kind == t.kind);
    CHECK(l->type == t.name);
    CHECK(static_cast<bool>(ref::forward_fn(*l)));
  }
  CHECK(find_layer_type("winograd") == nullptr);
  CHECK(find_layer_type("Conv") == nullptr);
  // The forward table is indexed by kind, not by position in some other list.
  CHECK((ref::forward_fn(*find_layer_type("relu")->make()) == &ref::forward_activation));
  CHECK((ref::forward_fn(*find_layer_type("avgpool")->make()) == &ref::forward_pool));
  CHECK((ref::forward_fn(*find_layer_type("concat")->make()) == &ref::forward_concat));
  CHECK((ref::forward_fn(*find_layer_type("dropout")->make()) == &ref::forward_copy));
}

TEST_CASE("passes: readers count every reference, of layers and of the network input") {
  Network net = parse(R"(  - {name: a, type: conv, filters: 2, kernel: 1}
  - {name: b, type: conv, filters: 2, kernel: 1, inputs: input}
  - {name: sum, type: add, inputs: [a, b, a]}
  - {name: cat, type: concat, inputs: [sum, input]}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 4}
)");
  const Readers r = readers(net);
  CHECK(r.input == 3);
  CHECK(r.of[static_cast<size_t>(idx(net, "a"))] == std::vector<int>{idx(net, "sum"), idx(net, "sum")});
  CHECK(r.count(idx(net, "b")) == 1);
  CHECK(r.count(idx(net, "sum")) == 1);
  CHECK(r.count(idx(net, "fc")) == 0);
}

TEST_CASE("passes: the identity rule") {
  Network net = parse(R"(  - {name: c, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: bn, type: batchnorm}
  - {name: d, type: dropout}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 4}
)");
  CHECK_FALSE(runs_as_identity(*net.layers[static_cast<size_t>(idx(net, "c"))]));
  CHECK_FALSE(runs_as_identity(*net.layers[static_cast<size_t>(idx(net, "bn"))]));  // not folded
  CHECK(runs_as_identity(*net.layers[static_cast<size_t>(idx(net, "d"))]));
  CHECK(runs_as_identity(*net.layers[static_cast<size_t>(idx(net, "f"))]));
  CHECK_FALSE(runs_as_identity(*net.layers[static_cast<size_t>(idx(net, "fc"))]));
}

TEST_CASE(
    "passes: a pool that maps every element to itself is an identity, one that changes a value is not") {
  // Input 3x8x8.
  Network net = parse(R"(  - {name: one, type: maxpool, size: 1, stride: 1}
  - {name: same, type: avgpool, output: [8, 8]}
  - {name: two, type: maxpool, size: 2}
  - {name: three, type: avgpool, size: 3, stride: 1, pad: 1}
  - {name: gap, type: avgpool, global: true}
  - {name: gap1, type: avgpool, global: true}
  - {name: ad1, type: avgpool, output: 1}
  - {name: max1, type: maxpool, size: 3, stride: 1, pad: 1}
  - {name: avg1, type: avgpool, size: 3, stride: 1, pad: 1}
  - {name: avg1n, type: avgpool, size: 3, stride: 1, pad: 1, count_pad: false}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 4}
)");
  auto is = [&](const char* n) { return runs_as_identity(*net.layers[static_cast<size_t>(idx(net, n))]); };
  CHECK(is("one"));   // 1x1 windows of stride 1
  CHECK(is("same"));  // adaptive to its input's size
  CHECK_FALSE(is("two"));
  CHECK_FALSE(is("three"));  // same shape, but each output averages 9 inputs
  CHECK_FALSE(is("gap"));    // 8x8 -> 1x1
  CHECK(is("gap1"));         // the mean of one value (a squeeze-and-excitation pool on a 1x1 map)
  CHECK(is("ad1"));
  CHECK(is("max1"));        // on a 1x1 plane, padding is -inf
  CHECK_FALSE(is("avg1"));  // x / 9: the padding counts in the divisor
  CHECK(is("avg1n"));       // x / 1
  CHECK(pool_is_identity(*net.layers[static_cast<size_t>(idx(net, "gap1"))]));
  CHECK_FALSE(pool_is_identity(*net.layers[static_cast<size_t>(idx(net, "f"))]));
}

TEST_CASE("passes: fold_batchnorms folds into a lone conv producer, not into a shared one") {
  Network net = parse(R"(  - {name: c, type: conv, filters: 2, kernel: 1, bias: false}
  - {name: bn, type: batchnorm, eps: 1.0e-30}
  - {name: c2, type: conv, filters: 2, kernel: 1}
  - {name: bn2, type: batchnorm}
  - {name: sum, type: add, inputs: [bn2, c2]}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 4}
)");
  Layer& c = *net.layers[static_cast<size_t>(idx(net, "c"))];
  Layer& bn = *net.layers[static_cast<size_t>(idx(net, "bn"))];
  Layer& c2 = *net.layers[static_cast<size_t>(idx(net, "c2"))];
  Layer& bn2 = *net.layers[static_cast<size_t>(idx(net, "bn2"))];
  c.weights["weight"] = Tensor({2, 3, 1, 1});
  c.weights["weight"].data = {1, 2, 3, 4, 5, 6};
  c2.weights["weight"] = Tensor({2, 2, 1, 1});
  c2.weights["bias"] = Tensor({2});
  for (Layer* b : {&bn, &bn2}) {
    b->weights["weight"] = Tensor({2});
    b->weights["weight"].data = {2, 3};
    b->weights["bias"] = Tensor({2});
    b->weights["bias"].data = {1, -1};
    b->weights["running_mean"] = Tensor({2});
    b->weights["running_mean"].data = {0.5, 0};
    b->weights["running_var"] = Tensor({2});
    b->weights["running_var"].data = {1, 4};
  }
  fold_batchnorms(net, "t");
  CHECK(bn.folded);
  CHECK(runs_as_identity(bn));
  CHECK_FALSE(bn2.folded);  // c2's output is read by bn2 and sum
  CHECK(layer_as<ConvLayer>(c).p.bias);
  // scale = weight / sqrt(var) = {2, 1.5}; shift = bias - mean * scale = {0, -1}
  CHECK(c.weight("weight").data == std::vector<float>{2, 4, 6, 6, 7.5f, 9});
  CHECK(c.weight("bias").data == std::vector<float>{0, -1});
}

namespace {

// The output layer's values for `n` random images on the CPU reference.
std::vector<float> cpu_outputs(const Network& net, int64_t n) {
  const Dataset data = test::gpu_random_data(net.input, n, 4, 11);
  std::vector<Tensor> all = make_cpu_executor(net)->forward_layers(data, 0, n, RunOptions{});
  return all[static_cast<size_t>(net.output)].data;
}

// A rewritten network gives the original's outputs on `n` images, up to rounding.
void check_same_outputs(const Network& rewritten, const Network& original, int64_t n) {
  const std::vector<float> a = cpu_outputs(rewritten, n), b = cpu_outputs(original, n);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-5));
}

}  // namespace

TEST_CASE("passes: fold_pools_into_fcs folds an average pool that does not shrink into the fc after it") {
  // Input 3x8x8 -> conv 5x2x3 (stride 4x3) -> adaptive 3x4 (overlapping windows of 1 and 2 rows
  // and columns) -> flatten -> dropout -> fc; and a second head where the pool copies (3x4 -> 3x4,
  // windows of one) with the fc right after it.
  const std::string layers = R"(  - {name: c, type: conv, filters: 5, kernel: [2, 2], stride: [4, 3]}
  - {name: gp, type: avgpool, output: [3, 4]}
  - {name: f, type: flatten}
  - {name: d, type: dropout}
  - {name: fc, type: fc, outputs: 2}
  - {name: r, type: relu}
  - {name: c2, type: conv, filters: 2, kernel: 1, inputs: gp}
  - {name: same, type: avgpool, output: [3, 4]}
  - {name: fc2, type: fc, outputs: 2}
  - {name: sum, type: add, inputs: [r, r]}
  - {name: cat, type: concat, inputs: [sum, fc2]}
)";
  Network plain = parse(layers), folded = parse(layers);
  test::random_weights(plain, 5);
  test::random_weights(folded, 5);
  REQUIRE(plain.layers[static_cast<size_t>(idx(plain, "c"))]->out_shape == Shape{5, 2, 3});
  // gp has two readers (f and c2): not folded; `same` (a copy) folds into fc2.
  CHECK(fold_pools_into_fcs(folded, "t") ==
        std::vector<std::string>{"avgpool 'same' (2x3x4, a copy) folded into fc 'fc2'"});
  CHECK(folded.find("same") < 0);
  CHECK(folded.find("gp") >= 0);
  const Layer& fc2 = *folded.layers[static_cast<size_t>(idx(folded, "fc2"))];
  CHECK(fc2.inputs == std::vector<int>{idx(folded, "c2")});
  CHECK(layer_as<FcLayer>(fc2).p.inputs == 2 * 3 * 4);
  CHECK(fc2.weight("weight").dims == std::vector<int64_t>{2, 24});
  CHECK(folded.output == idx(folded, "cat"));
  CHECK(folded.layers[static_cast<size_t>(folded.output)]->name == "cat");
  check_same_outputs(folded, plain, 3);

  // With c2 gone, gp's only reader chain is flatten -> dropout -> fc: it folds, 60 -> 30 inputs.
  const std::string one_head = R"(  - {name: c, type: conv, filters: 5, kernel: [2, 2], stride: [4, 3]}
  - {name: gp, type: avgpool, output: [3, 4]}
  - {name: f, type: flatten}
  - {name: d, type: dropout}
  - {name: fc, type: fc, outputs: 4}
  - {name: r, type: relu}
)";
  Network p1 = parse(one_head), f1 = parse(one_head);
  test::random_weights(p1, 9);
  test::random_weights(f1, 9);
  const std::vector<std::string> notes = fold_pools_into_fcs(f1, "t");
  REQUIRE(notes.size() == 1);
  CHECK(notes[0] == "avgpool 'gp' (5x2x3 -> 5x3x4) folded into fc 'fc': 60 -> 30 inputs");
  CHECK(f1.layers.size() == p1.layers.size() - 1);
  CHECK(f1.find("gp") < 0);
  CHECK(f1.layers[static_cast<size_t>(idx(f1, "f"))]->inputs == std::vector<int>{idx(f1, "c")});
  CHECK(f1.layers[static_cast<size_t>(idx(f1, "f"))]->out_shape == Shape{30, 1, 1});
  CHECK(f1.layers[static_cast<size_t>(idx(f1, "d"))]->out_shape == Shape{30, 1, 1});
  CHECK(f1.layers[static_cast<size_t>(idx(f1, "fc"))]->in_shapes == std::vector<Shape>{Shape{30, 1, 1}});
  CHECK(f1.output == idx(f1, "r"));
  // The outputs differ from the unfolded ones only by rounding.
  check_same_outputs(f1, p1, 4);
  // One folded weight by hand: fc output 0, channel 0, input position (0, 0).
  const Tensor& w0 = p1.layers[static_cast<size_t>(idx(p1, "fc"))]->weight("weight");
  const Tensor& w1 = f1.layers[static_cast<size_t>(idx(f1, "fc"))]->weight("weight");
  // Rows: 2 -> 3 gives windows {0}, {0, 1}, {1}; columns: 3 -> 4 gives {0}, {0, 1}, {1, 2}, {2}.
  // Input (0, 0) is in rows 0, 1 and columns 0, 1 with divisors 1*1, 1*2, 2*1, 2*2.
  const double expect =
      double(w0.data[0]) / 1 + double(w0.data[1]) / 2 + double(w0.data[4]) / 2 + double(w0.data[5]) / 4;
  CHECK(w1.data[0] == doctest::Approx(expect).epsilon(1e-6));
}

TEST_CASE(
    "passes: fold_pools_into_fcs leaves a pool that shrinks, a max-pool, an activation between and the "
    "output") {
  for (const char* tail :
       {"  - {name: p, type: avgpool, output: [2, 2]}\n  - {name: fc, type: fc, outputs: 4}\n",
        "  - {name: p, type: maxpool, output: [8, 8]}\n  - {name: fc, type: fc, outputs: 4}\n",
        "  - {name: p, type: avgpool, output: [9, 9]}\n  - {name: a, type: relu}\n"
        "  - {name: fc, type: fc, outputs: 4}\n",
        "  - {name: c, type: conv, filters: 1, kernel: 8}\n  - {name: p, type: avgpool, output: [2, 2]}\n"}) {
    CAPTURE(tail);
    Network net = parse(tail);
    test::random_weights(net, 1);
    const size_t n = net.layers.size();
    CHECK(fold_pools_into_fcs(net, "t").empty());
    CHECK(net.layers.size() == n);
  }
}

TEST_CASE("passes: fold_pools_into_fcs refuses finite weights whose sum overflows, keeps non-finite ones") {
  const std::string layers = R"(  - {name: c, type: conv, filters: 1, kernel: 8}
  - {name: p, type: avgpool, output: 2}
  - {name: fc, type: fc, outputs: 4}
)";
  Network big = parse(layers), inf = parse(layers);
  test::random_weights(big, 2);
  test::random_weights(inf, 2);
  big.layers[2]->weights["weight"].data[4] = 3e38f;  // output 1 sums 4 copies of 3e38
  big.layers[2]->weights["weight"].data[5] = 3e38f;
  CHECK_THROWS_WITH(
      fold_pools_into_fcs(big, "w.safetensors"),
      "w.safetensors: folding avgpool 'p' into fc 'fc' overflows float32 for output 1; the weights are "
      "too large");
  inf.layers[2]->weights["weight"].data[0] = std::numeric_limits<float>::infinity();
  REQUIRE(fold_pools_into_fcs(inf, "t").size() == 1);
  CHECK(std::isinf(inf.layers[1]->weight("weight").data[0]));
  CHECK(std::isfinite(inf.layers[1]->weight("weight").data[1]));
}

TEST_CASE("passes: drop_padding_taps keeps the one tap that reads a 1-position axis, with the same outputs") {
  // Input 3x8x8. c1 -> 4x1x1 and c2 -> 4x1x8 (a strip: only its height is one position).
  const std::string layers = R"(  - {name: c1, type: conv, filters: 4, kernel: 8}
  - {name: k3, type: conv, filters: 6, kernel: 3, pad: 1}
  - {name: dw, type: conv, filters: 6, kernel: 5, pad: 2, groups: 6}
  - {name: dil, type: conv, filters: 6, kernel: 3, pad: 2, dilation: 2, stride: 2}
  - {name: c2, type: conv, filters: 4, kernel: [8, 1], inputs: input}
  - {name: strip, type: conv, filters: 3, kernel: 3, pad: 1}
  - {name: gap, type: avgpool, global: true}
  - {name: cat, type: concat, inputs: [dil, gap]}
  - {name: between, type: conv, filters: 4, kernel: 2, pad: 1, dilation: 2, inputs: c1}
  - {name: sum, type: add, inputs: [between, between]}
  - {name: fc, type: fc, outputs: 4, inputs: [cat]}
  - {name: out, type: add, inputs: [fc, sum]}
)";
  Network plain = parse(layers), net = parse(layers);
  test::random_weights(plain, 4);
  test::random_weights(net, 4);
  const std::vector<std::string> notes = drop_padding_taps(net);
  CHECK(notes == std::vector<std::string>{
                     "conv 'k3' on 4x1x1: its 3x3 taps that read only padding dropped (now 1x1)",
                     "conv 'dw' on 6x1x1: its 5x5 taps that read only padding dropped (now 1x1)",
                     "conv 'dil' on 6x1x1: its 3x3 taps that read only padding dropped (now 1x1)",
                     "conv 'strip' on 4x1x8: its 3x3 taps that read only padding dropped (now 1x3)"});
  auto conv = [&](Network& n, const char* name) -> ConvLayer& {
    return layer_as<ConvLayer>(*n.layers[static_cast<size_t>(idx(n, name))]);
  };
  const ConvParams& k3 = conv(net, "k3").p;
  CHECK(k3.kernel_h == 1);
  CHECK(k3.kernel_w == 1);
  CHECK(k3.pad_h == 0);
  CHECK(k3.pad_w == 0);
  CHECK(conv(net, "k3").weight("weight").dims == std::vector<int64_t>{6, 4, 1, 1});
  // The centre tap (1, 1) of filter 2, channel 3.
  CHECK(conv(net, "k3").weight("weight").data[2 * 4 + 3] ==
        conv(plain, "k3").weight("weight").data[((2 * 4 + 3) * 3 + 1) * 3 + 1]);
  CHECK(conv(net, "dw").weight("weight").dims == std::vector<int64_t>{6, 1, 1, 1});
  CHECK(conv(net, "dw").weight("weight").data[5] == conv(plain, "dw").weight("weight").data[5 * 25 + 12]);
  const ConvParams& dil = conv(net, "dil").p;
  CHECK(dil.dilation_h == 1);
  CHECK(dil.stride_h == 1);
  const ConvParams& strip = conv(net, "strip").p;
  CHECK(strip.kernel_h == 1);
  CHECK(strip.pad_h == 0);
  CHECK(strip.kernel_w == 3);
  CHECK(strip.pad_w == 1);
  CHECK(conv(net, "strip").weight("weight").data[2] == conv(plain, "strip").weight("weight").data[3 + 2]);
  // Pad 1 with dilation 2: the input lies between two taps, every tap reads padding; left alone.
  CHECK(conv(net, "between").p.kernel_h == 2);
  for (const auto& l : net.layers)
    CHECK(l->out_shape == plain.layers[static_cast<size_t>(idx(plain, l->name.c_str()))]->out_shape);
  check_same_outputs(net, plain, 3);

  // A dropped weight that is not finite keeps the conv as it is (0 * inf is NaN in the original).
  Network inf = parse(layers);
  test::random_weights(inf, 4);
  inf.layers[static_cast<size_t>(idx(inf, "k3"))]->weights["weight"].data[0] =
      std::numeric_limits<float>::infinity();
  CHECK(drop_padding_taps(inf).size() == 3);
  CHECK(conv(inf, "k3").p.kernel_h == 3);
}

TEST_CASE("passes: merge_concat_convs makes a fire module's expand convs one conv, with the same outputs") {
  // SqueezeNet's fire module, then three branches of 1x1, 3x3 and 5x5 (stride 2, no activation),
  // then two 3x3 branches, one dilated: merged, merged, and left alone (dilations differ).
  const std::string layers = R"(  - {name: sq, type: conv, filters: 4, kernel: 1}
  - {name: sqr, type: relu}
  - {name: e1, type: conv, filters: 3, kernel: 1}
  - {name: e1r, type: relu}
  - {name: e3, type: conv, filters: 5, kernel: 3, pad: 1, inputs: sqr}
  - {name: e3r, type: relu}
  - {name: cat, type: concat, inputs: [e1r, e3r]}
  - {name: b1, type: conv, filters: 2, kernel: 1, stride: 2, bias: false}
  - {name: b3, type: conv, filters: 3, kernel: 3, stride: 2, pad: 1, inputs: cat}
  - {name: b5, type: conv, filters: 4, kernel: 5, stride: 2, pad: 2, inputs: cat}
  - {name: cat2, type: concat, inputs: [b5, b1, b3]}
  - {name: d1, type: conv, filters: 2, kernel: 3, pad: 1}
  - {name: d2, type: conv, filters: 2, kernel: 3, pad: 2, dilation: 2, inputs: cat2}
  - {name: cat3, type: concat, inputs: [d1, d2]}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 4}
)";
  Network plain = parse(layers), merged = parse(layers);
  test::random_weights(plain, 9);
  test::random_weights(merged, 9);
  auto conv = [&](Network& n, const char* name) -> ConvLayer& {
    return layer_as<ConvLayer>(*n.layers[static_cast<size_t>(n.find(name))]);
  };
  const std::vector<std::string> notes = merge_concat_convs(merged);
  REQUIRE(notes.size() == 2);
  CHECK(notes[0] ==
        "convs 'e1' (1x1), 'e3' (3x3) read by concat 'cat' merged into one 3x3 conv 'e1' of 8 filters (then "
        "'e1r')");
  CHECK(notes[1] ==
        "convs 'b5' (5x5), 'b1' (1x1), 'b3' (3x3) read by concat 'cat2' merged into one 5x5 conv 'b5' of 9 "
        "filters");
  CHECK(merged.layers.size() == plain.layers.size() - 6);
  CHECK(merged.find("e3") < 0);
  CHECK(merged.find("cat") < 0);
  CHECK(merged.find("cat3") >= 0);  // d1 and d2: dilations differ
  const ConvParams& e = conv(merged, "e1").p;
  CHECK(e.filters == 8);
  CHECK(e.kernel_h == 3);
  CHECK(e.pad_w == 1);
  CHECK(merged.layers[static_cast<size_t>(merged.find("b5"))]->inputs[0] == merged.find("e1r"));
  CHECK(merged.layers[static_cast<size_t>(merged.find("e1r"))]->out_shape == Shape{8, 8, 8});
  // Filter 1 of e1 sits at the centre of merged filter 1, zeros around it; e3's filter 0 is
  // merged filter 3 as it was. b1 had no bias: zeros in the merged bias, between b5's and b3's.
  const Tensor& w = merged.layers[static_cast<size_t>(merged.find("e1"))]->weights.at("weight");
  const Tensor& w1 = plain.layers[static_cast<size_t>(plain.find("e1"))]->weights.at("weight");
  const Tensor& w3 = plain.layers[static_cast<size_t>(plain.find("e3"))]->weights.at("weight");
  for (int64_t ch = 0; ch < 4; ++ch)
    for (int64_t t = 0; t < 9; ++t) {
      CHECK(w.data[static_cast<size_t>((1 * 4 + ch) * 9 + t)] ==
            (t == 4 ? w1.data[static_cast<size_t>(4 + ch)] : 0.f));
      CHECK(w.data[static_cast<size_t>((3 * 4 + ch) * 9 + t)] == w3.data[static_cast<size_t>(ch * 9 + t)]);
    }
  const Tensor& bb = merged.layers[static_cast<size_t>(merged.find("b5"))]->weights.at("bias");
  const Tensor& b3 = plain.layers[static_cast<size_t>(plain.find("b3"))]->weights.at("bias");
  CHECK(bb.data[4] == 0.f);
  CHECK(bb.data[5] == 0.f);
  CHECK(bb.data[6] == b3.data[0]);
  check_same_outputs(merged, plain, 3);

  // Left alone: different activations, a branch read by another layer too, inputs that differ,
  // a concat input that is not a conv, a grouped conv, and a concat that is the network output.
  for (const char* other :
       {"  - {name: a, type: conv, filters: 2, kernel: 1}\n  - {name: ar, type: relu}\n"
        "  - {name: b, type: conv, filters: 2, kernel: 3, pad: 1, inputs: input}\n  - {name: br, type: "
        "relu6}\n"
        "  - {name: cat, type: concat, inputs: [ar, br]}\n",
        "  - {name: a, type: conv, filters: 2, kernel: 1}\n"
        "  - {name: b, type: conv, filters: 2, kernel: 3, pad: 1, inputs: input}\n"
        "  - {name: cat, type: concat, inputs: [a, b]}\n  - {name: s, type: add, inputs: [a, a]}\n"
        "  - {name: cat2, type: concat, inputs: [cat, s]}\n",
        "  - {name: a, type: conv, filters: 3, kernel: 1}\n"
        "  - {name: b, type: conv, filters: 2, kernel: 3, pad: 1}\n  - {name: cat, type: concat, inputs: [a, "
        "b]}\n",
        "  - {name: a, type: conv, filters: 2, kernel: 1}\n  - {name: m, type: maxpool, size: 3, stride: 1, "
        "pad: 1, "
        "inputs: input}\n  - {name: cat, type: concat, inputs: [a, m]}\n",
        "  - {name: a, type: conv, filters: 3, kernel: 1, groups: 3}\n"
        "  - {name: b, type: conv, filters: 3, kernel: 3, pad: 1, inputs: input}\n"
        "  - {name: cat, type: concat, inputs: [a, b]}\n"}) {
    Network n1 =
        parse(std::string(other) + "  - {name: f, type: flatten}\n  - {name: fc, type: fc, outputs: 4}\n");
    test::random_weights(n1, 2);
    CAPTURE(other);
    CHECK(merge_concat_convs(n1).empty());
  }
  Network last = parse_netdef_string(
      "input: {channels: 3, height: 1, width: 1}\nclasses: 4\nlayers:\n"
      "  - {name: a, type: conv, filters: 2, kernel: 1}\n"
      "  - {name: b, type: conv, filters: 2, kernel: 3, pad: 1, inputs: input}\n"
      "  - {name: cat, type: concat, inputs: [a, b]}\n",
      "last.yaml");
  test::random_weights(last, 2);
  CHECK(merge_concat_convs(last).empty());
}

TEST_CASE("passes: find_fusions finds conv+relu(+max-pool), fc+relu, and the input's only conv") {
  Network net = parse(R"(  - {name: c1, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: r1, type: relu}
  - {name: p1, type: maxpool, size: 2, stride: 2}
  - {name: c2, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: r2, type: relu}
  - {name: p2, type: maxpool, size: 2, stride: 1}
  - {name: c3, type: conv, filters: 4, kernel: 1}
  - {name: t3, type: tanh}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 8}
  - {name: r4, type: relu}
  - {name: out, type: fc, outputs: 4}
)");
  const Fusions f = find_fusions(net);
  CHECK(f.input_conv == idx(net, "c1"));
  CHECK(f.relu[static_cast<size_t>(idx(net, "c1"))] == idx(net, "r1"));
  CHECK(f.pool[static_cast<size_t>(idx(net, "c1"))] == idx(net, "p1"));
  CHECK(f.relu[static_cast<size_t>(idx(net, "c2"))] == idx(net, "r2"));
  CHECK(f.pool[static_cast<size_t>(idx(net, "c2"))] == idx(net, "p2"));  // any fixed window
  CHECK(f.relu[static_cast<size_t>(idx(net, "c3"))] == -1);              // tanh is not a ReLU ...
  CHECK(f.act[static_cast<size_t>(idx(net, "c3"))] == idx(net, "t3"));   // ... but fuses
  CHECK(f.pool[static_cast<size_t>(idx(net, "c3"))] == -1);              // no pool reads it
  CHECK(f.relu[static_cast<size_t>(idx(net, "fc"))] == idx(net, "r4"));
  CHECK(f.pool[static_cast<size_t>(idx(net, "fc"))] == -1);
  CHECK(f.relu[static_cast<size_t>(idx(net, "out"))] == -1);

  // A second reader of the input, or of a conv's output, stops the fusion.
  Network two = parse(R"(  - {name: c1, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: r1, type: relu}
  - {name: c2, type: conv, filters: 4, kernel: 3, pad: 1, inputs: input}
  - {name: sum, type: add, inputs: [r1, c2, c1]}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 4}
)");
  const Fusions g = find_fusions(two);
  CHECK(g.input_conv == -1);
  CHECK(g.relu[static_cast<size_t>(idx(two, "c1"))] == -1);
}

TEST_CASE(
    "passes: find_fusions takes an average pool of fixed windows after any activation, not an identity one") {
  Network net = parse(R"(  - {name: c1, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: t1, type: tanh}
  - {name: p1, type: avgpool, size: 2, stride: 2}
  - {name: c2, type: conv, filters: 4, kernel: 1}
  - {name: r2, type: relu}
  - {name: p2, type: avgpool, size: 1}
  - {name: c3, type: conv, filters: 4, kernel: 1}
  - {name: s3, type: sigmoid}
  - {name: p3, type: avgpool, global: true}
  - {name: f, type: flatten}
  - {name: out, type: fc, outputs: 4}
)");
  const Fusions f = find_fusions(net);
  auto at = [&](const std::vector<int>& v, const char* layer) {
    return v[static_cast<size_t>(idx(net, layer))];
  };
  CHECK(at(f.act, "c1") == idx(net, "t1"));
  CHECK(at(f.pool, "c1") == idx(net, "p1"));
  CHECK(at(f.act, "c2") == idx(net, "r2"));
  CHECK(at(f.pool, "c2") == -1);  // a 1x1 window of stride 1: an identity, nothing to compute
  CHECK(at(f.pool, "c3") == -1);  // global
}

TEST_CASE("passes: find_fusions takes any activation into a conv or fc, and a max-pool of fixed windows") {
  Network net = parse(R"(  - {name: c1, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: a1, type: relu6}
  - {name: c2, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: a2, type: hardswish}
  - {name: c3, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: a3, type: gelu, approximate: tanh}
  - {name: c4, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: r4, type: relu}
  - {name: p4, type: maxpool, size: 2, stride: 2, ceil_mode: true}
  - {name: c5, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: r5, type: relu}
  - {name: p5, type: maxpool, output: [2, 2]}
  - {name: c7, type: conv, filters: 4, kernel: 1}
  - {name: a7, type: silu}
  - {name: p7, type: maxpool, size: 3, stride: 2, pad: 1}
  - {name: c8, type: conv, filters: 4, kernel: 1}
  - {name: r8, type: relu}
  - {name: p8, type: maxpool, global: true}
  - {name: c9, type: conv, filters: 4, kernel: 1}
  - {name: r9, type: relu}
  - {name: p9, type: avgpool, size: 1}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 8}
  - {name: a6, type: sigmoid}
  - {name: out, type: fc, outputs: 4}
)");
  const Fusions f = find_fusions(net);
  auto at = [&](const std::vector<int>& v, const char* layer) {
    return v[static_cast<size_t>(idx(net, layer))];
  };
  CHECK(at(f.act, "c1") == idx(net, "a1"));
  CHECK(at(f.relu, "c1") == -1);  // relu6 is not a ReLU: no library epilogue computes it
  CHECK(at(f.act, "c2") == idx(net, "a2"));
  CHECK(at(f.act, "c3") == idx(net, "a3"));
  CHECK(at(f.act, "c4") == idx(net, "r4"));
  CHECK(at(f.relu, "c4") == idx(net, "r4"));
  CHECK(at(f.pool, "c4") == idx(net, "p4"));  // ceil_mode (the implicit kernel's plan refuses it)
  CHECK(at(f.relu, "c5") == idx(net, "r5"));
  CHECK(at(f.pool, "c5") == -1);              // adaptive
  CHECK(at(f.pool, "c7") == idx(net, "p7"));  // after any activation, with padding
  CHECK(at(f.pool, "c8") == -1);              // global
  CHECK(at(f.pool, "c9") == -1);              // an average
  CHECK(at(f.act, "fc") == idx(net, "a6"));
  CHECK(at(f.act, "out") == -1);  // the network output is never fused away
  CHECK(at(f.act, "a1") == -1);   // only conv and fc have epilogues
}

TEST_CASE("passes: find_fusions sees through folded batchnorms and dropouts to the activation") {
  Network net = parse(R"(  - {name: c1, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: bn1, type: batchnorm}
  - {name: d1, type: dropout}
  - {name: r1, type: relu}
  - {name: p1, type: maxpool, size: 2, stride: 2}
  - {name: c2, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: bn2, type: batchnorm}
  - {name: r2, type: relu}
  - {name: c3, type: conv, filters: 4, kernel: 3, pad: 1, inputs: bn2}
  - {name: sum, type: add, inputs: [r2, c3]}
  - {name: c4, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: bn4, type: batchnorm}
  - {name: r4, type: relu}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 4}
)");
  for (const char* bn : {"bn1", "bn2", "bn4"}) net.layers[static_cast<size_t>(idx(net, bn))]->folded = true;
  net.layers[static_cast<size_t>(idx(net, "bn4"))]->folded = false;  // not folded: a pass of its own
  const Fusions f = find_fusions(net);
  auto at = [&](const std::vector<int>& v, const char* layer) {
    return v[static_cast<size_t>(idx(net, layer))];
  };
  CHECK(at(f.act, "c1") == idx(net, "r1"));
  CHECK(at(f.relu, "c1") == idx(net, "r1"));
  CHECK(at(f.pool, "c1") == idx(net, "p1"));
  CHECK(at(f.through, "bn1") == idx(net, "r1"));
  CHECK(at(f.through, "d1") == idx(net, "r1"));
  CHECK(at(f.act, "c2") == -1);  // bn2 has a second reader (c3): its value must exist
  CHECK(at(f.through, "bn2") == -1);
  CHECK(at(f.act, "c4") == -1);  // an unfolded batchnorm is arithmetic, not identity
  CHECK(at(f.through, "bn4") == -1);
  CHECK(at(f.through, "r1") == -1);
}

TEST_CASE("passes: find_fusions takes a residual add (and its activation) into the later conv") {
  // ResNet's two blocks: conv -> bn -> add(block input) -> relu, and the down block whose add
  // reads two convs (the later one, the shortcut, takes it: the other exists when it runs).
  Network net = parse(R"(  - {name: c0, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: r0, type: relu}
  - {name: c1, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: bn1, type: batchnorm}
  - {name: add1, type: add, inputs: [bn1, r0]}
  - {name: r1, type: relu}
  - {name: c2, type: conv, filters: 8, kernel: 3, stride: 2, pad: 1}
  - {name: bn2, type: batchnorm}
  - {name: sc, type: conv, filters: 8, kernel: 1, stride: 2, inputs: r1}
  - {name: add2, type: add, inputs: [bn2, sc]}
  - {name: r2, type: relu}
  - {name: c3, type: conv, filters: 8, kernel: 3, pad: 1}
  - {name: add3, type: add, inputs: [c3, r2]}
  - {name: c4, type: conv, filters: 8, kernel: 3, pad: 1, inputs: r2}
  - {name: add4, type: add, inputs: [c4, add3]}
  - {name: r4, type: relu}
  - {name: c5, type: conv, filters: 8, kernel: 3, pad: 1}
  - {name: r5, type: relu}
  - {name: add5, type: add, inputs: [r5, r4]}
  - {name: gap, type: avgpool, global: true}
  - {name: fc, type: fc, outputs: 4}
)");
  for (const char* bn : {"bn1", "bn2"}) net.layers[static_cast<size_t>(idx(net, bn))]->folded = true;
  const Fusions f = find_fusions(net);
  auto at = [&](const std::vector<int>& v, const char* layer) {
    return v[static_cast<size_t>(idx(net, layer))];
  };
  CHECK(at(f.residual, "c1") == idx(net, "add1"));
  CHECK(at(f.residual_act, "c1") == idx(net, "r1"));
  CHECK(at(f.through, "bn1") == idx(net, "r1"));  // the folded batchnorm's buffer holds r1's value
  CHECK(at(f.residual, "c2") == -1);              // the shortcut sc is computed after c2
  CHECK(at(f.through, "bn2") == -1);
  CHECK(at(f.residual, "sc") == idx(net, "add2"));
  CHECK(at(f.residual_act, "sc") == idx(net, "r2"));
  CHECK(at(f.residual, "c3") == idx(net, "add3"));
  CHECK(at(f.residual_act, "c3") == -1);  // add3's reader is an add, not an activation
  CHECK(at(f.residual, "c4") == idx(net, "add4"));
  CHECK(at(f.residual_act, "c4") == idx(net, "r4"));
  CHECK(at(f.residual, "c5") == -1);  // its relu comes before the add: that is act, not residual
  CHECK(at(f.act, "c5") == idx(net, "r5"));
  CHECK(at(f.residual, "c0") == -1);
}

TEST_CASE("passes: find_fusions finds a per-channel mul that a 1x1 conv can fold into its filters") {
  // Squeeze-and-excitation before a projection conv (EfficientNet's MBConv), in either input
  // order, and the muls that cannot fold: read twice, before a 3x3 conv, before a strided 1x1, two
  // full-size inputs, and one at 1x1 (nothing broadcast).
  Network net = parse(R"(  - {name: c0, type: conv, filters: 8, kernel: 3, pad: 1}
  - {name: gap, type: avgpool, output: 1}
  - {name: f1, type: conv, filters: 8, kernel: 1}
  - {name: sig, type: sigmoid}
  - {name: m1, type: mul, inputs: [sig, c0]}
  - {name: p1, type: conv, filters: 4, kernel: 1, bias: false}
  - {name: m2, type: mul, inputs: [c0, sig]}
  - {name: p2, type: conv, filters: 8, kernel: 1}
  - {name: m3, type: mul, inputs: [c0, sig]}
  - {name: p3, type: conv, filters: 8, kernel: 3, pad: 1}
  - {name: m4, type: mul, inputs: [c0, sig]}
  - {name: p4, type: conv, filters: 8, kernel: 1, stride: 2}
  - {name: m5, type: mul, inputs: [c0, p2]}
  - {name: p5, type: conv, filters: 8, kernel: 1}
  - {name: m6, type: mul, inputs: [c0, sig]}
  - {name: p6, type: conv, filters: 8, kernel: 1}
  - {name: p7, type: conv, filters: 8, kernel: 1, inputs: m6}
  - {name: m8, type: mul, inputs: [gap, sig]}
  - {name: p8, type: conv, filters: 8, kernel: 1}
  - {name: cat, type: concat, inputs: [p1, p2, p3, p5, p6, p7]}
  - {name: gp, type: avgpool, global: true}
  - {name: g4, type: avgpool, global: true, inputs: p4}
  - {name: cat2, type: concat, inputs: [gp, g4, p8]}
  - {name: fc, type: fc, outputs: 4}
)");
  const Fusions f = find_fusions(net);
  auto at = [&](const char* layer) { return f.scale[static_cast<size_t>(idx(net, layer))]; };
  CHECK(at("p1") == idx(net, "m1"));
  CHECK(at("p2") == idx(net, "m2"));
  CHECK(at("p3") == -1);  // a 3x3 window
  CHECK(at("p4") == -1);  // stride 2
  CHECK(at("p5") == -1);  // no input is per channel
  CHECK(at("p6") == -1);  // m6 has two readers
  CHECK(at("p7") == -1);
  CHECK(at("p8") == -1);  // 1x1: nothing is broadcast
  CHECK(at("c0") == -1);
  CHECK(at("m1") == -1);
}

TEST_CASE("passes: layer_lifetimes follow reads through identity layers to the output") {
  Network net = parse(R"(  - {name: c1, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: r1, type: relu}
  - {name: d1, type: dropout, rate: 0.5}
  - {name: c2, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: sum, type: add, inputs: [c2, d1]}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 4}
  - {name: out, type: dropout, rate: 0.1}
)");
  const std::vector<Lifetime> life = layer_lifetimes(net);
  REQUIRE(life.size() == net.layers.size());
  auto check = [&](const char* name, int first, int last) {
    CAPTURE(name);
    CHECK(life[static_cast<size_t>(idx(net, name))].first == first);
    CHECK(life[static_cast<size_t>(idx(net, name))].last == last);
  };
  check("c1", 0, 1);  // read by r1 only
  check("r1", 1, 4);  // through the dropout: by c2 and sum
  check("d1", 8, 7);  // an identity owns nothing
  check("c2", 3, 4);
  check("sum", 4, 6);  // through the flatten: by the fc
  check("fc", 6, 8);   // through the output dropout: after the last layer
  check("out", 8, 7);
}

TEST_CASE("share_groups: never two buffers in use at once together; reuses what it can") {
  // A chain of back-to-back lifetimes (each read by the next step only) needs two allocations.
  std::vector<Lifetime> chain;
  std::vector<int64_t> sizes;
  for (int i = 0; i < 10; ++i) {
    chain.push_back({i - 1, i});
    sizes.push_back(100 + i);
  }
  std::vector<int> g = share_groups(chain, sizes);
  CHECK(test::check_share_groups(chain, sizes, g) == 109 + 108);
  CHECK(*std::max_element(g.begin(), g.end()) == 1);
  // Of the free groups, the smallest that holds the buffer; else the largest, which grows;
  // a new group only when none is free.
  CHECK(share_groups({{0, 0}, {0, 0}, {1, 1}}, {50, 10, 8}) == std::vector<int>{0, 1, 1});
  CHECK(share_groups({{0, 0}, {0, 0}, {1, 1}}, {50, 10, 60}) == std::vector<int>{0, 1, 0});
  CHECK(share_groups({{0, 1}, {0, 2}, {2, 3}, {3, 4}}, {50, 10, 8, 40}) == std::vector<int>{0, 1, 0, 1});
  CHECK(share_groups({{0, 1}, {1, 2}}, {5, 5}) == std::vector<int>{0, 1});  // read and written at step 1
  // Random lifetimes and sizes: always valid, never more memory than a buffer each.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 40);
    std::vector<Lifetime> life;
    std::vector<int64_t> sz;
    int64_t all = 0;
    for (int b = 0; b < n; ++b) {
      const int first = static_cast<int>(rng() % 30) - 1;
      life.push_back({first, first + static_cast<int>(rng() % 9) - 1});  // some never in use
      sz.push_back(1 + static_cast<int64_t>(rng() % 1000));
      if (life.back().first <= life.back().last) all += sz.back();
    }
    CAPTURE(trial);
    std::vector<int64_t> group_sizes;
    const int64_t shared = test::check_share_groups(life, sz, share_groups(life, sz, &group_sizes));
    CHECK(shared <= all);
    int64_t reported = 0;
    for (int64_t f : group_sizes) reported += f;
    CHECK(reported == shared);  // each group's size is its largest member's
  }
}
