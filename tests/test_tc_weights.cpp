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
#include <vector>

#include "engine/gpu/conv2d_implicit.h"
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

#endif  // CNNRUN_HAVE_GPU
