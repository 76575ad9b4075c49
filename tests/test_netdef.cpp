// The netdef parser: shapes, graphs and every class of error with its file:line:column,
// layer and key.
#include <doctest/doctest.h>

#include "engine/layers/conv.h"
#include "engine/layers/pool.h"
#include "engine/network.h"
#include "tests/test_util.h"

using namespace cnnrun;

namespace {

const char* kHead = R"(input: {channels: 3, height: 8, width: 8}
classes: [a, b, c, d]
layers:
)";

Network parse(const std::string& layers) { return parse_netdef_string(kHead + layers, "t.yaml"); }

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
              .find("expected auto, im2col, implicit or cudnn") != std::string::npos);
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
