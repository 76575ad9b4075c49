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

// Direct convolution, double accumulation; filter f of `groups` sees the channels of group
// f / (F / groups), its taps dh, dw apart.
std::vector<double> naive_conv(const std::vector<float>& x, int64_t n, const Shape& in, const Tensor& w,
                               const float* bias, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t oh,
                               int64_t ow, int64_t groups = 1, int64_t dh = 1, int64_t dw = 1) {
  const int64_t f_count = w.dims[0], cg = w.dims[1], kh = w.dims[2], kw = w.dims[3];
  const int64_t fg = f_count / groups;
  std::vector<double> y(static_cast<size_t>(n * f_count * oh * ow));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t f = 0; f < f_count; ++f)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          double s = bias ? bias[f] : 0.0;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t ky = 0; ky < kh; ++ky)
              for (int64_t kx = 0; kx < kw; ++kx) {
                const int64_t c = (f / fg) * cg + ci;
                const int64_t iy = oy * sh - ph + ky * dh, ix = ox * sw - pw + kx * dw;
                if (iy < 0 || iy >= in.h || ix < 0 || ix >= in.w) continue;
                s += static_cast<double>(x[static_cast<size_t>(((i * in.c + c) * in.h + iy) * in.w + ix)]) *
                     w.data[static_cast<size_t>(((f * cg + ci) * kh + ky) * kw + kx)];
              }
          y[static_cast<size_t>(((i * f_count + f) * oh + oy) * ow + ox)] = s;
        }
  return y;
}

// The message of the netdef error a one-layer network (net_with) raises.
std::string layer_error(const std::string& layer_yaml, const Shape& in) {
  try {
    net_with(layer_yaml, in);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
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
  // Rows narrower than 16 (summed one by one) and wider (summed vectorised, 57 = 3 x 16 + 9).
  for (const Shape in : {Shape{5, 7, 9}, Shape{3, 11, 57}})
    for (const char* mode : {"maxpool", "avgpool"}) {
      const int64_t n = 3, plane_size = in.h * in.w;
      CAPTURE(mode);
      CAPTURE(in.str());
      Network net = net_with(std::string("type: ") + mode + ", global: true", in);
      const Layer& l = *net.layers[0];
      REQUIRE(l.out_shape == Shape{in.c, 1, 1});
      std::vector<float> x = random_floats(static_cast<size_t>(n * in.size()), 5);
      std::vector<double> want;
      for (int64_t plane = 0; plane < n * in.c; ++plane) {
        const float* p = x.data() + plane * plane_size;
        want.push_back(std::string(mode) == "maxpool"
                           ? *std::max_element(p, p + plane_size)
                           : std::accumulate(p, p + plane_size, 0.0) / static_cast<double>(plane_size));
      }
      check_close(run_layer(l, {x.data()}, n), want);
    }
}

TEST_CASE("cpu activations apply the scalar formulas") {
  const Shape in{3, 5, 7};
  const int64_t n = 3;
  std::vector<float> x = random_floats(static_cast<size_t>(n * in.size()), 9, -4.f, 4.f);
  x[0] = -100.f, x[1] = 100.f, x[2] = -1000.f, x[3] = 1000.f;  // saturated
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
  std::vector<Tensor> outs = ex->forward_layers(data, 0, data.count, RunOptions{});
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

namespace cnnrun::test {

TEST_CASE("cpu grouped, depthwise and dilated conv match direct convolution") {
  struct G {
    int64_t channels, filters, groups;
  };
  // Grouped (2, 3, 4 groups), depthwise (groups = channels = filters), depthwise with a channel
  // multiplier (filters = 2 x channels), and dense for the dilation-only cases.
  const G gs[] = {{4, 6, 2}, {6, 9, 3}, {8, 4, 4}, {5, 5, 5}, {7, 7, 7}, {3, 6, 3}, {5, 7, 1}};
  struct D {
    int64_t h, w;
  };
  const D dils[] = {{1, 1}, {2, 2}, {3, 2}, {1, 3}};
  const Shape sizes[] = {{0, 9, 11}, {0, 13, 7}, {0, 10, 10}};
  int config = 0, run = 0;
  for (const G& g : gs)
    for (const D& d : dils)
      for (int64_t k : {1, 3, 5})
        for (int64_t stride : {1, 2, 3}) {
          ++config;
          Shape in = sizes[config % 3];
          in.c = g.channels;
          const int64_t pad = config % 3, n = 1 + config % 3;
          const bool bias = config % 2 == 0;
          const int64_t eh = d.h * (k - 1) + 1, ew = d.w * (k - 1) + 1;
          if (in.h + 2 * pad < eh || in.w + 2 * pad < ew) continue;
          ++run;
          std::ostringstream y;
          y << "type: conv, filters: " << g.filters << ", kernel: " << k << ", stride: " << stride
            << ", pad: " << pad << ", groups: " << g.groups << ", dilation: [" << d.h << ", " << d.w
            << "], bias: " << (bias ? "true" : "false");
          CAPTURE(y.str());
          CAPTURE(in.str());
          CAPTURE(n);
          Network net = net_with(y.str(), in);
          fill_weights(net, static_cast<uint32_t>(config));
          const Layer& l = *net.layers[0];
          REQUIRE(l.weight("weight").dims == std::vector<int64_t>{g.filters, g.channels / g.groups, k, k});
          const int64_t oh = (in.h + 2 * pad - eh) / stride + 1, ow = (in.w + 2 * pad - ew) / stride + 1;
          REQUIRE(l.out_shape == Shape{g.filters, oh, ow});
          std::vector<float> x =
              random_floats(static_cast<size_t>(n * in.size()), 500u + static_cast<uint32_t>(config));
          check_close(run_layer(l, {x.data()}, n),
                      naive_conv(x, n, in, l.weight("weight"), bias ? l.weight("bias").ptr() : nullptr,
                                 stride, stride, pad, pad, oh, ow, g.groups, d.h, d.w));
        }
  CHECK(run > 200);
}

TEST_CASE("cpu depthwise conv on large planes (a row at a time) and small ones (a plane at a time)") {
  // forward_conv's depthwise path sums stride-1 planes of up to 4096 padded floats whole and larger
  // ones row by row; the test above meets only small planes. Both sides of the bound, with a
  // multiplier, dilation and no padding among them.
  struct C {
    int64_t channels, filters, h, w, k, stride, pad, dil;
  };
  const C cs[] = {{3, 3, 70, 66, 3, 1, 1, 1}, {2, 4, 61, 64, 5, 1, 2, 2}, {4, 4, 62, 62, 3, 1, 1, 1},
                  {4, 4, 63, 63, 3, 1, 1, 1}, {3, 6, 80, 40, 3, 1, 0, 3}, {5, 5, 90, 75, 3, 2, 1, 1}};
  uint32_t seed = 40;
  for (const C& c : cs) {
    std::ostringstream y;
    y << "type: conv, filters: " << c.filters << ", kernel: " << c.k << ", stride: " << c.stride
      << ", pad: " << c.pad << ", groups: " << c.channels << ", dilation: " << c.dil;
    CAPTURE(y.str());
    const Shape in{c.channels, c.h, c.w};
    Network net = net_with(y.str(), in);
    fill_weights(net, seed++);
    const Layer& l = *net.layers[0];
    const int64_t e = c.dil * (c.k - 1) + 1;
    const int64_t oh = (c.h + 2 * c.pad - e) / c.stride + 1, ow = (c.w + 2 * c.pad - e) / c.stride + 1;
    std::vector<float> x = random_floats(static_cast<size_t>(2 * in.size()), seed++);
    check_close(run_layer(l, {x.data()}, 2),
                naive_conv(x, 2, in, l.weight("weight"), l.weight("bias").ptr(), c.stride, c.stride, c.pad,
                           c.pad, oh, ow, c.channels, c.dil, c.dil));
  }
}

TEST_CASE("conv groups that do not divide channels or filters, and bad dilation, are errors") {
  CHECK(layer_error("type: conv, filters: 6, kernel: 3, groups: 4", {8, 9, 9}) ==
        "test:4:58: layer 't' (conv): key 'groups': 4 groups do not divide the 6 filters evenly (each group "
        "needs "
        "filters / groups of them)");
  CHECK(layer_error("type: conv, filters: 6, kernel: 3, groups: 3", {8, 9, 9}) ==
        "test:4:5: layer 't' (conv): 3 groups do not divide the 8 input channels evenly (each group needs "
        "channels "
        "/ groups of them) (input 'input' gives 8x9x9)");
  CHECK(layer_error("type: conv, filters: 6, kernel: 3, groups: 0", {6, 9, 9})
            .find("key 'groups': expected an "
                  "integer >= 1, found 0") != std::string::npos);
  CHECK(layer_error("type: conv, filters: 6, kernel: 3, dilation: [2, 0]", {6, 9, 9})
            .find("key 'dilation': expected an integer >= 1 or a list [height, width], found 2, 0") !=
        std::string::npos);
  // A dilated 3x3 kernel covers 9 rows at dilation 4: too tall for 8 rows.
  CHECK(layer_error("type: conv, filters: 6, kernel: 3, dilation: 4", {6, 8, 12})
            .find("window of height 9 does not fit the input height 8 with pad 0") != std::string::npos);
  CHECK(layer_error("type: conv, filters: 6, kernel: 3, padding_mode: reflect", {6, 8, 8})
            .find("key 'padding_mode': padding mode 'reflect' is not supported; conv pads with zeros") !=
        std::string::npos);
}

// The PyTorch rule written out independently of pool_window(): output size with ceil_mode and
// the last-window rule, and the average's divisor clipped to the padded input.
struct TorchPool {
  int64_t k, s, p;
  bool ceil;
  int64_t out(int64_t in) const {
    int64_t o = (in + 2 * p - k + (ceil ? s - 1 : 0)) / s + 1;
    if (ceil && (o - 1) * s >= in + p) --o;
    return o;
  }
};

TEST_CASE("cpu pools with ceil_mode follow PyTorch's windows and divisors") {
  // Output sizes PyTorch 1.13 gives (F.max_pool2d(..., ceil_mode=True)).
  const struct {
    int64_t in, k, s, p, out;
  } known[] = {{112, 3, 2, 0, 56}, {5, 2, 2, 1, 3},  {6, 3, 2, 1, 4},
               {7, 3, 2, 0, 3},    {14, 2, 2, 0, 7}, {8, 3, 3, 1, 3}};
  for (const auto& c : known) {
    CAPTURE(c.in);
    CAPTURE(c.k);
    Network net = net_with("type: maxpool, ceil_mode: true, size: " + std::to_string(c.k) +
                               ", stride: " + std::to_string(c.s) + ", pad: " + std::to_string(c.p),
                           {2, c.in, c.in});
    CHECK(net.layers[0]->out_shape == Shape{2, c.out, c.out});
    CHECK(TorchPool{c.k, c.s, c.p, true}.out(c.in) == c.out);
  }
  // PyTorch 1.13: avg_pool2d(arange(1, 7), (1, 3), (1, 2), (0, 1), ceil_mode=True) -> [1, 3, 5, 3]
  // (the last window reaches past the padding: divided by 2), count_include_pad=False -> [1.5, 3, 5, 6].
  for (bool count_pad : {true, false}) {
    Network net =
        net_with(std::string("type: avgpool, ceil_mode: true, size: [1, 3], stride: [1, 2], pad: [0, 1], "
                             "count_pad: ") +
                     (count_pad ? "true" : "false"),
                 {1, 1, 6});
    const std::vector<float> x{1, 2, 3, 4, 5, 6};
    const std::vector<double> want =
        count_pad ? std::vector<double>{1, 3, 5, 3} : std::vector<double>{1.5, 3, 5, 6};
    check_close(run_layer(*net.layers[0], {x.data()}, 1), want);
  }

  int config = 0;
  for (const char* mode : {"maxpool", "avgpool"})
    for (int64_t k : {2, 3, 4})
      for (int64_t s : {1, 2, 3})
        for (int64_t pad = 0; pad <= k / 2; ++pad)
          for (bool count_pad : {true, false}) {
            if (std::string(mode) == "maxpool" && !count_pad) continue;
            ++config;
            const Shape in{1 + config % 3, 5 + config % 4, 6 + config % 5};
            const int64_t n = 1 + config % 2;
            std::ostringstream y;
            y << "type: " << mode << ", ceil_mode: true, size: " << k << ", stride: " << s
              << ", pad: " << pad;
            if (std::string(mode) == "avgpool") y << ", count_pad: " << (count_pad ? "true" : "false");
            CAPTURE(y.str());
            CAPTURE(in.str());
            const TorchPool tp{k, s, pad, true};
            const int64_t oh = tp.out(in.h), ow = tp.out(in.w);
            if (oh < 1 || ow < 1 || in.h + 2 * pad < k || in.w + 2 * pad < k) continue;
            Network net = net_with(y.str(), in);
            REQUIRE(net.layers[0]->out_shape == Shape{in.c, oh, ow});
            std::vector<float> x = random_floats(static_cast<size_t>(n * in.size()),
                                                 900u + static_cast<uint32_t>(config), -3.f, -1.f);
            std::vector<double> want;
            for (int64_t plane = 0; plane < n * in.c; ++plane)
              for (int64_t oy = 0; oy < oh; ++oy)
                for (int64_t ox = 0; ox < ow; ++ox) {
                  const int64_t hs = oy * s - pad, ws = ox * s - pad;
                  const int64_t he = std::min(hs + k, in.h + pad), we = std::min(ws + k, in.w + pad);
                  const int64_t pool_size = (he - hs) * (we - ws);
                  double mx = -INFINITY, sum = 0;
                  int64_t inside = 0;
                  for (int64_t iy = std::max<int64_t>(hs, 0); iy < std::min(he, in.h); ++iy)
                    for (int64_t ix = std::max<int64_t>(ws, 0); ix < std::min(we, in.w); ++ix) {
                      const double v = x[static_cast<size_t>((plane * in.h + iy) * in.w + ix)];
                      mx = std::max(mx, v);
                      sum += v;
                      ++inside;
                    }
                  REQUIRE(inside > 0);
                  want.push_back(std::string(mode) == "maxpool" ? mx
                                                                : sum / (count_pad ? pool_size : inside));
                }
            check_close(run_layer(*net.layers[0], {x.data()}, n), want);
          }
  CHECK(config > 50);
}

TEST_CASE("cpu adaptive pools use PyTorch's floor/ceil windows") {
  // PyTorch 1.13: adaptive_avg_pool2d(arange(1, 6), (1, 3)) -> [1.5, 3, 4.5]; max -> [2, 4, 5].
  {
    const std::vector<float> x{1, 2, 3, 4, 5};
    check_close(run_layer(*net_with("type: avgpool, output: [1, 3]", {1, 1, 5}).layers[0], {x.data()}, 1),
                {1.5, 3, 4.5});
    check_close(run_layer(*net_with("type: maxpool, output: [1, 3]", {1, 1, 5}).layers[0], {x.data()}, 1),
                {2, 4, 5});
  }
  const Shape ins[] = {{3, 7, 7}, {2, 13, 9}, {4, 5, 6}, {1, 2, 3}, {2, 1, 1}};
  const int64_t outs[][2] = {{1, 1}, {7, 7}, {3, 2}, {5, 4}, {4, 7}};
  int config = 0;
  for (const char* mode : {"maxpool", "avgpool"})
    for (const Shape& in : ins)
      for (const auto& o : outs) {
        ++config;
        const int64_t n = 1 + config % 3;
        std::ostringstream y;
        y << "type: " << mode << ", output: [" << o[0] << ", " << o[1] << "]";
        CAPTURE(y.str());
        CAPTURE(in.str());
        Network net = net_with(y.str(), in);
        REQUIRE(net.layers[0]->out_shape == Shape{in.c, o[0], o[1]});
        std::vector<float> x =
            random_floats(static_cast<size_t>(n * in.size()), 40u + static_cast<uint32_t>(config));
        std::vector<double> want;
        for (int64_t plane = 0; plane < n * in.c; ++plane)
          for (int64_t oy = 0; oy < o[0]; ++oy)
            for (int64_t ox = 0; ox < o[1]; ++ox) {
              // start = floor(i * in / out), end = ceil((i + 1) * in / out), in doubles.
              const auto lo = [](int64_t i, int64_t a, int64_t b) {
                return static_cast<int64_t>(std::floor(static_cast<double>(i * a) / b));
              };
              const auto hi = [](int64_t i, int64_t a, int64_t b) {
                return static_cast<int64_t>(std::ceil(static_cast<double>((i + 1) * a) / b));
              };
              double mx = -INFINITY, sum = 0;
              int64_t cnt = 0;
              for (int64_t iy = lo(oy, in.h, o[0]); iy < hi(oy, in.h, o[0]); ++iy)
                for (int64_t ix = lo(ox, in.w, o[1]); ix < hi(ox, in.w, o[1]); ++ix) {
                  const double v = x[static_cast<size_t>((plane * in.h + iy) * in.w + ix)];
                  mx = std::max(mx, v);
                  sum += v;
                  ++cnt;
                }
              want.push_back(std::string(mode) == "maxpool" ? mx : sum / cnt);
            }
        check_close(run_layer(*net.layers[0], {x.data()}, n), want);
      }
}

TEST_CASE("pool key errors: conflicting windows, unsupported concepts, a complete key list") {
  const Shape in{2, 8, 8};
  CHECK(layer_error("type: maxpool, output: 2, size: 2", in) ==
        "test:4:47: layer 't' (maxpool): key 'size': not allowed with 'output' (adaptive windows follow from "
        "the "
        "output size)");
  CHECK(layer_error("type: avgpool, global: true, ceil_mode: true", in)
            .find("key 'ceil_mode': not allowed with 'global: true'") != std::string::npos);
  CHECK(layer_error("type: avgpool, global: true, output: 2", in)
            .find("key 'output': give either 'global: true' or 'output: [h, w]', not both") !=
        std::string::npos);
  CHECK(layer_error("type: avgpool, output: 2, count_pad: false", in)
            .find("key 'count_pad': not allowed with 'output' (adaptive windows have no padding)") !=
        std::string::npos);
  CHECK(layer_error("type: maxpool, size: 2, dilation: 2", in)
            .find("key 'dilation': dilated pooling is not supported") != std::string::npos);
  CHECK(layer_error("type: maxpool, output: [2, 0]", in).find("key 'output': expected an integer >= 1") !=
        std::string::npos);
  // PyTorch's argument name gets the netdef's.
  CHECK(layer_error("type: avgpool, size: 2, count_include_pad: false", in)
            .find("key 'count_include_pad': unknown key; PyTorch's 'count_include_pad' is 'count_pad' in a "
                  "netdef") != std::string::npos);
  // The list of keys is complete whichever form the pool took (global here).
  CHECK(
      layer_error("type: avgpool, global: true, zzzzzz: 1", in)
          .find(
              "unknown key; expected one of: ceil_mode, count_pad, global, inputs, name, output, pad, size, "
              "stride, type") != std::string::npos);
  CHECK(layer_error("type: conv, filters: 2, kernel: 1, zzzzzz: 1", in)
            .find("unknown key; expected one of: algo, bias, dilation, filters, groups, inputs, kernel, "
                  "name, pad, "
                  "stride, type") != std::string::npos);
}

TEST_CASE("cpu modern activations apply PyTorch's formulas") {
  const Shape in{3, 5, 7};
  const int64_t n = 2;
  std::vector<float> x = random_floats(static_cast<size_t>(n * in.size()), 19, -7.f, 7.f);
  x[0] = 0.f;
  x[1] = -3.f;
  x[2] = 3.f;
  x[3] = 6.f;
  // Far into saturation (the exp-based ones neither overflow nor lose the sign there).
  x[4] = -100.f;
  x[5] = 100.f;
  x[6] = -1000.f;
  x[7] = 1000.f;
  const double pi = std::acos(-1.0);
  struct A {
    const char* yaml;
    double (*f)(double);
  };
  const A acts[] = {
      {"type: relu6", [](double v) { return std::min(std::max(v, 0.0), 6.0); }},
      {"type: leaky_relu", [](double v) { return v > 0 ? v : 0.01 * v; }},
      {"type: leaky_relu, slope: 0.2", [](double v) { return v > 0 ? v : 0.2 * v; }},
      {"type: leaky_relu, slope: -1.5", [](double v) { return v > 0 ? v : -1.5 * v; }},
      {"type: hardswish", [](double v) { return v * std::min(std::max(v + 3, 0.0), 6.0) / 6; }},
      {"type: hardsigmoid", [](double v) { return std::min(std::max(v + 3, 0.0), 6.0) / 6; }},
      {"type: silu", [](double v) { return v / (1 + std::exp(-v)); }},
      {"type: gelu", [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }},
      {"type: gelu, approximate: none",
       [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }},
      {"type: gelu, approximate: tanh", nullptr},
  };
  for (const A& a : acts) {
    CAPTURE(a.yaml);
    Network net = net_with(a.yaml, in);
    std::vector<double> want;
    for (float v : x) {
      const double d = v;
      want.push_back(a.f ? a.f(d)
                         : 0.5 * d * (1 + std::tanh(std::sqrt(2 / pi) * (d + 0.044715 * d * d * d))));
    }
    check_close(run_layer(*net.layers[0], {x.data()}, n), want);
  }
  CHECK(layer_error("type: gelu, approximate: sigmoid", in)
            .find("key 'approximate': expected none or tanh, found 'sigmoid'") != std::string::npos);
  CHECK(
      layer_error("type: relu6, slope: 0.1", in).find("key 'slope': unknown key; this takes no keys here") ==
      std::string::npos);  // relu6 lists its (structural) keys instead
  CHECK(layer_error("type: relu6, slope: 0.1", in).find("key 'slope': unknown key") != std::string::npos);
  CHECK(layer_error("type: leaky_relu, negative_slope: 0.1", in)
            .find("PyTorch's 'negative_slope' is 'slope' in a netdef") != std::string::npos);
}

TEST_CASE("cpu mul multiplies inputs and broadcasts C x 1 x 1 over the plane") {
  const std::string yaml =
      "input: {channels: 3, height: 5, width: 7}\n"
      "classes: [a, b]\n"
      "layers:\n"
      "  - {name: r, type: relu}\n"
      "  - {name: t, type: tanh, inputs: input}\n"
      "  - {name: g, type: avgpool, global: true, inputs: input}\n"
      "  - {name: s, type: sigmoid}\n"
      "  - {name: m3, type: mul, inputs: [r, s, t]}\n"
      "  - {name: se, type: mul, inputs: [s, r]}\n"
      "  - {name: gg, type: mul, inputs: [s, g]}\n"
      "  - {name: sum, type: add, inputs: [m3, se]}\n"
      "  - {name: gs, type: avgpool, global: true, inputs: sum}\n"
      "  - {name: cat, type: concat, inputs: [gs, gg]}\n"
      "  - {name: out, type: fc, outputs: 2}\n";
  Network net = parse_netdef_string(yaml, "test");
  const int64_t n = 3, plane = 35;
  const Layer& m3 = *net.layers[static_cast<size_t>(net.find("m3"))];
  const Layer& se = *net.layers[static_cast<size_t>(net.find("se"))];
  const Layer& gg = *net.layers[static_cast<size_t>(net.find("gg"))];
  REQUIRE(m3.out_shape == Shape{3, 5, 7});
  REQUIRE(se.out_shape == Shape{3, 5, 7});
  REQUIRE(gg.out_shape == Shape{3, 1, 1});
  std::vector<float> a = random_floats(static_cast<size_t>(n * 3 * plane), 1), b = random_floats(a.size(), 2),
                     c = random_floats(static_cast<size_t>(n * 3), 3), d = random_floats(c.size(), 4);
  std::vector<double> want3, want_se, want_gg;
  for (size_t i = 0; i < a.size(); ++i) {
    const double sc = c[i / static_cast<size_t>(plane)];
    want3.push_back(static_cast<double>(a[i]) * sc * b[i]);
    want_se.push_back(sc * a[i]);
  }
  for (size_t i = 0; i < c.size(); ++i) want_gg.push_back(static_cast<double>(c[i]) * d[i]);
  check_close(run_layer(m3, {a.data(), c.data(), b.data()}, n), want3);
  check_close(run_layer(se, {c.data(), a.data()}, n), want_se);
  check_close(run_layer(gg, {c.data(), d.data()}, n), want_gg);

  const std::string head =
      "input: {channels: 3, height: 5, width: 7}\nclasses: [a, b, c]\nlayers:\n"
      "  - {name: p, type: avgpool, size: [5, 1], stride: 1}\n";  // 3 x 1 x 7: not broadcastable
  for (const std::string& bad :
       {std::string("  - {name: m, type: mul, inputs: [input, p]}\n"),
        std::string("  - {name: q, type: conv, filters: 4, kernel: 1, inputs: input}\n"
                    "  - {name: g, type: avgpool, global: true}\n"
                    "  - {name: m, type: mul, inputs: [input, g, p]}\n")}) {
    std::string msg;
    try {
      parse_netdef_string(head + bad + "  - {name: o, type: fc, outputs: 3, inputs: m}\n", "test");
    } catch (const Error& e) {
      msg = e.what();
    }
    CAPTURE(bad);
    CHECK(msg.find("layer 'm' (mul): inputs must have one shape, or be C x 1 x 1 with the same channels") !=
          std::string::npos);
  }
}

TEST_CASE("cpu upsample: nearest and bilinear, with and without align_corners") {
  // PyTorch 1.13, F.interpolate([[1, 2], [3, 4]], scale_factor=2, mode='bilinear').
  const std::vector<float> x{1, 2, 3, 4};
  check_close(
      run_layer(*net_with("type: upsample, scale: 2, mode: bilinear", {1, 2, 2}).layers[0], {x.data()}, 1),
      {1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4});
  check_close(
      run_layer(
          *net_with("type: upsample, scale: 2, mode: bilinear, align_corners: true", {1, 2, 2}).layers[0],
          {x.data()}, 1),
      {1, 4. / 3, 5. / 3, 2, 5. / 3, 2, 7. / 3, 8. / 3, 7. / 3, 8. / 3, 3, 10. / 3, 3, 10. / 3, 11. / 3, 4});

  int config = 0;
  for (const char* mode : {"nearest", "bilinear"})
    for (int ac = 0; ac < (std::string(mode) == "bilinear" ? 2 : 1); ++ac)
      for (const Shape& in : {Shape{2, 3, 5}, Shape{3, 1, 4}, Shape{1, 7, 2}})
        for (int64_t sh : {1, 2, 3})
          for (int64_t sw : {1, 2, 5}) {
            ++config;
            const int64_t n = 1 + config % 2;
            std::ostringstream y;
            y << "type: upsample, scale: [" << sh << ", " << sw << "], mode: " << mode;
            if (ac) y << ", align_corners: true";
            CAPTURE(y.str());
            CAPTURE(in.str());
            Network net = net_with(y.str(), in);
            const Shape os{in.c, in.h * sh, in.w * sw};
            REQUIRE(net.layers[0]->out_shape == os);
            std::vector<float> v =
                random_floats(static_cast<size_t>(n * in.size()), 70u + static_cast<uint32_t>(config));
            // Source coordinate along one axis, in doubles.
            auto src = [&](int64_t o, int64_t len, int64_t scale) {
              const int64_t out = len * scale;
              if (ac) return out > 1 ? static_cast<double>(o) * (len - 1) / (out - 1) : 0.0;
              return std::max((o + 0.5) / scale - 0.5, 0.0);
            };
            std::vector<double> want;
            for (int64_t plane = 0; plane < n * in.c; ++plane)
              for (int64_t oy = 0; oy < os.h; ++oy)
                for (int64_t ox = 0; ox < os.w; ++ox) {
                  auto at = [&](int64_t iy, int64_t ix) {
                    return static_cast<double>(v[static_cast<size_t>((plane * in.h + iy) * in.w + ix)]);
                  };
                  if (std::string(mode) == "nearest") {
                    want.push_back(at(oy / sh, ox / sw));
                    continue;
                  }
                  const double fy = src(oy, in.h, sh), fx = src(ox, in.w, sw);
                  const int64_t y0 = std::min<int64_t>(static_cast<int64_t>(fy), in.h - 1),
                                x0 = std::min<int64_t>(static_cast<int64_t>(fx), in.w - 1);
                  const int64_t y1 = std::min(y0 + 1, in.h - 1), x1 = std::min(x0 + 1, in.w - 1);
                  const double ly = fy - y0, lx = fx - x0;
                  want.push_back((1 - ly) * ((1 - lx) * at(y0, x0) + lx * at(y0, x1)) +
                                 ly * ((1 - lx) * at(y1, x0) + lx * at(y1, x1)));
                }
            check_close(run_layer(*net.layers[0], {v.data()}, n), want);
          }
  CHECK(config == 3 * 3 * 3 * 3);
  const Shape in{1, 4, 4};
  CHECK(layer_error("type: upsample, scale: 2, mode: bicubic", in)
            .find("key 'mode': mode 'bicubic' is not supported; expected nearest or bilinear") !=
        std::string::npos);
  CHECK(layer_error("type: upsample, scale: 2, align_corners: true", in)
            .find("key 'align_corners': only bilinear upsampling takes 'align_corners'") !=
        std::string::npos);
  // Fractional factors and sizes (values against PyTorch in tests/upsample_crosscheck.py).
  CHECK(net_with("type: upsample, scale: 1.5", in).layers[0]->out_shape == Shape{1, 6, 6});
  CHECK(net_with("type: upsample, scale: [0.5, 2.6]", in).layers[0]->out_shape == Shape{1, 2, 10});
  CHECK(net_with("type: upsample, size: [3, 9], mode: bilinear", in).layers[0]->out_shape == Shape{1, 3, 9});
  CHECK(net_with("type: upsample, size: 5", in).layers[0]->out_shape == Shape{1, 5, 5});
  CHECK(layer_error("type: upsample, scale: 2, size: 8", in).find("give 'scale' or 'size', not both") !=
        std::string::npos);
  CHECK(layer_error("type: upsample, scale: 0", in).find("key 'scale': expected a positive factor") !=
        std::string::npos);
  CHECK(layer_error("type: upsample, scale: [2, -1]", in).find("expected a positive factor") !=
        std::string::npos);
  CHECK(layer_error("type: upsample, scale: .nan", in).find("key 'scale': expected a number") !=
        std::string::npos);
  CHECK(
      layer_error("type: upsample, scale: 0.2", in).find("upsampling a length of 4 by 0.2 gives no output") !=
      std::string::npos);
  CHECK(layer_error("type: upsample, size: [0, 2]", in).find("key 'size'") != std::string::npos);
  CHECK(layer_error("type: upsample", in).find("key 'scale': missing") != std::string::npos);
  CHECK(layer_error("type: upsample, scale_factor: 2", in)
            .find("PyTorch's 'scale_factor' is 'scale' in a netdef") != std::string::npos);
}

}  // namespace cnnrun::test

namespace cnnrun::test {

TEST_CASE("cpu batchnorm folded into grouped and depthwise convs gives the unfolded outputs") {
  const std::string yaml =
      "input: {channels: 6, height: 9, width: 7}\n"
      "preprocess: {scale: 0.01, shift: -1}\n"
      "classes: [a, b, c]\n"
      "layers:\n"
      "  - {name: g, type: conv, filters: 9, kernel: 3, pad: 1, groups: 3, bias: false}\n"
      "  - {name: gbn, type: batchnorm}\n"
      "  - {name: dw, type: conv, filters: 9, kernel: 3, stride: 2, dilation: 2, pad: 2, groups: 9}\n"
      "  - {name: dbn, type: batchnorm, eps: 0.001}\n"
      "  - {name: act, type: hardswish}\n"
      "  - {name: gp, type: avgpool, output: [2, 3]}\n"
      "  - {name: fc, type: fc, outputs: 3}\n";
  Network folded = parse_netdef_string(yaml, "test"), plain = parse_netdef_string(yaml, "test");
  fill_weights(folded, 7);
  fill_weights(plain, 7);
  for (Network* n : {&folded, &plain})
    for (auto& l : n->layers)
      if (l->weights.count("running_var"))
        for (float& v : l->weights["running_var"].data) v = std::fabs(v) + 0.3f;
  fold_batchnorms(folded, "test");
  REQUIRE(folded.layers[1]->folded);
  REQUIRE(folded.layers[3]->folded);
  Dataset data;
  data.count = 5;
  data.shape = folded.input;
  for (float v : random_floats(static_cast<size_t>(data.count * data.shape.size()), 8, 0.f, 255.99f))
    data.pixels.push_back(static_cast<uint8_t>(v));
  data.labels.assign(5, 0);
  std::vector<Tensor> a = make_cpu_executor(folded)->forward_layers(data, 0, 5, RunOptions{});
  std::vector<Tensor> b = make_cpu_executor(plain)->forward_layers(data, 0, 5, RunOptions{});
  const Tensor& ya = a.back();
  const Tensor& yb = b.back();
  REQUIRE(ya.data.size() == 15);
  check_close(ya.data, std::vector<double>(yb.data.begin(), yb.data.end()));
}

}  // namespace cnnrun::test
