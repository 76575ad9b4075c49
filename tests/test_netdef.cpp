// The netdef parser: shapes, graphs and every class of error with its file:line:column,
// layer and key.
#include <doctest/doctest.h>

#include <cmath>

#include "engine/layer_types.h"
#include "engine/layers/conv.h"
#include "engine/layers/pool.h"
#include "engine/network.h"
#include "tests/test_util.h"

using namespace cnnrun;

namespace {

const char* const kHead = test::kSmallHead;

Network parse(const std::string& layers) { return test::parse_layers(layers); }

std::string error_of(const std::string& text) {
  try {
    parse_netdef_string(text, "t.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
std::string layers_error(const std::string& layers) { return error_of(kHead + layers); }

}  // namespace

TEST_CASE("netdef: the CIFAR-10 netdef parses to the thesis network") {
  Network net = parse_netdef_file(std::string(CNNRUN_SOURCE_DIR) + "/netdefs/cifar10.yaml");
  REQUIRE(net.layers.size() == 11);
  CHECK(net.input == Shape{3, 32, 32});
  CHECK(net.classes.size() == 10);
  CHECK(net.classes[9] == "truck");
  CHECK(net.layers[0]->out_shape == Shape{16, 32, 32});
  CHECK(net.layers[2]->out_shape == Shape{16, 16, 16});
  CHECK(net.layers[5]->out_shape == Shape{20, 8, 8});
  CHECK(net.layers[8]->out_shape == Shape{20, 4, 4});
  CHECK(net.layers[9]->out_shape == Shape{10, 1, 1});
  CHECK(net.output == 10);
  auto& conv = dynamic_cast<ConvLayer&>(*net.layers[3]);
  CHECK(conv.p.in_c == 16);
  CHECK(conv.p.pad_h == 2);
  CHECK(net.pre.scale[0] == doctest::Approx(1.0 / 255));
  CHECK(net.pre.shift[2] == doctest::Approx(-0.5));
  CHECK(net.weights.format == "convnetjs");
  CHECK(net.weights.files.size() == 4);
  CHECK(net.data.format == "cifar10");
}

TEST_CASE("netdef: shapes for strides, pads, non-square kernels and pools") {
  Network net = parse(R"(  - {name: c, type: conv, filters: 5, kernel: [3, 1], stride: [2, 1], pad: [1, 0]}
  - {name: p, type: avgpool, size: 3, stride: 2, pad: 1}
  - {name: g, type: maxpool, global: true}
  - {name: f, type: flatten}
  - {name: o, type: fc, outputs: 4, bias: false}
)");
  CHECK(net.layers[0]->out_shape == Shape{5, 4, 8});  // (8+2-3)/2+1 = 4, (8-1)/1+1 = 8
  CHECK(net.layers[1]->out_shape == Shape{5, 2, 4});  // (4+2-3)/2+1 = 2, (8+2-3)/2+1 = 4
  CHECK(net.layers[2]->out_shape == Shape{5, 1, 1});
  CHECK(dynamic_cast<PoolLayer&>(*net.layers[2]).p.size_h == 2);
  CHECK(net.layers[3]->out_shape == Shape{5, 1, 1});
  auto specs = net.layers[4]->weight_specs(net.layers[4]->in_shapes);
  REQUIRE(specs.size() == 1);  // bias: false
  CHECK(specs[0].dims == std::vector<int64_t>{4, 5});
}

TEST_CASE("netdef: a graph with add and concat, forward references and default names") {
  Network net = parse(R"(  - {name: a, type: conv, filters: 2, kernel: 3, pad: 1}
  - {name: sum, type: add, inputs: [a, b]}
  - {name: b, type: conv, filters: 2, kernel: 1, inputs: input}
  - {name: cat, type: concat, inputs: [sum, a, input]}
  - {type: conv, filters: 4, kernel: 8}
)");
  REQUIRE(net.layers.size() == 5);
  // 'b' is written after 'sum' but must run before it.
  CHECK(net.layers[0]->name == "a");
  CHECK(net.layers[1]->name == "b");
  CHECK(net.layers[2]->name == "sum");
  CHECK(net.layers[2]->inputs == std::vector<int>{0, 1});
  CHECK(net.layers[3]->out_shape == Shape{7, 8, 8});
  CHECK(net.layers[3]->inputs == std::vector<int>{2, 0, -1});
  CHECK(net.layers[4]->name == "conv5");
  CHECK(net.layers[4]->out_shape == Shape{4, 1, 1});
}

TEST_CASE("netdef: preprocessing by mean and std") {
  Network net = parse_netdef_string(R"(input: {channels: 2, height: 4, width: 4}
preprocess: {mean: [0.5, 0.25], std: [0.5, 0.25]}
classes: [x, y]
layers:
  - {type: fc, outputs: 2}
)",
                                    "t.yaml");
  // (255/255 - 0.25) / 0.25 = 3
  CHECK(255.f * net.pre.scale[1] + net.pre.shift[1] == doctest::Approx(3.0));
  CHECK(0.f * net.pre.scale[0] + net.pre.shift[0] == doctest::Approx(-1.0));
}

TEST_CASE("netdef errors name file, line, column, layer and key") {
  SUBCASE("YAML syntax") {
    CHECK(error_of("input: {channels: 3\nclasses: [a]\n").find("t.yaml:") == 0);
    CHECK(error_of("layers: [a, 'unterminated\n").find("YAML syntax error") != std::string::npos);
  }
  SUBCASE("unknown key with a suggestion") {
    CHECK(layers_error("  - {name: c, type: conv, filters: 4, kernel: 8, strid: 2}\n") ==
          "t.yaml:4:50: layer 'c' (conv): key 'strid': unknown key; did you mean 'stride'?");
  }
  SUBCASE("misspelt required key") {
    CHECK(layers_error("  - {name: c, type: conv, filtres: 4, kernel: 8}\n") ==
          "t.yaml:4:27: layer 'c' (conv): key 'filtres': unknown key; did you mean 'filters'?");
  }
  SUBCASE("unknown top-level key") {
    CHECK(error_of(std::string(kHead) + "  - {type: flatten}\nlayerz: []\n")
              .find("key 'netdef.layerz': unknown key; did you mean 'layers'?") != std::string::npos);
  }
  SUBCASE("unknown layer type") {
    CHECK(layers_error("  - {name: x, type: fancy, filters: 4}\n") ==
          "t.yaml:4:21: layer 'x': key 'type': unknown layer type 'fancy'; expected one of: add, avgpool, "
          "batchnorm, concat, conv, dropout, fc, flatten, gelu, hardsigmoid, hardswish, leaky_relu, maxpool, "
          "mul, "
          "relu, relu6, sigmoid, silu, softmax, tanh, upsample");
    CHECK(layers_error("  - {name: x, type: rellu}\n").find("did you mean 'relu'?") != std::string::npos);
    // Another framework's name for the same math gets the cnnrun name.
    CHECK(layers_error("  - {name: x, type: convolution, filters: 4}\n") ==
          "t.yaml:4:21: layer 'x': key 'type': unknown layer type 'convolution'; the same layer is called "
          "conv in "
          "a netdef");
    CHECK(layers_error("  - {name: x, type: swish}\n").find("is called silu") != std::string::npos);
    // A real concept cnnrun lacks says so and is never "corrected" into different math.
    const std::string elu = layers_error("  - {name: x, type: elu}\n");
    CHECK(elu.find("layer type 'elu': the ELU activation is not supported by cnnrun") != std::string::npos);
    CHECK(elu.find("did you mean") == std::string::npos);
    for (const char* t : {"relu7", "conv3d", "softmin", "glu", "prelu", "selu"}) {
      CAPTURE(t);
      CHECK(layers_error(std::string("  - {name: x, type: ") + t + "}\n").find("did you mean") ==
            std::string::npos);
    }
  }
  SUBCASE("missing type") {
    CHECK(layers_error("  - {name: x}\n") ==
          "t.yaml:4:5: layer 'x': key 'type': missing; expected one of the layer types");
  }
  SUBCASE("missing parameter") {
    CHECK(layers_error("  - {name: c, type: conv, kernel: 3}\n") ==
          "t.yaml:4:5: layer 'c' (conv): key 'filters': missing; expected an integer >= 1");
  }
  SUBCASE("non-positive and zero parameters") {
    CHECK(layers_error("  - {name: c, type: conv, filters: -3, kernel: 3}\n") ==
          "t.yaml:4:36: layer 'c' (conv): key 'filters': expected an integer >= 1, found -3");
    CHECK(layers_error("  - {name: p, type: maxpool, size: 2, stride: 0}\n") ==
          "t.yaml:4:47: layer 'p' (maxpool): key 'stride': expected an integer >= 1 or a list [height, "
          "width], found 0");
    CHECK(layers_error("  - {name: p, type: maxpool, size: 0}\n").find("key 'size'") != std::string::npos);
    CHECK(layers_error("  - {name: c, type: conv, filters: 2, kernel: 3, pad: -1}\n")
              .find("key 'pad': expected an integer >= 0") != std::string::npos);
  }
  SUBCASE("non-numeric and overflowing numbers") {
    CHECK(layers_error("  - {name: c, type: conv, filters: many, kernel: 3}\n")
              .find("expected an integer, found 'many'") != std::string::npos);
    CHECK(layers_error("  - {name: c, type: conv, filters: 99999999999999999999999, kernel: 3}\n")
              .find("out of range") != std::string::npos);
    CHECK(layers_error("  - {name: c, type: conv, filters: 2.5, kernel: 3}\n").find("found '2.5'") !=
          std::string::npos);
    CHECK(layers_error("  - {name: d, type: dropout, rate: 1.5}\n")
              .find("key 'rate': expected a number in [0, 1)") != std::string::npos);
  }
  SUBCASE("huge dimensions overflow checked") {
    CHECK(error_of("input: {channels: 3000000000, height: 4000000000, width: 4000000000}\nclasses: "
                   "[a]\nlayers:\n  - {type: relu}\n")
              .find("size overflow") != std::string::npos);
  }
  SUBCASE("shape that does not fit names both ends") {
    CHECK(layers_error("  - {name: c, type: conv, filters: 2, kernel: 9}\n") ==
          "t.yaml:4:5: layer 'c' (conv): window of height 9 does not fit the input height 8 with pad 0 "
          "(input 'input' gives 3x8x8)");
    CHECK(layers_error("  - {name: a, type: conv, filters: 2, kernel: 3}\n  - {name: s, type: add, inputs: "
                       "[a, input]}\n") ==
          "t.yaml:5:5: layer 's' (add): inputs must have one shape: 'a' gives 2x6x6, 'input' gives 3x8x8 "
          "(input 'a' gives 2x6x6, 'input' gives 3x8x8)");
    CHECK(layers_error("  - {name: a, type: conv, filters: 2, kernel: 3}\n  - {name: s, type: concat, "
                       "inputs: [a, input]}\n")
              .find("one height and width") != std::string::npos);
  }
  SUBCASE("input that nothing produces") {
    CHECK(layers_error("  - {name: a, type: relu, inputs: [inptu]}\n") ==
          "t.yaml:4:36: layer 'a' (relu): key 'inputs': no layer named 'inptu' produces this input; did you "
          "mean 'input'?");
  }
  SUBCASE("wrong number of inputs") {
    CHECK(layers_error("  - {name: a, type: add}\n").find("expected at least 2 inputs, found 1") !=
          std::string::npos);
    CHECK(layers_error("  - {name: a, type: relu, inputs: [input, input]}\n")
              .find("expected exactly 1 input(s), found 2") != std::string::npos);
  }
  SUBCASE("a cycle") {
    std::string e = layers_error(
        "  - {name: a, type: relu, inputs: c}\n  - {name: b, type: relu}\n  - {name: c, type: add, inputs: "
        "[b, input]}\n");
    CHECK(e.find("the layers form a cycle") != std::string::npos);
    CHECK(e.find("t.yaml:") == 0);
    CHECK(e.find("'a'") != std::string::npos);
    CHECK(layers_error("  - {name: a, type: relu, inputs: a}\n").find("cannot take its own output") !=
          std::string::npos);
  }
  SUBCASE("a duplicate name") {
    CHECK(layers_error("  - {name: a, type: relu}\n  - {name: a, type: relu}\n") ==
          "t.yaml:5:12: layer 'a' (relu): key 'name': duplicate layer name; first defined at t.yaml:4:5");
  }
  SUBCASE("a duplicate key") {
    CHECK(layers_error("  - {name: a, type: relu, name: b}\n") ==
          "t.yaml:4:27: key 'name': written twice in one mapping");
  }
  SUBCASE("a layer that reaches no output") {
    CHECK(layers_error("  - {name: a, type: relu}\n  - {name: b, type: tanh, inputs: input}\n")
              .find("layer 'a' (relu): its output reaches no path to the network output 'b'") !=
          std::string::npos);
  }
  SUBCASE("output size differs from the class count") {
    CHECK(layers_error("  - {type: fc, outputs: 5}\n").find("5 values per image but 4 classes") !=
          std::string::npos);
  }
  SUBCASE("algo only on conv, and only known ones") {
    CHECK(layers_error("  - {name: r, type: relu, algo: cudnn}\n").find("only conv layers take 'algo'") !=
          std::string::npos);
    CHECK(layers_error("  - {name: c, type: conv, filters: 4, kernel: 8, algo: fft}\n")
              .find("expected auto, im2col, implicit, cudnn, cudnn-3xtf32, depthwise, cutlass, stem, gemm or "
                    "conv1x1") != std::string::npos);
  }
  SUBCASE("missing sections") {
    CHECK(error_of("classes: [a]\nlayers:\n  - {type: relu}\n").find("key 'netdef.input': missing") !=
          std::string::npos);
    CHECK(error_of("input: {channels: 1, height: 1, width: 1}\nclasses: [a]\nlayers: []\n")
              .find("non-empty list") != std::string::npos);
    CHECK(error_of("- just\n- a list\n").find("expected a YAML mapping") != std::string::npos);
  }
  SUBCASE("data and weights sections") {
    std::string base = std::string(kHead) + "  - {type: fc, outputs: 4}\n";
    CHECK(error_of(base + "data: {format: jpeg, path: x}\n").find("unknown data format 'jpeg'") !=
          std::string::npos);
    CHECK(error_of(base + "weights: {format: onnx, path: x}\n").find("unknown weights format 'onnx'") !=
          std::string::npos);
    CHECK(error_of(base + "data: {format: idx, images: x}\n").find("key 'data.labels': missing") !=
          std::string::npos);
    CHECK(error_of(base + "data: {format: cifar10, path: x, split: val}\n")
              .find("expected 'train' or 'test'") != std::string::npos);
    CHECK(error_of(base + "preprocess: {scale: [1, 2]}\n").find("one value per input channel (3), found 2") !=
          std::string::npos);
    CHECK(error_of(base + "preprocess: {scale: nan}\n").find("not finite") != std::string::npos);
  }
}

namespace {

// A residual block written once and used three times, and the same network written out flat.
const char* kBlocks = R"(input: {channels: 3, height: 8, width: 8}
classes: [a, b, c, d]
blocks:
  basic:
    params: [filters, stride, kernel]
    layers:
      - {name: conv1, type: conv, filters: $filters, kernel: [$kernel, 3], stride: $stride, pad: 1}
      - {name: relu1, type: relu}
      - {name: conv2, type: conv, filters: $filters, kernel: 3, pad: 1}
      - {name: short, type: conv, filters: $filters, kernel: 1, stride: $stride, inputs: input}
      - {name: add, type: add, inputs: [conv2, short]}
      - {type: relu}
layers:
  - {name: stem, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: l1.0, block: basic, filters: 4, stride: 1, kernel: 3}
  - {name: l2.0, block: basic, filters: 6, stride: 2, kernel: 3}
  - {name: side, type: relu, inputs: l1.0}
  - {name: l2.1, block: basic, filters: 6, stride: 1, kernel: 3, inputs: l2.0}
  - {name: gp, type: avgpool, global: true}
  - {name: fc, type: fc, outputs: 4}
  - {name: cat, type: concat, inputs: [side, side]}
output: fc
)";

std::string flat_block(const std::string& p, int filters, int stride, const std::string& in) {
  const std::string f = std::to_string(filters), s = std::to_string(stride);
  return "  - {name: " + p + ".conv1, type: conv, filters: " + f + ", kernel: 3, stride: " + s +
         ", pad: 1, inputs: " + in + "}\n  - {name: " + p + ".relu1, type: relu}\n  - {name: " + p +
         ".conv2, type: conv, filters: " + f + ", kernel: 3, pad: 1}\n  - {name: " + p +
         ".short, type: conv, filters: " + f + ", kernel: 1, stride: " + s + ", inputs: " + in +
         "}\n  - {name: " + p + ".add, type: add, inputs: [" + p + ".conv2, " + p +
         ".short]}\n  - {name: " + p + ".relu6, type: relu}\n";
}

std::string block_error(const std::string& blocks, const std::string& layers) {
  return error_of("input: {channels: 3, height: 8, width: 8}\nclasses: [a, b, c, d]\nblocks:\n" + blocks +
                  "layers:\n" + layers);
}

}  // namespace

TEST_CASE("netdef blocks: a block written once expands to the layers written out, names prefixed") {
  // Not a valid network as a whole (the concat's output reaches no output), so a copy without it.
  std::string text = kBlocks;
  text.replace(text.find("  - {name: cat"),
               std::string("  - {name: cat, type: concat, inputs: [side, side]}\n").size(), "");
  text.replace(text.find("  - {name: side"),
               std::string("  - {name: side, type: relu, inputs: l1.0}\n").size(), "");
  Network b = parse_netdef_string(text, "b.yaml");
  const std::string flat =
      std::string(kHead) + "  - {name: stem, type: conv, filters: 4, kernel: 3, pad: 1}\n" +
      flat_block("l1.0", 4, 1, "stem") + flat_block("l2.0", 6, 2, "l1.0.relu6") +
      flat_block("l2.1", 6, 1, "l2.0.relu6") +
      "  - {name: gp, type: avgpool, global: true}\n  - {name: fc, type: fc, outputs: 4}\n";
  Network f = parse_netdef_string(flat, "f.yaml");
  REQUIRE(b.layers.size() == f.layers.size());
  REQUIRE(b.layers.size() == 1 + 3 * 6 + 2);
  for (size_t i = 0; i < b.layers.size(); ++i) {
    const Layer& x = *b.layers[i];
    const Layer& y = *f.layers[i];
    CAPTURE(y.name);
    CHECK(x.name == y.name);
    CHECK(x.type == y.type);
    CHECK(x.inputs == y.inputs);
    CHECK(x.out_shape == y.out_shape);
    if (auto* c = dynamic_cast<const ConvLayer*>(&x)) {
      const ConvParams& q = dynamic_cast<const ConvLayer&>(y).p;
      CHECK(c->p.filters == q.filters);
      CHECK(c->p.stride_h == q.stride_h);
      CHECK(c->p.kernel_h == q.kernel_h);
      CHECK(c->p.kernel_w == q.kernel_w);
    }
  }
  CHECK(b.layers[static_cast<size_t>(b.find("l2.0.add"))]->out_shape == Shape{6, 4, 4});
  CHECK(b.find("l2.1.relu6") >= 0);
}

TEST_CASE("netdef blocks: a parameter may give a layer's type") {
  Network net = parse_netdef_string(
      "input: {channels: 3, height: 4, width: 4}\nclasses: [a, b]\nblocks:\n  act:\n    params: [kind, n]\n"
      "    layers:\n      - {name: c, type: conv, filters: $n, kernel: 1}\n      - {name: a, type: $kind}\n"
      "layers:\n  - {name: x, block: act, kind: relu6, n: 3}\n  - {name: y, block: act, kind: hardswish, n: "
      "2}\n"
      "  - {name: g, type: avgpool, global: true}\n",
      "t.yaml");
  CHECK(net.layers[static_cast<size_t>(net.find("x.a"))]->type == "relu6");
  CHECK(net.layers[static_cast<size_t>(net.find("y.a"))]->kind == LayerKind::kHardswish);
  CHECK(block_error("  b:\n    params: [t]\n    layers:\n      - {name: c, type: $t}\n",
                    "  - {name: x, block: b, t: relu7}\n")
            .find("layer 'x.c': key 'type': unknown layer type 'relu7'") != std::string::npos);
}

TEST_CASE("netdef blocks: errors name the block, the instance and the parameter") {
  const std::string basic =
      "  b:\n    params: [n]\n    layers:\n      - {name: c, type: conv, filters: $n, kernel: 1}\n";
  // A bad value is reported where the instance gives it, with the expanded layer's name.
  CHECK(block_error(basic, "  - {name: x, block: b, n: many}\n  - {type: flatten}\n") ==
        "t.yaml:9:28: layer 'x.c' (conv): key 'filters': expected an integer, found 'many'");
  CHECK(block_error(basic, "  - {name: x, block: b}\n") ==
        "t.yaml:9:5: layer 'x' (block b): key 'n': missing; block 'b' needs a value for each of n");
  CHECK(block_error(basic, "  - {name: x, block: b, n: 4, m: 2}\n") ==
        "t.yaml:9:31: layer 'x' (block b): key 'm': unknown key for an instance of block 'b'; did you mean "
        "'n'?");
  CHECK(block_error(basic, "  - {name: x, block: bb, n: 4}\n") ==
        "t.yaml:9:22: layer 'x': key 'block': no block named 'bb' is defined; did you mean 'b'?");
  CHECK(block_error(basic, "  - {block: b, n: 4}\n").find("key 'name': a block instance needs a name") !=
        std::string::npos);
  CHECK(block_error(basic, "  - {name: x, block: b, n: 4, inputs: [input, input]}\n")
            .find("key 'inputs': a block takes exactly 1 input, found 2") != std::string::npos);
  CHECK(block_error(basic, "  - {name: x, type: relu}\n  - {name: x, block: b, n: 4}\n")
            .find("layer 'x' (block b): key 'name': duplicate name; first defined at t.yaml:9:5") !=
        std::string::npos);
  CHECK(block_error(
            "  b:\n    params: [n, k]\n    layers:\n      - {name: c, type: conv, filters: $n, kernel: 1}\n",
            "  - {name: x, block: b, n: 4, k: 1}\n")
            .find("key 'blocks.b.params': parameter 'k' is used by none of the block's layers (write it as "
                  "'$k')") != std::string::npos);
  CHECK(block_error(
            "  b:\n    params: [n]\n    layers:\n      - {name: c, type: conv, filters: $m, kernel: 1}\n",
            "  - {name: x, block: b, n: 4}\n") ==
        "t.yaml:7:40: key 'blocks.b.layers': '$m' names no parameter of block 'b'; did you mean 'n'?");
  CHECK(block_error("  b:\n    params: [n]\n    layers:\n      - {name: $n, type: relu}\n",
                    "  - {name: x, block: b, n: 4}\n")
            .find("a parameter can give a layer's values and type, not its name") != std::string::npos);
  CHECK(block_error("  b:\n    layers:\n      - {name: c, block: b}\n", "  - {name: x, block: b}\n")
            .find("a block's layers cannot instantiate another block") != std::string::npos);
  CHECK(block_error("  b:\n    layers:\n      - {name: input, type: relu}\n", "  - {name: x, block: b}\n")
            .find("'input' is reserved for the block's input") != std::string::npos);
  CHECK(block_error("  b:\n    layers:\n      - {name: c, type: relu, inputs: stem}\n",
                    "  - {name: stem, type: relu}\n  - {name: x, block: b}\n")
            .find("layer 'x.c' (relu): key 'inputs': no layer named 'x.stem' produces this input") !=
        std::string::npos);
  {
    // 400 instances of a 300-layer block: 120000 layers from a few KB.
    std::string big = "  big:\n    layers:\n";
    for (int i = 0; i < 300; ++i) big += "      - {type: relu}\n";
    std::string uses;
    for (int i = 0; i < 400; ++i) uses += "  - {name: i" + std::to_string(i) + ", block: big}\n";
    CHECK(block_error(big, uses).find("key 'block': the network expands to over 100000 layers") !=
          std::string::npos);
  }
  CHECK(block_error("  b:\n    layers: []\n", "  - {name: x, block: b}\n")
            .find("key 'blocks.b.layers': expected a non-empty list of layers") != std::string::npos);
  CHECK(block_error("  b:\n    layers:\n      - {type: relu}\n    extra: 1\n", "  - {name: x, block: b}\n")
            .find("key 'blocks.b.extra': unknown key") != std::string::npos);
}

TEST_CASE("netdef blocks: an instance's name stands for its last layer, also as 'output'") {
  std::string text = kBlocks;
  text = text.substr(0, text.find("layers:\n  - {name: stem"));
  text.replace(text.find("height: 8, width: 8"), 19, "height: 2, width: 2");
  text.replace(text.find("classes: [a, b, c, d]"), 21, "classes: [a, b, c, d, e, f, g, h, i, j, k, l]");
  text +=
      "layers:\n"
      "  - {name: l1.0, block: basic, filters: 3, stride: 1, kernel: 3}\n"
      "  - {name: side, type: relu, inputs: input}\n"
      "  - {name: sum, type: add, inputs: [l1.0, side]}\n"
      "  - {name: l2.0, block: basic, filters: 3, stride: 1, kernel: 3, inputs: sum}\n"
      "output: l2.0\n";
  CAPTURE(text);
  Network net = parse_netdef_string(text, "t.yaml");
  auto at = [&](const char* n) { return net.find(n); };
  const Layer& sum = *net.layers[static_cast<size_t>(at("sum"))];
  CHECK(sum.inputs == std::vector<int>{at("l1.0.relu6"), at("side")});
  CHECK(net.layers[static_cast<size_t>(at("l1.0.conv1"))]->inputs == std::vector<int>{-1});
  CHECK(net.layers[static_cast<size_t>(at("l1.0.short"))]->inputs == std::vector<int>{-1});
  CHECK(net.layers[static_cast<size_t>(at("l2.0.conv1"))]->inputs == std::vector<int>{at("sum")});
  CHECK(net.layers[static_cast<size_t>(at("l2.0.short"))]->inputs == std::vector<int>{at("sum")});
  CHECK(net.output == at("l2.0.relu6"));
  CHECK(at("l1.0") == -1);  // an instance is a name for its last layer, not a layer
}

TEST_CASE("netdef: the torchvision netdefs have torchvision's parameter counts and state_dict sizes") {
  // sum(p.numel() for p in model.parameters()) and the state_dict's tensors without
  // num_batches_tracked, from torchvision 0.14.
  const struct {
    const char* name;
    int64_t params, tensors;
  } nets[] = {{"resnet18", 11689512, 102},          {"mobilenet_v2", 3504872, 262},
              {"mobilenet_v3_small", 2542856, 210}, {"efficientnet_b0", 5288548, 311},
              {"googlenet", 6624904, 287},          {"squeezenet1_1", 1235496, 52},
              {"vgg11_bn", 132868840, 54}};
  for (const auto& n : nets) {
    CAPTURE(n.name);
    Network net =
        parse_netdef_file(std::string(CNNRUN_SOURCE_DIR) + "/netdefs/torchvision/" + n.name + ".yaml");
    CHECK(net.input == Shape{3, 224, 224});
    CHECK(net.layers[static_cast<size_t>(net.output)]->out_shape.size() == 1000);
    int64_t params = 0, tensors = 0;
    for (const auto& l : net.layers)
      for (const auto& w : l->weight_specs(l->in_shapes)) {
        ++tensors;
        if (w.name != "running_mean" && w.name != "running_var") params += numel_of(w.dims);
      }
    CHECK(params == n.params);
    CHECK(tensors == n.tensors);
  }
}

TEST_CASE(
    "netdef: multiply_adds counts each conv's and fc's arithmetic an image, as torchvision's documentation "
    "does") {
  // The thesis network by hand: conv1 32x32 outputs x 16 filters x 5x5x3, conv2 16x16 x 20 x
  // 5x5x16, conv3 8x8 x 20 x 5x5x20, fc 320 x 10; the pools, ReLUs and softmax none.
  const Network cifar = parse_netdef_file(std::string(CNNRUN_SOURCE_DIR) + "/netdefs/cifar10.yaml");
  CHECK(multiply_adds(cifar) == 32 * 32 * 16 * 75 + 16 * 16 * 20 * 400 + 8 * 8 * 20 * 500 + 320 * 10);
  // Groups: a depthwise conv's filter sees one channel.
  const Network dw = parse_netdef_string(R"(
name: dw
input: {channels: 8, height: 6, width: 6}
classes: 2
layers:
  - {name: d, type: conv, filters: 8, kernel: 3, pad: 1, groups: 8}
  - {name: g, type: conv, filters: 4, kernel: 1, groups: 2}
  - {name: f, type: fc, outputs: 2}
)");
  CHECK(multiply_adds(dw) == 6 * 6 * 8 * 9 + 6 * 6 * 4 * 4 + 6 * 6 * 4 * 2);
  // torchvision's model documentation gives these in GFLOPS (multiply-adds, two decimals) at
  // 224x224: ours round to them.
  const struct {
    const char* name;
    double g;
  } nets[] = {{"resnet18", 1.81},          {"vgg11_bn", 7.61},     {"squeezenet1_1", 0.35},
              {"googlenet", 1.50},         {"mobilenet_v2", 0.30}, {"efficientnet_b0", 0.39},
              {"mobilenet_v3_small", 0.06}};
  for (const auto& n : nets) {
    CAPTURE(n.name);
    const Network net =
        parse_netdef_file(std::string(CNNRUN_SOURCE_DIR) + "/netdefs/torchvision/" + n.name + ".yaml");
    const double g = static_cast<double>(multiply_adds(net)) / 1e9;
    CAPTURE(g);
    CHECK(std::abs(g - n.g) <= 0.005 + 1e-9);
  }
}
