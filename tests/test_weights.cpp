// Weight loaders: ConvNetJS orderings checked at hand-picked positions, safetensors against
// files assembled byte by byte, load_weights on small netdefs in both formats, batchnorm folding
// against a plain-loop conv + batchnorm, and the real ConvNetJS network on the CIFAR-10 sample.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "engine/io/assets.h"
#include "engine/io/dataset.h"
#include "engine/io/weights.h"
#include "engine/layers/batchnorm.h"
#include "engine/layers/conv.h"
#include "engine/layers/fc.h"
#include "engine/network.h"
#include "tests/test_util.h"

using namespace cnnrun;

namespace {

// doctest::Contains takes a doctest::String, which std::string does not convert to.
doctest::Contains has(const std::string& s) { return doctest::Contains(s.c_str()); }

// Distinct, exactly representable values: number n of a file is val(n).
float val(int64_t n) { return static_cast<float>(n) * 0.25f - 3.0f; }

std::string numbers(const std::string& header, int64_t count, int64_t per_line = 5) {
  std::ostringstream s;
  s << header << "\n";
  for (int64_t n = 0; n < count; ++n) s << val(n) << ((n + 1) % per_line ? " " : "\n");
  return s.str();
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 255);
  return s;
}

std::string f32_bytes(const std::vector<float>& v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(&s[0], v.data(), s.size());
  return s;
}

std::string st_file(const std::string& json, const std::string& data) {
  return le64(json.size()) + json + data;
}

// Shorthand for a header entry.
std::string ent(const std::string& name, const std::string& dtype, const std::string& shape, int64_t b,
                int64_t e) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(b) + "," + std::to_string(e) + "]}";
}

void check_throws(const std::string& path, const std::string& bytes, const std::string& fragment) {
  test::write_file(path, bytes);
  CAPTURE(fragment);
  CHECK_THROWS_WITH_AS(read_safetensors(path), has(fragment), Error);
}

Tensor tensor(std::vector<int64_t> dims, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  Tensor t(std::move(dims));
  t.data = test::random_floats(t.data.size(), seed, lo, hi);
  return t;
}

// Plain conv (stride 1) on one CHW image.
std::vector<float> conv_ref(const std::vector<float>& in, int64_t C, int64_t H, int64_t W, const Tensor& w,
                            const Tensor* b, int64_t pad) {
  int64_t F = w.dims[0], KH = w.dims[2], KW = w.dims[3];
  int64_t OH = H + 2 * pad - KH + 1, OW = W + 2 * pad - KW + 1;
  std::vector<float> out(static_cast<size_t>(F * OH * OW));
  for (int64_t f = 0; f < F; ++f)
    for (int64_t oy = 0; oy < OH; ++oy)
      for (int64_t ox = 0; ox < OW; ++ox) {
        double s = b ? b->data[static_cast<size_t>(f)] : 0.0;
        for (int64_t c = 0; c < C; ++c)
          for (int64_t ky = 0; ky < KH; ++ky)
            for (int64_t kx = 0; kx < KW; ++kx) {
              int64_t y = oy + ky - pad, x = ox + kx - pad;
              if (y < 0 || y >= H || x < 0 || x >= W) continue;
              s += static_cast<double>(w.data[static_cast<size_t>(((f * C + c) * KH + ky) * KW + kx)]) *
                   in[static_cast<size_t>((c * H + y) * W + x)];
            }
        out[static_cast<size_t>((f * OH + oy) * OW + ox)] = static_cast<float>(s);
      }
  return out;
}

const std::string kSmallNet =
    "input: {channels: 2, height: 4, width: 4}\n"
    "classes: [a, b]\n"
    "weights:\n"
    "  format: convnetjs\n"
    "  path: w\n"
    "  files: {conv1: c.txt, fc: f.txt}\n"
    "layers:\n"
    "  - {name: conv1, type: conv, filters: 3, kernel: 3, pad: 1}\n"
    "  - {name: relu1, type: relu}\n"
    "  - {name: pool1, type: maxpool, size: 2, stride: 2}\n"
    "  - {name: fc, type: fc, outputs: 2}\n";

// A netdef dir with kSmallNet (optionally edited) and its ConvNetJS files.
std::string small_net_dir(const std::string& netdef = kSmallNet) {
  std::string d = test::temp_dir("weights-net");
  std::filesystem::create_directories(d + "/w");
  test::write_file(d + "/w/c.txt", numbers("3 3 2 3", 3 * 3 * 3 * 2 + 3));
  test::write_file(d + "/w/f.txt", numbers("12 2", 12 * 2 + 2));
  test::write_file(d + "/net.yaml", netdef);
  return d;
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  size_t p = s.find(from);
  REQUIRE(p != std::string::npos);
  return s.replace(p, from.size(), to);
}

}  // namespace

TEST_CASE("convnetjs conv: (f, x, y, d) file order becomes [f][d][y][x]") {
  std::string d = test::temp_dir("cjs-conv");
  // KW=3 != KH=2, so a swapped x/y reading cannot pass.
  const int64_t KW = 3, KH = 2, D = 2, F = 2;
  test::write_file(d + "/c.txt", numbers("3 2 2 2", F * KW * KH * D + F));
  auto t = read_convnetjs_conv(d + "/c.txt");
  const Tensor& w = t.at("weight");
  REQUIRE(w.dims == std::vector<int64_t>{F, D, KH, KW});
  auto at = [&](int64_t f, int64_t dd, int64_t y, int64_t x) {
    return w.data[static_cast<size_t>(((f * D + dd) * KH + y) * KW + x)];
  };
  CHECK(at(0, 0, 0, 0) == val(0));
  CHECK(at(0, 1, 0, 0) == val(1));   // depth is fastest in the file
  CHECK(at(0, 0, 1, 0) == val(2));   // then y
  CHECK(at(0, 0, 0, 1) == val(4));   // then x
  CHECK(at(1, 1, 1, 0) == val(15));  // ((1*3 + 0)*2 + 1)*2 + 1
  CHECK(at(1, 0, 0, 2) == val(20));  // ((1*3 + 2)*2 + 0)*2 + 0
  for (int64_t f = 0; f < F; ++f)
    for (int64_t x = 0; x < KW; ++x)
      for (int64_t y = 0; y < KH; ++y)
        for (int64_t dd = 0; dd < D; ++dd) CHECK(at(f, dd, y, x) == val(((f * KW + x) * KH + y) * D + dd));
  CHECK(t.at("bias").dims == std::vector<int64_t>{2});
  CHECK(t.at("bias").data == std::vector<float>{val(24), val(25)});
}

TEST_CASE("convnetjs fc: inputs in (y, x, d) order become CHW") {
  std::string d = test::temp_dir("cjs-fc");
  const int64_t C = 2, H = 2, W = 3, I = 12, O = 2;
  test::write_file(d + "/f.txt", numbers("12 2", O * I + O));
  auto t = read_convnetjs_fc(d + "/f.txt", Shape{C, H, W});
  const Tensor& w = t.at("weight");
  REQUIRE(w.dims == std::vector<int64_t>{O, I});
  // Output 1, channel 1, row 0, column 2: file input (0*3 + 2)*2 + 1 = 5 -> CHW 1*6 + 0*3 + 2 = 8.
  CHECK(w.data[1 * 12 + 8] == val(12 + 5));
  // Output 0, channel 0, row 1, column 0: file input (1*3 + 0)*2 + 0 = 6 -> CHW 3.
  CHECK(w.data[3] == val(6));
  CHECK(w.data[1] == val(2));  // CHW 1 = (c0, y0, x1) = file (0*3 + 1)*2 + 0
  for (int64_t o = 0; o < O; ++o)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x)
        for (int64_t c = 0; c < C; ++c)
          CHECK(w.data[static_cast<size_t>(o * I + (c * H + y) * W + x)] == val(o * I + (y * W + x) * C + c));
  CHECK(t.at("bias").data == std::vector<float>{val(24), val(25)});
  CHECK_THROWS_WITH_AS(read_convnetjs_fc(d + "/f.txt", Shape{2, 2, 2}),
                       has(d + "/f.txt:1:1: header says 12 inputs but the layer's input 2x2x2 has 8"), Error);
}

TEST_CASE("convnetjs: strict numbers and headers") {
  std::string d = test::temp_dir("cjs-bad");
  std::string p = d + "/c.txt";
  auto conv_throws = [&](const std::string& text, const std::string& fragment) {
    test::write_file(p, text);
    CAPTURE(fragment);
    CHECK_THROWS_WITH_AS(read_convnetjs_conv(p), has(fragment), Error);
  };
  // 1x1 kernel, depth 1, 2 filters: 2 weights + 2 biases.
  test::write_file(p, "1 1 1 2\n0.5 -1.5e-1\n2 3\n");
  CHECK(read_convnetjs_conv(p).at("weight").data == std::vector<float>{0.5f, -0.15f});
  conv_throws("1 1 1 2\n0.5 -1\nabc 3\n",
              p + ":3:1: number 7: expected a finite decimal number, found 'abc'");
  conv_throws("1 1 1 2\n0.5 nan 2 3\n", p + ":2:5: number 6: expected a finite decimal number, found 'nan'");
  conv_throws("1 1 1 2\n0.5 inf 2 3\n", "found 'inf'");
  conv_throws("1 1 1 2\n0.5 1e50 2 3\n", "found '1e50'");
  conv_throws("1 1 1 2\n0.5 0x10 2 3\n", "found '0x10'");
  conv_throws("1 1 1 2\n0.5 1.5.5 2 3\n", "found '1.5.5'");
  conv_throws("1 1 1 2\n0.5 2 3\n",
              p + ": expected 4 numbers after the header (2x1x1x1 weights + 2 biases), found 3");
  conv_throws("1 1 1 2\n0.5 2 3 4\n  5\n", p + ":3:3: number 9 '5' is one too many");
  conv_throws("", "expected the header 'KW KH DEPTH FILTERS', the file ends before KW");
  conv_throws("1 0 1 2\n",
              p + ":1:3: header 'KW KH DEPTH FILTERS': KH must be an integer from 1 to 4096, found '0'");
  conv_throws("1 1 -1 2\n", "DEPTH must be an integer from 1 to 16777216, found '-1'");
  conv_throws("1 1 2.5 2\n", "found '2.5'");
  conv_throws("4096 4096 16777216 16777216\n1\n", "size overflow");
  CHECK_THROWS_WITH_AS(read_convnetjs_conv(d + "/none.txt"), has(d + "/none.txt: cannot open"), Error);
}

TEST_CASE("safetensors: write then read round-trips") {
  std::string d = test::temp_dir("st-rt");
  std::map<std::string, Tensor> m{{"b.weight", tensor({4}, 1)},
                                  {"a.weight", tensor({2, 3, 1, 1}, 2)},
                                  {"empty", Tensor({0, 3})},
                                  {"scalar", tensor({}, 3)}};
  write_safetensors(d + "/x.safetensors", m);
  auto r = read_safetensors(d + "/x.safetensors");
  REQUIRE(r.size() == 4);
  for (const auto& kv : m) {
    CAPTURE(kv.first);
    CHECK(r.at(kv.first).dims == kv.second.dims);
    CHECK(r.at(kv.first).data == kv.second.data);
  }
  // The header is padded so the data starts 8-byte aligned.
  std::string raw = test::read_file(d + "/x.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  CHECK(n % 8 == 0);
  CHECK(raw.size() == 8 + n + 4 * (4 + 6 + 0 + 1));
}

TEST_CASE("safetensors: a hand-built file reads correctly") {
  std::string d = test::temp_dir("st-hand");
  // b before a in the buffer, metadata present, and the JSON padded with spaces.
  std::string json = "{\"__metadata__\":{\"format\":\"pt\"}," + ent("a", "F32", "[2,2]", 8, 24) + "," +
                     ent("b", "F32", "[2]", 0, 8) + "}   ";
  test::write_file(d + "/h.safetensors", st_file(json, f32_bytes({7.5f, -1.f, 1.f, 2.f, 3.f, 4.f})));
  auto r = read_safetensors(d + "/h.safetensors");
  REQUIRE(r.size() == 2);
  CHECK(r.at("a").dims == std::vector<int64_t>{2, 2});
  CHECK(r.at("a").data == std::vector<float>{1.f, 2.f, 3.f, 4.f});
  CHECK(r.at("b").data == std::vector<float>{7.5f, -1.f});
}

TEST_CASE("safetensors: malformed files") {
  std::string d = test::temp_dir("st-bad");
  std::string p = d + "/m.safetensors";
  std::string two = f32_bytes({1.f, 2.f});
  check_throws(p, "abc", p + ": too short");
  check_throws(p, le64(1000) + "{}",
               p + ": byte 0: header length 1000 runs past the end of the file (10 bytes)");
  check_throws(p, le64(200'000'000) + "{}", "header length 200000000 is over the 100 MB limit");
  check_throws(p, st_file("{bad", ""), p + ": byte 8: header is not valid JSON");
  check_throws(p, st_file("[1]", ""), "header is not a JSON object");
  check_throws(p, st_file("{" + ent("a", "F16", "[2]", 0, 4) + "}", "abcd"),
               "tensor 'a': dtype F16 is not supported; only F32");
  check_throws(p, st_file("{" + ent("a", "Q9", "[2]", 0, 4) + "}", "abcd"), "unknown dtype 'Q9'");
  check_throws(p, st_file("{" + ent("a", "F32", "[-2]", 0, 8) + "}", two),
               "tensor 'a': shape [-2] has a negative");
  check_throws(p, st_file("{" + ent("a", "F32", "[2.5]", 0, 8) + "}", two), "holds a non-integer");
  check_throws(p, st_file("{" + ent("a", "F32", "[4294967296,4294967296]", 0, 8) + "}", two), "overflows");
  check_throws(p, st_file("{" + ent("a", "F32", "[3]", 0, 8) + "}", two),
               "tensor 'a': shape [3] of F32 needs 12 bytes, data_offsets [0,8] give 8");
  check_throws(p, st_file("{" + ent("a", "F32", "[2]", 0, 400) + "}", two),
               "data_offsets [0,400] lie outside the 8-byte data buffer");
  check_throws(p, st_file("{" + ent("a", "F32", "[0]", 8, 0) + "}", two), "end before they begin");
  check_throws(p,
               st_file("{" + ent("a", "F32", "[2]", 0, 8) + "," + ent("b", "F32", "[2]", 4, 12) + "}",
                       two + f32_bytes({3.f})),
               "tensor 'b' overlaps tensor 'a'");
  check_throws(p,
               st_file("{" + ent("a", "F32", "[1]", 0, 4) + "," + ent("b", "F32", "[1]", 8, 12) + "}",
                       two + f32_bytes({3.f})),
               "hole of 4 bytes in the data buffer before tensor 'b'");
  check_throws(p, st_file("{" + ent("a", "F32", "[1]", 0, 4) + "}", two),
               "4 bytes in the data buffer belong to no tensor");
  check_throws(p, st_file("{" + ent("a", "F32", "[1]", 0, 4) + "," + ent("a", "F32", "[1]", 4, 8) + "}", two),
               "header names 'a' twice");
  check_throws(p, st_file("{" + ent("a", "F32", "[1]", 0, 4) + ",\"x\":5}", f32_bytes({1.f})),
               "tensor 'x': expected an object");
  check_throws(p,
               st_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1}}",
                       f32_bytes({1.f})),
               "unknown key 'extra'");
  std::string one = "{" + ent("a", "F32", "[2]", 0, 8) + "}";
  check_throws(p, st_file(one, f32_bytes({1.f, NAN})),
               p + ": byte " + std::to_string(8 + one.size() + 4) + ": tensor 'a' element 1 is NaN");
  check_throws(p, st_file("{" + ent("a", "F32", "[2]", 0, 8) + "}", f32_bytes({-INFINITY, 1.f})),
               "tensor 'a' element 0 is infinite");
  check_throws(d + "/none.safetensors", "", "too short for a safetensors file (0 bytes)");
  CHECK_THROWS_WITH_AS(read_safetensors(d + "/nope"), has(d + "/nope: cannot open"), Error);
}

TEST_CASE("safetensors: PyTorch's I64 num_batches_tracked is skipped only when asked") {
  std::string d = test::temp_dir("st-nbt");
  std::string json = "{" + ent("bn.num_batches_tracked", "I64", "[]", 0, 8) + "," +
                     ent("bn.weight", "F32", "[2]", 8, 16) + "}";
  test::write_file(d + "/b.safetensors", st_file(json, le64(12345) + f32_bytes({1.f, 2.f})));
  CHECK_THROWS_WITH_AS(read_safetensors(d + "/b.safetensors"),
                       has("tensor 'bn.num_batches_tracked': dtype I64 is not supported"), Error);
  auto r = read_safetensors(d + "/b.safetensors", true);
  CHECK(r.size() == 1);
  CHECK(r.at("bn.weight").data == std::vector<float>{1.f, 2.f});
  // Its place in the buffer is still checked.
  json = "{" + ent("bn.num_batches_tracked", "I64", "[]", 0, 4) + "," +
         ent("bn.weight", "F32", "[2]", 4, 12) + "}";
  test::write_file(d + "/c.safetensors", st_file(json, le64(1).substr(0, 4) + f32_bytes({1.f, 2.f})));
  CHECK_THROWS_WITH_AS(read_safetensors(d + "/c.safetensors", true), has("of I64 needs 8 bytes"), Error);
}

TEST_CASE("load_weights: convnetjs through the netdef's files map") {
  std::string d = small_net_dir();
  Network net = parse_netdef_file(d + "/net.yaml");
  AssetResolver assets(net.source_dir, {});
  load_weights(net, assets, "");
  const Layer& conv = *net.layers[static_cast<size_t>(net.find("conv1"))];
  const Layer& fc = *net.layers[static_cast<size_t>(net.find("fc"))];
  REQUIRE(conv.weight("weight").dims == std::vector<int64_t>{3, 2, 3, 3});
  // f=1, d=1, y=2, x=0: file value ((1*3 + 0)*3 + 2)*2 + 1 = 23.
  CHECK(conv.weight("weight").data[((1 * 2 + 1) * 3 + 2) * 3 + 0] == val(23));
  CHECK(conv.weight("bias").data == std::vector<float>{val(54), val(55), val(56)});
  REQUIRE(fc.weight("weight").dims == std::vector<int64_t>{2, 12});
  // fc input is pool1's 3x2x2; output 1, c=2, y=1, x=0: file (1*2 + 0)*3 + 2 = 8 -> CHW 2*4 + 1*2 + 0 = 10.
  CHECK(fc.weight("weight").data[12 + 10] == val(12 + 8));
  CHECK(collect_weights(net).size() == 4);
  CHECK(collect_weights(net).at("fc.bias").data == std::vector<float>{val(24), val(25)});

  // --weights DIR: the same files map in another directory.
  std::string other = small_net_dir();
  test::write_file(other + "/w/c.txt", numbers("3 3 2 3", 3 * 3 * 3 * 2 + 3, 1));
  Network net2 = parse_netdef_file(d + "/net.yaml");
  load_weights(net2, assets, other + "/w");
  CHECK(collect_weights(net2).at("conv1.weight").data == collect_weights(net).at("conv1.weight").data);
  CHECK_THROWS_WITH_AS(load_weights(net2, assets, other + "/nothing"),
                       has("--weights " + other + "/nothing: no such file or directory"), Error);
}

TEST_CASE("load_weights: through a flatten the fc still reorders against the C x H x W volume") {
  std::string d =
      small_net_dir(replace(kSmallNet, "  - {name: fc,", "  - {name: flat, type: flatten}\n  - {name: fc,"));
  Network net = parse_netdef_file(d + "/net.yaml");
  load_weights(net, AssetResolver(net.source_dir, {}), "");
  const Layer& fc = *net.layers[static_cast<size_t>(net.find("fc"))];
  CHECK(fc.in_shapes[0] == Shape{12, 1, 1});
  CHECK(fc.weight("weight").data[12 + 10] == val(12 + 8));
}

TEST_CASE("load_weights: convnetjs files map errors point at the netdef") {
  SUBCASE("a layer without a file") {
    std::string d =
        small_net_dir(replace(kSmallNet, "files: {conv1: c.txt, fc: f.txt}", "files: {conv1: c.txt}"));
    Network net = parse_netdef_file(d + "/net.yaml");
    CHECK_THROWS_WITH_AS(load_weights(net, AssetResolver(net.source_dir, {}), ""),
                         has(d + "/net.yaml:4:3: layer 'fc' (fc): key 'weights.files': the layer needs "
                                 "weights but 'files' names no file for it"),
                         Error);
  }
  SUBCASE("an entry naming no layer") {
    std::string d = small_net_dir(replace(kSmallNet, "fc: f.txt}", "fc: f.txt, conv9: x.txt}"));
    Network net = parse_netdef_file(d + "/net.yaml");
    CHECK_THROWS_WITH_AS(load_weights(net, AssetResolver(net.source_dir, {}), ""),
                         has(d + "/net.yaml:6:36: key 'weights.files': names layer 'conv9' but the "
                                 "network has no such layer"),
                         Error);
  }
  SUBCASE("an entry naming a layer without weights") {
    std::string d = small_net_dir(replace(kSmallNet, "fc: f.txt}", "fc: f.txt, relu1: x.txt}"));
    Network net = parse_netdef_file(d + "/net.yaml");
    CHECK_THROWS_WITH_AS(load_weights(net, AssetResolver(net.source_dir, {}), ""),
                         has(":6:36: layer 'relu1' (relu): key 'weights.files': this layer takes no "
                             "weights"),
                         Error);
  }
  SUBCASE("a file escaping the weights directory") {
    std::string d = small_net_dir(replace(kSmallNet, "fc: f.txt}", "fc: ../../f.txt}"));
    Network net = parse_netdef_file(d + "/net.yaml");
    CHECK_THROWS_WITH_AS(load_weights(net, AssetResolver(net.source_dir, {}), ""),
                         has("ConvNetJS weights file '../../f.txt' resolves outside"), Error);
  }
  SUBCASE("a file for the wrong shape") {
    std::string d = small_net_dir();
    test::write_file(d + "/w/c.txt", numbers("3 3 1 3", 3 * 3 * 3 + 3));
    Network net = parse_netdef_file(d + "/net.yaml");
    CHECK_THROWS_WITH_AS(load_weights(net, AssetResolver(net.source_dir, {}), ""),
                         has(d + "/w/c.txt: layer 'conv1' weight: expected [3, 2, 3, 3], found [3, 1, 3, 3]"),
                         Error);
  }
  SUBCASE("a conv with bias: false cannot take ConvNetJS biases") {
    std::string d =
        small_net_dir(replace(kSmallNet, "kernel: 3, pad: 1}", "kernel: 3, pad: 1, bias: false}"));
    Network net = parse_netdef_file(d + "/net.yaml");
    CHECK_THROWS_WITH_AS(load_weights(net, AssetResolver(net.source_dir, {}), ""),
                         has("layer 'conv1' (conv) takes no tensor 'bias' (the netdef says bias: false)"),
                         Error);
  }
  SUBCASE("no weights section") {
    std::string text = kSmallNet;
    text.erase(text.find("weights:"), text.find("layers:") - text.find("weights:"));
    Network net = parse_netdef_string(text, "s.yaml");
    CHECK_THROWS_WITH_AS(load_weights(net, AssetResolver(".", {}), ""),
                         has("s.yaml:4:5: layer 'conv1' (conv): the layer needs weights but the netdef "
                             "has no 'weights' section"),
                         Error);
  }
}

TEST_CASE("load_weights: safetensors, shapes, missing and extra tensors") {
  std::string d = small_net_dir();
  Network ref = parse_netdef_file(d + "/net.yaml");
  AssetResolver assets(ref.source_dir, {});
  std::map<std::string, Tensor> m{{"conv1.weight", tensor({3, 2, 3, 3}, 1)},
                                  {"conv1.bias", tensor({3}, 2)},
                                  {"fc.weight", tensor({2, 12}, 3)},
                                  {"fc.bias", tensor({2}, 4)}};
  write_safetensors(d + "/m.safetensors", m);
  {
    Network net = parse_netdef_file(d + "/net.yaml");
    load_weights(net, assets, d + "/m.safetensors");
    auto got = collect_weights(net);
    REQUIRE(got.size() == 4);
    for (const auto& kv : m) CHECK(got.at(kv.first).data == kv.second.data);
  }
  {
    // Through the netdef's own weights section.
    Network net = parse_netdef_file(d + "/net.yaml");
    std::string text = replace(replace(kSmallNet, "format: convnetjs", "format: safetensors"), "path: w",
                               "path: m.safetensors");
    text = replace(text, "  files: {conv1: c.txt, fc: f.txt}\n", "");
    test::write_file(d + "/st.yaml", text);
    Network st = parse_netdef_file(d + "/st.yaml");
    load_weights(st, AssetResolver(st.source_dir, {}), "");
    CHECK(collect_weights(st).at("fc.weight").data == m.at("fc.weight").data);
  }
  auto fails = [&](std::map<std::string, Tensor> mm, const std::string& fragment) {
    write_safetensors(d + "/bad.safetensors", mm);
    Network net = parse_netdef_file(d + "/net.yaml");
    CAPTURE(fragment);
    CHECK_THROWS_WITH_AS(load_weights(net, assets, d + "/bad.safetensors"), has(fragment), Error);
  };
  auto m2 = m;
  m2["conv1.weight"] = tensor({3, 2, 2, 2}, 5);
  fails(m2, d + "/bad.safetensors: layer 'conv1' weight: expected [3, 2, 3, 3], found [3, 2, 2, 2]");
  m2 = m;
  m2.erase("fc.bias");
  fails(m2, "layer 'fc' bias: no tensor 'fc.bias' [2] in the file (if the layer has none, write bias: false");
  m2 = m;
  m2["conv2.weight"] = tensor({1}, 6);
  m2["relu1.weight"] = tensor({1}, 7);
  fails(m2, "2 tensor(s) that no layer of the network uses: conv2.weight, relu1.weight");
  // An F32 num_batches_tracked is tolerated too.
  m2 = m;
  m2["conv1.num_batches_tracked"] = tensor({}, 8);
  write_safetensors(d + "/ok.safetensors", m2);
  Network net = parse_netdef_file(d + "/net.yaml");
  load_weights(net, assets, d + "/ok.safetensors");
  CHECK(collect_weights(net).size() == 4);
}

TEST_CASE("load_weights: batchnorm folds into conv and fc, numerically") {
  std::string d = test::temp_dir("bn-fold");
  test::write_file(d + "/net.yaml",
                   "input: {channels: 2, height: 5, width: 5}\n"
                   "classes: [a, b]\n"
                   "weights: {format: safetensors, path: w.safetensors}\n"
                   "layers:\n"
                   "  - {name: conv1, type: conv, filters: 3, kernel: 3, pad: 1, bias: false}\n"
                   "  - {name: bn1, type: batchnorm, eps: 0.001}\n"
                   "  - {name: relu1, type: relu}\n"
                   "  - {name: fc1, type: fc, outputs: 4}\n"
                   "  - {name: bn2, type: batchnorm}\n"
                   "  - {name: fc2, type: fc, outputs: 2}\n");
  std::map<std::string, Tensor> m{{"conv1.weight", tensor({3, 2, 3, 3}, 1)},
                                  {"bn1.weight", tensor({3}, 2, 0.5f, 2.f)},
                                  {"bn1.bias", tensor({3}, 3)},
                                  {"bn1.running_mean", tensor({3}, 4)},
                                  {"bn1.running_var", tensor({3}, 5, 0.1f, 3.f)},
                                  {"fc1.weight", tensor({4, 75}, 6)},
                                  {"fc1.bias", tensor({4}, 7)},
                                  {"bn2.weight", tensor({4}, 8, 0.5f, 2.f)},
                                  {"bn2.bias", tensor({4}, 9)},
                                  {"bn2.running_mean", tensor({4}, 10)},
                                  {"bn2.running_var", tensor({4}, 11, 0.1f, 3.f)},
                                  {"fc2.weight", tensor({2, 4}, 12)},
                                  {"fc2.bias", tensor({2}, 13)}};
  write_safetensors(d + "/w.safetensors", m);
  Network net = parse_netdef_file(d + "/net.yaml");
  load_weights(net, AssetResolver(net.source_dir, {}), "");
  auto& conv = dynamic_cast<ConvLayer&>(*net.layers[static_cast<size_t>(net.find("conv1"))]);
  auto& fc1 = dynamic_cast<FcLayer&>(*net.layers[static_cast<size_t>(net.find("fc1"))]);
  CHECK(net.layers[static_cast<size_t>(net.find("bn1"))]->folded);
  CHECK(net.layers[static_cast<size_t>(net.find("bn2"))]->folded);
  CHECK(conv.p.bias);  // created by the fold
  REQUIRE(conv.weights.count("bias") == 1);

  // conv -> batchnorm with the original tensors, by the PyTorch formula, against the folded conv.
  std::vector<float> x = test::random_floats(2 * 5 * 5, 99);
  std::vector<float> y = conv_ref(x, 2, 5, 5, m.at("conv1.weight"), nullptr, 1);
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t i = 0; i < 25; ++i) {
      float& v = y[static_cast<size_t>(c * 25 + i)];
      auto at = [&](const char* n) {
        return static_cast<double>(m.at(std::string("bn1.") + n).data[static_cast<size_t>(c)]);
      };
      v = static_cast<float>((v - at("running_mean")) / std::sqrt(at("running_var") + 0.001) * at("weight") +
                             at("bias"));
    }
  std::vector<float> folded = conv_ref(x, 2, 5, 5, conv.weight("weight"), &conv.weight("bias"), 1);
  auto c1 = test::compare(folded.data(), y.data(), y.size(), 1e-5, 1e-5);
  CHECK_MESSAGE(c1.ok, "max abs diff " << c1.max_abs);
  CHECK(test::compare(conv.weight("weight").data.data(), m.at("conv1.weight").data.data(), 18 * 3, 1e-6, 0)
            .ok == false);

  // fc1 -> bn2 the same way (on the relu'd conv output).
  std::vector<float> h(75);
  for (size_t i = 0; i < 75; ++i) h[i] = std::max(0.f, y[i]);
  std::vector<float> z(4), zf(4);
  for (size_t o = 0; o < 4; ++o) {
    double s = m.at("fc1.bias").data[o], sf = fc1.weight("bias").data[o];
    for (size_t i = 0; i < 75; ++i) {
      s += static_cast<double>(m.at("fc1.weight").data[o * 75 + i]) * h[i];
      sf += static_cast<double>(fc1.weight("weight").data[o * 75 + i]) * h[i];
    }
    auto at = [&](const char* n) { return static_cast<double>(m.at(std::string("bn2.") + n).data[o]); };
    z[o] = static_cast<float>((s - at("running_mean")) / std::sqrt(at("running_var") + 1e-5) * at("weight") +
                              at("bias"));
    zf[o] = static_cast<float>(sf);
  }
  auto c2 = test::compare(zf.data(), z.data(), 4, 1e-5, 1e-5);
  CHECK_MESSAGE(c2.ok, "max abs diff " << c2.max_abs);

  auto all = collect_weights(net);
  CHECK(all.count("bn1.weight") == 0);
  CHECK(all.at("conv1.bias").data == conv.weight("bias").data);
  CHECK(all.size() == 6);
  CHECK_THROWS_WITH_AS(load_weights(net, AssetResolver(net.source_dir, {}), ""), has("already loaded"),
                       Error);

  // fold = false (cnnrun convert) leaves every tensor as the file has it.
  Network raw = parse_netdef_file(d + "/net.yaml");
  load_weights(raw, AssetResolver(raw.source_dir, {}), "", false);
  CHECK_FALSE(raw.layers[static_cast<size_t>(raw.find("bn1"))]->folded);
  auto unfolded = collect_weights(raw);
  REQUIRE(unfolded.size() == m.size());
  for (const auto& kv : m) CHECK(unfolded.at(kv.first).data == kv.second.data);
}

TEST_CASE("load_weights: batchnorm stays apart when its producer's output is also read elsewhere") {
  std::string d = test::temp_dir("bn-nofold");
  test::write_file(d + "/net.yaml",
                   "input: {channels: 2, height: 1, width: 1}\n"
                   "classes: [a, b, c]\n"
                   "layers:\n"
                   "  - {name: fc1, type: fc, outputs: 3}\n"
                   "  - {name: bn1, type: batchnorm}\n"
                   "  - {name: sum, type: add, inputs: [bn1, fc1]}\n");
  std::map<std::string, Tensor> m{{"fc1.weight", tensor({3, 2}, 1)},
                                  {"fc1.bias", tensor({3}, 2)},
                                  {"bn1.weight", tensor({3}, 3)},
                                  {"bn1.bias", tensor({3}, 4)},
                                  {"bn1.running_mean", tensor({3}, 5)},
                                  {"bn1.running_var", tensor({3}, 6, 0.5f, 1.f)},
                                  {"bn1.num_batches_tracked", tensor({}, 7)}};
  write_safetensors(d + "/w.safetensors", m);
  Network net = parse_netdef_file(d + "/net.yaml");
  load_weights(net, AssetResolver(net.source_dir, {}), d + "/w.safetensors");
  CHECK_FALSE(net.layers[static_cast<size_t>(net.find("bn1"))]->folded);
  CHECK(net.layers[static_cast<size_t>(net.find("fc1"))]->weight("weight").data == m.at("fc1.weight").data);
  CHECK(collect_weights(net).size() == 6);
}

namespace {

// The ConvNetJS CIFAR-10 network by plain loops: conv 5x5 pad 2 + relu + maxpool 2, three
// times, then fc. Inner loops run over contiguous output rows so 1200 images take about a second.
int64_t count_correct(const Network& net, const Dataset& ds, int64_t n) {
  auto W = [&](const char* l, const char* t) -> const Tensor& {
    return net.layers[static_cast<size_t>(net.find(l))]->weight(t);
  };
  int64_t correct = 0;
  for (int64_t img = 0; img < n; ++img) {
    int64_t C = 3, H = 32;
    std::vector<float> a(static_cast<size_t>(C * H * H));
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < H * H; ++i)
        a[static_cast<size_t>(c * H * H + i)] =
            ds.image(img)[c * H * H + i] * net.pre.scale[static_cast<size_t>(c)] +
            net.pre.shift[static_cast<size_t>(c)];
    for (const char* layer : {"conv1", "conv2", "conv3"}) {
      const Tensor& w = W(layer, "weight");
      const Tensor& b = W(layer, "bias");
      int64_t F = w.dims[0], P = H + 4;
      std::vector<float> pad(static_cast<size_t>(C * P * P), 0.f);
      for (int64_t c = 0; c < C; ++c)
        for (int64_t y = 0; y < H; ++y)
          for (int64_t x = 0; x < H; ++x)
            pad[static_cast<size_t>((c * P + y + 2) * P + x + 2)] =
                a[static_cast<size_t>((c * H + y) * H + x)];
      std::vector<float> o(static_cast<size_t>(F * H * H));
      for (int64_t f = 0; f < F; ++f) {
        float* of = &o[static_cast<size_t>(f * H * H)];
        for (int64_t i = 0; i < H * H; ++i) of[i] = b.data[static_cast<size_t>(f)];
        for (int64_t c = 0; c < C; ++c)
          for (int64_t ky = 0; ky < 5; ++ky)
            for (int64_t kx = 0; kx < 5; ++kx) {
              float wv = w.data[static_cast<size_t>(((f * C + c) * 5 + ky) * 5 + kx)];
              for (int64_t y = 0; y < H; ++y) {
                const float* row = &pad[static_cast<size_t>((c * P + y + ky) * P + kx)];
                for (int64_t x = 0; x < H; ++x) of[y * H + x] += wv * row[x];
              }
            }
      }
      int64_t h2 = H / 2;
      a.assign(static_cast<size_t>(F * h2 * h2), 0.f);
      for (int64_t f = 0; f < F; ++f)
        for (int64_t y = 0; y < h2; ++y)
          for (int64_t x = 0; x < h2; ++x) {
            float mx = 0.f;  // relu then max == max then relu
            for (int64_t dy = 0; dy < 2; ++dy)
              for (int64_t dx = 0; dx < 2; ++dx)
                mx = std::max(mx, o[static_cast<size_t>((f * H + 2 * y + dy) * H + 2 * x + dx)]);
            a[static_cast<size_t>((f * h2 + y) * h2 + x)] = mx;
          }
      C = F;
      H = h2;
    }
    const Tensor& w = W("fc", "weight");
    const Tensor& b = W("fc", "bias");
    int64_t best = 0;
    double best_v = -1e30;
    for (int64_t k = 0; k < 10; ++k) {
      double s = b.data[static_cast<size_t>(k)];
      for (int64_t i = 0; i < 320; ++i)
        s += static_cast<double>(w.data[static_cast<size_t>(k * 320 + i)]) * a[static_cast<size_t>(i)];
      if (s > best_v) best_v = s, best = k;
    }
    if (best == ds.labels[static_cast<size_t>(img)]) ++correct;
  }
  return correct;
}

}  // namespace

TEST_CASE("real weights: the ConvNetJS CIFAR-10 network loads and reaches the thesis accuracy") {
  std::string shared = test::shared_dir();
  if (!test::have_file(shared + "/models/convnetjs-cifar10/layer1_conv.txt") ||
      !test::have_file(shared + "/data/cifar10-sample/train_2000.bin")) {
    MESSAGE("no shared assets at " << shared << "; skipped");
    return;
  }
  Network net = parse_netdef_file(std::string(CNNRUN_SOURCE_DIR) + "/netdefs/cifar10.yaml");
  AssetResolver assets(net.source_dir, {shared});
  load_weights(net, assets, "");
  auto all = collect_weights(net);
  CHECK(all.at("conv1.weight").dims == std::vector<int64_t>{16, 3, 5, 5});
  CHECK(all.at("conv2.weight").dims == std::vector<int64_t>{20, 16, 5, 5});
  CHECK(all.at("conv3.weight").dims == std::vector<int64_t>{20, 20, 5, 5});
  CHECK(all.at("fc.weight").dims == std::vector<int64_t>{10, 320});
  CHECK(all.at("fc.bias").dims == std::vector<int64_t>{10});
  // The file's first two numbers: filter 0, x 0, y 0, channels 0 and 1.
  CHECK(all.at("conv1.weight").data[0] == 0.49360308834139554612f);
  CHECK(all.at("conv1.weight").data[25] == -0.28431075243435233180f);

  Dataset ds = load_dataset(net, assets, "");
  REQUIRE(ds.count == 2000);
  // ../shared/README.md: 78.25 % of the first 1200 images (939); a wrong ordering lands far off.
  int64_t correct = count_correct(net, ds, 1200);
  CHECK(correct == 939);
}
