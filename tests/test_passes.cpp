// The layer-type list (engine/layer_types.h) and the graph passes (engine/passes.h): every
// kind has a name, a factory that makes a layer of that kind and a CPU forward function; the
// passes find readers, identities, fusions and batchnorm folds from the graph alone.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <set>

#include "engine/layers/conv.h"
#include "engine/network.h"
#include "engine/passes.h"
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

TEST_CASE("passes: find_fusions finds conv+relu(+2x2 max-pool), fc+relu, and the input's only conv") {
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
  CHECK(f.pool[static_cast<size_t>(idx(net, "c2"))] == -1);  // stride 1: not the 2x2/2 pool
  CHECK(f.relu[static_cast<size_t>(idx(net, "c3"))] == -1);  // tanh runs as its own pass
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

TEST_CASE("passes: find_fusions takes any activation into a conv or fc, and only a flooring 2x2 pool") {
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
  CHECK(at(f.pool, "c4") == -1);  // ceil_mode: a partial last window the fused pool would drop
  CHECK(at(f.relu, "c5") == idx(net, "r5"));
  CHECK(at(f.pool, "c5") == -1);  // adaptive
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
