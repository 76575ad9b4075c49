// The tensor-core kernel's host side, which needs no GPU: when the uint8 input can be staged
// exactly (exact_input_offsets), the FP16 two-part weights for it (implicit_weights_x16), and the
// 3xTF32 weights whose last n-tile carries its low parts in its spare columns. Each is decoded
// here bit by bit, independently of CUDA's conversions, and checked against the weights it came
// from. (Built where the GPU executor is; the kernels themselves are tested in test_gpu.cpp.)
#ifdef CNNRUN_HAVE_GPU

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/gpu/conv2d_implicit.h"
#include "engine/gpu/conv2d_stem.h"
#include "tests/test_util.h"

using namespace cnnrun;
using namespace cnnrun::gpu;

namespace {

// IEEE half bits -> value (normals, subnormals, zero; no inf/NaN expected here).
double half_value(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
  REQUIRE(exp != 31);
  const double v = exp == 0 ? std::ldexp(man, -24) : std::ldexp(1024 + man, exp - 25);
  return sign ? -v : v;
}
// The two halves of a float's bits (low half first: the lower k-slot).
void halves(float f, double& lo, double& hi) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  lo = half_value(static_cast<uint16_t>(b & 0xffffu));
  hi = half_value(static_cast<uint16_t>(b >> 16));
}
bool is_tf32(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return (b & 0x1fffu) == 0;
}

ConvParams conv(int64_t c, int64_t f, int64_t k) {
  ConvParams p;
  p.filters = f;
  p.kernel_h = p.kernel_w = k;
  p.pad_h = p.pad_w = k / 2;
  p.in_c = c;
  p.in_h = p.in_w = p.out_h = p.out_w = 32;
  return p;
}

}  // namespace

TEST_CASE("exact uint8 input: which preprocessings have exact FP16 offsets") {
  std::vector<float> off;
  // ConvNetJS: byte / 255 - 0.5 = (byte - 127.5) / 255 (up to the rounding of 1/255 to float).
  REQUIRE(exact_input_offsets({1 / 255.f, 1 / 255.f, 1 / 255.f}, {-0.5f, -0.5f, -0.5f}, &off));
  CHECK(off == std::vector<float>{127.5f, 127.5f, 127.5f});
  // The default byte / 255: offset 0.
  REQUIRE(exact_input_offsets({1 / 255.f}, {0.f}, &off));
  CHECK(off == std::vector<float>{0.f});
  // mean/std as the netdef computes them: 0.3 / 0.2 -> offset 76.5 (exact); Fashion-MNIST's
  // 0.2860 / 0.3530 -> 72.93: no multiple of 1/8 is close enough.
  const auto mean_std = [](double m, double s) {
    return std::make_pair(static_cast<float>(1.0 / (255.0 * s)), static_cast<float>(-m / s));
  };
  const auto a = mean_std(0.3, 0.2), b = mean_std(0.4, 0.25), fm = mean_std(0.2860, 0.3530);
  REQUIRE(exact_input_offsets({a.first, b.first}, {a.second, b.second}, &off));
  CHECK(off == std::vector<float>{76.5f, 102.f});
  off.assign(1, -1.f);
  CHECK(!exact_input_offsets({fm.first}, {fm.second}, &off));
  CHECK(off == std::vector<float>{-1.f});  // untouched when there is none
  // One channel without an offset is enough to refuse.
  CHECK(!exact_input_offsets({a.first, fm.first}, {a.second, fm.second}, nullptr));
  // byte - 1000.25 needs 12 significant bits (FP16 has 11); byte * 2 - 255 is exact.
  CHECK(!exact_input_offsets({1.f}, {-1000.25f}, nullptr));
  REQUIRE(exact_input_offsets({2.f}, {-255.f}, &off));
  CHECK(off == std::vector<float>{127.5f});
  // Nonsense: no scale, non-finite values, mismatched sizes, nothing.
  CHECK(!exact_input_offsets({0.f}, {1.f}, nullptr));
  CHECK(!exact_input_offsets({NAN}, {0.f}, nullptr));
  CHECK(!exact_input_offsets({1.f}, {INFINITY}, nullptr));
  CHECK(!exact_input_offsets({1.f, 1.f}, {0.f}, nullptr));
  CHECK(!exact_input_offsets({}, {}, nullptr));
}

TEST_CASE("exact uint8 input: two FP16 parts per weight times the scale, in the kernel's lane order") {
  for (const auto& shape : {std::vector<int64_t>{3, 16, 5}, {1, 12, 5}, {2, 20, 3}, {4, 8, 1}}) {
    const ConvParams p = conv(shape[0], shape[1], shape[2]);
    const int64_t khkw = p.kernel_h * p.kernel_w, k = p.in_c * khkw, ksteps = (k + 7) / 8,
                  nt = (p.filters + 7) / 8;
    INFO("C" << p.in_c << " F" << p.filters << " k" << p.kernel_h);
    std::vector<float> w = test::random_floats(static_cast<size_t>(p.filters * k), 7, -0.3f, 0.3f);
    w[3] = 1e-9f;  // a tiny weight: its low part is subnormal, and it must still come out close
    std::vector<float> scale;
    for (int64_t c = 0; c < p.in_c; ++c)
      scale.push_back(1 / (255.f * (0.2f + 0.05f * static_cast<float>(c))));
    float out_scale = 0;
    const std::vector<float> packed = implicit_weights_x16(p, w.data(), scale, &out_scale);
    REQUIRE(packed.size() == static_cast<size_t>(ksteps * nt * 128));
    // A power of two that brings the largest scaled weight near 2^14.
    int e = 0;
    CHECK(std::frexp(out_scale, &e) == 0.5);
    double big = 0;
    for (int64_t i = 0; i < p.filters * k; ++i)
      big = std::max(big, std::fabs(static_cast<double>(w[static_cast<size_t>(i)]) *
                                    scale[static_cast<size_t>((i % k) / khkw)]));
    CHECK(big / out_scale >= 8192);
    CHECK(big / out_scale < 16384);
    int checked = 0;
    for (int64_t ks = 0; ks < ksteps; ++ks)
      for (int64_t t = 0; t < nt; ++t)
        for (int lane = 0; lane < 32; ++lane) {
          const float* o = &packed[static_cast<size_t>(((ks * nt + t) * 32 + lane) * 4)];
          double hi[2], lo[2];
          halves(o[0], hi[0], hi[1]);
          halves(o[1], lo[0], lo[1]);
          CHECK(o[2] == 0.f);
          CHECK(o[3] == 0.f);
          const int64_t f = t * 8 + lane / 4;
          for (int h = 0; h < 2; ++h) {
            const int64_t kk = ks * 8 + lane % 4 + 4 * h;
            const double want = f < p.filters && kk < k
                                    ? static_cast<double>(w[static_cast<size_t>(f * k + kk)]) *
                                          scale[static_cast<size_t>(kk / khkw)]
                                    : 0.0;
            const double got = (hi[h] + lo[h]) * out_scale;
            // 22 significant bits, or below the subnormals' absolute step for the tiny one.
            CHECK(std::fabs(got - want) <= std::ldexp(std::fabs(want), -21) + std::ldexp(big, -38));
            if (want == 0.0) CHECK(got == 0.0);
            ++checked;
          }
        }
    CHECK(checked == ksteps * nt * 64);
  }
  // Weights beyond FP16's reach even after scaling: refused, not rounded to nonsense.
  const ConvParams p = conv(1, 8, 1);
  std::vector<float> w(8, 1e-38f);
  w[0] = 1e30f;
  CHECK_FALSE(implicit_weights_x16(p, w.data(), {1.f}, nullptr).empty());  // 1e30 scales down fine
  std::vector<float> inf(8, INFINITY);
  CHECK(implicit_weights_x16(p, inf.data(), {1.f}, nullptr).empty());
  CHECK(implicit_weights_x16(p, w.data(), {1.f, 1.f}, nullptr).empty());  // one scale per channel
}

TEST_CASE("3xTF32 weights: the last n-tile's spare columns carry its low parts (at most 4 filters there)") {
  for (int64_t filters : {20, 12, 4, 9, 16, 5}) {
    const ConvParams p = conv(3, filters, 5);
    const int64_t k = 75, ksteps = 10, nt = (filters + 7) / 8;
    const bool packs = (filters - 1) % 8 < 4;
    INFO("F" << filters);
    std::vector<float> w = test::random_floats(static_cast<size_t>(filters * k), 11, -0.2f, 0.2f);
    const std::vector<float> packed = implicit_weights_tc(p, w.data(), Precision::kFp32);
    REQUIRE(packed.size() == static_cast<size_t>(ksteps * nt * 128));
    for (int64_t ks = 0; ks < ksteps; ++ks)
      for (int64_t t = 0; t < nt; ++t)
        for (int lane = 0; lane < 32; ++lane) {
          const float* o = &packed[static_cast<size_t>(((ks * nt + t) * 32 + lane) * 4)];
          for (int h = 0; h < 2; ++h) {
            const int64_t kk = ks * 8 + lane % 4 + 4 * h;
            CHECK(is_tf32(o[h]));
            CHECK(is_tf32(o[2 + h]));
            if (packs && t == nt - 1) {
              // Column g < 4: filter t*8+g's high part; g >= 4: filter t*8+g-4's low part.
              const int g = lane / 4;
              const int64_t f = t * 8 + g % 4;
              const float v = f < filters && kk < k ? w[static_cast<size_t>(f * k + kk)] : 0.f;
              CHECK(o[2 + h] == 0.f);
              if (g < 4) {
                CHECK(std::fabs(o[h] - v) <= std::ldexp(std::fabs(v), -11));
                // Its partner column holds exactly what is left.
                const float* lo = &packed[static_cast<size_t>(((ks * nt + t) * 32 + lane + 16) * 4)];
                CHECK(std::fabs(static_cast<double>(o[h]) + lo[h] - v) <= std::ldexp(std::fabs(v), -21));
              }
            } else {
              const int64_t f = t * 8 + lane / 4;
              const float v = f < filters && kk < k ? w[static_cast<size_t>(f * k + kk)] : 0.f;
              CHECK(std::fabs(static_cast<double>(o[h]) + o[2 + h] - v) <= std::ldexp(std::fabs(v), -21));
            }
          }
        }
  }
}

namespace {

// The stem's reading-bytes decomposition (StemBytesWeights) evaluated on the host, in double:
// 2^-e * sum over the in-image taps of (byte - o) * (high + low) + table, against the convolution
// of byte * scale + shift (FP32, as the preprocess pass computes it) with the FP32 weights.
// Returns the largest difference relative to the largest output.
double stem_bytes_error(const ConvParams& p, const std::vector<float>& scale, const std::vector<float>& shift,
                        uint32_t seed, StemBytesWeights* got) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int64_t taps = p.kernel_h * p.kernel_w;
  std::vector<float> w(static_cast<size_t>(p.filters * p.in_c * taps)), bias(static_cast<size_t>(p.filters));
  // Filters of very different sizes, so that each gets its own scale.
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = u(rng) * std::ldexp(1.f, -static_cast<int>(i / static_cast<size_t>(p.in_c * taps)) % 7);
  for (float& b : bias) b = u(rng);
  std::vector<uint8_t> x(static_cast<size_t>(p.in_c * p.in_h * p.in_w));
  for (uint8_t& v : x) v = static_cast<uint8_t>(rng() & 255u);
  REQUIRE(stem_bytes_weights(p, w.data(), bias.data(), scale, shift, got) == "");
  const StemBytesWeights& b = *got;
  double big = 0, worst = 0;
  for (int64_t f = 0; f < p.filters; ++f)
    for (int64_t oy = 0; oy < p.out_h; ++oy)
      for (int64_t ox = 0; ox < p.out_w; ++ox) {
        double want = bias[static_cast<size_t>(f)], acc = 0;
        for (int64_t c = 0; c < p.in_c; ++c)
          for (int64_t r = 0; r < p.kernel_h; ++r)
            for (int64_t q = 0; q < p.kernel_w; ++q) {
              const int64_t iy = oy * p.stride_h - p.pad_h + r * p.dilation_h;
              const int64_t ix = ox * p.stride_w - p.pad_w + q * p.dilation_w;
              if (iy < 0 || iy >= p.in_h || ix < 0 || ix >= p.in_w) continue;
              const uint8_t byte = x[static_cast<size_t>((c * p.in_h + iy) * p.in_w + ix)];
              const float xv =
                  static_cast<float>(byte) * scale[static_cast<size_t>(c)] + shift[static_cast<size_t>(c)];
              want += static_cast<double>(xv) *
                      w[static_cast<size_t>((f * p.in_c + c) * taps + r * p.kernel_w + q)];
              const size_t at = static_cast<size_t>(f * taps * p.in_c + (r * p.kernel_w + q) * p.in_c + c);
              acc += (byte - b.offset[static_cast<size_t>(c)]) *
                     (half_value(b.w_hi[at]) + half_value(b.w_lo[at]));
            }
        const double got_v =
            acc * b.out_scale[static_cast<size_t>(f)] +
            b.table[static_cast<size_t>((b.row_class[static_cast<size_t>(oy)] * b.col_classes +
                                         b.col_class[static_cast<size_t>(ox)]) *
                                            p.filters +
                                        f)];
        big = std::max(big, std::fabs(want));
        worst = std::max(worst, std::fabs(got_v - want));
      }
  return worst / big;
}

}  // namespace

TEST_CASE("stem reading bytes: the offsets, FP16 weight parts and border table give the float convolution") {
  // ResNet's stem on a 20x18 image: 7x7, stride 2, padding 3, ImageNet's mean and std.
  ConvParams p;
  p.in_c = 3, p.in_h = 20, p.in_w = 18, p.filters = 16, p.kernel_h = p.kernel_w = 7;
  p.stride_h = p.stride_w = 2, p.pad_h = p.pad_w = 3;
  p.out_h = 10, p.out_w = 9;
  const std::vector<float> mean{0.485f, 0.456f, 0.406f}, sd{0.229f, 0.224f, 0.225f};
  std::vector<float> scale, shift;
  for (int c = 0; c < 3; ++c) scale.push_back(1 / (255 * sd[c])), shift.push_back(-mean[c] / sd[c]);
  StemBytesWeights b;
  CHECK(stem_bytes_error(p, scale, shift, 1, &b) < 2e-7);
  CHECK(b.offset == std::vector<int>{124, 116, 104});  // 255 * mean, rounded
  // Rows: 0 and 1 lose window rows at the top, 9 at the bottom (its window reaches row 21);
  // columns: 0 and 1 at the left, 8 at the right (column 19).
  CHECK(b.row_classes == 4);
  CHECK(b.col_classes == 4);
  CHECK(b.row_class[2] == b.row_class[8]);
  CHECK(b.row_class[0] != b.row_class[1]);
  CHECK(b.col_class[8] != b.col_class[7]);
  // Each filter's largest high part in [2^14, 2^15]; the low parts far smaller.
  for (int64_t f = 0; f < p.filters; ++f) {
    double hi = 0, lo = 0;
    for (int64_t k = 0; k < 49 * 3; ++k) {
      hi = std::max(hi, std::fabs(half_value(b.w_hi[static_cast<size_t>(f * 147 + k)])));
      lo = std::max(lo, std::fabs(half_value(b.w_lo[static_cast<size_t>(f * 147 + k)])));
    }
    CHECK(hi >= 16384);
    CHECK(hi <= 32768);
    CHECK(lo <= 16);
  }
  // An offset at the end of the byte range (shift 1: o would be -255): the table carries a
  // residual of 1 a channel, which only the border classes tell apart.
  CHECK(stem_bytes_error(p, {1 / 255.f, 1 / 255.f, 1 / 255.f}, {1.f, -0.5f, 0.f}, 2, &b) < 2e-7);
  CHECK(b.offset == std::vector<int>{0, 127, 0});  // 1/255.f is above 1/255: 127.49998
  // One channel, 3x3 dilated by 2, stride 1, padding 1 (windows reaching past both sides).
  ConvParams q;
  q.in_c = 1, q.in_h = q.in_w = 9, q.filters = 8, q.kernel_h = q.kernel_w = 3, q.pad_h = q.pad_w = 1;
  q.dilation_h = q.dilation_w = 2, q.out_h = q.out_w = 7;
  CHECK(stem_bytes_error(q, {0.0123f}, {-1.7f}, 3, &b) < 2e-7);
  // What the kernel cannot read: five channels, filters not a multiple of 8; non-finite scales.
  ConvParams r = p;
  r.in_c = 5;
  CHECK(stem_bytes_weights(r, nullptr, nullptr, {}, {}, &b) != "");
  r = p;
  r.filters = 12;
  CHECK(stem_bytes_weights(r, nullptr, nullptr, {}, {}, &b) != "");
  // 8x8 taps of 4 channels and 64 filters: both weight parts and the staged outputs a fused pool
  // needs are over its shared memory (32 filters fit).
  ConvParams big;
  big.in_c = 4, big.in_h = big.in_w = 40, big.filters = 64, big.kernel_h = big.kernel_w = 8;
  big.out_h = big.out_w = 33;
  CHECK(stem_bytes_cannot_run(big).find("shared memory") != std::string::npos);
  big.filters = 32;
  CHECK(stem_bytes_cannot_run(big).empty());
  std::vector<float> w(16 * 147, 1.f);
  CHECK(stem_bytes_weights(p, w.data(), nullptr, {1.f, NAN, 1.f}, {0.f, 0.f, 0.f}, &b) != "");
  CHECK(stem_bytes_weights(p, w.data(), nullptr, {1.f, 1.f}, {0.f, 0.f}, &b) != "");
}

#endif  // CNNRUN_HAVE_GPU
