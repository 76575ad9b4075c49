#include "engine/gpu/conv2d_cutlass.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "engine/core/error.h"
#include "engine/gpu/check.h"
#include "engine/gpu/cutlass/fprop.h"

namespace cnnrun::gpu {

namespace {

struct Tile {
  const char* name;
  void (*run)(const cutlass_conv::Problem&, cudaStream_t);
};

#ifdef CNNRUN_HAVE_CUTLASS
// Output pixels x filters x taps a step / stages, large tiles first; the executor times every one
// on each layer (cutlass_pick_tile).
constexpr Tile kTiles[] = {
    {"256x64x16/4", cutlass_conv::run_256x64x16_s4}, {"128x128x16/4", cutlass_conv::run_128x128x16_s4},
    {"128x64x32/3", cutlass_conv::run_128x64x32_s3}, {"128x64x16/4", cutlass_conv::run_128x64x16_s4},
    {"64x128x16/4", cutlass_conv::run_64x128x16_s4}, {"64x64x16/5", cutlass_conv::run_64x64x16_s5},
};
constexpr int kTileCount = sizeof(kTiles) / sizeof(kTiles[0]);
#else
constexpr Tile kTiles[] = {{"none", nullptr}};
constexpr int kTileCount = 0;
#endif

// CUTLASS's kernels address each tensor with 32-bit byte offsets: every tensor of one launch stays
// under 2^31 bytes (ImplicitGemmConvolution::can_implement refuses larger ones).
constexpr int64_t kMaxBytes = int64_t{1} << 31;

int64_t images_per_launch(const ConvParams& p, int64_t y_c_stride = 0) {
  const int64_t image =
      std::max(p.in_h * p.in_w * p.in_c, p.out_h * p.out_w * std::max(p.filters, y_c_stride)) * 4;
  return (kMaxBytes - 1) / image;
}

}  // namespace

std::string cutlass_missing() {
#ifdef CNNRUN_HAVE_CUTLASS
  return "";
#else
  return "built without CUTLASS (scripts/fetch_headers.sh cutlass)";
#endif
}

std::string cutlass_cannot_run(const ConvParams& p, Precision prec, bool channels_last, int64_t n) {
  if (std::string why = cutlass_missing(); !why.empty()) return why;
  if (prec != Precision::kFp32 || !channels_last)
    return "the cutlass convolution runs FP32 channels last (--precision fp32 --layout nhwc)";
  if (p.groups != 1) return "groups (" + std::to_string(p.groups) + ") > 1";
  if (p.in_c % 4 != 0 || p.filters % 4 != 0)
    return "input channels (" + std::to_string(p.in_c) + ") and filters (" + std::to_string(p.filters) +
           ") must be multiples of 4";
  (void)n;  // any block: launch_conv_cutlass runs it in slices of images_per_launch
  if (images_per_launch(p) < 1 || p.filters * p.kernel_h * p.kernel_w * p.in_c * 4 >= kMaxBytes)
    return "one image's input or output, or the filters, take 2 GiB or more (CUTLASS's 32-bit offsets)";
  return "";
}

int cutlass_tiles() { return kTileCount; }

const char* cutlass_tile_name(int tile) {
  if (tile < 0 || tile >= kTileCount) throw Error("cutlass: no tile " + std::to_string(tile));
  return kTiles[tile].name;
}

bool cutlass_fuses(ActFn act) {
  return act.kind == Act::kIdentity || act.kind == Act::kRelu || act.kind == Act::kRelu6;
}

void launch_conv_cutlass(int tile, const ConvParams& p, int64_t n, const float* x, const float* w,
                         const float* bias, const float* z, float* y, ActFn act, cudaStream_t s,
                         int64_t y_c_stride) {
  if (tile < 0 || tile >= kTileCount) throw Error("cutlass: no tile " + std::to_string(tile));
  if (!cutlass_fuses(act)) throw Error("cutlass: the epilogue cannot apply " + act_fn_name(act));
  auto misaligned = [](const void* v) { return v && reinterpret_cast<uintptr_t>(v) % 16 != 0; };
  if (misaligned(x) || misaligned(w) || misaligned(z) || misaligned(y) || y_c_stride % 4 != 0)
    throw Error("cutlass: a tensor is not 16-byte aligned");
  if (y_c_stride > 0 && y_c_stride < p.filters)
    throw Error("cutlass: an output slice of " + std::to_string(p.filters) + " channels in pixels of " +
                std::to_string(y_c_stride));
  auto i32 = [](int64_t v) { return static_cast<int>(v); };
  cutlass_conv::Problem q{};
  q.n = i32(n), q.in_h = i32(p.in_h), q.in_w = i32(p.in_w), q.in_c = i32(p.in_c);
  q.filters = i32(p.filters), q.kernel_h = i32(p.kernel_h), q.kernel_w = i32(p.kernel_w);
  q.out_h = i32(p.out_h), q.out_w = i32(p.out_w);
  q.pad_h = i32(p.pad_h), q.pad_w = i32(p.pad_w), q.stride_h = i32(p.stride_h), q.stride_w = i32(p.stride_w);
  q.dilation_h = i32(p.dilation_h), q.dilation_w = i32(p.dilation_w);
  q.x = x, q.wt = w, q.bias = bias, q.z = z, q.y = y, q.y_c_stride = i32(y_c_stride);
  q.lo = act.kind == Act::kIdentity ? -std::numeric_limits<float>::infinity() : 0.f;
  q.hi = act.kind == Act::kRelu6 ? 6.f : std::numeric_limits<float>::infinity();
  // Blocks whose tensors pass 2 GiB run as several launches of whole images.
  const int64_t most = images_per_launch(p, y_c_stride), in_image = p.in_h * p.in_w * p.in_c,
                out_image = p.out_h * p.out_w * (y_c_stride > 0 ? y_c_stride : p.filters);
  for (int64_t first = 0; first < n; first += most) {
    q.n = i32(std::min(most, n - first));
    q.x = x + first * in_image, q.y = y + first * out_image, q.z = z ? z + first * out_image : nullptr;
    kTiles[tile].run(q, s);
  }
}

int cutlass_pick_tile(const ConvParams& p, int64_t n, const float* x, const float* w, const float* bias,
                      const float* z, float* y, ActFn act, cudaStream_t s, int64_t y_c_stride) {
  int best = -1;
  float best_ms = 0;
  std::string refused;
  for (int t = 0; t < kTileCount; ++t) {
    try {
      launch_conv_cutlass(t, p, n, x, w, bias, z, y, act, s, y_c_stride);  // the warm-up, and whether it runs
    } catch (const Error& e) {
      refused = e.what();
      continue;
    }
    const float least =
        least_ms(s, 3, [&] { launch_conv_cutlass(t, p, n, x, w, bias, z, y, act, s, y_c_stride); });
    if (best < 0 || least < best_ms) best = t, best_ms = least;
  }
  if (best < 0) throw Error(refused.empty() ? cutlass_missing() : refused);
  return best;
}

int64_t cutlass_centre_split(const ConvParams& p, const float* w) {
  const int64_t kh = p.kernel_h, kw = p.kernel_w;
  if (p.groups != 1 || kh % 2 == 0 || kw % 2 == 0 || (kh == 1 && kw == 1) ||
      p.pad_h != p.dilation_h * (kh - 1) / 2 || p.pad_w != p.dilation_w * (kw - 1) / 2)
    return 0;
  const int64_t taps = kh * kw, centre = (kh / 2) * kw + kw / 2;
  int64_t k = 0;
  for (; k < p.filters; ++k) {
    bool only = true;
    for (int64_t c = 0; c < p.in_c && only; ++c)
      for (int64_t t = 0; t < taps; ++t)
        if (t != centre && w[(k * p.in_c + c) * taps + t] != 0.f) {
          only = false;
          break;
        }
    if (!only) break;
  }
  k -= k % 4;
  return k >= 4 && p.filters - k >= 4 && (p.filters - k) % 4 == 0 ? k : 0;
}

ConvParams cutlass_centre_part(const ConvParams& p, int64_t centre) {
  ConvParams c = p;
  c.filters = centre;
  c.kernel_h = c.kernel_w = 1;
  c.pad_h = c.pad_w = 0;
  c.dilation_h = c.dilation_w = 1;
  return c;
}

ConvParams cutlass_rest_part(const ConvParams& p, int64_t centre) {
  ConvParams c = p;
  c.filters = p.filters - centre;
  return c;
}

}  // namespace cnnrun::gpu
