// The ONNX importer on models built here with the generated protobuf classes: the netdef it
// writes (names, tensors, folded shape subgraphs, fused MatMul+Add), that an imported network
// computes what the same network written by hand computes, the one error that lists every
// unsupported node, and bad input (truncated, cycles, missing initializers, huge or negative
// dims, external data outside the model's directory).
#ifdef CNNRUN_HAVE_ONNX

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "engine/executor.h"
#include "engine/io/weights.h"
#include "engine/onnx/onnx_import.h"
#include "onnx/onnx.pb.h"
#include "reference/cpu_executor.h"
#include "tests/test_util.h"

using namespace cnnrun;

namespace {

struct ModelBuilder {
  onnx::ModelProto m;
  explicit ModelBuilder(int64_t opset = 13, int64_t ir = 8) {
    m.set_ir_version(ir);
    m.set_producer_name("test");
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    m.mutable_graph()->set_name("g");
  }
  onnx::GraphProto& g() { return *m.mutable_graph(); }
  void input(const std::string& name, const std::vector<int64_t>& dims) {
    auto* vi = g().add_input();
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    for (size_t k = 0; k < dims.size(); ++k) {
      auto* d = tt->mutable_shape()->add_dim();
      if (k == 0 && dims[k] == 0)
        d->set_dim_param("N");
      else
        d->set_dim_value(dims[k]);
    }
  }
  void output(const std::string& name) { g().add_output()->set_name(name); }
  onnx::TensorProto& init(const std::string& name, const std::vector<int64_t>& dims,
                          const std::vector<float>& v) {
    auto* t = g().add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    for (float x : v) t->add_float_data(x);
    return *t;
  }
  onnx::TensorProto& init_i64(const std::string& name, const std::vector<int64_t>& v) {
    auto* t = g().add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
    return *t;
  }
  onnx::NodeProto& node(const std::string& op, const std::string& name, const std::vector<std::string>& in,
                        const std::vector<std::string>& out) {
    auto* n = g().add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& s : in) n->add_input(s);
    for (const auto& s : out) n->add_output(s);
    return *n;
  }
  std::string bytes() const { return m.SerializeAsString(); }
};

void attr_ints(onnx::NodeProto& n, const std::string& key, const std::vector<int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
void attr_int(onnx::NodeProto& n, const std::string& key, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

std::string import_error(const std::string& bytes, const std::string& dir = "") {
  try {
    import_onnx_bytes(bytes, "m.onnx", dir, {});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A small CNN as torch.onnx.export writes it: Conv -> Relu -> MaxPool -> Conv -> BatchNorm -> Relu,
// a flatten through the Shape -> Gather -> Unsqueeze -> Concat -> Reshape chain, MatMul + Add,
// Softmax.
ModelBuilder small_cnn() {
  ModelBuilder b;
  b.input("x", {0, 2, 8, 8});
  b.init("c1.w", {4, 2, 3, 3}, test::random_floats(72, 1));
  b.init("c1.b", {4}, test::random_floats(4, 2));
  attr_ints(b.node("Conv", "conv1", {"x", "c1.w", "c1.b"}, {"a"}), "pads", {1, 1, 1, 1});
  b.node("Relu", "relu1", {"a"}, {"b"});
  auto& mp = b.node("MaxPool", "pool1", {"b"}, {"c"});
  attr_ints(mp, "kernel_shape", {2, 2});
  attr_ints(mp, "strides", {2, 2});
  b.init("c2.w", {3, 4, 3, 3}, test::random_floats(108, 3));
  auto& c2 = b.node("Conv", "conv2", {"c", "c2.w"}, {"d"});
  attr_ints(c2, "strides", {1, 1});
  attr_ints(c2, "pads", {1, 1, 1, 1});
  b.init("bn.s", {3}, {1.5f, 0.5f, 1.0f});
  b.init("bn.b", {3}, {0.1f, -0.2f, 0.3f});
  b.init("bn.m", {3}, {0.05f, -0.1f, 0.2f});
  b.init("bn.v", {3}, {0.9f, 1.2f, 0.7f});
  b.node("BatchNormalization", "bn2", {"d", "bn.s", "bn.b", "bn.m", "bn.v"}, {"e"});
  b.node("Relu", "relu2", {"e"}, {"f"});
  b.node("Shape", "shape", {"f"}, {"s"});
  b.init_i64("zero", {0});
  b.g().mutable_initializer(b.g().initializer_size() - 1)->clear_dims();  // a scalar index
  b.node("Gather", "gather", {"s", "zero"}, {"n"});
  b.init_i64("ax", {0});
  b.node("Unsqueeze", "unsq", {"n", "ax"}, {"n1"});
  b.init_i64("minus1", {-1});
  auto& cat = b.node("Concat", "cat", {"n1", "minus1"}, {"shp"});
  attr_int(cat, "axis", 0);
  b.node("Reshape", "flat", {"f", "shp"}, {"g"});
  b.init("fc.w", {48, 5}, test::random_floats(240, 4));
  b.init("fc.b", {5}, test::random_floats(5, 5));
  b.node("MatMul", "fc", {"g", "fc.w"}, {"h"});
  b.node("Add", "fc_add", {"h", "fc.b"}, {"i"});
  b.node("Softmax", "prob", {"i"}, {"y"});
  b.output("y");
  return b;
}

Dataset random_images(const Shape& s, int64_t n, uint32_t seed) {
  Dataset d;
  d.count = n;
  d.shape = s;
  std::mt19937 g(seed);
  for (int64_t i = 0; i < n * s.size(); ++i) d.pixels.push_back(static_cast<uint8_t>(g() & 255));
  d.labels.assign(static_cast<size_t>(n), 0);
  return d;
}

}  // namespace

TEST_CASE("onnx: a small CNN becomes a readable netdef with the graph's names and initializers") {
  ImportOptions opt;
  opt.weights_path = "small.safetensors";
  ImportResult r = import_onnx_bytes(small_cnn().bytes(), "small.onnx", "", opt);
  INFO(r.netdef);
  CHECK(r.netdef.find("input: {channels: 2, height: 8, width: 8}") != std::string::npos);
  CHECK(r.netdef.find("weights: {format: safetensors, path: \"small.safetensors\"}") != std::string::npos);
  CHECK(
      r.netdef.find(
          "- {name: \"conv1\", type: conv, filters: 4, kernel: 3, pad: 1, tensors: {weight: \"c1.w\", bias: "
          "\"c1.b\"}}") != std::string::npos);
  CHECK(r.netdef.find("- {name: \"pool1\", type: maxpool, size: 2, stride: 2}") != std::string::npos);
  CHECK(r.netdef.find(
            "- {name: \"conv2\", type: conv, filters: 3, kernel: 3, pad: 1, bias: false, tensors: {weight: "
            "\"c2.w\"}}") != std::string::npos);
  CHECK(r.netdef.find(
            "tensors: {weight: \"bn.s\", bias: \"bn.b\", running_mean: \"bn.m\", running_var: \"bn.v\"}") !=
        std::string::npos);
  // The shape chain folded away: one flatten, no layer for Shape/Gather/Unsqueeze/Concat.
  CHECK(r.netdef.find("- {name: \"flat\", type: flatten}") != std::string::npos);
  for (const char* gone : {"shape", "gather", "unsq", "\"cat\"", "fc_add"})
    CHECK(r.netdef.find(gone) == std::string::npos);
  // MatMul + Add: one fc with the Add's constant as its bias; the [K, N] weight transposed.
  CHECK(
      r.netdef.find("- {name: \"fc\", type: fc, outputs: 5, tensors: {weight: \"fc.w\", bias: \"fc.b\"}}") !=
      std::string::npos);
  CHECK(r.netdef.find("output: \"prob\"") != std::string::npos);
  REQUIRE(r.tensors.count("fc.w"));
  CHECK(r.tensors["fc.w"].dims == std::vector<int64_t>{5, 48});
  std::vector<float> w = test::random_floats(240, 4);
  CHECK(r.tensors["fc.w"].data[1 * 48 + 7] == w[7 * 5 + 1]);
  CHECK(r.tensors.size() == 9);  // the int64 shape constants are not weights
}

TEST_CASE("onnx: the imported network computes what the same network written by hand computes") {
  ImportResult r = import_onnx_bytes(small_cnn().bytes(), "small.onnx", "", {});
  Network a = parse_netdef_string(r.netdef, "imported");
  load_weights_from(a, r.tensors, "small.onnx");
  const char* hand = R"(
input: {channels: 2, height: 8, width: 8}
classes: [a, b, c, d, e]
layers:
  - {name: conv1, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: relu1, type: relu}
  - {name: pool1, type: maxpool, size: 2, stride: 2}
  - {name: conv2, type: conv, filters: 3, kernel: 3, pad: 1, bias: false}
  - {name: bn2, type: batchnorm}
  - {name: relu2, type: relu}
  - {name: flat, type: flatten}
  - {name: fc, type: fc, outputs: 5}
  - {name: prob, type: softmax}
)";
  Network b = parse_netdef_string(hand, "hand");
  std::map<std::string, Tensor> t;
  auto put = [&](const std::string& n, std::vector<int64_t> dims, std::vector<float> v) {
    Tensor x;
    x.dims = std::move(dims);
    x.data = std::move(v);
    t[n] = x;
  };
  put("conv1.weight", {4, 2, 3, 3}, test::random_floats(72, 1));
  put("conv1.bias", {4}, test::random_floats(4, 2));
  put("conv2.weight", {3, 4, 3, 3}, test::random_floats(108, 3));
  put("bn2.weight", {3}, {1.5f, 0.5f, 1.0f});
  put("bn2.bias", {3}, {0.1f, -0.2f, 0.3f});
  put("bn2.running_mean", {3}, {0.05f, -0.1f, 0.2f});
  put("bn2.running_var", {3}, {0.9f, 1.2f, 0.7f});
  std::vector<float> kn = test::random_floats(240, 4), nk(240);
  for (int k = 0; k < 48; ++k)
    for (int o = 0; o < 5; ++o) nk[static_cast<size_t>(o * 48 + k)] = kn[static_cast<size_t>(k * 5 + o)];
  put("fc.weight", {5, 48}, nk);
  put("fc.bias", {5}, test::random_floats(5, 5));
  load_weights_from(b, t, "hand");
  Dataset d = random_images({2, 8, 8}, 7, 9);
  std::vector<Tensor> ya = make_cpu_executor(a)->forward_layers(d, 0, 7, RunOptions{});
  std::vector<Tensor> yb = make_cpu_executor(b)->forward_layers(d, 0, 7, RunOptions{});
  REQUIRE(ya.size() == yb.size());
  const Tensor& oa = ya[static_cast<size_t>(a.output)];
  const Tensor& ob = yb[static_cast<size_t>(b.output)];
  REQUIRE(oa.dims == ob.dims);
  CHECK(oa.data == ob.data);  // same layers, same weights: bit for bit
  // Softmax of 5 values per image: each row sums to 1 (the output is not trivially equal).
  float sum = 0;
  for (int k = 0; k < 5; ++k) sum += oa.data[static_cast<size_t>(k)];
  CHECK(sum == doctest::Approx(1.0f).epsilon(1e-5));
}

TEST_CASE("onnx: one error lists every unsupported node, op and attribute") {
  ModelBuilder b;
  b.input("x", {1, 4, 8, 8});
  b.init("w", {4, 4, 3, 3}, std::vector<float>(144, 0.1f));
  auto& lop = b.node("Conv", "lopsided", {"x", "w"}, {"a"});
  attr_ints(lop, "pads", {2, 1, 0, 1});
  b.node("LRN", "norm", {"x"}, {"b"});
  auto& cl = b.node("Clip", "clip", {"x"}, {"c0"});
  auto* lo = cl.add_attribute();  // opset 13: min/max are inputs, so an attribute is unknown
  lo->set_name("min");
  lo->set_type(onnx::AttributeProto::FLOAT);
  auto& mp = b.node("MaxPool", "pool", {"x"}, {"d"});
  attr_ints(mp, "kernel_shape", {2, 2});
  attr_ints(mp, "dilations", {2, 2});
  attr_int(mp, "funny", 3);
  b.node("Sum", "sum", {"a", "b", "c0", "d"}, {"y"});
  b.output("y");
  std::string e = import_error(b.bytes());
  INFO(e);
  CHECK(e.find("cannot import 7 thing(s)") != std::string::npos);
  CHECK(e.find("node 'lopsided' (Conv): pads [2, 1, 0, 1] (cnnrun pads both sides of a dimension alike)") !=
        std::string::npos);
  CHECK(e.find("node 'norm' (LRN): op LRN is not supported") != std::string::npos);
  CHECK(e.find("node 'clip' (Clip): attribute 'min' is not supported") != std::string::npos);
  CHECK(e.find("node 'clip' (Clip): Clip(-inf, inf) (cnnrun has Clip(0, 6) as relu6") != std::string::npos);
  CHECK(e.find("node 'pool' (MaxPool): dilations [2, 2] (cnnrun's pools take none)") != std::string::npos);
  CHECK(e.find("node 'pool' (MaxPool): attribute 'funny' is not supported") != std::string::npos);
  CHECK(e.find("node 'sum' (Sum): op Sum is not supported") != std::string::npos);
}

TEST_CASE("onnx: grouped and dilated conv, ceil_mode, Clip(0, 6), LeakyRelu, Mul by C x 1 x 1, Resize") {
  ModelBuilder b(13);
  b.input("x", {0, 4, 7, 7});
  b.init("dw", {8, 1, 3, 3}, test::random_floats(72, 1));
  auto& c = b.node("Conv", "dwconv", {"x", "dw"}, {"a"});
  attr_int(c, "group", 4);
  attr_ints(c, "dilations", {2, 2});
  attr_ints(c, "pads", {2, 2, 2, 2});
  b.init("zero", {}, {0.f});
  b.init("six", {}, {6.f});
  b.node("Clip", "relu6", {"a", "zero", "six"}, {"b"});
  auto& mp = b.node("MaxPool", "pool", {"b"}, {"p"});
  attr_ints(mp, "kernel_shape", {2, 2});
  attr_ints(mp, "strides", {2, 2});
  attr_int(mp, "ceil_mode", 1);
  b.node("GlobalAveragePool", "squeeze", {"p"}, {"s"});
  auto* lr = b.node("LeakyRelu", "leaky", {"s"}, {"t"}).add_attribute();
  lr->set_name("alpha");
  lr->set_type(onnx::AttributeProto::FLOAT);
  lr->set_f(0.125f);
  b.node("Mul", "excite", {"p", "t"}, {"m"});
  b.init("roi", {0}, {});
  b.init("scales", {4}, {1.f, 1.f, 2.f, 2.f});
  auto& rs = b.node("Resize", "up", {"m", "roi", "scales"}, {"y"});
  auto* md = rs.add_attribute();
  md->set_name("mode");
  md->set_type(onnx::AttributeProto::STRING);
  md->set_s("nearest");
  b.output("y");
  ImportResult r = import_onnx_bytes(b.bytes(), "m.onnx", "", {});
  INFO(r.netdef);
  CHECK(
      r.netdef.find("- {name: \"dwconv\", type: conv, filters: 8, kernel: 3, pad: 2, dilation: 2, groups: 4, "
                    "bias: false, tensors: {weight: \"dw\"}}") != std::string::npos);
  CHECK(r.netdef.find("- {name: \"relu6\", type: relu6}") != std::string::npos);
  CHECK(r.netdef.find("- {name: \"pool\", type: maxpool, size: 2, stride: 2, ceil_mode: true}") !=
        std::string::npos);
  CHECK(r.netdef.find("- {name: \"leaky\", type: leaky_relu, slope: 0.125}") != std::string::npos);
  CHECK(r.netdef.find("- {name: \"excite\", type: mul, inputs: [\"pool\", \"leaky\"]}") != std::string::npos);
  CHECK(r.netdef.find("- {name: \"up\", type: upsample, scale: 2, mode: nearest}") != std::string::npos);
  // The netdef parses: 7x7 -> conv (dilated, padded) 7x7 -> ceil pool 4x4 -> upsampled 8x8.
  Network net = parse_netdef_string(r.netdef, "m.yaml");
  load_weights_from(net, r.tensors, "m.onnx");
  CHECK(net.layers[static_cast<size_t>(net.output)]->out_shape == Shape{8, 8, 8});
  CHECK(net.num_classes() == 8 * 8 * 8);
}

namespace {

// x -> 1x1 conv 'c' -> Gelu written with Erf: Mul(Mul(c, Add(Erf(c / sqrt 2), one)), half),
// the scaling as Div by sqrt 2 or Mul by 1/sqrt 2, operands in either order.
std::string gelu_erf_model(bool mul_form, bool swapped, float one, float half) {
  ModelBuilder b(13);
  b.input("x", {0, 3, 4, 4});
  b.init("w", {3, 3, 1, 1}, test::random_floats(9, 11));
  b.node("Conv", "conv", {"x", "w"}, {"c"});
  if (mul_form) {
    b.init("inv_sqrt2", {}, {0.70710678f});
    b.node("Mul", "scale",
           swapped ? std::vector<std::string>{"inv_sqrt2", "c"} : std::vector<std::string>{"c", "inv_sqrt2"},
           {"d"});
  } else {
    b.init("sqrt2", {}, {1.41421356f});
    b.node("Div", "scale", {"c", "sqrt2"}, {"d"});
  }
  b.node("Erf", "erf", {"d"}, {"e"});
  b.init("one", {}, {one});
  b.node("Add", "plus1",
         swapped ? std::vector<std::string>{"one", "e"} : std::vector<std::string>{"e", "one"}, {"f"});
  b.node("Mul", "times_x", swapped ? std::vector<std::string>{"f", "c"} : std::vector<std::string>{"c", "f"},
         {"g"});
  b.init("half", {}, {half});
  b.node("Mul", "halve", {"g", "half"}, {"y"});
  b.output("y");
  return b.bytes();
}

}  // namespace

TEST_CASE("onnx: Gelu written with Erf (torch.onnx before opset 20) imports as one exact gelu layer") {
  for (bool mul_form : {false, true})
    for (bool swapped : {false, true}) {
      INFO("mul_form " << mul_form << " swapped " << swapped);
      ImportResult r = import_onnx_bytes(gelu_erf_model(mul_form, swapped, 1.f, 0.5f), "m.onnx", "", {});
      INFO(r.netdef);
      CHECK(r.netdef.find("- {name: \"scale\", type: gelu}") != std::string::npos);
      CHECK(r.netdef.find("Erf") == std::string::npos);
      CHECK(r.netdef.find("times_x") == std::string::npos);
      REQUIRE(r.notes.size() >= 1);
      CHECK(r.notes.back().find("Gelu written with Erf, imported as one gelu layer") != std::string::npos);
      Network net = parse_netdef_string(r.netdef, "m.yaml");
      load_weights_from(net, r.tensors, "m.onnx");
      REQUIRE(net.layers.size() == 2);
      // The exact (erf) form, against the definition in double precision.
      Dataset d = random_images({3, 4, 4}, 5, 3);
      std::vector<Tensor> y = make_cpu_executor(net)->forward_layers(d, 0, 5, RunOptions{});
      const Tensor& c = y[0];
      const Tensor& g = y[1];
      REQUIRE(c.data.size() == g.data.size());
      double worst = 0;
      for (size_t i = 0; i < c.data.size(); ++i) {
        const double v = c.data[i], want = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
        worst = std::max(worst, std::fabs(g.data[i] - want) / std::max(1.0, std::fabs(want)));
      }
      CHECK(worst < 1e-6);
    }
  // Not Gelu (Add 2, or a factor 0.25): the Erf stays a node cnnrun has no layer for.
  for (auto [one, half] : {std::pair<float, float>{2.f, 0.5f}, {1.f, 0.25f}}) {
    try {
      import_onnx_bytes(gelu_erf_model(false, false, one, half), "m.onnx", "", {});
      FAIL("imported a chain that is not Gelu");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("op Erf is not supported") != std::string::npos);
    }
  }
}

TEST_CASE("onnx: bad models are one clear error naming the node or tensor") {
  SUBCASE("truncated protobuf") {
    std::string full = small_cnn().bytes();
    std::string e = import_error(full.substr(0, full.size() / 2));
    CHECK(e.find("m.onnx: not an ONNX model: the protobuf is malformed or truncated") == 0);
  }
  SUBCASE("IR version and opset out of range") {
    CHECK(import_error(ModelBuilder(13, 2).bytes()).find("IR version 2 is not supported (3 to 10)") !=
          std::string::npos);
    CHECK(import_error(ModelBuilder(6).bytes()).find("opset 6 is not supported (7 to 21)") !=
          std::string::npos);
  }
  SUBCASE("a cycle") {
    ModelBuilder b;
    b.input("x", {1, 3, 4, 4});
    b.node("Add", "loop_a", {"x", "q"}, {"p"});
    b.node("Relu", "loop_b", {"p"}, {"q"});
    b.output("q");
    std::string e = import_error(b.bytes());
    CHECK(e.find("the graph has a cycle: node 'loop_a' (Add), node 'loop_b' (Relu)") != std::string::npos);
  }
  SUBCASE("a missing initializer") {
    ModelBuilder b;
    b.input("x", {1, 3, 4, 4});
    b.node("Conv", "conv", {"x", "conv.weight"}, {"y"});
    b.output("y");
    CHECK(import_error(b.bytes()) ==
          "m.onnx: node 'conv' (Conv): input 'conv.weight' is made by no node, initializer or graph input (a "
          "missing initializer?)");
  }
  SUBCASE("huge and negative dimensions") {
    ModelBuilder b;
    b.input("x", {1, 3, int64_t{1} << 40, 4});
    b.node("Relu", "r", {"x"}, {"y"});
    b.output("y");
    CHECK(import_error(b.bytes()).find("graph input 'x': dimension 2 is 1099511627776") != std::string::npos);
    ModelBuilder c;
    c.input("x", {1, 3, 4, 4});
    c.init("w", {4, -3, 3, 3}, {});
    c.node("Conv", "conv", {"x", "w"}, {"y"});
    c.output("y");
    CHECK(import_error(c.bytes()).find("initializer 'w': negative dimension -3") != std::string::npos);
    // Dims that claim 2^40 floats with 4 bytes of data: refused before any allocation.
    ModelBuilder d;
    d.input("x", {1, 3, 4, 4});
    auto& t = d.init("w", {1024, 1024, 1024, 1024}, {});
    t.set_raw_data(std::string(4, '\0'));
    d.node("Conv", "conv", {"x", "w"}, {"y"});
    d.output("y");
    CHECK(import_error(d.bytes()).find("initializer 'w': dims 1024x1024x1024x1024 exceed") !=
          std::string::npos);
    ModelBuilder e2;
    e2.input("x", {1, 3, 4, 4});
    auto& t2 = e2.init("w", {4, 3, 3, 3}, {});
    t2.set_raw_data(std::string(8, '\0'));
    e2.node("Conv", "conv", {"x", "w"}, {"y"});
    e2.output("y");
    CHECK(import_error(e2.bytes()).find("initializer 'w': raw_data has 8 bytes, the dims need 432") !=
          std::string::npos);
  }
  SUBCASE("a conv whose weights do not fit its input") {
    ModelBuilder b;
    b.input("x", {1, 3, 4, 4});
    b.init("w", {4, 5, 3, 3}, std::vector<float>(180, 0.f));
    b.node("Conv", "conv7", {"x", "w"}, {"y"});
    b.output("y");
    CHECK(import_error(b.bytes()) ==
          "m.onnx: node 'conv7' (Conv): W [4, 5, 3, 3] with group 1 expects 5 input channels, X has 3");
  }
}

TEST_CASE("onnx: external data is read inside the model's directory only") {
  std::string dir = test::temp_dir("onnx_external");
  std::vector<float> w = test::random_floats(4 * 3 * 3 * 3, 11);
  std::string raw(16, 'z');  // an offset of 16 bytes
  raw.append(reinterpret_cast<const char*>(w.data()), w.size() * 4);
  test::write_file(dir + "/weights.bin", raw);
  auto model = [&](const std::string& location, const std::string& offset) {
    ModelBuilder b;
    b.input("x", {1, 3, 4, 4});
    auto& t = b.init("w", {4, 3, 3, 3}, {});
    t.set_data_location(onnx::TensorProto::EXTERNAL);
    auto* kv = t.add_external_data();
    kv->set_key("location");
    kv->set_value(location);
    kv = t.add_external_data();
    kv->set_key("offset");
    kv->set_value(offset);
    b.node("Conv", "conv", {"x", "w"}, {"y"});
    b.output("y");
    return b.bytes();
  };
  ImportResult r = import_onnx_bytes(model("weights.bin", "16"), "m.onnx", dir, {});
  REQUIRE(r.tensors.count("w"));
  CHECK(r.tensors["w"].data == w);
  CHECK(import_error(model("../weights.bin", "0"), dir).find("lies outside the model's directory") !=
        std::string::npos);
  CHECK(import_error(model("/etc/passwd", "0"), dir).find("is absolute") != std::string::npos);
  std::filesystem::create_symlink("/etc/hostname", dir + "/link.bin");
  CHECK(import_error(model("link.bin", "0"), dir).find("lies outside the model's directory") !=
        std::string::npos);
  CHECK(import_error(model("weights.bin", "400"), dir).find("do not fit") != std::string::npos);
  CHECK(import_error(model("weights.bin", "16"), "").find("not read from a model in memory") !=
        std::string::npos);
}

TEST_CASE("onnx: softmax, flatten and reshape only where cnnrun's layers mean the same") {
  auto one = [](int64_t opset, const std::vector<int64_t>& in, int64_t axis) {
    ModelBuilder b(opset);
    b.input("x", in);
    attr_int(b.node("Softmax", "sm", {"x"}, {"y"}), "axis", axis);
    b.output("y");
    return import_error(b.bytes());
  };
  CHECK(one(13, {1, 3, 4, 4}, 1).empty());  // per position over channels
  CHECK(one(11, {1, 3, 1, 1}, 1).empty());  // over C x 1 x 1 = over channels
  CHECK(one(11, {1, 3, 4, 4}, 1).find("node 'sm' (Softmax): axis 1 of a rank-4 input") != std::string::npos);
  CHECK(one(13, {1, 3, 4, 4}, -1).find("axis 3") != std::string::npos);
  CHECK(one(13, {1, 10}, -1).empty());
}

TEST_CASE("netdef: a layer's tensors: map names its weights in the file") {
  const char* text = R"(
input: {channels: 1, height: 4, width: 4}
classes: [a, b]
layers:
  - {name: fc, type: fc, outputs: 2, tensors: {weight: "W0", bias: "onnx::B"}}
)";
  Network net = parse_netdef_string(text, "t.yaml");
  CHECK(net.layers[0]->tensor_name("weight") == "W0");
  CHECK(net.layers[0]->tensor_name("bias") == "onnx::B");
  Tensor w({2, 16}), bias({2});
  bias.data = {1.f, 2.f};
  load_weights_from(net, {{"W0", w}, {"onnx::B", bias}}, "mem");
  CHECK(net.layers[0]->weight("bias").data == bias.data);
  CHECK(collect_weights(net).count("onnx::B") == 1);
  try {
    parse_netdef_string(R"(
input: {channels: 1, height: 4, width: 4}
classes: [a, b]
layers:
  - {name: fc, type: fc, outputs: 2, tensors: {wieght: "W0"}}
)",
                        "t.yaml");
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) ==
          "t.yaml:5:47: layer 'fc' (fc): key 'tensors': 'wieght' is not a weight of this layer; did you mean "
          "'weight'?");
  }
}

TEST_CASE(
    "onnx: cnnrun import writes the netdef and safetensors, and a direct .onnx run gives the same outputs") {
  const std::string dir = test::temp_dir("onnx_cli");
  test::write_file(dir + "/small.onnx", small_cnn().bytes());
  std::string out;
  const std::string bin = CNNRUN_BINARY;
  REQUIRE(test::run_command(bin + " import " + dir + "/small.onnx " + dir +
                                "/small.yaml --classes 5 --scale 0.01 "
                                "--shift -1 2>&1",
                            &out) == 0);
  CHECK(out.find("small.yaml (9 layers) and " + dir + "/small.safetensors (9 tensors)") != std::string::npos);
  const std::string yaml = test::read_file(dir + "/small.yaml");
  CHECK(yaml.find("preprocess: {scale: 0.01, shift: -1}") != std::string::npos);
  CHECK(yaml.find("classes: 5\n") != std::string::npos);
  CHECK(yaml.find("weights: {format: safetensors, path: \"small.safetensors\"}") != std::string::npos);
  // Both runs on the same float32 images (N x 2 x 8 x 8, taken as preprocessed).
  std::vector<float> x = test::random_floats(3 * 2 * 8 * 8, 21);
  std::string npy = std::string("\x93NUMPY\x01\x00", 8);
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2, 8, 8), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');  // the data starts 64-aligned
  header += '\n';
  npy += static_cast<char>(header.size() & 255);
  npy += static_cast<char>(header.size() >> 8);
  npy += header;
  npy.append(reinterpret_cast<const char*>(x.data()), x.size() * 4);
  test::write_file(dir + "/x.npy", npy);
  REQUIRE(test::run_command(bin + " " + dir + "/small.yaml --engine cpu --data " + dir + "/x.npy --dump " +
                                dir + "/a.npy --quiet 2>&1",
                            &out) == 0);
  REQUIRE(test::run_command(bin + " " + dir + "/small.onnx --engine cpu --data " + dir + "/x.npy --dump " +
                                dir + "/b.npy --quiet 2>&1",
                            &out) == 0);
  const std::string a = test::read_file(dir + "/a.npy"), b = test::read_file(dir + "/b.npy");
  REQUIRE(a.size() > 3 * 5 * 4);
  CHECK(a == b);
  // The dumped values are the softmax: each image's 5 values sum to 1.
  std::vector<float> y(15);
  std::memcpy(y.data(), a.data() + a.size() - 60, 60);
  for (int i = 0; i < 3; ++i)
    CHECK(y[static_cast<size_t>(5 * i)] + y[static_cast<size_t>(5 * i + 1)] +
              y[static_cast<size_t>(5 * i + 2)] + y[static_cast<size_t>(5 * i + 3)] +
              y[static_cast<size_t>(5 * i + 4)] ==
          doctest::Approx(1.0f).epsilon(1e-5));
  // Import options belong to .onnx models: a netdef says these itself.
  CHECK(test::run_command(bin + " " + dir + "/small.yaml --mean 0.5 --std 0.2 --engine cpu 2>&1", &out) == 1);
  CHECK(out.find("--mean, --std, --scale, --shift, --classes and --name apply to an .onnx model") !=
        std::string::npos);
  CHECK(test::run_command(bin + " import " + dir + "/small.yaml " + dir + "/x.yaml 2>&1", &out) == 1);
  CHECK(out.find("small.yaml: expected an .onnx file") != std::string::npos);
}

#endif  // CNNRUN_HAVE_ONNX

namespace {

// x (1 x 2 x 10 x 7) -> Resize(mode, coordinate_transformation_mode, nearest_mode) by `scales`
// or to `sizes` (one of the two empty).
std::string resize_model(const char* mode, const char* ct, const char* nm, std::vector<float> scales,
                         std::vector<int64_t> sizes) {
  ModelBuilder b(13);
  b.input("x", {0, 2, 10, 7});
  b.init("roi", {0}, {});
  auto string_attr = [](onnx::NodeProto& n, const char* name, const char* v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  };
  std::vector<std::string> in{"x", "roi"};
  if (!scales.empty()) {
    b.init("scales", {4}, scales);
    in.push_back("scales");
  } else {
    b.init("scales", {0}, {});
    in.push_back("scales");
    b.init_i64("sizes", sizes);
    in.push_back("sizes");
  }
  auto& rs = b.node("Resize", "rs", in, {"y"});
  string_attr(rs, "mode", mode);
  string_attr(rs, "coordinate_transformation_mode", ct);
  string_attr(rs, "nearest_mode", nm);
  b.output("y");
  return b.bytes();
}

}  // namespace

TEST_CASE("onnx: Resize by fractional scales and to sizes, and the coordinate rules cnnrun cannot follow") {
  // Linear, half-pixel, by 0.6 x 1.5: upsample with the scales written to float precision, the
  // output floor(10 * 0.6) x floor(7 * 1.5).
  ImportResult r = import_onnx_bytes(
      resize_model("linear", "half_pixel", "floor", {1.f, 1.f, 0.6f, 1.5f}, {}), "m.onnx", "", {});
  INFO(r.netdef);
  CHECK(r.netdef.find("- {name: \"rs\", type: upsample, scale: [0.600000024, 1.5], mode: bilinear}") !=
        std::string::npos);
  Network net = parse_netdef_string(r.netdef, "m.yaml");
  CHECK(net.layers[static_cast<size_t>(net.output)]->out_shape == Shape{2, 6, 10});
  // To sizes 4 x 9, align_corners: the sizes as they are.
  r = import_onnx_bytes(resize_model("linear", "align_corners", "floor", {}, {1, 2, 4, 9}), "m.onnx", "", {});
  CHECK(r.netdef.find("type: upsample, size: [4, 9], mode: bilinear, align_corners: true}") !=
        std::string::npos);
  // Nearest, asymmetric with floor, by 0.5 x 0.75: PyTorch's nearest.
  r = import_onnx_bytes(resize_model("nearest", "asymmetric", "floor", {1.f, 1.f, 0.5f, 0.75f}, {}), "m.onnx",
                        "", {});
  CHECK(r.netdef.find("type: upsample, scale: [0.5, 0.75], mode: nearest}") != std::string::npos);
  // Refused, with the reason: half-pixel nearest at fractional factors, align_corners at
  // fractional scales, pytorch_half_pixel to one pixel, channel scaling.
  const std::pair<std::string, std::string> refused[] = {
      {resize_model("nearest", "half_pixel", "round_prefer_floor", {1.f, 1.f, 0.6f, 0.6f}, {}),
       "nearest with coordinate_transformation_mode half_pixel and nearest_mode round_prefer_floor at a "
       "fractional factor"},
      {resize_model("linear", "align_corners", "floor", {1.f, 1.f, 0.6f, 0.6f}, {}),
       "align_corners at fractional scales (give sizes instead)"},
      {resize_model("linear", "pytorch_half_pixel", "floor", {}, {1, 2, 3, 1}),
       "pytorch_half_pixel to an output one pixel high or wide"},
      {resize_model("linear", "half_pixel", "floor", {1.f, 2.f, 2.f, 2.f}, {}),
       "scales [1, 2, 2, 2] (cnnrun resizes height and width only, by positive factors)"}};
  for (const auto& [model, why] : refused) {
    const std::string e = import_error(model);
    INFO(e);
    CHECK(e.find("node 'rs' (Resize): " + why) != std::string::npos);
  }
}
