// The CPU reference's layers against plain nested loops written here, independently of the
// im2col/GEMM formulation: if the reference is wrong, the GPU would be judged against a wrong
// specification, so every layer type is checked on odd shapes, strides, pads and batch sizes.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "engine/layers/batchnorm.h"
#include "engine/network.h"
#include "engine/passes.h"
#include "reference/cpu_executor.h"
#include "reference/cpu_layers.h"
#include "tests/test_util.h"

namespace cnnrun::test {
namespace {

constexpr double kAtol = 1e-5, kRtol = 1e-4;

// A network whose first layer `t` is the layer under test, on an input of shape `in`; a global
// average pool and an fc to two classes follow so that any output shape makes a valid netdef.
Network net_with(const std::string& layer_yaml, const Shape& in) {
  std::ostringstream y;
  y << "input: {channels: " << in.c << ", height: " << in.h << ", width: " << in.w << "}\n"
    << "classes: [a, b]\n"
    << "layers:\n"
    << "  - {name: t, " << layer_yaml << "}\n"
    << "  - {name: gp, type: avgpool, global: true}\n"
    << "  - {name: out, type: fc, outputs: 2}\n";
  return parse_netdef_string(y.str(), "test");
}

void fill_weights(Network& net, uint32_t seed) {
  for (auto& l : net.layers)
    for (const auto& ws : l->weight_specs(l->in_shapes)) {
      Tensor t(ws.dims);
      t.data = random_floats(static_cast<size_t>(t.numel()), seed++, -0.5f, 0.5f);
      l->weights[ws.name] = t;
    }
}

// Runs one layer's CPU forward function on a block of n images.
std::vector<float> run_layer(const Layer& l, const std::vector<const float*>& in, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n * l.out_shape.size()),
                         std::numeric_limits<float>::quiet_NaN());
  ref::Workspace ws;
  ref::forward_fn(l)(l, in, n, out.data(), ws);
  return out;
}

void check_close(const std::vector<float>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  std::vector<float> w(want.begin(), want.end());
  Compare c = compare(got.data(), w.data(), got.size(), kAtol, kRtol);
  INFO("worst element " << c.worst << ": got " << got[c.worst] << ", want " << want[c.worst]
                        << " (max abs err " << c.max_abs << ")");
  CHECK(c.ok);
}

// Direct convolution, double accumulation.
std::vector<double> naive_conv(const std::vector<float>& x, int64_t n, const Shape& in, const Tensor& w,
                               const float* bias, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t oh,
                               int64_t ow) {
  const int64_t f_count = w.dims[0], kh = w.dims[2], kw = w.dims[3];
  std::vector<double> y(static_cast<size_t>(n * f_count * oh * ow));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t f = 0; f < f_count; ++f)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          double s = bias ? bias[f] : 0.0;
          for (int64_t c = 0; c < in.c; ++c)
            for (int64_t ky = 0; ky < kh; ++ky)
              for (int64_t kx = 0; kx < kw; ++kx) {
                const int64_t iy = oy * sh - ph + ky, ix = ox * sw - pw + kx;
                if (iy < 0 || iy >= in.h || ix < 0 || ix >= in.w) continue;
                s += static_cast<double>(x[static_cast<size_t>(((i * in.c + c) * in.h + iy) * in.w + ix)]) *
                     w.data[static_cast<size_t>(((f * in.c + c) * kh + ky) * kw + kx)];
              }
          y[static_cast<size_t>(((i * f_count + f) * oh + oy) * ow + ox)] = s;
        }
  return y;
}

}  // namespace

TEST_CASE("cpu conv matches direct convolution") {
  struct K {
    int64_t h, w;
  };
  const K kernels[] = {{1, 1}, {3, 3}, {5, 5}, {3, 5}, {5, 1}};
  const int64_t channels[] = {3, 5, 17};
  const int64_t batches[] = {1, 3, 7};
  const Shape sizes[] = {{0, 7, 9}, {0, 8, 8}, {0, 11, 6}};
  int config = 0;
  for (const K& k : kernels)
    for (int64_t stride : {1, 2})
      for (int64_t pad : {0, 1, 2})
        for (bool bias : {true, false}) {
          ++config;
          Shape in = sizes[config % 3];
          in.c = channels[config % 3];
          const int64_t n = batches[(config / 3) % 3];
          const int64_t filters = 1 + (config * 7) % 13;
          // Non-square stride and pad on some configurations.
          const int64_t sw = config % 4 == 0 ? 3 - stride : stride,
                        pw = config % 5 == 0 ? (pad + 1) % 3 : pad;
          if (in.h + 2 * pad < k.h || in.w + 2 * pw < k.w) continue;
          std::ostringstream y;
          y << "type: conv, filters: " << filters << ", kernel: [" << k.h << ", " << k.w << "], stride: ["
            << stride << ", " << sw << "], pad: [" << pad << ", " << pw
            << "], bias: " << (bias ? "true" : "false");
          CAPTURE(y.str());
          CAPTURE(in.str());
          CAPTURE(n);
          Network net = net_with(y.str(), in);
          fill_weights(net, static_cast<uint32_t>(config));
          const Layer& l = *net.layers[0];
          const int64_t oh = (in.h + 2 * pad - k.h) / stride + 1, ow = (in.w + 2 * pw - k.w) / sw + 1;
          REQUIRE(l.out_shape == Shape{filters, oh, ow});
          std::vector<float> x =
              random_floats(static_cast<size_t>(n * in.size()), 1000u + static_cast<uint32_t>(config));
          std::vector<float> got = run_layer(l, {x.data()}, n);
          check_close(got, naive_conv(x, n, in, l.weight("weight"), bias ? l.weight("bias").ptr() : nullptr,
                                      stride, sw, pad, pw, oh, ow));
        }
  CHECK(config == 5 * 2 * 3 * 2);
}

TEST_CASE("cpu maxpool and avgpool match window loops") {
  struct P {
    int64_t size, stride, pad;
  };
  const P pools[] = {{2, 2, 0}, {3, 2, 1}, {3, 1, 1}, {2, 1, 1}, {3, 3, 0}, {5, 2, 2}};
  int config = 0;
  for (const char* mode : {"maxpool", "avgpool"})
    for (const P& p : pools)
      for (int count_pad = 0; count_pad < (std::string(mode) == "avgpool" ? 2 : 1); ++count_pad) {
        ++config;
        const Shape in{1 + config % 5, 7 + config % 3, 9 - config % 2};
        const int64_t n = config % 2 ? 3 : 1;
        std::ostringstream y;
        y << "type: " << mode << ", size: " << p.size << ", stride: " << p.stride << ", pad: " << p.pad;
        if (std::string(mode) == "avgpool") y << ", count_pad: " << (count_pad ? "true" : "false");
        CAPTURE(y.str());
        CAPTURE(in.str());
        CAPTURE(n);
        Network net = net_with(y.str(), in);
        const Layer& l = *net.layers[0];
        const int64_t oh = (in.h + 2 * p.pad - p.size) / p.stride + 1,
                      ow = (in.w + 2 * p.pad - p.size) / p.stride + 1;
        REQUIRE(l.out_shape == Shape{in.c, oh, ow});
        std::vector<float> x = random_floats(static_cast<size_t>(n * in.size()),
                                             77u + static_cast<uint32_t>(config), -3.f, -1.f);
        std::vector<double> want;
        for (int64_t plane = 0; plane < n * in.c; ++plane)
          for (int64_t oy = 0; oy < oh; ++oy)
            for (int64_t ox = 0; ox < ow; ++ox) {
              double mx = -INFINITY, sum = 0;
              int inside = 0;
              for (int64_t ky = 0; ky < p.size; ++ky)
                for (int64_t kx = 0; kx < p.size; ++kx) {
                  const int64_t iy = oy * p.stride - p.pad + ky, ix = ox * p.stride - p.pad + kx;
                  if (iy < 0 || iy >= in.h || ix < 0 || ix >= in.w) continue;
                  const double v = x[static_cast<size_t>((plane * in.h + iy) * in.w + ix)];
                  mx = std::max(mx, v);
                  sum += v;
                  ++inside;
                }
              if (std::string(mode) == "maxpool")
                want.push_back(mx);
              else
                want.push_back(sum / (count_pad ? p.size * p.size : inside));
            }
        check_close(run_layer(l, {x.data()}, n), want);
      }
}

TEST_CASE("cpu global pools reduce the whole plane") {
  for (const char* mode : {"maxpool", "avgpool"}) {
    const Shape in{5, 7, 9};
    const int64_t n = 3;
    CAPTURE(mode);
    Network net = net_with(std::string("type: ") + mode + ", global: true", in);
    const Layer& l = *net.layers[0];
    REQUIRE(l.out_shape == Shape{5, 1, 1});
    std::vector<float> x = random_floats(static_cast<size_t>(n * in.size()), 5);
    std::vector<double> want;
    for (int64_t plane = 0; plane < n * in.c; ++plane) {
      const float* p = x.data() + plane * 63;
      want.push_back(std::string(mode) == "maxpool" ? *std::max_element(p, p + 63)
                                                    : std::accumulate(p, p + 63, 0.0) / 63.0);
    }
    check_close(run_layer(l, {x.data()}, n), want);
  }
}

TEST_CASE("cpu activations apply the scalar formulas") {
  const Shape in{3, 5, 7};
  const int64_t n = 3;
  std::vector<float> x = random_floats(static_cast<size_t>(n * in.size()), 9, -4.f, 4.f);
  for (const char* type : {"relu", "tanh", "sigmoid"}) {
    CAPTURE(type);
    Network net = net_with(std::string("type: ") + type, in);
    std::vector<double> want;
    for (float v : x) {
      const double d = v;
      want.push_back(std::string(type) == "relu"   ? std::max(d, 0.0)
                     : std::string(type) == "tanh" ? std::tanh(d)
                                                   : 1.0 / (1.0 + std::exp(-d)));
    }
    check_close(run_layer(*net.layers[0], {x.data()}, n), want);
  }
}

TEST_CASE("cpu fc is a matrix product over the CHW values") {
  for (int64_t n : {1, 3, 7})
    for (bool bias : {true, false}) {
      const Shape in{5, 3, 4};
      const int64_t outputs = 7;
      CAPTURE(n);
      CAPTURE(bias);
      Network net = net_with("type: fc, outputs: 7, bias: " + std::string(bias ? "true" : "false"), in);
      fill_weights(net, 3);
      const Layer& l = *net.layers[0];
      REQUIRE(l.out_shape == Shape{outputs, 1, 1});
      std::vector<float> x = random_floats(static_cast<size_t>(n * in.size()), 11);
      const Tensor& w = l.weight("weight");
      std::vector<double> want;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t o = 0; o < outputs; ++o) {
          double s = bias ? l.weight("bias").data[static_cast<size_t>(o)] : 0.0;
          for (int64_t k = 0; k < in.size(); ++k)
            s += static_cast<double>(x[static_cast<size_t>(i * in.size() + k)]) *
                 w.data[static_cast<size_t>(o * in.size() + k)];
          want.push_back(s);
        }
      check_close(run_layer(l, {x.data()}, n), want);
    }
}

TEST_CASE("cpu softmax normalises the channels at each position") {
  for (const Shape in : {Shape{10, 1, 1}, Shape{5, 3, 4}}) {
    const int64_t n = 3;
    CAPTURE(in.str());
    Network net = net_with("type: softmax", in);
    // Large logits: a softmax without the max subtraction overflows exp() to inf here.
    std::vector<float> x = random_floats(static_cast<size_t>(n * in.size()), 21, -100.f, 200.f);
    std::vector<float> got = run_layer(*net.layers[0], {x.data()}, n);
    const int64_t plane = in.h * in.w;
    std::vector<double> want(got.size());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t pos = 0; pos < plane; ++pos) {
        double mx = -INFINITY, sum = 0, got_sum = 0;
        for (int64_t c = 0; c < in.c; ++c)
          mx = std::max(mx, static_cast<double>(x[static_cast<size_t>((i * in.c + c) * plane + pos)]));
        for (int64_t c = 0; c < in.c; ++c)
          sum += std::exp(x[static_cast<size_t>((i * in.c + c) * plane + pos)] - mx);
        for (int64_t c = 0; c < in.c; ++c) {
          const size_t k = static_cast<size_t>((i * in.c + c) * plane + pos);
          want[k] = std::exp(x[k] - mx) / sum;
          got_sum += got[k];
        }
        CHECK(got_sum == doctest::Approx(1.0).epsilon(1e-5));
      }
    check_close(got, want);
  }
}

TEST_CASE("cpu batchnorm applies the inference formula; folded runs as identity") {
  const Shape in{17, 5, 3};
  const int64_t n = 3;
  for (double eps : {1e-5, 0.1}) {
    CAPTURE(eps);
    Network net = net_with("type: batchnorm, eps: " + std::to_string(eps), in);
    fill_weights(net, 4);
    Layer& l = *net.layers[0];
    // A variance must be positive.
    for (float& v : l.weights["running_var"].data) v = std::fabs(v) + 0.05f;
    std::vector<float> x = random_floats(static_cast<size_t>(n * in.size()), 31, -2.f, 2.f);
    std::vector<double> want;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < in.c; ++c)
        for (int64_t k = 0; k < in.h * in.w; ++k) {
          const size_t ci = static_cast<size_t>(c);
          const double v = x[static_cast<size_t>((i * in.c + c) * in.h * in.w + k)];
          want.push_back((v - l.weight("running_mean").data[ci]) /
                             std::sqrt(l.weight("running_var").data[ci] + eps) * l.weight("weight").data[ci] +
                         l.weight("bias").data[ci]);
        }
    check_close(run_layer(l, {x.data()}, n), want);
    CHECK_FALSE(runs_as_identity(l));

    l.folded = true;
    CHECK(runs_as_identity(l));
    CHECK(run_layer(l, {x.data()}, n) == x);
  }
}

TEST_CASE("cpu dropout and flatten copy their input") {
  const Shape in{3, 5, 7};
  std::vector<float> x = random_floats(static_cast<size_t>(2 * in.size()), 41);
  for (const char* type : {"dropout", "flatten"}) {
    CAPTURE(type);
    Network net = net_with(std::string("type: ") + type, in);
    CHECK(runs_as_identity(*net.layers[0]));
    CHECK(run_layer(*net.layers[0], {x.data()}, 2) == x);
  }
}

TEST_CASE("cpu add of three inputs and concat keep the input order") {
  const Shape in{3, 4, 5};
  const int64_t n = 3;
  const std::string net_yaml =
      "input: {channels: 3, height: 4, width: 5}\n"
      "classes: [a, b]\n"
      "layers:\n"
      "  - {name: r, type: relu}\n"
      "  - {name: t, type: tanh, inputs: input}\n"
      "  - {name: s, type: sigmoid, inputs: input}\n"
      "  - {name: sum, type: add, inputs: [r, t, s]}\n"
      "  - {name: cat, type: concat, inputs: [s, sum, r]}\n"
      "  - {name: gp, type: avgpool, global: true}\n"
      "  - {name: out, type: fc, outputs: 2}\n";
  Network net = parse_netdef_string(net_yaml, "test");
  const Layer& add = *net.layers[static_cast<size_t>(net.find("sum"))];
  const Layer& cat = *net.layers[static_cast<size_t>(net.find("cat"))];
  REQUIRE(cat.out_shape == Shape{9, 4, 5});
  std::vector<float> a = random_floats(static_cast<size_t>(n * in.size()), 1), b = random_floats(a.size(), 2),
                     c = random_floats(a.size(), 3);
  std::vector<double> want_add, want_cat;
  for (size_t i = 0; i < a.size(); ++i) want_add.push_back(static_cast<double>(a[i]) + b[i] + c[i]);
  for (int64_t i = 0; i < n; ++i)
    for (const auto* src : {&a, &b, &c})
      for (int64_t k = 0; k < in.size(); ++k)
        want_cat.push_back((*src)[static_cast<size_t>(i * in.size() + k)]);
  check_close(run_layer(add, {a.data(), b.data(), c.data()}, n), want_add);
  check_close(run_layer(cat, {a.data(), b.data(), c.data()}, n), want_cat);
}

TEST_CASE("cpu executor runs a branching graph: two convs, concat, add with a skip") {
  const std::string net_yaml =
      "input: {channels: 3, height: 7, width: 9}\n"
      "preprocess: {scale: 0.0078125, shift: -1}\n"
      "classes: [a, b, c]\n"
      "layers:\n"
      "  - {name: left, type: conv, filters: 4, kernel: 3, pad: 1, inputs: input}\n"
      "  - {name: right, type: conv, filters: 5, kernel: 1, inputs: input}\n"
      "  - {name: cat, type: concat, inputs: [left, right]}\n"
      "  - {name: skip, type: conv, filters: 9, kernel: [3, 5], pad: [1, 2], inputs: input}\n"
      "  - {name: sum, type: add, inputs: [cat, skip]}\n"
      "  - {name: act, type: relu}\n"
      "  - {name: gp, type: avgpool, global: true}\n"
      "  - {name: fc, type: fc, outputs: 3}\n";
  Network net = parse_netdef_string(net_yaml, "test");
  fill_weights(net, 100);
  Dataset data;
  data.count = 7;
  data.shape = net.input;
  for (float v : random_floats(static_cast<size_t>(data.count * data.shape.size()), 8, 0.f, 255.99f))
    data.pixels.push_back(static_cast<uint8_t>(v));
  data.labels.assign(7, 0);

  auto ex = make_cpu_executor(net);
  std::vector<Tensor> outs = ex->forward_layers(data, 0, data.count);
  REQUIRE(outs.size() == net.layers.size());
  auto out_of = [&](const char* name) -> const Tensor& { return outs[static_cast<size_t>(net.find(name))]; };
  CHECK(out_of("cat").dims == std::vector<int64_t>{7, 9, 7, 9});

  const int64_t n = data.count;
  const Shape in = net.input;
  std::vector<float> x(data.pixels.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = data.pixels[i] * 0.0078125f - 1.f;
  auto conv = [&](const char* name, int64_t ph, int64_t pw) {
    const Layer& l = *net.layers[static_cast<size_t>(net.find(name))];
    return naive_conv(x, n, in, l.weight("weight"), l.weight("bias").ptr(), 1, 1, ph, pw, in.h, in.w);
  };
  std::vector<double> left = conv("left", 1, 1), right = conv("right", 0, 0), skip = conv("skip", 1, 2);
  const int64_t plane = in.h * in.w;
  std::vector<double> cat, sum, act;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < 4 * plane; ++k) cat.push_back(left[static_cast<size_t>(i * 4 * plane + k)]);
    for (int64_t k = 0; k < 5 * plane; ++k) cat.push_back(right[static_cast<size_t>(i * 5 * plane + k)]);
  }
  for (size_t k = 0; k < cat.size(); ++k) {
    sum.push_back(cat[k] + skip[k]);
    act.push_back(std::max(0.0, sum.back()));
  }
  check_close(out_of("cat").data, cat);
  check_close(out_of("sum").data, sum);
  check_close(out_of("act").data, act);
}

}  // namespace cnnrun::test
