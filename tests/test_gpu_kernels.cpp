// Issue 15's GPU kernels on their own, against plain loops written here from PyTorch's
// definitions (in double, except where PyTorch itself computes a coordinate in float): the
// activations as a pass and as a bias+activation epilogue, pooling with ceil_mode and adaptive
// windows, mul with per-channel broadcast, nearest and bilinear upsampling, and the depthwise
// convolution with strides, dilations, padding, channel multipliers and odd plane sizes. The
// same layers through netdefs, the GPU executor and the CPU reference are in test_gpu_layers.cpp.
// Built where the GPU executor is; cases named "gpu: ..." skip without a GPU.
#ifdef CNNRUN_HAVE_GPU

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

#include "engine/gpu/activation.h"
#include "engine/gpu/check.h"
#include "engine/gpu/conv2d_cutlass.h"
#include "engine/gpu/conv2d_depthwise.h"
#include "engine/gpu/conv_selector.h"
#include "engine/gpu/kernels.h"
#include "engine/gpu/mul.h"
#include "engine/gpu/nhwc.h"
#include "engine/gpu/pool2d.h"
#include "engine/gpu/upsample.h"
#include "engine/layers/conv.h"
#include "engine/layers/upsample.h"
#include "engine/network.h"
#include "engine/passes.h"
#include "tests/test_util.h"

using namespace cnnrun;
using namespace cnnrun::gpu;
using test::gpu_present;

namespace {

// One stream per case, synchronised before any result is read.
struct Stream {
  cudaStream_t s = nullptr;
  Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s); }
};

std::vector<float> download(const DevBuf& b, size_t count, cudaStream_t s) {
  std::vector<float> v(count);
  CUDA_CHECK(cudaStreamSynchronize(s));
  CUDA_CHECK(cudaMemcpy(v.data(), b.get(), count * sizeof(float), cudaMemcpyDeviceToHost));
  return v;
}

void check_close(const std::vector<float>& got, const std::vector<double>& want, double atol, double rtol,
                 const std::string& what) {
  REQUIRE(got.size() == want.size());
  size_t bad = got.size();
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(got[i] - want[i]);
    if (!(e <= atol + rtol * std::fabs(want[i])) && (bad == got.size() || e > worst)) bad = i, worst = e;
  }
  INFO(what);
  if (bad != got.size()) INFO("element " << bad << ": gpu " << got[bad] << ", expected " << want[bad]);
  CHECK(bad == got.size());
}

double act_ref(const ActFn& a, double x) {
  const double c = std::min(std::max(x + 3, 0.0), 6.0);
  switch (a.kind) {
    case Act::kIdentity:
      return x;
    case Act::kRelu:
      return x > 0 ? x : 0;
    case Act::kRelu6:
      return std::min(std::max(x, 0.0), 6.0);
    case Act::kLeakyRelu:
      return x > 0 ? x : x * a.slope;
    case Act::kHardswish:
      return x * c / 6;
    case Act::kHardsigmoid:
      return c / 6;
    case Act::kSilu:
      return x / (1 + std::exp(-x));
    case Act::kGelu:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Act::kGeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case Act::kTanh:
      return std::tanh(x);
    case Act::kSigmoid:
      return 1 / (1 + std::exp(-x));
  }
  return x;
}

// The first i where got[i] is not act_ref(a, in[i]) within rel * |exact| + tiny (NaN for NaN, the
// same infinity for an infinity), or in.size() where every value is.
size_t first_off_exact(const ActFn& a, const std::vector<float>& in, const std::vector<float>& got,
                       double rel, double tiny) {
  for (size_t i = 0; i < in.size(); ++i) {
    const double want = act_ref(a, in[i]);
    if (std::isnan(want) || std::isinf(want)) {
      if (std::isnan(want) != std::isnan(got[i]) || (std::isinf(want) && got[i] != want)) return i;
    } else if (!(std::fabs(got[i] - want) <= rel * std::fabs(want) + tiny)) {
      return i;
    }
  }
  return in.size();
}

const ActFn kActs[] = {{Act::kIdentity},
                       {Act::kRelu},
                       {Act::kRelu6},
                       {Act::kLeakyRelu, 0.01f},
                       {Act::kLeakyRelu, 0.2f},
                       {Act::kHardswish},
                       {Act::kHardsigmoid},
                       {Act::kSilu},
                       {Act::kGelu},
                       {Act::kGeluTanh},
                       {Act::kTanh},
                       {Act::kSigmoid}};

}  // namespace

TEST_CASE("gpu: activation kernels vs PyTorch's formulas" * doctest::skip(!gpu_present())) {
  Stream st;
  // The kinks and clamps (-3, 0, 3, 6) exactly, both sides of them, and a spread up to +-12.
  std::vector<float> x = {-3.f, 0.f, 3.f, 6.f, -2.999f, 2.999f, 6.001f, -6.f, 1e-7f, -1e-7f, 40.f, -40.f};
  for (float v : test::random_floats(1001, 7, -12.f, 12.f)) x.push_back(v);
  // Counts that take the float4 path (multiple of 4, aligned) and the scalar one (odd, and
  // one float past an aligned start).
  for (size_t count : {x.size() - x.size() % 4, x.size() - (x.size() % 4 == 1 ? 0 : x.size() % 4 - 1)}) {
    for (size_t off : {size_t(0), size_t(1)}) {
      if (off + count > x.size()) continue;
      DevBuf in = upload(x.data(), x.size()), out(x.size() * sizeof(float));
      for (const ActFn& a : kActs) {
        launch_act(in.as<float>() + off, out.as<float>() + off, static_cast<int64_t>(count), a, st.s);
        std::vector<float> got = download(out, x.size(), st.s);
        got.erase(got.begin(), got.begin() + static_cast<long>(off));
        got.resize(count);
        std::vector<double> want(count);
        for (size_t i = 0; i < count; ++i) want[i] = act_ref(a, x[i + off]);
        check_close(got, want, 1e-6, 2e-6,
                    act_fn_name(a) + " count " + std::to_string(count) + " offset " + std::to_string(off));
      }
    }
  }
  // In place, as the fused epilogue uses it.
  DevBuf io = upload(x.data(), x.size());
  launch_act(io.as<float>(), io.as<float>(), static_cast<int64_t>(x.size()), {Act::kHardswish}, st.s);
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = act_ref({Act::kHardswish}, x[i]);
  check_close(download(io, x.size(), st.s), want, 1e-6, 2e-6, "hardswish in place");
}

// FP16 and BF16 storage: the activation pass and the add pass compute SiLU and sigmoid with the
// fast exponential and division (act_eval_stored). Each output must be the exact value of the
// stored input rounded to the storage format, give or take one unit in its last place (the fast
// functions' few FP32 ulp may tip a rounding), with the same limits as the accurate functions:
// infinities, NaN, zero, and values large enough to overflow the exponential.
TEST_CASE("gpu: SiLU and sigmoid stored in fp16 and bf16 within one unit of the exact value" *
          doctest::skip(!gpu_present())) {
  Stream st;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.f,  -0.f,  inf,  -inf,  std::nanf(""), 1e-6f,  -1e-6f, 80.f,  -80.f, 87.f, -87.f,
                          88.f, -88.f, 89.f, -89.f, 100.f,         -100.f, 1e4f,   -1e4f, 6e4f,  -6e4f};
  for (float v : test::random_floats(997, 11, -20.f, 20.f)) x.push_back(v);
  for (float v : test::random_floats(200, 12, -0.05f, 0.05f)) x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());
  // As floats on the host, from storage t.
  auto fetch = [&](const DevBuf& b, Storage t) {
    DevBuf f(x.size() * sizeof(float));
    launch_nhwc_to_nchw(b.get(), t, f.as<float>(), 1, 1, n, st.s);
    return download(f, x.size(), st.s);
  };
  for (Storage t : {Storage::kF16, Storage::kBf16}) {
    // One unit in the last place: 2^-10 (FP16) or 2^-7 (BF16) of the value's binade. Below that,
    // FP16's subnormal step; for BF16 (FP32's range) 2^-118: from x = -88.7 the exponential
    // overflows FP32 (the accurate functions give -0 and 0 there too), and the fast division
    // gives 0 for a divisor above 2^126, so an exact value below 2^-118 may come out 0.
    const double rel = t == Storage::kF16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
    const double tiny = t == Storage::kF16 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -118);
    DevBuf xf = upload(x.data(), x.size()), xs(x.size() * 2), zero(x.size() * 2), ys(x.size() * 2);
    launch_to_storage(xf.as<float>(), xs.get(), t, n, st.s);
    CUDA_CHECK(cudaMemsetAsync(zero.get(), 0, x.size() * 2, st.s));
    const std::vector<float> stored = fetch(xs, t);  // the inputs as the format holds them
    for (const ActFn& a : {ActFn{Act::kSilu}, ActFn{Act::kSigmoid}}) {
      for (bool add : {false, true}) {
        if (add)
          launch_add_storage({xs.get(), zero.get()}, ys.get(), t, n, a, st.s);
        else
          launch_act_storage(xs.get(), ys.get(), t, n, a, st.s);
        const std::vector<float> got = fetch(ys, t);
        const size_t bad = first_off_exact(a, stored, got, rel, tiny);
        INFO(act_fn_name(a) << (add ? " add pass, " : " act pass, ") << storage_name(t));
        if (bad != x.size())
          INFO("input " << stored[bad] << ": gpu " << got[bad] << ", exact " << act_ref(a, stored[bad]));
        CHECK(bad == x.size());
      }
    }
  }
}

// FP32 storage at --precision tf32: ActFn::fast takes the same approximate SiLU and sigmoid in
// FP32 (the executor sets it there). Each output within a few FP32 ulp of the exact value, with the
// accurate functions' limits; without the flag the accurate ones, and the two differ somewhere (the
// flag is honoured).
TEST_CASE(
    "gpu: SiLU and sigmoid in FP32 storage with ActFn::fast within a few ulp, and not the accurate bits" *
    doctest::skip(!gpu_present())) {
  Stream st;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.f,  -0.f,  inf,  -inf,  std::nanf(""), 1e-6f, -1e-6f,
                          80.f, -80.f, 87.f, -87.f, 100.f,         -100.f};
  for (float v : test::random_floats(997, 13, -20.f, 20.f)) x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());
  DevBuf xs = upload(x.data(), x.size()), zero(x.size() * sizeof(float)), ys(x.size() * sizeof(float));
  CUDA_CHECK(cudaMemsetAsync(zero.get(), 0, x.size() * sizeof(float), st.s));
  for (Act kind : {Act::kSilu, Act::kSigmoid}) {
    for (bool add : {false, true}) {
      std::vector<float> got[2];
      for (bool fast : {false, true}) {
        ActFn a{kind};
        a.fast = fast;
        if (add)
          launch_add_storage({xs.get(), zero.get()}, ys.get(), Storage::kF32, n, a, st.s);
        else
          launch_act_storage(xs.get(), ys.get(), Storage::kF32, n, a, st.s);
        got[fast] = download(ys, x.size(), st.s);
        // The accurate functions to a few ulp (2^-20; FP32's ulp is 2^-23 of the binade); the
        // approximate ones to 2^-16: x * log2(e) is rounded before the exponential, an error of up
        // to |x| 2^-24 in the exponent (about 2^-17.5 at |x| = 87), still far under TF32's 2^-11;
        // 2^-118 absolute below, where the fast reciprocal flushes (as the 16-bit case above).
        const double rel = fast ? std::ldexp(1.0, -16) : std::ldexp(1.0, -20), tiny = std::ldexp(1.0, -118);
        const size_t bad = first_off_exact(a, x, got[fast], rel, tiny);
        INFO(act_fn_name(a) << (fast ? " fast" : " accurate") << (add ? " add pass" : " act pass"));
        if (bad != x.size())
          INFO("input " << x[bad] << ": gpu " << got[fast][bad] << ", exact " << act_ref(a, x[bad]));
        CHECK(bad == x.size());
      }
      size_t differ = 0;
      for (size_t i = 0; i < x.size(); ++i) differ += std::memcmp(&got[0][i], &got[1][i], sizeof(float)) != 0;
      INFO(act_fn_name(ActFn{kind}) << (add ? " add pass" : " act pass"));
      CHECK(differ > 0);
    }
  }
}

TEST_CASE("gpu: bias+activation epilogue kernel" * doctest::skip(!gpu_present())) {
  Stream st;
  struct Case {
    int n, c, plane;
  };
  for (const Case& k : {Case{1, 1, 1}, Case{3, 17, 49}, Case{2, 5, 1000}, Case{7, 3, 300}}) {
    const size_t count = size_t(k.n) * k.c * k.plane;
    std::vector<float> y = test::random_floats(count, 11, -5.f, 5.f),
                       b = test::random_floats(k.c, 12, -2.f, 2.f);
    DevBuf bias = upload(b.data(), b.size());
    for (const ActFn& a : kActs) {
      for (bool with_bias : {true, false}) {
        DevBuf d = upload(y.data(), y.size());
        launch_bias_act(d.as<float>(), with_bias ? bias.as<float>() : nullptr, k.n, k.c, k.plane, a, st.s);
        std::vector<double> want(count);
        for (size_t i = 0; i < count; ++i)
          want[i] = act_ref(a, double(with_bias ? y[i] + b[i / k.plane % k.c] : y[i]));
        std::ostringstream what;
        what << act_fn_name(a) << (with_bias ? " + bias" : "") << " n" << k.n << " c" << k.c << " plane "
             << k.plane;
        check_close(download(d, count, st.s), want, 1e-6, 2e-6, what.str());
      }
    }
  }
}

namespace {

// PyTorch's output size of a pooling window (pooling_output_shape).
int pool_out(int in, int k, int s, int p, bool ceil_mode) {
  int out = (in + 2 * p - k + (ceil_mode ? s - 1 : 0)) / s + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

std::vector<double> pool_ref(const std::vector<float>& x, int n, const Pool2dArgs& a) {
  std::vector<double> out;
  for (int nc = 0; nc < n * a.channels; ++nc)
    for (int oy = 0; oy < a.out_h; ++oy)
      for (int ox = 0; ox < a.out_w; ++ox) {
        int y0, y1, x0, x1, div;
        if (a.adaptive) {
          y0 = oy * a.in_h / a.out_h, y1 = ((oy + 1) * a.in_h + a.out_h - 1) / a.out_h;
          x0 = ox * a.in_w / a.out_w, x1 = ((ox + 1) * a.in_w + a.out_w - 1) / a.out_w;
          div = (y1 - y0) * (x1 - x0);
        } else {
          y0 = oy * a.stride_h - a.pad_h, x0 = ox * a.stride_w - a.pad_w;
          y1 = std::min(y0 + a.kernel_h, a.in_h + a.pad_h), x1 = std::min(x0 + a.kernel_w, a.in_w + a.pad_w);
          div = (y1 - y0) * (x1 - x0);
          y0 = std::max(y0, 0), x0 = std::max(x0, 0), y1 = std::min(y1, a.in_h), x1 = std::min(x1, a.in_w);
          if (!a.count_pad) div = (y1 - y0) * (x1 - x0);
        }
        double m = -INFINITY, s = 0;
        for (int y = y0; y < y1; ++y)
          for (int xx = x0; xx < x1; ++xx) {
            const double v = x[(size_t(nc) * a.in_h + y) * a.in_w + xx];
            m = std::max(m, v), s += v;
          }
        out.push_back(a.is_max ? m : s / div);
      }
  return out;
}

}  // namespace

TEST_CASE("gpu: pool2d kernel: ceil_mode and adaptive windows" * doctest::skip(!gpu_present())) {
  Stream st;
  struct Fixed {
    int h, w, k, s, p;
  };
  // Sizes where ceil_mode adds a partial last window (GoogLeNet's 3/2 on odd and even inputs),
  // where it adds none, and where the last window would start in the padding (dropped).
  const Fixed fixed[] = {{32, 32, 3, 2, 0}, {15, 15, 3, 2, 0}, {16, 16, 3, 2, 1}, {7, 9, 2, 2, 0},
                         {5, 5, 3, 3, 1},   {13, 6, 3, 2, 1},  {1, 1, 1, 1, 0},   {11, 10, 4, 3, 2},
                         {9, 9, 3, 1, 1},   {6, 6, 3, 2, 1}};
  uint32_t seed = 40;
  for (const Fixed& f : fixed)
    for (bool ceil_mode : {false, true})
      for (bool is_max : {true, false})
        for (bool count_pad : {true, false}) {
          if (is_max && !count_pad) continue;
          Pool2dArgs a;
          a.channels = 3, a.in_h = f.h, a.in_w = f.w, a.is_max = is_max, a.count_pad = count_pad;
          a.kernel_h = a.kernel_w = f.k, a.stride_h = a.stride_w = f.s, a.pad_h = a.pad_w = f.p;
          a.out_h = pool_out(f.h, f.k, f.s, f.p, ceil_mode),
          a.out_w = pool_out(f.w, f.k, f.s, f.p, ceil_mode);
          const int n = 2;
          std::vector<float> x = test::random_floats(size_t(n) * 3 * f.h * f.w, seed++, -4.f, 1.f);
          DevBuf in = upload(x.data(), x.size()), out(size_t(n) * 3 * a.out_h * a.out_w * sizeof(float));
          launch_pool2d(in.as<float>(), out.as<float>(), n, a, st.s);
          std::ostringstream what;
          what << (is_max ? "max" : "avg") << " " << f.h << "x" << f.w << " k" << f.k << " s" << f.s << " p"
               << f.p << (ceil_mode ? " ceil" : " floor") << (count_pad ? "" : " count_pad false") << " -> "
               << a.out_h << "x" << a.out_w;
          check_close(download(out, size_t(n) * 3 * a.out_h * a.out_w, st.s), pool_ref(x, n, a), 1e-6, 1e-6,
                      what.str());
        }
  // The ceil_mode sizes themselves: GoogLeNet's 3/2 pools on 32 -> 16 (floor: 15).
  CHECK(pool_out(32, 3, 2, 0, true) == 16);
  CHECK(pool_out(32, 3, 2, 0, false) == 15);

  struct Adaptive {
    int h, w, oh, ow;
  };
  // Divisible, not divisible (overlapping windows), larger output than input, 1x1 (global).
  const Adaptive adaptive[] = {{8, 8, 4, 4},  {7, 7, 7, 7}, {10, 13, 3, 4}, {5, 3, 7, 6},
                               {9, 11, 1, 1}, {1, 1, 2, 3}, {14, 14, 6, 6}, {17, 5, 4, 2}};
  for (const Adaptive& f : adaptive)
    for (bool is_max : {true, false}) {
      Pool2dArgs a;
      a.channels = 5, a.in_h = f.h, a.in_w = f.w, a.out_h = f.oh, a.out_w = f.ow, a.is_max = is_max;
      a.adaptive = true;
      const int n = 3;
      std::vector<float> x = test::random_floats(size_t(n) * 5 * f.h * f.w, seed++, -3.f, 3.f);
      DevBuf in = upload(x.data(), x.size()), out(size_t(n) * 5 * f.oh * f.ow * sizeof(float));
      launch_pool2d(in.as<float>(), out.as<float>(), n, a, st.s);
      std::ostringstream what;
      what << "adaptive " << (is_max ? "max " : "avg ") << f.h << "x" << f.w << " -> " << f.oh << "x" << f.ow;
      check_close(download(out, size_t(n) * 5 * f.oh * f.ow, st.s), pool_ref(x, n, a), 1e-6, 1e-6,
                  what.str());
    }
}

// The channels-last pools against the same reference at every storage format, the inputs as the
// format holds them. 3x3 max pools at stride 1 run max_pool_rows_nhwc_kernel (pool_by_rows):
// GoogLeNet's padded ceil_mode ones on planes of 2 to 29 rows (one and several groups of 4 rows,
// a last group cut short), without padding, on one row and column, and with NaN, -0, -inf
// and FP16's near-largest value among the inputs; channel counts give every vector width (8, 4, 2, 1).
// The other 2x2 and 3x3 max pools run max_pool_windows_nhwc_kernel (pool_by_windows): VGG's 2x2/2,
// ResNet's padded 3x3/2, GoogLeNet's and SqueezeNet's ceil_mode 3x3/2 (the last window hanging
// past the edge), odd planes, one output row. A max takes one of its inputs, so it must be exact;
// the average pools and a 4x4 max (the general kernel) are checked too.
TEST_CASE(
    "gpu: channels-last pools, the 3x3 max by rows and the 2x2/3x3 max by windows among them, vs reference" *
    doctest::skip(!gpu_present())) {
  Stream st;
  struct Case {
    int h, w, c, k, s, p;
    bool ceil_mode, is_max;
  };
  const Case cases[] = {{28, 28, 24, 3, 1, 1, true, true},   {14, 14, 48, 3, 1, 1, true, true},
                        {7, 7, 16, 3, 1, 1, true, true},     {4, 4, 8, 3, 1, 1, true, true},
                        {2, 2, 8, 3, 1, 1, true, true},      {29, 5, 12, 3, 1, 1, false, true},
                        {17, 3, 6, 3, 1, 0, false, true},    {16, 9, 3, 3, 1, 1, false, true},
                        {3, 1, 8, 3, 1, 1, false, true},     {9, 10, 16, 3, 1, 0, true, true},
                        {31, 6, 2, 3, 1, 1, false, true},    {28, 28, 24, 3, 2, 0, true, true},
                        {14, 14, 24, 3, 1, 1, false, false}, {28, 28, 64, 2, 2, 0, false, true},
                        {7, 9, 16, 2, 2, 0, true, true},     {30, 30, 64, 3, 2, 1, false, true},
                        {15, 15, 24, 3, 2, 0, true, true},   {13, 11, 6, 3, 2, 1, true, true},
                        {3, 17, 3, 3, 2, 0, false, true},    {9, 9, 8, 3, 3, 1, false, true},
                        {12, 12, 16, 4, 2, 1, false, true},  {12, 12, 16, 2, 2, 0, false, false}};
  uint32_t seed = 90;
  int by_rows = 0, by_windows = 0;
  for (const Case& c : cases)
    for (Storage t : {Storage::kF32, Storage::kF16, Storage::kBf16}) {
      Pool2dArgs a;
      a.channels = c.c, a.in_h = c.h, a.in_w = c.w, a.is_max = c.is_max;
      a.kernel_h = a.kernel_w = c.k, a.stride_h = a.stride_w = c.s, a.pad_h = a.pad_w = c.p;
      a.out_h = pool_out(c.h, c.k, c.s, c.p, c.ceil_mode),
      a.out_w = pool_out(c.w, c.k, c.s, c.p, c.ceil_mode);
      by_rows += pool_by_rows(a) ? 1 : 0;
      by_windows += pool_by_windows(a) ? 1 : 0;
      CHECK_FALSE((pool_by_rows(a) && pool_by_windows(a)));
      const int n = 3;
      const int64_t plane = int64_t(c.h) * c.w, out_plane = int64_t(a.out_h) * a.out_w;
      std::vector<float> x = test::random_floats(size_t(n) * c.c * plane, seed++, -4.f, 4.f);
      if (c.is_max && x.size() > 40) {                     // values no window may turn into another value
        x[3] = std::nanf(""), x[17] = -0.f, x[29] = 6e4f;  // 6e4: finite in FP16 too
        x[31] = -std::numeric_limits<float>::infinity();
      }
      const int64_t bytes = storage_bytes(t);
      DevBuf xf = upload(x.data(), x.size()), xs(x.size() * bytes), back(x.size() * sizeof(float));
      DevBuf ys(size_t(n) * c.c * out_plane * bytes), yf(size_t(n) * c.c * out_plane * sizeof(float));
      launch_nchw_to_nhwc(xf.as<float>(), xs.get(), t, n, c.c, plane, st.s);
      launch_nhwc_to_nchw(xs.get(), t, back.as<float>(), n, c.c, plane, st.s);
      const std::vector<float> held = download(back, x.size(), st.s);  // the inputs as t holds them
      // The rows kernel at one and two output columns a thread (odd widths: a last column alone).
      for (int cols : {1, 2}) {
        if (cols == 1 && !pool_by_rows(a)) continue;
        CUDA_CHECK(cudaMemsetAsync(ys.get(), 0xff, size_t(n) * c.c * out_plane * bytes, st.s));
        launch_pool2d_nhwc(xs.get(), ys.get(), t, n, a, st.s, cols);
        launch_nhwc_to_nchw(ys.get(), t, yf.as<float>(), n, c.c, out_plane, st.s);
        std::ostringstream what;
        what << (c.is_max ? "max " : "avg ") << c.h << "x" << c.w << "x" << c.c << " k" << c.k << " s" << c.s
             << " p" << c.p << (c.ceil_mode ? " ceil" : "") << " -> " << a.out_h << "x" << a.out_w << ", "
             << storage_name(t)
             << (pool_by_rows(a)      ? ", by rows of " + std::to_string(cols) + " columns"
                 : pool_by_windows(a) ? ", by windows"
                                      : "");
        const double tol = t == Storage::kF32 ? 1e-6 : t == Storage::kF16 ? 1e-3 : 8e-3;
        check_close(download(yf, size_t(n) * c.c * out_plane, st.s), pool_ref(held, n, a), c.is_max ? 0 : tol,
                    c.is_max ? 0 : tol, what.str());
      }
    }
  CHECK(by_rows == 11 * 3);    // every stride-1 3x3 max case ran the rows kernel
  CHECK(by_windows == 8 * 3);  // every other 2x2 and 3x3 max case the windows kernel
}

// The channels-last preprocess (launch_preprocess_nhwc): four pixels a thread where the plane
// holds whole groups of four (grey, RGB and any other channel count), one value a thread where it
// does not or where the bytes start off a 4-byte boundary. Each value is the host's
// (v * scale) + shift in FP32, rounded as the products are, then converted to the storage format
// on the device as a host tensor's conversion is: exact.
TEST_CASE("gpu: the channels-last preprocess, four pixels a thread or one value a thread, vs the host" *
          doctest::skip(!gpu_present())) {
  Stream st;
  struct Case {
    int c, h, w, skew;  // skew: the bytes start this far past an aligned address
  };
  const Case cases[] = {{3, 8, 8, 0}, {1, 4, 6, 0}, {4, 2, 6, 0}, {5, 3, 4, 0},
                        {3, 5, 7, 0}, {3, 8, 8, 1}, {2, 1, 1, 0}, {3, 224, 4, 0}};
  std::mt19937 rng(31);
  for (const Case& k : cases)
    for (Storage t : {Storage::kF32, Storage::kF16, Storage::kBf16}) {
      const int n = 3;
      const int64_t plane = int64_t(k.h) * k.w, count = n * k.c * plane;
      std::vector<uint8_t> bytes(static_cast<size_t>(count + k.skew));
      for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng() & 255);
      std::vector<float> scale(static_cast<size_t>(k.c)), shift(static_cast<size_t>(k.c));
      for (int c = 0; c < k.c; ++c)
        scale[size_t(c)] = 1.f / (57.f + float(c)), shift[size_t(c)] = -0.4f - 0.3f * float(c);
      std::vector<float> want(static_cast<size_t>(count));  // NCHW, FP32
      for (int64_t i = 0; i < count; ++i) {
        const int c = static_cast<int>((i / plane) % k.c);
        volatile float prod = float(bytes[size_t(i + k.skew)]) * scale[size_t(c)];  // rounded, not fused
        want[size_t(i)] = prod + shift[size_t(c)];
      }
      DevBuf in = upload(bytes.data(), bytes.size()), sc = upload(scale.data(), scale.size()),
             sh = upload(shift.data(), shift.size()), ref = upload(want.data(), want.size());
      const int64_t sb = storage_bytes(t);
      DevBuf out(size_t(count * sb)), ref_t(size_t(count * sb)), got(size_t(count) * sizeof(float)),
          exp(size_t(count) * sizeof(float));
      launch_preprocess_nhwc(in.as<uint8_t>() + k.skew, out.get(), t, n, k.c, plane, sc.as<float>(),
                             sh.as<float>(), st.s);
      launch_nhwc_to_nchw(out.get(), t, got.as<float>(), n, k.c, plane, st.s);
      launch_nchw_to_nhwc(ref.as<float>(), ref_t.get(), t, n, k.c, plane, st.s);
      launch_nhwc_to_nchw(ref_t.get(), t, exp.as<float>(), n, k.c, plane, st.s);
      const std::vector<float> g = download(got, size_t(count), st.s), e = download(exp, size_t(count), st.s);
      std::ostringstream what;
      what << k.c << "x" << k.h << "x" << k.w << (k.skew ? " skewed" : "") << ", " << storage_name(t);
      INFO(what.str());
      size_t bad = 0;
      for (size_t i = 0; i < g.size(); ++i) bad += g[i] != e[i];
      CHECK(bad == 0);
    }
}

// The argmax (launch_argmax): a thread an image below 32 values, a warp an image from 32 on
// (ImageNet's 1000 classes), against the serial rule both keep: the first index of the largest
// value, a NaN never the largest, 0 where the first value is a NaN or none exceeds -inf; ties,
// infinities and NaNs planted, the counts of right predictions and of images with a value that is
// not finite.
TEST_CASE("gpu: argmax a thread or a warp an image: the first largest, NaNs never taken, vs the serial rule" *
          doctest::skip(!gpu_present())) {
  Stream st;
  std::mt19937 rng(41);
  for (int size : {1, 10, 31, 32, 33, 100, 1000, 1001}) {
    const int n = 70;
    std::vector<float> x(size_t(n) * size);
    std::uniform_real_distribution<float> u(-3.f, 3.f);
    for (float& v : x) v = std::round(u(rng) * 4.f) / 4.f;  // coarse values: ties at the top happen
    const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
    auto at = [&](int img, int k) -> float& { return x[size_t(img) * size + size_t(k % size)]; };
    at(1, 0) = nan;                                  // the first a NaN: 0
    at(2, size / 2) = nan;                           // a NaN elsewhere: skipped
    at(3, size - 1) = inf;                           // +inf wins
    for (int k = 0; k < size; ++k) at(4, k) = -inf;  // all -inf: 0
    for (int k = 0; k < size; ++k) at(5, k) = nan;   // all NaN: 0
    at(6, size / 3) = 9.f, at(6, size - 1) = 9.f;    // a tie: the first
    for (int k = 1; k < size; ++k) at(7, k) = nan;   // only the first is a number
    at(8, 0) = -inf, at(8, size - 1) = -inf;
    std::vector<int32_t> labels(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) labels[size_t(i)] = static_cast<int32_t>(rng() % size);
    std::vector<int32_t> want(static_cast<size_t>(n));
    unsigned long long right = 0, bad = 0;
    for (int i = 0; i < n; ++i) {
      int best = 0;
      float bv = at(i, 0);
      bool finite = std::isfinite(bv);
      for (int k = 1; k < size; ++k) {
        if (at(i, k) > bv) bv = at(i, k), best = k;
        finite = finite && std::isfinite(at(i, k));
      }
      want[size_t(i)] = best;
      right += best == labels[size_t(i)];
      bad += !finite;
    }
    DevBuf xd = upload(x.data(), x.size()), ld = upload(labels.data(), labels.size()), pd(size_t(n) * 4),
           cd(2 * sizeof(unsigned long long));
    CUDA_CHECK(cudaMemset(cd.get(), 0, 2 * sizeof(unsigned long long)));
    launch_argmax(xd.as<float>(), n, size, pd.as<int32_t>(), ld.as<int32_t>(), 0, n,
                  cd.as<unsigned long long>(), st.s);
    CUDA_CHECK(cudaStreamSynchronize(st.s));
    std::vector<int32_t> got(static_cast<size_t>(n));
    unsigned long long counts[2];
    CUDA_CHECK(cudaMemcpy(got.data(), pd.get(), got.size() * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(counts, cd.get(), sizeof(counts), cudaMemcpyDeviceToHost));
    INFO("size " << size);
    for (int i = 0; i < n; ++i) {
      INFO("image " << i);
      CHECK(got[size_t(i)] == want[size_t(i)]);
    }
    CHECK(counts[0] == right);
    CHECK(counts[1] == bad);
  }
}

TEST_CASE("gpu: mul kernel with per-channel broadcast" * doctest::skip(!gpu_present())) {
  Stream st;
  const int n = 3, c = 7, plane = 5 * 9;
  const size_t full = size_t(n) * c * plane, chan = size_t(n) * c;
  std::vector<std::vector<float>> host;
  for (uint32_t k = 0; k < 10; ++k)
    host.push_back(test::random_floats(k % 3 == 1 ? chan : full, 60 + k, -2.f, 2.f));
  std::vector<DevBuf> dev;
  for (auto& h : host) dev.push_back(upload(h.data(), h.size()));
  // Two inputs either way round, three, and ten (two launches).
  for (int count : {2, 3, 10}) {
    for (bool swap : {false, true}) {
      std::vector<int> order(static_cast<size_t>(count));
      for (int i = 0; i < count; ++i) order[static_cast<size_t>(i)] = i;
      if (swap) std::swap(order[0], order[1]);
      std::vector<MulInput> in;
      for (int i : order) in.push_back({dev[size_t(i)].as<float>(), i % 3 == 1});
      DevBuf out(full * sizeof(float));
      launch_mul(in, out.as<float>(), n, c, plane, st.s);
      std::vector<double> want(full);
      for (size_t e = 0; e < full; ++e) {
        float p = 0;  // the float product, left to right, as the kernel and the CPU round it
        for (size_t k = 0; k < order.size(); ++k) {
          const int i = order[k];
          const float v = host[size_t(i)][i % 3 == 1 ? e / plane : e];
          p = k == 0 ? v : p * v;
        }
        want[e] = p;
      }
      check_close(download(out, full, st.s), want, 0, 0,
                  std::to_string(count) + " inputs" + (swap ? ", broadcast one first" : ""));
    }
  }
  // In place into the full-size first input (the executor may alias the output with it).
  DevBuf a = upload(host[0].data(), full);
  launch_mul({{a.as<float>(), false}, {dev[1].as<float>(), true}}, a.as<float>(), n, c, plane, st.s);
  std::vector<double> want(full);
  for (size_t e = 0; e < full; ++e) want[e] = host[0][e] * host[1][e / plane];
  check_close(download(a, full, st.s), want, 0, 0, "in place");
}

TEST_CASE("gpu: upsample kernel: nearest and bilinear, align_corners, whole and fractional factors, sizes" *
          doctest::skip(!gpu_present())) {
  Stream st;
  // Per axis: a scale (size 0) or a size (scale 0).
  struct Case {
    int h, w;
    double sh, sw;
    int size_h, size_w;
  };
  const Case cases[] = {{4, 4, 2, 2, 0, 0}, {5, 7, 2, 2, 0, 0},     {3, 5, 3, 3, 0, 0},
                        {1, 1, 4, 4, 0, 0}, {6, 4, 1, 3, 0, 0},     {7, 7, 1, 1, 0, 0},
                        {2, 9, 5, 2, 0, 0}, {5, 7, 1.5, 0.5, 0, 0}, {9, 3, 1.3333, 2.4, 0, 0},
                        {4, 6, 0, 0, 7, 3}, {5, 5, 0, 0, 10, 15},   {3, 8, 2.6, 0.7, 0, 0}};
  uint32_t seed = 80;
  for (const Case& k : cases)
    for (int mode = 0; mode < 3; ++mode) {  // nearest, bilinear, bilinear with align_corners
      const bool ac = mode == 2;
      const UpsampleAxis ay = upsample_axis(k.h, k.sh, k.size_h, ac),
                         ax = upsample_axis(k.w, k.sw, k.size_w, ac);
      UpsampleArgs a;
      a.channels = 3, a.in_h = k.h, a.in_w = k.w, a.out_h = int(ay.out), a.out_w = int(ax.out);
      a.factor_h = int(ay.factor), a.factor_w = int(ax.factor), a.ratio_h = ay.ratio, a.ratio_w = ax.ratio;
      a.bilinear = mode > 0, a.align_corners = ac;
      const int n = 2;
      std::vector<float> x = test::random_floats(size_t(n) * 3 * k.h * k.w, seed++, -1.f, 1.f);
      std::vector<double> want;
      // Plain loops: PyTorch's source coordinate from the axis's float ratio, the rest in double.
      auto nearest = [](int o, const UpsampleAxis& ax_) {
        if (ax_.factor > 0) return int(o / ax_.factor);
        return std::min(int(std::floor(float(o) * ax_.ratio)), int(ax_.in) - 1);
      };
      auto src = [&](int o, const UpsampleAxis& ax_, double& l1) {
        if (ax_.out == ax_.in) {
          l1 = 0;
          return o;
        }
        const double s = ac ? double(ax_.ratio) * o : std::max(double(ax_.ratio) * (o + 0.5) - 0.5, 0.0);
        const int i0 = std::min(int(s), int(ax_.in) - 1);
        l1 = s - i0;
        return i0;
      };
      for (int nc = 0; nc < n * 3; ++nc)
        for (int oy = 0; oy < a.out_h; ++oy)
          for (int ox = 0; ox < a.out_w; ++ox) {
            auto at = [&](int y, int xx) { return double(x[(size_t(nc) * k.h + y) * k.w + xx]); };
            if (!a.bilinear) {
              want.push_back(at(nearest(oy, ay), nearest(ox, ax)));
              continue;
            }
            double ly, lx;
            const int y0 = src(oy, ay, ly), x0 = src(ox, ax, lx);
            const int y1 = y0 + (y0 < k.h - 1), x1 = x0 + (x0 < k.w - 1);
            want.push_back((1 - ly) * ((1 - lx) * at(y0, x0) + lx * at(y0, x1)) +
                           ly * ((1 - lx) * at(y1, x0) + lx * at(y1, x1)));
          }
      DevBuf in = upload(x.data(), x.size()), out(want.size() * sizeof(float));
      launch_upsample(in.as<float>(), out.as<float>(), n, a, st.s);
      std::ostringstream what;
      what << (mode == 0   ? "nearest "
               : mode == 1 ? "bilinear "
                           : "bilinear align_corners ")
           << k.h << "x" << k.w << " -> " << a.out_h << "x" << a.out_w;
      check_close(download(out, want.size(), st.s), want, 2e-6, 1e-5, what.str());
    }
  // An output that is not the input times the factors is refused, not read out of bounds.
  UpsampleArgs bad;
  bad.channels = 1, bad.in_h = bad.in_w = 4, bad.factor_h = bad.factor_w = 2, bad.out_h = 8, bad.out_w = 9;
  CHECK_THROWS_AS(launch_upsample(nullptr, nullptr, 1, bad, st.s), Error);
}

namespace {

// A depthwise layer for the kernel tests: c channels, a multiplier, an h x w input, kernel,
// stride, pad and dilation (h, w), n images; args() with the output size PyTorch's.
struct DwCase {
  int c, mult, h, w, kh, kw, sh, sw, ph, pw, dh, dw, n;
  DepthwiseArgs args() const {
    DepthwiseArgs a;
    a.channels = c, a.filters = c * mult, a.in_h = h, a.in_w = w;
    a.kernel_h = kh, a.kernel_w = kw, a.stride_h = sh, a.stride_w = sw, a.pad_h = ph, a.pad_w = pw;
    a.dilation_h = dh, a.dilation_w = dw;
    a.out_h = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
    a.out_w = (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
    return a;
  }
};

std::vector<double> depthwise_ref(const std::vector<float>& x, const std::vector<float>& w,
                                  const std::vector<float>& b, int n, const DepthwiseArgs& a,
                                  const ActFn& act) {
  std::vector<double> y;
  const int mult = a.filters / a.channels;
  for (int img = 0; img < n; ++img)
    for (int f = 0; f < a.filters; ++f)
      for (int oy = 0; oy < a.out_h; ++oy)
        for (int ox = 0; ox < a.out_w; ++ox) {
          double s = b.empty() ? 0 : b[size_t(f)];
          for (int ky = 0; ky < a.kernel_h; ++ky)
            for (int kx = 0; kx < a.kernel_w; ++kx) {
              const int iy = oy * a.stride_h - a.pad_h + ky * a.dilation_h;
              const int ix = ox * a.stride_w - a.pad_w + kx * a.dilation_w;
              if (iy < 0 || iy >= a.in_h || ix < 0 || ix >= a.in_w) continue;
              s += double(x[((size_t(img) * a.channels + f / mult) * a.in_h + iy) * a.in_w + ix]) *
                   w[(size_t(f) * a.kernel_h + ky) * a.kernel_w + kx];
            }
          y.push_back(act_ref(act, s));
        }
  return y;
}

}  // namespace

TEST_CASE("gpu: depthwise convolution kernel vs plain loops" * doctest::skip(!gpu_present())) {
  Stream st;
  // MobileNet's 3x3 stride 1 and 2, EfficientNet's 5x5, 7x7 planes packed several to a block,
  // planes cut into row tiles (70x45), stride and dilation together, non-square everything,
  // a channel multiplier of 2 and 3, 1x1, a 1x1 input with padding, and wide stride-2 rows.
  const DwCase cases[] = {{32, 1, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 3},
                          {24, 1, 17, 15, 3, 3, 2, 2, 1, 1, 1, 1, 2},
                          {40, 1, 9, 9, 5, 5, 1, 1, 2, 2, 1, 1, 3},
                          {40, 1, 14, 14, 5, 5, 2, 2, 2, 2, 1, 1, 1},
                          {96, 1, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 5},
                          {5, 1, 70, 45, 3, 3, 1, 1, 1, 1, 1, 1, 2},
                          {7, 1, 23, 19, 3, 3, 2, 1, 2, 2, 2, 2, 3},
                          {6, 2, 13, 11, 3, 5, 1, 2, 1, 2, 3, 1, 2},
                          {4, 3, 10, 12, 7, 7, 2, 2, 3, 3, 1, 1, 2},
                          {9, 1, 8, 8, 1, 1, 1, 1, 0, 0, 1, 1, 4},
                          {3, 1, 1, 1, 3, 3, 1, 1, 1, 1, 1, 1, 7},
                          {17, 1, 29, 31, 3, 3, 1, 1, 2, 2, 2, 2, 1},
                          {33, 1, 112, 112, 3, 3, 2, 2, 1, 1, 1, 1, 1},
                          // stride 2 across rows of 32 outputs or more (staged even columns first): 5x5 on an
                          // odd patch width, a channel multiplier, stride 1 down and 2 across
                          {16, 1, 80, 71, 5, 5, 2, 2, 2, 2, 1, 1, 2},
                          {8, 2, 40, 70, 3, 3, 2, 2, 1, 1, 1, 1, 2},
                          {6, 1, 20, 66, 3, 3, 1, 2, 1, 1, 1, 1, 2},
                          // a warp a plane (rows under 32): a last tile of 5 live planes of 16; rows cut
                          // into two tiles, the last a row short; staged a warp a plane but outputs
                          // under 32; tiny planes with a multiplier (one value a thread throughout)
                          {7, 1, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 3},
                          {3, 1, 301, 20, 3, 3, 1, 1, 1, 1, 1, 1, 2},
                          {10, 1, 8, 8, 3, 3, 2, 2, 1, 1, 1, 1, 3},
                          {12, 2, 3, 3, 3, 3, 2, 2, 1, 1, 1, 1, 3}};
  uint32_t seed = 200;
  int k = 0;
  for (const DwCase& c : cases) {
    const DepthwiseArgs a = c.args();
    DepthwiseConfig cfg = depthwise_config(a);
    REQUIRE(cfg.ok);
    const ActFn act = kActs[size_t(k++) % (sizeof(kActs) / sizeof(kActs[0]))];
    const bool with_bias = k % 3 != 0;
    std::vector<float> x = test::random_floats(size_t(c.n) * c.c * c.h * c.w, seed++, -1.f, 1.f);
    std::vector<float> w = test::random_floats(size_t(a.filters) * c.kh * c.kw, seed++, -0.5f, 0.5f);
    std::vector<float> b =
        with_bias ? test::random_floats(size_t(a.filters), seed++, -0.5f, 0.5f) : std::vector<float>();
    std::vector<double> want = depthwise_ref(x, w, b, c.n, a, act);
    DevBuf dx = upload(x.data(), x.size()), dw = upload(w.data(), w.size()), db = upload(b.data(), b.size());
    DevBuf dy(want.size() * sizeof(float));
    launch_conv_depthwise(cfg, a, dx.as<float>(), dw.as<float>(), with_bias ? db.as<float>() : nullptr,
                          dy.as<float>(), c.n, act, st.s);
    std::ostringstream what;
    what << "C" << c.c << " x" << c.mult << " " << c.h << "x" << c.w << " k" << c.kh << "x" << c.kw << " s"
         << c.sh << "x" << c.sw << " p" << c.ph << "x" << c.pw << " d" << c.dh << "x" << c.dw << " n" << c.n
         << " " << act_fn_name(act) << (with_bias ? " bias" : "") << ": tile " << cfg.planes << " planes x "
         << cfg.rows << " rows";
    check_close(download(dy, want.size(), st.s), want, 1e-5, 1e-5, what.str());
  }
}

TEST_CASE("gpu: channels-last depthwise kernel vs plain loops, fp32, fp16 and bf16" *
          doctest::skip(!gpu_present())) {
  Stream st;
  // 16-byte vectors (96, 32 channels), 8 and 4 bytes (36, 6), one value a thread (7 channels, and
  // a channel multiplier), MobileNet's 3x3 stride 1 and 2, EfficientNet's 5x5, 7x7 (run-time
  // loops), stride and dilation together, a 1x1 input with padding; several pixels a thread with
  // a channel multiplier and on a 37-wide row without row padding (a last group of one pixel).
  // The two-filter kernel (pairs) at 8, 7 and 4 pixels a thread: row dilation with none along the
  // row, unequal strides, 5x5 stride 2 on 144 channels, and one pair of channels. The tile
  // kernel's lane groups: 8 channels (8 strips a warp), 24 (2, of 12 lanes each), and the last 16
  // of 144 (4) on a 28x28 map, five images.
  const DwCase cases[] = {
      {96, 1, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, 3},  {32, 1, 17, 15, 3, 3, 2, 2, 1, 1, 1, 1, 2},
      {36, 1, 9, 9, 5, 5, 1, 1, 2, 2, 1, 1, 3},    {6, 1, 23, 19, 3, 3, 2, 1, 2, 2, 2, 2, 3},
      {7, 1, 10, 12, 7, 7, 2, 2, 3, 3, 1, 1, 2},   {8, 2, 13, 11, 3, 5, 1, 2, 1, 2, 3, 1, 2},
      {16, 1, 1, 1, 3, 3, 1, 1, 1, 1, 1, 1, 5},    {40, 1, 29, 31, 5, 5, 2, 2, 2, 2, 1, 1, 1},
      {24, 2, 11, 13, 3, 3, 1, 1, 1, 1, 1, 1, 2},  {64, 1, 6, 39, 3, 3, 1, 1, 0, 0, 1, 1, 2},
      {12, 1, 12, 13, 3, 3, 1, 1, 2, 1, 2, 1, 2},  {20, 1, 16, 18, 5, 5, 2, 1, 2, 2, 1, 1, 2},
      {144, 1, 15, 15, 5, 5, 2, 2, 2, 2, 1, 1, 2}, {2, 1, 9, 30, 3, 3, 1, 1, 1, 1, 1, 1, 3},
      {8, 1, 20, 22, 3, 3, 1, 1, 1, 1, 1, 1, 3},   {24, 1, 13, 17, 5, 5, 1, 1, 2, 2, 1, 1, 2},
      {144, 1, 28, 28, 3, 3, 1, 1, 1, 1, 1, 1, 5}};
  uint32_t seed = 700;
  int k = 0;
  int mean_runs[3] = {0, 0, 0};  // by kernel: tile, strip, vector
  for (Storage t : {Storage::kF32, Storage::kF16, Storage::kBf16})
    for (const DwCase& c : cases) {
      const DepthwiseArgs a = c.args();
      const ActFn act = kActs[size_t(k++) % (sizeof(kActs) / sizeof(kActs[0]))];
      const bool with_bias = k % 3 != 0;
      const int taps = c.kh * c.kw, in_plane = c.h * c.w, out_plane = a.out_h * a.out_w;
      const std::vector<float> x = test::random_floats(size_t(c.n) * c.c * in_plane, seed++, -1.f, 1.f);
      const std::vector<float> w = test::random_floats(size_t(a.filters) * taps, seed++, -0.5f, 0.5f);
      const std::vector<float> b =
          with_bias ? test::random_floats(size_t(a.filters), seed++, -0.5f, 0.5f) : std::vector<float>();
      std::vector<float> w_taps(w.size());
      for (int f = 0; f < a.filters; ++f)
        for (int q = 0; q < taps; ++q) w_taps[size_t(q) * a.filters + f] = w[size_t(f) * taps + q];
      // The input in the storage format, and back: the values the kernel reads, for the reference.
      const int64_t bytes = storage_bytes(t);
      DevBuf dx = upload(x.data(), x.size()), xs(x.size() * bytes), xr(x.size() * sizeof(float));
      launch_nchw_to_nhwc(dx.as<float>(), xs.get(), t, c.n, c.c, in_plane, st.s);
      launch_nhwc_to_nchw(xs.get(), t, xr.as<float>(), c.n, c.c, in_plane, st.s);
      const std::vector<double> want = depthwise_ref(download(xr, x.size(), st.s), w, b, c.n, a, act);
      DevBuf dw = upload(w_taps.data(), w_taps.size()), db = upload(b.data(), b.size());
      DevBuf ys(want.size() * bytes), y(want.size() * sizeof(float));
      // The vector kernel at 1, 2 and 4 pixels a thread (the unit-stride 3x3 and 5x5 ones take 2
      // and 4), the strip kernel where it runs, at up to 4, 7 and 8 pixels a thread, then the tile
      // kernel wherever it runs, at 4 and 8 pixels a lane, in patches of at most 4 KiB (tiles of a
      // few rows, several row tiles), 12, 46, 64 and 100 KiB (shared memory opted in above 48), at
      // 46 KiB without its lane groups (one strip a warp), and in blocks of 128 threads for every
      // tile (4 and 46 KiB) and for none (46 KiB; the default: tiles of at most 16 strips), and
      // with one output row a lane and two where the rule allows it (16-bit, 3x3 of stride 1: tiles
      // of 1 to 14 rows, odd ones reading a row past the tile, with and without lane groups).
      struct Variant {
        int row_pixels, strip_pixels, tile_kib, tile_pixels;
        bool pack = true;
        int small_strips = DepthwiseNhwcKnobs{}.small_tile_strips;
        int rows = DepthwiseNhwcKnobs{}.tile_rows;
      };
      constexpr int kAll = 1 << 20;
      const Variant variants[] = {{1, 0, 0, 4},
                                  {2, 0, 0, 4},
                                  {4, 0, 0, 4},
                                  {1, 4, 0, 4},
                                  {1, 7, 0, 4},
                                  {1, 8, 0, 4},
                                  {1, 0, 4, 4},
                                  {1, 0, 12, 4},
                                  {1, 0, 12, 8},
                                  {1, 0, 46, 4},
                                  {1, 0, 64, 4},
                                  {1, 0, 100, 8},
                                  {1, 0, 46, 4, false},
                                  {1, 0, 4, 4, true, kAll},
                                  {1, 0, 46, 4, true, kAll},
                                  {1, 0, 46, 4, true, 0, 1},
                                  {1, 0, 4, 4, true, 0, 2},
                                  {1, 0, 46, 4, true, 0, 2},
                                  {1, 0, 64, 4, false, 0, 2}};
      std::vector<float> vector_out;  // the vector kernel's, 1 pixel a thread
      for (const Variant& v : variants) {
        DepthwiseNhwcKnobs kn;
        kn.row_pixels = v.row_pixels, kn.strip_pixels = v.strip_pixels;
        kn.set_tile_smem(size_t(v.tile_kib) << 10), kn.tile_pixels = v.tile_pixels, kn.tile_everywhere = true;
        kn.tile_pack = v.pack;
        kn.small_tile_strips = v.small_strips;
        kn.tile_rows = v.rows;
        kn.mean_everywhere = true;  // the mean in every kernel that has one
        const DepthwiseStrip ds = depthwise_nhwc_strip(a, t, kn.strip_pixels);
        const DepthwiseTile tile = depthwise_nhwc_tile(a, t, kn);
        if ((v.strip_pixels > 0 && ds.pixels == 0) || (v.tile_kib > 0 && tile.smem == 0)) continue;
        CUDA_CHECK(
            cudaMemsetAsync(ys.get(), 0xff, want.size() * bytes, st.s));  // NaNs where nothing is written
        launch_conv_depthwise_nhwc(a, xs.get(), t, dw.as<float>(), with_bias ? db.as<float>() : nullptr,
                                   ys.get(), c.n, act, st.s, kn);
        launch_nhwc_to_nchw(ys.get(), t, y.as<float>(), c.n, a.filters, out_plane, st.s);
        const std::vector<float> got = download(y, want.size(), st.s);
        if (vector_out.empty()) vector_out = got;
        std::ostringstream what;
        what << storage_name(t) << " C" << c.c << " x" << c.mult << " " << c.h << "x" << c.w << " k" << c.kh
             << "x" << c.kw << " s" << c.sh << "x" << c.sw << " p" << c.ph << "x" << c.pw << " d" << c.dh
             << "x" << c.dw << " n" << c.n << " " << act_fn_name(act) << (with_bias ? " bias" : "") << ": "
             << (tile.smem > 0   ? 2
                 : ds.pixels > 0 ? ds.filters
                                 : depthwise_nhwc_vector(a, t))
             << " filters x "
             << (tile.smem > 0 ? std::to_string(tile.pixels) + " pixels of " + std::to_string(tile.tile_h) +
                                     "x" + std::to_string(tile.tile_w) + " tiles"
                 : ds.pixels > 0 ? std::to_string(ds.pixels) + " pixels"
                                 : std::to_string(depthwise_nhwc_pixels(a, v.row_pixels)) + " pixels")
             << " a thread" << (v.pack ? "" : ", no lane groups")
             << (tile.smem > 0 ? ", blocks of " + std::to_string(tile.threads) + ", " +
                                     std::to_string(tile.rows) + " rows a lane"
                               : std::string());
        // One rounding to the storage format after an FP32 sum (FP16: 2^-11 relative, BF16: 2^-8).
        const double tol = t == Storage::kF32 ? 1e-5 : t == Storage::kF16 ? 1e-3 : 8e-3;
        check_close(got, want, tol, tol, what.str());
        if (tile.smem > 0) {  // the same sum in the same tap order as the vector kernel: the same values
          size_t differ = 0;
          for (size_t e = 0; e < got.size(); ++e) differ += got[e] != vector_out[e];
          INFO(what.str());
          CHECK(differ == 0);
        }
        // With the whole-plane mean where this kernel computes it: the same outputs, and each
        // image's and filter's mean of the stored outputs (one FP32 sum, rounded once), every
        // partial sum written (they start as NaNs).
        const int slots = depthwise_nhwc_mean_slots(a, t, kn);
        const size_t means = size_t(c.n) * a.filters;
        DevBuf part(std::max<size_t>(size_t(slots) * means, 1) * sizeof(float)), ms(means * bytes),
            mf(means * sizeof(float));
        DepthwiseMean mean;
        mean.partial = part.as<float>(), mean.out = ms.get();
        if (slots == 0) {
          CHECK_THROWS_WITH_AS(launch_conv_depthwise_nhwc(a, xs.get(), t, dw.as<float>(), nullptr, ys.get(),
                                                          c.n, act, st.s, kn, mean),
                               doctest::Contains("cannot compute their mean"), Error);
          continue;
        }
        CUDA_CHECK(cudaMemsetAsync(part.get(), 0xff, size_t(slots) * means * sizeof(float), st.s));
        CUDA_CHECK(cudaMemsetAsync(ys.get(), 0xff, want.size() * bytes, st.s));
        launch_conv_depthwise_nhwc(a, xs.get(), t, dw.as<float>(), with_bias ? db.as<float>() : nullptr,
                                   ys.get(), c.n, act, st.s, kn, mean);
        launch_nhwc_to_nchw(ys.get(), t, y.as<float>(), c.n, a.filters, out_plane, st.s);
        launch_nhwc_to_nchw(ms.get(), t, mf.as<float>(), c.n, a.filters, 1, st.s);
        const std::vector<float> again = download(y, want.size(), st.s), got_mean = download(mf, means, st.s);
        std::vector<double> want_mean(means, 0.0);
        for (size_t q = 0; q < means; ++q) {
          for (int e = 0; e < out_plane; ++e) want_mean[q] += got[q * size_t(out_plane) + size_t(e)];
          want_mean[q] /= out_plane;
        }
        INFO(what.str() << ", with the mean in " << slots << " slots an image");
        size_t differ = 0;
        for (size_t e = 0; e < got.size(); ++e) differ += std::memcmp(&got[e], &again[e], sizeof(float)) != 0;
        CHECK(differ == 0);
        check_close(got_mean, want_mean, tol, tol, what.str() + ", the mean");
        ++mean_runs[tile.smem > 0 ? 0 : ds.pixels > 0 ? 1 : 2];
      }
    }
  // Each kernel computed the mean somewhere (the tile, strip and vector kernels).
  CHECK(mean_runs[0] > 0);
  CHECK(mean_runs[1] > 0);
  CHECK(mean_runs[2] > 0);
}

TEST_CASE("depthwise: the channels-last kernels' rules (vector width, pixels, strip, tile; no GPU needed)") {
  // Vector widths: 16 bytes where the filters allow it, one value a thread with a multiplier.
  DepthwiseArgs a;
  a.channels = a.filters = 96;
  CHECK(depthwise_nhwc_vector(a, Storage::kF16) == 8);
  CHECK(depthwise_nhwc_vector(a, Storage::kF32) == 4);
  a.channels = a.filters = 36;
  CHECK(depthwise_nhwc_vector(a, Storage::kBf16) == 4);
  a.channels = a.filters = 6;
  CHECK(depthwise_nhwc_vector(a, Storage::kF32) == 2);
  a.filters = 12;
  CHECK(depthwise_nhwc_vector(a, Storage::kF16) == 1);
  // Pixels a thread: several only for 3x3 and 5x5 windows of unit stride and dilation along the row.
  a.kernel_h = a.kernel_w = 3, a.stride_w = a.dilation_w = 1;
  CHECK(depthwise_nhwc_pixels(a, 4) == 4);
  CHECK(depthwise_nhwc_pixels(a, 2) == 2);
  CHECK(depthwise_nhwc_pixels(a, 3) == 1);
  CHECK(depthwise_nhwc_pixels(a) == DepthwiseNhwcKnobs{}.row_pixels);
  a.stride_w = 2;
  CHECK(depthwise_nhwc_pixels(a, 4) == 1);
  a.stride_w = 1, a.dilation_w = 2;
  CHECK(depthwise_nhwc_pixels(a, 4) == 1);
  a.dilation_w = 1, a.kernel_h = a.kernel_w = 7;
  CHECK(depthwise_nhwc_pixels(a, 4) == 1);
  a.kernel_h = a.kernel_w = 5;
  CHECK(depthwise_nhwc_pixels(a, 4) == 4);
  // The strip kernel at FP32 storage: 2 filters of the pixels that waste least of a row's last
  // strip, the widest on a tie; at 16-bit storage 4 filters of 4 pixels, 3x3 of stride 1 only;
  // none for a multiplier, odd channels, 7x7, stride 3, row dilation or short rows.
  a.channels = a.filters = 96, a.stride_w = 1, a.kernel_h = a.kernel_w = 3;
  for (const auto& [w, p] : {std::pair{112, 8}, {56, 8}, {28, 7}, {14, 7}, {7, 7}, {16, 8}, {4, 4}, {9, 7}}) {
    a.out_w = w;
    const DepthwiseStrip d = depthwise_nhwc_strip(a, Storage::kF32);
    CHECK_MESSAGE(d.pixels == p, "out_w ", w);
    CHECK(d.filters == 2);
    const DepthwiseStrip h = depthwise_nhwc_strip(a, Storage::kF16);
    CHECK(h.pixels == 4);
    CHECK(h.filters == 4);
  }
  a.out_w = 28;
  CHECK(depthwise_nhwc_strip(a, Storage::kF32, 4).pixels == 4);
  CHECK(depthwise_nhwc_strip(a, Storage::kF32, 0).pixels == 0);
  CHECK(depthwise_nhwc_strip(a, Storage::kBf16, 0).pixels == 0);
  a.channels = a.filters = 90;  // even, not a multiple of 4
  CHECK(depthwise_nhwc_strip(a, Storage::kF32).pixels == 7);
  CHECK(depthwise_nhwc_strip(a, Storage::kBf16).pixels == 0);
  a.channels = a.filters = 96, a.stride_w = 2;
  CHECK(depthwise_nhwc_strip(a, Storage::kF32).pixels == 7);
  CHECK(depthwise_nhwc_strip(a, Storage::kBf16).pixels == 0);
  a.stride_w = 1, a.kernel_h = a.kernel_w = 5;
  CHECK(depthwise_nhwc_strip(a, Storage::kF32).pixels == 7);
  CHECK(depthwise_nhwc_strip(a, Storage::kF16).pixels == 0);
  a.out_w = 3;
  CHECK(depthwise_nhwc_strip(a, Storage::kF32).pixels == 0);
  a.out_w = 28, a.filters = 192;
  CHECK(depthwise_nhwc_strip(a, Storage::kF32).pixels == 0);
  a.channels = a.filters = 95;
  CHECK(depthwise_nhwc_strip(a, Storage::kF32).pixels == 0);
  a.channels = a.filters = 96, a.kernel_h = a.kernel_w = 7;
  CHECK(depthwise_nhwc_strip(a, Storage::kF32).pixels == 0);
  a.kernel_h = a.kernel_w = 3, a.stride_w = 3;
  CHECK(depthwise_nhwc_strip(a, Storage::kF32).pixels == 0);
  a.stride_w = 2, a.dilation_w = 2;
  CHECK(depthwise_nhwc_strip(a, Storage::kF32).pixels == 0);
  // The tile kernel: channels a multiple of 8, 3x3 or 5x5 windows of equal
  // stride 1 or 2 and no dilation; by default only where it won (unit stride, rows of 14 to 28,
  // 128 channels or more).
  a = DepthwiseArgs{};
  a.channels = a.filters = 192, a.out_h = a.out_w = 28;
  a.kernel_h = a.kernel_w = 5, a.stride_h = a.stride_w = 1, a.dilation_h = a.dilation_w = 1;
  // By default 64 KiB at 16-bit storage: 16 staged rows of 32 x 128 bytes, 12 output rows a
  // tile at most, 28 rows as 3 x 10, 14 staged rows.
  const DepthwiseTile t28d = depthwise_nhwc_tile(a, Storage::kBf16);
  CHECK(DepthwiseNhwcKnobs{}.tile_smem_16 == size_t(64) << 10);
  CHECK(t28d.tile_w == 28);
  CHECK(t28d.tile_h == 10);
  CHECK(t28d.row_tiles == 3);
  CHECK(t28d.smem == size_t(14) * 32 * 128);
  CHECK(t28d.threads == 256);  // 10 rows of 7 strips: more than 16
  // A 7x7 map is one tile of 14 strips: blocks of 128 threads, unless small_tile_strips says not.
  DepthwiseArgs a7 = a;
  a7.channels = a7.filters = 1152, a7.out_h = a7.out_w = 7;
  const DepthwiseTile t7 = depthwise_nhwc_tile(a7, Storage::kF16);
  CHECK(t7.tile_h == 7);
  CHECK(t7.tile_w == 7);
  CHECK(t7.threads == 128);
  CHECK(t7.rows == 1);  // half blocks: one output row a lane
  DepthwiseNhwcKnobs whole;
  whole.small_tile_strips = 0;
  CHECK(depthwise_nhwc_tile(a7, Storage::kF16, whole).threads == 256);
  // Two output rows a lane: 16-bit storage, 3x3 windows of stride 1, blocks of 256 threads. A 13x13
  // map is one tile of 13 rows: its patch holds the row past the tile that the last lane strip
  // reads (16 staged rows of 15 pixels, not 15), and the 3 pixels its last strip reads past a row.
  DepthwiseArgs a13 = a;
  a13.kernel_h = a13.kernel_w = 3, a13.in_h = a13.in_w = a13.out_h = a13.out_w = 13;
  for (Storage st16 : {Storage::kF16, Storage::kBf16}) {
    const DepthwiseTile t13 = depthwise_nhwc_tile(a13, st16);
    CHECK(t13.tile_h == 13);
    CHECK(t13.threads == 256);
    CHECK(t13.rows == 2);
    CHECK(t13.smem == size_t(16) * 15 * 128 + 3 * 128);
  }
  DepthwiseNhwcKnobs one_row;
  one_row.tile_rows = 1;
  const DepthwiseTile t13one = depthwise_nhwc_tile(a13, Storage::kF16, one_row);
  CHECK(t13one.rows == 1);
  CHECK(t13one.smem == size_t(15) * 15 * 128 + 3 * 128);
  CHECK(depthwise_nhwc_tile(a13, Storage::kF32).rows == 1);  // FP32 storage: slower with two
  CHECK(depthwise_nhwc_tile(a, Storage::kF16).rows == 1);    // 5x5: 105-113 registers, slower
  DepthwiseArgs a13s2 = a13;
  a13s2.in_h = a13s2.in_w = 26, a13s2.stride_h = a13s2.stride_w = 2;
  CHECK(depthwise_nhwc_tile(a13s2, Storage::kF16).rows == 1);  // stride 2: mostly slower
  DepthwiseNhwcKnobs eight_px;                                 // 8 pixels a lane: no half-block instances
  eight_px.tile_pixels = 8;
  CHECK(depthwise_nhwc_tile(a7, Storage::kF16, eight_px).threads == 256);
  // At FP32 storage: a 31 KiB patch, 6 half blocks an SM against 3: halved; at stride 2 (14 -> 7) a
  // 73 KiB one, 3 blocks an SM either way: not (it measured slower, Session 43).
  CHECK(depthwise_nhwc_tile(a7, Storage::kF32).threads == 128);
  DepthwiseArgs s2 = a7;
  s2.in_h = s2.in_w = 14, s2.stride_h = s2.stride_w = 2;
  const DepthwiseTile t2 = depthwise_nhwc_tile(s2, Storage::kF32);
  CHECK(t2.smem == size_t(17) * 17 * 64 * 4 + 2 * 64 * 4);  // and the last strip's 2 columns past the row
  CHECK(t2.threads == 256);
  // 16-bit at stride 2: 37 KiB, 5 half blocks an SM against 3: halved.
  CHECK(depthwise_nhwc_tile(s2, Storage::kBf16).threads == 128);
  DepthwiseNhwcKnobs k46;
  k46.tile_smem_16 = size_t(46) << 10;
  const DepthwiseTile t28 = depthwise_nhwc_tile(a, Storage::kBf16, k46);
  CHECK(t28.smem > 0);
  CHECK(t28.smem <= k46.tile_smem_16);
  CHECK(t28.tile_w == 28);  // one column tile: (28 - 1) + 5 staged columns of 128 bytes
  // 46 KiB hold 11 staged rows of 32 x 128 bytes: 7 output rows a tile, 28 rows as 4 x 7.
  CHECK(t28.tile_h == 7);
  CHECK(t28.row_tiles == 4);
  CHECK(t28.smem == size_t(11) * 32 * 128);  // 7 strips of 4: no strip reads past the row
  CHECK(t28.pixels == 4);
  DepthwiseNhwcKnobs large;  // 100 KiB (opted in above 48): 25 rows, 21 outputs, 28 as 2 x 14
  large.set_tile_smem(size_t(100) << 10), large.tile_pixels = 8;
  const DepthwiseTile t28l = depthwise_nhwc_tile(a, Storage::kBf16, large);
  CHECK(t28l.tile_h == 14);
  CHECK(t28l.row_tiles == 2);
  CHECK(t28l.smem == size_t(18) * 32 * 128 + 4 * 128);  // 4 strips of 8: 4 pixels past the row
  CHECK(t28l.pixels == 8);
  large.tile_pixels = 2;  // not a width the kernel is built for
  CHECK(depthwise_nhwc_tile(a, Storage::kBf16, large).smem == 0);
  // FP32 storage: pixels of 256 bytes, rows of at most 16 outputs (28 as 2 x 14): 18 staged
  // columns, 10 staged rows and the 2 pixels a row's last strip of 4 reads past it in 46 KiB: 6
  // output rows a tile, 28 rows as 5 x 6.
  const DepthwiseTile t28f = depthwise_nhwc_tile(a, Storage::kF32);
  CHECK(t28f.col_tiles == 2);
  CHECK(t28f.tile_w == 14);
  CHECK(t28f.tile_h == 6);
  CHECK(t28f.row_tiles == 5);
  CHECK(t28f.smem == size_t(10) * 18 * 256 + 2 * 256);
  DepthwiseNhwcKnobs never;
  never.set_tile_smem(0);
  CHECK(depthwise_nhwc_tile(a, Storage::kF16, never).smem == 0);
  CHECK(depthwise_nhwc_tile(a, Storage::kF32, never).smem == 0);
  DepthwiseNhwcKnobs f32_only;  // each storage its own budget
  f32_only.tile_smem_16 = 0;
  CHECK(depthwise_nhwc_tile(a, Storage::kF16, f32_only).smem == 0);
  CHECK(depthwise_nhwc_tile(a, Storage::kF32, f32_only).smem == t28f.smem);
  // At FP32 only where it won (16-bit storage: wherever it runs, each below).
  a.channels = a.filters = 96;  // fewer than 128 channels: measured slower, unless everywhere
  CHECK(depthwise_nhwc_tile(a, Storage::kF32).smem == 0);
  CHECK(depthwise_nhwc_tile(a, Storage::kF16).smem > 0);
  a.channels = a.filters = 192;
  a.out_h = a.out_w = 112;  // measured slower there, unless everywhere
  CHECK(depthwise_nhwc_tile(a, Storage::kF32).smem == 0);
  CHECK(depthwise_nhwc_tile(a, Storage::kBf16).tile_w == 28);  // 112 as 4 x 28
  a.out_h = a.out_w = 7;  // 5x5 windows on a 7x7 map: faster since Session 23; 3x3 ones not
  CHECK(depthwise_nhwc_tile(a, Storage::kF32).tile_w == 7);
  CHECK(depthwise_nhwc_tile(a, Storage::kF16).tile_w == 7);
  a.kernel_h = a.kernel_w = 3;
  CHECK(depthwise_nhwc_tile(a, Storage::kF32).smem == 0);
  CHECK(depthwise_nhwc_tile(a, Storage::kF16).tile_w == 7);
  a.out_h = a.out_w = 28, a.stride_h = a.stride_w = 2;  // 3x3 of stride 2: slower
  CHECK(depthwise_nhwc_tile(a, Storage::kF32).smem == 0);
  CHECK(depthwise_nhwc_tile(a, Storage::kF16).tile_w == 14);  // rows of at most 32 / 2: 28 as 2 x 14
  a.kernel_h = a.kernel_w = 5;                                // 5x5 of stride 2: faster
  CHECK(depthwise_nhwc_tile(a, Storage::kF16).tile_w == 14);  // 28 outputs as 2 x 14
  // FP32, stride 2: rows of at most 16 / 2 outputs (28 as 4 x 7) and twice the bytes: 21 staged
  // rows of 17 pixels of 256 bytes and the 2 that the last strip reads past them in 92 KiB, 9
  // output rows, 28 as 4 x 7.
  const DepthwiseTile f2 = depthwise_nhwc_tile(a, Storage::kF32);
  CHECK(f2.tile_w == 7);
  CHECK(f2.tile_h == 7);
  CHECK(f2.row_tiles == 4);
  CHECK(f2.smem == size_t(17) * 17 * 256 + 2 * 256);
  a.stride_h = a.stride_w = 1;
  a.out_h = a.out_w = 56;
  DepthwiseNhwcKnobs everywhere;
  everywhere.tile_everywhere = true;
  const DepthwiseTile t56 = depthwise_nhwc_tile(a, Storage::kF16);
  CHECK(t56.col_tiles == 2);  // 56 as 2 x 28
  CHECK(t56.tile_w == 28);
  a.stride_h = a.stride_w = 2;
  CHECK(depthwise_nhwc_tile(a, Storage::kF16, everywhere).tile_w == 14);  // 56 outputs as 4 x 14
  a.stride_w = 1;                                                         // unequal strides
  CHECK(depthwise_nhwc_tile(a, Storage::kF16, everywhere).smem == 0);
  a.stride_w = 2, a.dilation_h = 2;
  CHECK(depthwise_nhwc_tile(a, Storage::kF16, everywhere).smem == 0);
  a.dilation_h = 1, a.channels = a.filters = 100;  // not a multiple of 8
  CHECK(depthwise_nhwc_tile(a, Storage::kF16, everywhere).smem == 0);
}

TEST_CASE("depthwise: where the channels-last kernels compute the whole-plane mean, in how many slots") {
  // No GPU needed. EfficientNet-B0's depthwise convs at 224x224.
  auto dw = [](int c, int in, int k, int s) {
    DepthwiseArgs a;
    a.channels = a.filters = c;
    a.in_h = a.in_w = in;
    a.kernel_h = a.kernel_w = k, a.stride_h = a.stride_w = s, a.pad_h = a.pad_w = k / 2;
    a.out_h = a.out_w = (in + 2 * (k / 2) - k) / s + 1;
    return a;
  };
  DepthwiseNhwcKnobs all;  // the mean in the strip and vector kernels too
  all.mean_everywhere = true;
  // The strip and vector kernels: a block an image's 8 rows (112 as 14 blocks) and 256 of a row's
  // items (chunks). 112x112x32, 3x3: the strip kernel, 4 filters x 4 pixels (16-bit) or 2 x 8
  // (FP32): 224 items a row, one chunk. At 16-bit storage the tile kernel runs there by default
  // (untiled: without it): 4 column tiles of 28 x 8 row tiles of 14 rows (17 staged rows of 30
  // pixels of 128 bytes fit 64 KiB: 15 output rows, 112 as 8 x 14).
  DepthwiseNhwcKnobs untiled = all;
  untiled.set_tile_smem(0);
  CHECK(depthwise_nhwc_mean_slots(dw(32, 112, 3, 1), Storage::kBf16, untiled) == 14);
  CHECK(depthwise_nhwc_mean_slots(dw(32, 112, 3, 1), Storage::kF32, all) == 14);
  CHECK(depthwise_nhwc_mean_slots(dw(32, 112, 3, 1), Storage::kBf16, all) == 32);
  // 56x56x144, 3x3: the tile kernel, 2 column tiles of 28 x 4 row tiles (17 staged rows of 30 x
  // 128 bytes in 64 KiB: 15 output rows, 56 as 4 x 14); at FP32, 4 column tiles of 14 x 7 row tiles (11
  // staged rows of 16 x 256 bytes and 2 pixels past the last: 9 output rows, 56 as 7 x 8).
  CHECK(depthwise_nhwc_mean_slots(dw(144, 56, 3, 1), Storage::kF16, all) == 8);
  CHECK(depthwise_nhwc_mean_slots(dw(144, 56, 3, 1), Storage::kF32, all) == 28);
  CHECK(depthwise_nhwc_mean_slots(dw(144, 56, 3, 1), Storage::kF32) == 28);  // the tile kernel's by default
  // 112 -> 56, 96 channels, stride 2: the vector kernel, 56 x 12 vectors a row in 3 chunks; the
  // tile kernel, 4 column tiles of 14 x 7 row tiles of 8 rows (17 staged rows of 29 pixels and the
  // 4 that the last strip reads past them in 64 KiB).
  CHECK(depthwise_nhwc_mean_slots(dw(96, 112, 3, 2), Storage::kBf16, untiled) == 7 * 3);
  CHECK(depthwise_nhwc_mean_slots(dw(96, 112, 3, 2), Storage::kBf16, all) == 28);
  // 28x28x240, 5x5: the tile kernel, 3 row tiles of 10 rows x 1 column tile (16 staged rows of
  // 32 pixels in 64 KiB: 12 output rows, 28 as 3 x 10).
  CHECK(depthwise_nhwc_mean_slots(dw(240, 28, 5, 1), Storage::kBf16, all) == 3);
  // 14x14x480, 3x3: one 14x14 tile.
  CHECK(depthwise_nhwc_mean_slots(dw(480, 14, 3, 1), Storage::kF16, all) == 1);
  // 7x7x1152: 5x5 windows, the tile kernel, one tile; 3x3, the strip kernel, one row block of 3
  // chunks (16-bit storage without the tile kernel: 2 strips of 4 pixels x 288 filter quads a row;
  // FP32: one strip of 7 pixels x 576 filter pairs), at 16-bit storage one tile. 14 -> 7, 5x5 of
  // stride 2: one tile.
  CHECK(depthwise_nhwc_mean_slots(dw(1152, 7, 5, 1), Storage::kBf16, all) == 1);
  CHECK(depthwise_nhwc_mean_slots(dw(1152, 7, 3, 1), Storage::kBf16, untiled) == 3);
  CHECK(depthwise_nhwc_mean_slots(dw(1152, 7, 3, 1), Storage::kBf16, all) == 1);
  CHECK(depthwise_nhwc_mean_slots(dw(1152, 7, 3, 1), Storage::kF32, all) == 3);
  CHECK(depthwise_nhwc_mean_slots(dw(672, 14, 5, 2), Storage::kBf16, all) == 1);
  // Partial sums over a quarter of the output's bytes: a 2x2 map's one slot of 16-bit values
  // (16 bytes a filter against 8), not of FP32 ones (16 against 16).
  CHECK(depthwise_nhwc_mean_slots(dw(64, 4, 3, 2), Storage::kBf16, all) == 0);
  CHECK(depthwise_nhwc_mean_slots(dw(64, 4, 3, 2), Storage::kF32, all) == 1);
  // Not where the kernels have no mean: a channel multiplier, a 7x7 window, channels not a
  // multiple of 16 bytes, a tile of 8 pixels a lane, the vector kernel at several pixels a thread.
  DepthwiseArgs m = dw(32, 112, 3, 1);
  m.filters = 64;
  CHECK(depthwise_nhwc_mean_slots(m, Storage::kBf16, all) == 0);
  CHECK(depthwise_nhwc_mean_slots(dw(32, 56, 7, 1), Storage::kBf16, all) == 0);
  CHECK(depthwise_nhwc_mean_slots(dw(36, 56, 3, 1), Storage::kBf16, all) == 0);
  CHECK(depthwise_nhwc_mean_slots(dw(36, 56, 3, 1), Storage::kF32, all) > 0);
  // By default only the tile kernel computes it (where it was measured to win).
  CHECK(depthwise_nhwc_mean_slots(dw(240, 28, 5, 1), Storage::kBf16) == 3);
  CHECK(depthwise_nhwc_mean_slots(dw(480, 14, 3, 1), Storage::kF16) == 1);
  CHECK(depthwise_nhwc_mean_slots(dw(32, 112, 3, 1), Storage::kBf16) == 32);  // 16-bit: tiled everywhere
  CHECK(depthwise_nhwc_mean_slots(dw(96, 112, 3, 2), Storage::kBf16) == 28);
  CHECK(depthwise_nhwc_mean_slots(dw(32, 112, 3, 1), Storage::kF32) == 0);  // FP32: the strip kernel
  CHECK(depthwise_nhwc_mean_slots(dw(96, 112, 3, 2), Storage::kF32) == 0);
  // FP32: 5 row tiles of 6 rows, 2 column tiles of 14.
  CHECK(depthwise_nhwc_mean_slots(dw(240, 28, 5, 1), Storage::kF32) == 10);
  // FP32 strips of stride 2: not even then (measured slower).
  CHECK(depthwise_nhwc_mean_slots(dw(96, 112, 3, 2), Storage::kF32, all) == 0);
  DepthwiseNhwcKnobs eight;
  eight.tile_pixels = 8;
  CHECK(depthwise_nhwc_mean_slots(dw(240, 28, 5, 1), Storage::kBf16, eight) == 0);
  DepthwiseNhwcKnobs wide = all;
  wide.row_pixels = 4, wide.strip_pixels = 0, wide.set_tile_smem(0);  // the vector kernel, 4 pixels a thread
  CHECK(depthwise_nhwc_mean_slots(dw(32, 112, 3, 1), Storage::kBf16, wide) == 0);
  wide.row_pixels = 1;  // 1 pixel a thread: 14 row blocks x 2 chunks of 448 vectors
  CHECK(depthwise_nhwc_mean_slots(dw(32, 112, 3, 1), Storage::kBf16, wide) == 28);
}

// The cutlass convolution runs a merged fire module's conv as two: the leading filters that read
// only the centre tap (the 1x1 branch merge_concat_convs centred) as a 1x1 conv, the rest as they
// are (engine/gpu/conv2d_cutlass.h). Which filters qualify is found from the weights.
TEST_CASE("cutlass: cutlass_centre_split finds the centred 1x1 branch of a merged conv (no GPU needed)") {
  const std::string layers = R"(  - {name: e1, type: conv, filters: 8, kernel: 1}
  - {name: e3, type: conv, filters: 12, kernel: 3, pad: 1, inputs: input}
  - {name: cat, type: concat, inputs: [e1, e3]}
  - {name: f, type: flatten}
  - {name: fc, type: fc, outputs: 4}
)";
  Network merged = test::parse_layers(layers);
  test::random_weights(merged, 5);
  REQUIRE(merge_concat_convs(merged).size() == 1);
  const Layer& m = *merged.layers[static_cast<size_t>(merged.find("e1"))];
  const ConvParams& p = layer_as<ConvLayer>(m).p;
  REQUIRE(p.filters == 20);
  CHECK(cutlass_centre_split(p, m.weight("weight").ptr()) == 8);
  const ConvParams c = cutlass_centre_part(p, 8), r = cutlass_rest_part(p, 8);
  CHECK(c.filters == 8);
  CHECK(c.kernel_h == 1);
  CHECK(c.kernel_w == 1);
  CHECK(c.pad_h == 0);
  CHECK(c.out_h == p.out_h);
  CHECK(r.filters == 12);
  CHECK(r.kernel_h == 3);
  CHECK(r.pad_w == 1);
  // Synthetic 3x3 weights, 2 channels: the first `centre` filters centre-only.
  auto weights = [](int64_t filters, int64_t centre) {
    std::vector<float> w(static_cast<size_t>(filters * 2 * 9), 0.5f);
    for (int64_t k = 0; k < centre; ++k)
      for (int64_t t = 0; t < 18; ++t)
        if (t % 9 != 4) w[static_cast<size_t>(k * 18 + t)] = 0.f;
    return w;
  };
  ConvParams q;
  q.filters = 16, q.kernel_h = q.kernel_w = 3, q.pad_h = q.pad_w = 1, q.in_c = 2;
  CHECK(cutlass_centre_split(q, weights(16, 8).data()) == 8);
  CHECK(cutlass_centre_split(q, weights(16, 6).data()) == 4);   // whole groups of 4
  CHECK(cutlass_centre_split(q, weights(16, 16).data()) == 0);  // all of them: nothing left to split
  CHECK(cutlass_centre_split(q, weights(16, 3).data()) == 0);   // fewer than 4
  q.filters = 14;
  CHECK(cutlass_centre_split(q, weights(14, 8).data()) == 0);  // the rest is not a multiple of 4
  q.filters = 16, q.stride_h = q.stride_w = 2;
  CHECK(cutlass_centre_split(q, weights(16, 8).data()) == 8);  // any stride: the same pixels
  q.pad_w = 0;
  CHECK(cutlass_centre_split(q, weights(16, 8).data()) == 0);  // the centre is not the 1x1's pixel
  q.pad_w = 1, q.groups = 2;
  CHECK(cutlass_centre_split(q, weights(16, 8).data()) == 0);
  q.groups = 1, q.dilation_h = 2;
  CHECK(cutlass_centre_split(q, weights(16, 8).data()) == 0);  // pad 1 does not centre a dilated 3x3
  q.pad_h = 2;
  CHECK(cutlass_centre_split(q, weights(16, 8).data()) == 8);
}

TEST_CASE("gpu: cutlass convolution (3xTF32) vs plain loops, every tile, FP32-level accuracy" *
          doctest::skip(!gpu_present() || !cutlass_missing().empty())) {
  Stream st;
  struct Case {
    int n, c, h, w, k, kh, kw, sh, sw, ph, pw, dh, dw;
    Act act;
    bool residual;
  };
  // ResNet's 3x3 (stride 1 and 2, with the residual), a 1x1 with ReLU6 and the residual, a 7x7
  // stride-2 stem on 4 channels, a dilated and strided window of unequal sides, filters not a
  // multiple of any tile.
  const Case cases[] = {{3, 16, 14, 14, 32, 3, 3, 1, 1, 1, 1, 1, 1, Act::kRelu, false},
                        {2, 64, 15, 13, 64, 3, 3, 2, 2, 1, 1, 1, 1, Act::kIdentity, true},
                        {5, 32, 9, 9, 96, 1, 1, 1, 1, 0, 0, 1, 1, Act::kRelu6, true},
                        {2, 4, 23, 21, 8, 7, 7, 2, 2, 3, 3, 1, 1, Act::kRelu, false},
                        {1, 8, 12, 17, 12, 3, 5, 1, 2, 2, 2, 2, 1, Act::kIdentity, false},
                        {2, 12, 10, 10, 20, 5, 5, 1, 1, 2, 2, 1, 1, Act::kRelu, true}};
  uint32_t seed = 900;
  for (const Case& c : cases) {
    ConvParams p;
    p.in_c = c.c, p.in_h = c.h, p.in_w = c.w, p.filters = c.k, p.kernel_h = c.kh, p.kernel_w = c.kw;
    p.stride_h = c.sh, p.stride_w = c.sw, p.pad_h = c.ph, p.pad_w = c.pw, p.dilation_h = c.dh,
    p.dilation_w = c.dw;
    p.out_h = (c.h + 2 * c.ph - p.extent_h()) / c.sh + 1;
    p.out_w = (c.w + 2 * c.pw - p.extent_w()) / c.sw + 1;
    REQUIRE(cutlass_cannot_run(p, Precision::kFp32, true, c.n).empty());
    const size_t out = size_t(c.n) * p.out_h * p.out_w * c.k;
    const std::vector<float> x = test::random_floats(size_t(c.n) * c.h * c.w * c.c, seed++, -1.f, 1.f);
    const std::vector<float> w = test::random_floats(size_t(c.k) * c.kh * c.kw * c.c, seed++, -0.5f, 0.5f);
    const std::vector<float> b = test::random_floats(size_t(c.k), seed++, -0.5f, 0.5f);
    const std::vector<float> z = test::random_floats(out, seed++, -1.f, 1.f);
    // Plain loops over the NHWC / KRSC tensors in double, and each output's sum of |terms|
    // (what FP32 rounding errors scale with).
    std::vector<double> want(out), scale(out);
    for (int i = 0; i < c.n; ++i)
      for (int oy = 0; oy < p.out_h; ++oy)
        for (int ox = 0; ox < p.out_w; ++ox)
          for (int f = 0; f < c.k; ++f) {
            double sum = b[size_t(f)], mag = std::fabs(b[size_t(f)]);
            for (int ky = 0; ky < c.kh; ++ky)
              for (int kx = 0; kx < c.kw; ++kx) {
                const int iy = oy * c.sh - c.ph + ky * c.dh, ix = ox * c.sw - c.pw + kx * c.dw;
                if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
                for (int ch = 0; ch < c.c; ++ch) {
                  const double t = double(x[((size_t(i) * c.h + iy) * c.w + ix) * c.c + ch]) *
                                   w[((size_t(f) * c.kh + ky) * c.kw + kx) * c.c + ch];
                  sum += t, mag += std::fabs(t);
                }
              }
            const size_t o = ((size_t(i) * p.out_h + oy) * p.out_w + ox) * c.k + f;
            if (c.residual) sum += z[o], mag += std::fabs(z[o]);
            want[o] = act_ref(ActFn{c.act}, sum), scale[o] = mag;
          }
    DevBuf dx = upload(x.data(), x.size()), dw = upload(w.data(), w.size()), db = upload(b.data(), b.size()),
           dz = upload(z.data(), z.size()), dy(out * sizeof(float));
    const float* zp = c.residual ? dz.as<float>() : nullptr;
    for (int t = 0; t < cutlass_tiles(); ++t) {
      CUDA_CHECK(
          cudaMemsetAsync(dy.get(), 0xff, out * sizeof(float), st.s));  // NaNs where nothing is written
      launch_conv_cutlass(t, p, c.n, dx.as<float>(), dw.as<float>(), db.as<float>(), zp, dy.as<float>(),
                          ActFn{c.act}, st.s);
      const std::vector<float> got = download(dy, out, st.s);
      INFO("tile " << cutlass_tile_name(t) << ", C" << c.c << " " << c.h << "x" << c.w << " -> K" << c.k
                   << " " << c.kh << "x" << c.kw << " s" << c.sh << "x" << c.sw << " p" << c.ph << "x" << c.pw
                   << " d" << c.dh << "x" << c.dw << " n" << c.n << " " << act_fn_name(ActFn{c.act})
                   << (c.residual ? " +z" : ""));
      // 3xTF32 is within FP32's rounding of the sum (1xTF32 would be off by about 2^-11 of it).
      size_t bad = out;
      for (size_t o = 0; o < out && bad == out; ++o)
        if (!(std::fabs(got[o] - want[o]) <= 1e-6 + 1e-5 * scale[o])) bad = o;
      if (bad != out) INFO("element " << bad << ": gpu " << got[bad] << ", expected " << want[bad]);
      CHECK(bad == out);
    }
    const int best = cutlass_pick_tile(p, c.n, dx.as<float>(), dw.as<float>(), db.as<float>(), zp,
                                       dy.as<float>(), ActFn{c.act}, st.s);
    CHECK((best >= 0 && best < cutlass_tiles()));
  }
  // A block whose tensors pass 2 GiB runs as launches of 2047 images (1 MiB an image here):
  // the images on either side of each seam, and the last, against plain loops.
  {
    ConvParams p;
    p.in_c = p.filters = 4, p.kernel_h = p.kernel_w = 1, p.in_h = p.in_w = p.out_h = p.out_w = 256;
    const int64_t n = 4100, image = 256 * 256 * 4;
    std::vector<float> x(size_t(n * image));
    for (size_t i = 0; i < x.size(); ++i) x[i] = float((i * 2654435761u) % 1999) / 1000.f - 1.f;
    const std::vector<float> w = test::random_floats(16, seed++, -1.f, 1.f),
                             b = test::random_floats(4, seed++, -1.f, 1.f);
    DevBuf dx = upload(x.data(), x.size()), dw = upload(w.data(), w.size()), db = upload(b.data(), b.size()),
           dy(x.size() * sizeof(float));
    launch_conv_cutlass(0, p, n, dx.as<float>(), dw.as<float>(), db.as<float>(), nullptr, dy.as<float>(),
                        ActFn{Act::kRelu}, st.s);
    const std::vector<float> y = download(dy, x.size(), st.s);
    for (int64_t i : {int64_t{0}, int64_t{2046}, int64_t{2047}, int64_t{4093}, int64_t{4094}, n - 1}) {
      INFO("image " << i);
      size_t bad = 0;
      for (int64_t px = 0; px < 256 * 256; ++px)
        for (int f = 0; f < 4; ++f) {
          double sum = b[size_t(f)];
          for (int c = 0; c < 4; ++c) sum += double(x[size_t(i * image + px * 4 + c)]) * w[size_t(f * 4 + c)];
          if (!(std::fabs(y[size_t(i * image + px * 4 + f)] - std::max(sum, 0.0)) <= 1e-5)) ++bad;
        }
      CHECK(bad == 0);
    }
  }
  // An activation the epilogue cannot apply, and a misaligned tensor, are refused.
  ConvParams p;
  p.in_c = p.filters = 4, p.kernel_h = p.kernel_w = 1, p.in_h = p.in_w = p.out_h = p.out_w = 2;
  DevBuf d(64 * sizeof(float));
  CHECK_THROWS_AS(launch_conv_cutlass(0, p, 1, d.as<float>(), d.as<float>(), d.as<float>(), nullptr,
                                      d.as<float>(), ActFn{Act::kSilu}, st.s),
                  Error);
  CHECK_THROWS_AS(launch_conv_cutlass(0, p, 1, d.as<float>() + 1, d.as<float>(), d.as<float>(), nullptr,
                                      d.as<float>(), ActFn{}, st.s),
                  Error);
}

TEST_CASE(
    "conv_cannot_run: channels last leaves cuDNN, cutlass and the depthwise kernel, which needs no tile "
    "there") {
  auto conv = [](int64_t c, int64_t f, int64_t groups, int64_t w) {
    ConvParams p;
    p.in_c = c, p.filters = f, p.groups = groups;
    p.kernel_h = p.kernel_w = 3, p.pad_h = p.pad_w = 1;
    p.in_h = p.out_h = 8, p.in_w = p.out_w = w;
    return p;
  };
  const ConvParams dense = conv(16, 32, 1, 8), dw = conv(32, 32, 32, 8), wide = conv(32, 64, 32, 20000),
                   grouped = conv(32, 32, 4, 8);
  const Precision fp32 = Precision::kFp32;
  for (bool nhwc : {false, true}) {
    INFO((nhwc ? "channels last" : "NCHW"));
    CHECK(conv_cannot_run(dense, ConvAlgo::kCudnn, 16, fp32, nhwc).empty());
    CHECK(conv_cannot_run(dense, ConvAlgo::kIm2col, 16, fp32, nhwc).empty() == !nhwc);
    CHECK(conv_cannot_run(dense, ConvAlgo::kImplicit, 16, fp32, nhwc).empty() == !nhwc);
    CHECK_FALSE(conv_cannot_run(dense, ConvAlgo::kDepthwise, 16, fp32, nhwc).empty());
    CHECK(conv_cannot_run(dw, ConvAlgo::kDepthwise, 16, fp32, nhwc).empty());
    // A row of 20000 outputs does not fit the NCHW kernel's shared memory; channels last stages
    // nothing (a channel multiplier of 2).
    CHECK(conv_cannot_run(wide, ConvAlgo::kDepthwise, 16, fp32, nhwc).empty() == nhwc);
    CHECK(conv_cannot_run(grouped, ConvAlgo::kDepthwise, 16, fp32, nhwc).find("groups (4)") !=
          std::string::npos);
    // cutlass: FP32 channels last only (where the build has CUTLASS).
    const std::string cut = conv_cannot_run(dense, ConvAlgo::kCutlass, 16, fp32, nhwc);
    if (!cutlass_missing().empty())
      CHECK(cut == cutlass_missing());
    else
      CHECK(cut.empty() == nhwc);
  }
  CHECK(conv_cannot_run(dense, ConvAlgo::kImplicit, 16, fp32, true).find("--layout nhwc") !=
        std::string::npos);
}

TEST_CASE(
    "conv_cannot_run: the stem kernel takes 1 to 4 input channels, filters a multiple of 8, channels "
    "last, any precision") {
  auto conv = [](int64_t c, int64_t f, int64_t k, int64_t stride) {
    ConvParams p;
    p.in_c = c, p.filters = f, p.kernel_h = p.kernel_w = k, p.stride_h = p.stride_w = stride;
    p.pad_h = p.pad_w = k / 2;
    p.in_h = p.in_w = 224;
    p.out_h = p.out_w = (224 + 2 * (k / 2) - k) / stride + 1;
    return p;
  };
  const Precision fp16 = Precision::kFp16, bf16 = Precision::kBf16;
  CHECK(conv_cannot_run(conv(3, 64, 7, 2), ConvAlgo::kStem, 16, fp16, true).empty());
  CHECK(conv_cannot_run(conv(3, 64, 7, 2), ConvAlgo::kStem, 16, bf16, true).empty());
  CHECK(conv_cannot_run(conv(1, 8, 3, 1), ConvAlgo::kStem, 16, bf16, true).empty());
  CHECK(conv_cannot_run(conv(4, 96, 7, 1), ConvAlgo::kStem, 16, fp16, true).empty());  // 196 taps: 7x7x4
  for (Precision p : {Precision::kFp32, Precision::kTf32}) {
    // FP32 storage: TF32 / 3xTF32 products; its values take twice the shared memory, so an 8x8
    // of 4 channels (256 taps) that fits in 16 bits does not.
    CHECK(conv_cannot_run(conv(3, 64, 7, 2), ConvAlgo::kStem, 16, p, true).empty());
    CHECK(conv_cannot_run(conv(4, 96, 7, 2), ConvAlgo::kStem, 16, p, true).empty());
    CHECK(conv_cannot_run(conv(4, 96, 8, 1), ConvAlgo::kStem, 16, p, true).find("shared memory") !=
          std::string::npos);
  }
  CHECK(conv_cannot_run(conv(4, 96, 8, 1), ConvAlgo::kStem, 16, fp16, true).empty());
  CHECK(conv_cannot_run(conv(3, 64, 7, 2), ConvAlgo::kStem, 16, fp16, false).find("channels last") !=
        std::string::npos);
  CHECK(conv_cannot_run(conv(5, 64, 3, 1), ConvAlgo::kStem, 16, fp16, true).find("input channels (5)") !=
        std::string::npos);
  CHECK(conv_cannot_run(conv(3, 20, 3, 1), ConvAlgo::kStem, 16, fp16, true).find("filters (20)") !=
        std::string::npos);
  CHECK(conv_cannot_run(conv(3, 64, 11, 4), ConvAlgo::kStem, 16, fp16, true).find("taps") !=
        std::string::npos);
  ConvParams grouped = conv(4, 64, 3, 1);
  grouped.groups = 2;
  CHECK(conv_cannot_run(grouped, ConvAlgo::kStem, 16, fp16, true).find("groups (2)") != std::string::npos);
}

TEST_CASE("cutlass_cannot_run: FP32 channels last, dense, channels and filters in fours, int32 tensors") {
  ConvParams p;
  p.in_c = 64, p.filters = 128, p.kernel_h = p.kernel_w = 3, p.pad_h = p.pad_w = 1;
  p.in_h = p.out_h = p.in_w = p.out_w = 56;
  if (!cutlass_missing().empty()) {
    MESSAGE("built without CUTLASS: ", cutlass_missing());
    CHECK(cutlass_cannot_run(p, Precision::kFp32, true, 8) == cutlass_missing());
    return;
  }
  CHECK(cutlass_tiles() >= 1);
  CHECK(std::string(cutlass_tile_name(0)).find('x') != std::string::npos);
  CHECK_THROWS_AS(cutlass_tile_name(cutlass_tiles()), Error);
  CHECK(cutlass_cannot_run(p, Precision::kFp32, true, 8).empty());
  for (Precision q : {Precision::kTf32, Precision::kFp16, Precision::kBf16})
    CHECK(cutlass_cannot_run(p, q, true, 8).find("FP32 channels last") != std::string::npos);
  CHECK(cutlass_cannot_run(p, Precision::kFp32, false, 8).find("--layout nhwc") != std::string::npos);
  ConvParams q = p;
  q.in_c = 3;  // an RGB stem
  CHECK(cutlass_cannot_run(q, Precision::kFp32, true, 8).find("multiples of 4") != std::string::npos);
  q = p;
  q.filters = 10;
  CHECK(cutlass_cannot_run(q, Precision::kFp32, true, 8).find("multiples of 4") != std::string::npos);
  q = p;
  q.groups = 2;
  CHECK(cutlass_cannot_run(q, Precision::kFp32, true, 8).find("groups (2)") != std::string::npos);
  // A block of any size runs (in launches under 2 GiB a tensor); one image of 2 GiB does not.
  CHECK(cutlass_cannot_run(p, Precision::kFp32, true, 100000).empty());
  q = p;
  q.in_h = q.in_w = q.out_h = q.out_w = 4096;  // 4096 x 4096 x 128 outputs: 8 GiB
  CHECK(cutlass_cannot_run(q, Precision::kFp32, true, 1).find("2 GiB") != std::string::npos);
  CHECK(cutlass_fuses(ActFn{Act::kRelu6}));
  CHECK_FALSE(cutlass_fuses(ActFn{Act::kSilu}));
}

TEST_CASE("depthwise_config packs small planes, tiles large ones and refuses what does not fit") {
  DepthwiseArgs a;
  a.channels = a.filters = 96, a.kernel_h = a.kernel_w = 3, a.pad_h = a.pad_w = 1;
  a.in_h = a.in_w = a.out_h = a.out_w = 7;
  DepthwiseConfig c = depthwise_config(a);
  REQUIRE(c.ok);
  CHECK(c.planes > 1);  // 49 outputs a plane: several planes per block
  CHECK(c.rows == 7);
  CHECK(c.row_tiles == 1);
  a.in_h = a.in_w = a.out_h = a.out_w = 112;
  c = depthwise_config(a);
  REQUIRE(c.ok);
  CHECK(c.planes == 1);
  CHECK(c.rows < 112);
  CHECK(c.row_tiles == (112 + c.rows - 1) / c.rows);
  CHECK(c.patch_h == c.rows + 2);
  CHECK(c.patch_w == 114);
  CHECK(c.smem <= (48u << 10));
  a.in_w = a.out_w = 20000;  // one row of patch is 80 KB
  c = depthwise_config(a);
  CHECK(!c.ok);
  CHECK(c.why.find("shared memory") != std::string::npos);
  a.in_w = a.out_w = 7;
  a.filters = 100;  // not a multiple of the 96 channels
  c = depthwise_config(a);
  CHECK(!c.ok);
  CHECK(c.why.find("multiple") != std::string::npos);
}

#endif  // CNNRUN_HAVE_GPU
