// Weight packing: the host lays the weights out as each kernel reads them (the FFMA kernel's
// [m_tile][K][BM] slices, the tensor-core kernel's B fragments per precision, the exact-pixel
// kernel's two FP16 parts), once per convolution.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/gpu/conv2d_implicit.h"
#include "engine/gpu/implicit/mma.cuh"
#include "engine/gpu/implicit/tiling.h"

namespace cnnrun::gpu {

using namespace implicit;  // pack2, tc_packs_lo, the arithmetic variants

// Round to tf32 as cvt.rna does: to nearest, ties away from zero, on the 13 low mantissa bits.
float round_tf32(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  b = (b + 0x1000u) & ~0x1fffu;
  std::memcpy(&x, &b, 4);
  return x;
}

// Two weights as the bits of a half2 / bfloat162 (pack2, the kernel's own packing of A), stored
// in a float of the weights array.
float pack_pair(Precision prec, float lo, float hi) {
  const uint32_t v = prec == Precision::kFp16 ? pack2<kTcFp16>(lo, hi) : pack2<kTcBf16>(lo, hi);
  float f;
  std::memcpy(&f, &v, 4);
  return f;
}

// The tensor-core kernel's B fragments, [k-steps][n-tiles][32 lanes] float4 (zeros unless
// filled): fill(o, t, g, kk) writes lane's float4 o of n-tile t, whose column (filter t * 8 + g)
// and k-step rows (taps kk[0] and kk[1] = kk[0] + 4) the mma's B layout gives it.
template <class Fill>
std::vector<float> tc_fragments(const ConvParams& p, Fill fill) {
  const int64_t k = p.in_c * p.kernel_h * p.kernel_w, ksteps = (k + 7) / 8, nt = (p.filters + 7) / 8;
  std::vector<float> out(static_cast<size_t>(ksteps * nt * 128), 0.f);
  for (int64_t ks = 0; ks < ksteps; ++ks)
    for (int64_t t = 0; t < nt; ++t)
      for (int lane = 0; lane < 32; ++lane) {
        const int64_t kk[2] = {ks * 8 + lane % 4, ks * 8 + lane % 4 + 4};
        fill(&out[static_cast<size_t>(((ks * nt + t) * 32 + lane) * 4)], t, lane / 4, kk);
      }
  return out;
}

std::vector<float> implicit_weights_tc(const ConvParams& p, const float* weight, Precision prec,
                                       bool pack_low) {
  const int64_t k = p.in_c * p.kernel_h * p.kernel_w, nt = (p.filters + 7) / 8;
  const bool pack_lo = tc_packs_lo(p.filters, pack_low);
  auto w = [&](int64_t f, int64_t kk) { return f < p.filters && kk < k ? weight[f * k + kk] : 0.f; };
  return tc_fragments(p, [&](float* o, int64_t t, int g, const int64_t(&kk)[2]) {
    const int64_t f = t * 8 + g;
    switch (prec) {
      case Precision::kFp32:
        if (pack_lo && t == nt - 1) {  // columns 0-3: filters' high parts; 4-7: their low parts
          for (int h = 0; h < 2; ++h) {
            const float v = w(t * 8 + g % 4, kk[h]);
            o[h] = g < 4 ? round_tf32(v) : round_tf32(v - round_tf32(v));
          }
          break;
        }
        for (int h = 0; h < 2; ++h) o[h] = round_tf32(w(f, kk[h])), o[2 + h] = round_tf32(w(f, kk[h]) - o[h]);
        break;
      case Precision::kTf32:
        o[0] = round_tf32(w(f, kk[0])), o[1] = round_tf32(w(f, kk[1]));
        break;
      case Precision::kFp16:
      case Precision::kBf16:
        o[0] = pack_pair(prec, w(f, kk[0]), w(f, kk[1]));
        break;
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Exact uint8 input (kTcX16).

bool exact_input_offsets(const std::vector<float>& scale, const std::vector<float>& shift,
                         std::vector<float>* offset) {
  if (scale.size() != shift.size() || scale.empty()) return false;
  std::vector<float> off(scale.size());
  for (size_t c = 0; c < scale.size(); ++c) {
    const double sc = scale[c], sh = shift[c];
    if (!std::isfinite(sc) || !std::isfinite(sh) || sc == 0) return false;
    const double o_true = -sh / sc;                   // byte * sc + sh == sc * (byte - o_true)
    const double o = std::nearbyint(o_true * 8) / 8;  // a multiple of 1/8: bytes - o stay in 11 bits
    double big = 0;
    for (int b = 0; b < 256; ++b) {
      const float v = static_cast<float>(b - o);  // exact in FP16 (and so in FP32)?
      if (v != b - o || __half2float(__float2half_rn(v)) != v) return false;
      big = std::max(big, std::fabs(b - o_true));
    }
    // What moving the offset changes is below the FP32 rounding of the largest inputs.
    if (std::fabs(o - o_true) > std::ldexp(big, -22)) return false;
    off[c] = static_cast<float>(o);
  }
  if (offset) *offset = off;
  return true;
}

std::vector<float> implicit_weights_x16(const ConvParams& p, const float* weight,
                                        const std::vector<float>& scale, float* out_scale) {
  const int64_t khkw = p.kernel_h * p.kernel_w, k = p.in_c * khkw;
  if (static_cast<int64_t>(scale.size()) != p.in_c) return {};
  auto scaled = [&](int64_t f, int64_t kk) {  // weight times its channel's scale, 0 past the ends
    return f < p.filters && kk < k
               ? static_cast<double>(weight[f * k + kk]) * scale[static_cast<size_t>(kk / khkw)]
               : 0.0;
  };
  double big = 0;
  for (int64_t f = 0; f < p.filters; ++f)
    for (int64_t kk = 0; kk < k; ++kk) {
      const double v = scaled(f, kk);
      if (!std::isfinite(v)) return {};
      big = std::max(big, std::fabs(v));
    }
  // The largest weight near 2^14: every high part a normal FP16, low parts normal down to
  // weights 2^-17 of it, and no product or 16-tap sum near FP16's or FP32's range limits
  // (|byte - offset| < 2048 and the sums are kept in FP32).
  int e = 0;
  if (big > 0) std::frexp(big, &e);
  const int sh = 14 - e;
  if (sh < -100 || sh > 100) return {};
  if (out_scale) *out_scale = std::ldexp(1.f, -sh);
  return tc_fragments(p, [&](float* o, int64_t t, int g, const int64_t(&kk)[2]) {
    float hi[2], lo[2];
    for (int h = 0; h < 2; ++h) {
      const double v = std::ldexp(scaled(t * 8 + g, kk[h]), sh);
      hi[h] = __half2float(__float2half_rn(static_cast<float>(v)));
      lo[h] = __half2float(__float2half_rn(static_cast<float>(v - hi[h])));
    }
    o[0] = pack_pair(Precision::kFp16, hi[0], hi[1]);
    o[1] = pack_pair(Precision::kFp16, lo[0], lo[1]);
  });
}

std::vector<float> implicit_weights(const ConvParams& p, const float* weight) {
  const int bm = implicit_bm(p.filters);
  const int64_t mt = (p.filters + bm - 1) / bm, k = p.in_c * p.kernel_h * p.kernel_w;
  std::vector<float> out(static_cast<size_t>(mt * k * bm), 0.f);
  for (int64_t f = 0; f < p.filters; ++f)
    for (int64_t kk = 0; kk < k; ++kk)
      out[static_cast<size_t>(((f / bm) * k + kk) * bm + f % bm)] = weight[f * k + kk];
  return out;
}

}  // namespace cnnrun::gpu
