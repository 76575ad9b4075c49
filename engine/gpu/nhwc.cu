// The channels-last passes. Each is memory-bound, so a thread moves 16 bytes where the channel
// count allows it (8 FP16/BF16 or 4 FP32 values of one pixel: the channels are contiguous), and
// one value otherwise, in a grid-stride loop. Values are loaded to FP32, computed with the NCHW
// kernels' formulas (__fmul_rn/__fadd_rn where the CPU reference multiplies and adds apart) and
// rounded to the storage format once, when stored.
#include <algorithm>
#include <climits>
#include <type_traits>

#include "engine/gpu/activation.cuh"
#include "engine/gpu/check.h"
#include "engine/gpu/fast_div.cuh"
#include "engine/gpu/grid_stride.h"
#include "engine/gpu/nhwc.h"
#include "engine/gpu/pool_window.cuh"
#include "engine/gpu/storage.cuh"

namespace cnnrun::gpu {

Storage storage_of(Precision p) {
  return p == Precision::kFp16 ? Storage::kF16 : p == Precision::kBf16 ? Storage::kBf16 : Storage::kF32;
}
int64_t storage_bytes(Storage t) { return t == Storage::kF32 ? 4 : 2; }
const char* storage_name(Storage t) {
  return t == Storage::kF16 ? "fp16" : t == Storage::kBf16 ? "bf16" : "fp32";
}

namespace {

#define GRID_STRIDE(i, count)                                                   \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (count); \
       i += int64_t(gridDim.x) * blockDim.x)

// One thread per value: any plane (its size not a multiple of 4).
template <typename T>
__global__ void preprocess_nhwc_kernel(const uint8_t* __restrict__ in, T* __restrict__ out, int64_t count,
                                       int channels, int64_t plane, const float* __restrict__ scale,
                                       const float* __restrict__ shift) {
  GRID_STRIDE(i, count) {
    const int c = static_cast<int>(i % channels);
    const int64_t q = i / channels, img = q / plane, p = q % plane;
    const float v = static_cast<float>(in[(img * channels + c) * plane + p]);
    out[i] = to<T>(__fadd_rn(__fmul_rn(v, scale[c]), shift[c]));
  }
}

// Four pixels of one image a thread (the plane a multiple of 4): each channel's four bytes in one
// load, one index division per four pixels (the kernel above spends four 64-bit divisions on each
// value). With C channels known here (1 or 3: grey and RGB), the 4C values go out as 8-byte
// stores; else (C = 0: `channels` of them) one store a value.
template <typename T, int C>
__global__ void preprocess_nhwc_x4_kernel(const uint8_t* __restrict__ in, T* __restrict__ out, int64_t quads,
                                          int channels, int64_t plane, const float* __restrict__ scale,
                                          const float* __restrict__ shift) {
  const int ch = C > 0 ? C : channels;
  GRID_STRIDE(i, quads) {
    const int64_t px = i * 4, img = px / plane, p = px - img * plane;
    const uint8_t* src = in + img * ch * plane + p;
    T* dst = out + px * ch;
    if constexpr (C > 0) {
      alignas(8) T v[4 * C];
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const uchar4 b = *reinterpret_cast<const uchar4*>(src + c * plane);
        const float sc = scale[c], sh = shift[c];
        v[c] = to<T>(__fadd_rn(__fmul_rn(static_cast<float>(b.x), sc), sh));
        v[C + c] = to<T>(__fadd_rn(__fmul_rn(static_cast<float>(b.y), sc), sh));
        v[2 * C + c] = to<T>(__fadd_rn(__fmul_rn(static_cast<float>(b.z), sc), sh));
        v[3 * C + c] = to<T>(__fadd_rn(__fmul_rn(static_cast<float>(b.w), sc), sh));
      }
      static_assert(sizeof(v) % sizeof(uint2) == 0, "four pixels are whole 8-byte words");
#pragma unroll
      for (int k = 0; k < static_cast<int>(sizeof(v) / sizeof(uint2)); ++k)
        reinterpret_cast<uint2*>(dst)[k] = reinterpret_cast<const uint2*>(v)[k];
    } else {
      for (int c = 0; c < ch; ++c) {
        const uchar4 b = *reinterpret_cast<const uchar4*>(src + c * plane);
        const float sc = scale[c], sh = shift[c];
        dst[c] = to<T>(__fadd_rn(__fmul_rn(static_cast<float>(b.x), sc), sh));
        dst[ch + c] = to<T>(__fadd_rn(__fmul_rn(static_cast<float>(b.y), sc), sh));
        dst[2 * ch + c] = to<T>(__fadd_rn(__fmul_rn(static_cast<float>(b.z), sc), sh));
        dst[3 * ch + c] = to<T>(__fadd_rn(__fmul_rn(static_cast<float>(b.w), sc), sh));
      }
    }
  }
}

template <typename T>
__global__ void nchw_to_nhwc_kernel(const float* __restrict__ in, T* __restrict__ out, int64_t count,
                                    int channels, int64_t plane) {
  GRID_STRIDE(i, count) {
    const int c = static_cast<int>(i % channels);
    const int64_t q = i / channels, img = q / plane, p = q % plane;
    out[i] = to<T>(in[(img * channels + c) * plane + p]);
  }
}

template <typename T>
__global__ void nhwc_to_nchw_kernel(const T* __restrict__ in, float* __restrict__ out, int64_t count,
                                    int channels, int64_t plane) {
  GRID_STRIDE(i, count) {  // i indexes the NCHW output: its writes are contiguous
    const int64_t p = i % plane, q = i / plane;
    const int c = static_cast<int>(q % channels);
    const int64_t img = q / channels;
    out[i] = ld(in[(img * plane + p) * channels + c]);
  }
}

template <typename T>
__global__ void to_storage_kernel(const float* __restrict__ in, T* __restrict__ out, int64_t count) {
  GRID_STRIDE(i, count) out[i] = to<T>(in[i]);
}

// out[p][c] = act(in[p][c] * scale[c] + shift[c]), either factor may be absent; V channels a thread.
template <typename T, int V>
__global__ void channel_kernel(const T* in, T* out, int64_t vecs, int channels,
                               const float* __restrict__ scale, const float* __restrict__ shift, ActFn a) {
  GRID_STRIDE(i, vecs) {
    Vec<T, V> x = reinterpret_cast<const Vec<T, V>*>(in)[i];
    const int c0 = static_cast<int>((i * V) % channels);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float v = ld(x.v[k]);
      if (scale) v = __fmul_rn(v, scale[c0 + k]);
      if (shift) v = __fadd_rn(v, shift[c0 + k]);
      x.v[k] = to<T>(act_eval_stored<T>(a, v));
    }
    reinterpret_cast<Vec<T, V>*>(out)[i] = x;
  }
}

constexpr int kMaxInputs = 8;
template <typename T>
struct Inputs {
  const T* p[kMaxInputs];
  int num;
};

template <typename T, int V>
__global__ void add_kernel(Inputs<T> in, T* out, int64_t vecs, ActFn act) {
  GRID_STRIDE(i, vecs) {
    float s[V];
    Vec<T, V> x = reinterpret_cast<const Vec<T, V>*>(in.p[0])[i];
#pragma unroll
    for (int k = 0; k < V; ++k) s[k] = ld(x.v[k]);
    for (int j = 1; j < in.num; ++j) {
      x = reinterpret_cast<const Vec<T, V>*>(in.p[j])[i];
#pragma unroll
      for (int k = 0; k < V; ++k) s[k] = __fadd_rn(s[k], ld(x.v[k]));
    }
#pragma unroll
    for (int k = 0; k < V; ++k) x.v[k] = to<T>(act_eval_stored<T>(act, s[k]));
    reinterpret_cast<Vec<T, V>*>(out)[i] = x;
  }
}

template <typename T>
struct MulArgs {
  const T* p[kMaxInputs];
  bool per_channel[kMaxInputs];
  int num;
};

// V channels of one pixel a thread, blockIdx.y the image: 32-bit indices within an image, and a
// per-channel input read at its image's channels.
template <typename T, int V>
__global__ void mul_kernel(MulArgs<T> a, T* out, int image_vecs, int channels) {
  const int cv = channels / V;
  const int64_t img = blockIdx.y;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < image_vecs; i += gridDim.x * blockDim.x) {
    const int c0 = (i % cv) * V;
    const int64_t at = img * image_vecs + i;
    float r[V];
    for (int j = 0; j < a.num; ++j) {
      const T* src = a.per_channel[j] ? a.p[j] + img * channels + c0 : a.p[j] + at * V;
      const Vec<T, V> x = *reinterpret_cast<const Vec<T, V>*>(src);
#pragma unroll
      for (int k = 0; k < V; ++k) r[k] = j == 0 ? ld(x.v[k]) : __fmul_rn(r[k], ld(x.v[k]));
    }
    Vec<T, V> o;
#pragma unroll
    for (int k = 0; k < V; ++k) o.v[k] = to<T>(r[k]);
    reinterpret_cast<Vec<T, V>*>(out)[at] = o;
  }
}

// Loads a thread issues before it uses the first, in the SE mul whose threads loop over many
// vectors: one at a time left it latency-bound at about half of the memory bandwidth
// (docs/performance.md, Session 15).
constexpr int kLoadsInFlight = 4;

// Squeeze-and-excitation's mul, out = x * scale with scale one value per image and channel: each
// thread loads kLoadsInFlight vectors of x (a grid stride apart) before it multiplies and stores
// any; blockIdx.y the image.
template <typename T, int V>
__global__ void scale_kernel(const T* __restrict__ x, const T* __restrict__ scale, T* __restrict__ out,
                             int image_vecs, int channels) {
  const int cv = channels / V;
  const int64_t img = blockIdx.y;
  const Vec<T, V>* xi = reinterpret_cast<const Vec<T, V>*>(x) + img * image_vecs;
  Vec<T, V>* oi = reinterpret_cast<Vec<T, V>*>(out) + img * image_vecs;
  const T* si = scale + img * channels;
  const int stride = gridDim.x * blockDim.x;
  for (int base = blockIdx.x * blockDim.x + threadIdx.x; base < image_vecs; base += stride * kLoadsInFlight) {
    Vec<T, V> xv[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u)
      if (base + u * stride < image_vecs) xv[u] = xi[base + u * stride];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int i = base + u * stride;
      if (i >= image_vecs) break;
      const Vec<T, V> sv = *reinterpret_cast<const Vec<T, V>*>(si + (i % cv) * V);
      Vec<T, V> o;
#pragma unroll
      for (int k = 0; k < V; ++k) o.v[k] = to<T>(__fmul_rn(ld(xv[u].v[k]), ld(sv.v[k])));
      oi[i] = o;
    }
  }
}

// A pool whose one window is the whole plane (global and 1x1 adaptive pools: squeeze-and-
// excitation's, a network's head): one block per image and tile of blockDim.x channel vectors,
// blockDim.y threads striding over the plane (a warp reads whole pixels' channels), their partial
// results then reduced in shared memory. The one-thread-per-output kernel below would walk a
// 112 x 112 plane alone.
template <typename T, int V>
__global__ void global_pool_nhwc_kernel(const T* __restrict__ in, T* __restrict__ out, int plane,
                                        int channels, bool is_max) {
  extern __shared__ float part[];  // [blockDim.y][blockDim.x * V]
  const int cv = channels / V;
  const int v = blockIdx.y * blockDim.x + threadIdx.x;
  const int64_t img = blockIdx.x;
  float r[V];
#pragma unroll
  for (int k = 0; k < V; ++k) r[k] = is_max ? -INFINITY : 0.f;
  if (v < cv) {
    const T* src = in + img * plane * channels + v * V;
    for (int p = threadIdx.y; p < plane; p += blockDim.y) {
      const Vec<T, V> x = *reinterpret_cast<const Vec<T, V>*>(src + int64_t(p) * channels);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float f = ld(x.v[k]);
        r[k] = is_max ? (r[k] < f ? f : r[k]) : __fadd_rn(r[k], f);
      }
    }
  }
  const int row = blockDim.x * V;
  float* mine = part + threadIdx.y * row + threadIdx.x * V;
#pragma unroll
  for (int k = 0; k < V; ++k) mine[k] = r[k];
  for (int half = blockDim.y / 2; half > 0; half /= 2) {  // blockDim.y is a power of two
    __syncthreads();
    if (threadIdx.y < half) {
      const float* other = mine + half * row;
#pragma unroll
      for (int k = 0; k < V; ++k)
        mine[k] = is_max ? (mine[k] < other[k] ? other[k] : mine[k]) : __fadd_rn(mine[k], other[k]);
    }
  }
  if (threadIdx.y == 0 && v < cv) {
    Vec<T, V> o;
#pragma unroll
    for (int k = 0; k < V; ++k)
      o.v[k] = to<T>(is_max ? mine[k] : __fdiv_rn(mine[k], static_cast<float>(plane)));
    reinterpret_cast<Vec<T, V>*>(out + img * channels)[v] = o;
  }
}

// pool2d.cu's windows and arithmetic, V channels of one output pixel a thread.
template <typename T, int V>
__global__ void pool_nhwc_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t vecs, Pool2dArgs a) {
  const int cv = a.channels / V;
  GRID_STRIDE(i, vecs) {
    const int c0 = static_cast<int>(i % cv) * V;
    const int64_t q = i / cv;
    const int ox = static_cast<int>(q % a.out_w);
    const int oy = static_cast<int>((q / a.out_w) % a.out_h);
    const int64_t img = q / (int64_t(a.out_w) * a.out_h);
    const T* src = in + img * a.in_h * a.in_w * a.channels + c0;
    const PoolWindow wy = a.adaptive ? adaptive_window(oy, a.in_h, a.out_h)
                                     : fixed_window(oy, a.kernel_h, a.stride_h, a.pad_h, a.in_h);
    const PoolWindow wx = a.adaptive ? adaptive_window(ox, a.in_w, a.out_w)
                                     : fixed_window(ox, a.kernel_w, a.stride_w, a.pad_w, a.in_w);
    float r[V];
#pragma unroll
    for (int k = 0; k < V; ++k) r[k] = a.is_max ? -INFINITY : 0.f;
    for (int y = wy.start; y < wy.end; ++y)
      for (int x = wx.start; x < wx.end; ++x) {
        const Vec<T, V> v = *reinterpret_cast<const Vec<T, V>*>(src + (int64_t(y) * a.in_w + x) * a.channels);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float f = ld(v.v[k]);
          r[k] = a.is_max ? (r[k] < f ? f : r[k]) : __fadd_rn(r[k], f);
        }
      }
    Vec<T, V> o;
    const int cnt = a.adaptive || a.count_pad ? wy.divisor_len * wx.divisor_len
                                              : (wy.end - wy.start) * (wx.end - wx.start);
#pragma unroll
    for (int k = 0; k < V; ++k) o.v[k] = to<T>(a.is_max ? r[k] : __fdiv_rn(r[k], static_cast<float>(cnt)));
    reinterpret_cast<Vec<T, V>*>(out)[i] = o;
  }
}

// pool_by_rows' pools (3x3 windows at stride 1), R output rows of V channels of CW consecutive
// columns a thread. Neighbouring outputs' windows share six of their nine taps; the
// one-output-a-thread kernel reads each input about three times from L2 (a block's rows are other
// blocks' too). Here a thread reads the R + 2 input rows its R x CW windows cover, CW + 2 columns
// each (no loop bound depends on the data, so every load can be in flight together), takes each
// row's maxima over its outputs' three columns (CW = 2: the middle two columns' max once, shared by
// both), and adds each row's into the outputs whose windows hold it: each input is read from L2
// about (R + 2) / R times, and (CW + 2) / CW times in L1 where the one-column kernel read it three
// times. The maxima are taken in the storage format (max_into) and the thread's position is
// divided out in I (32 bits where the items fit): with float compares and 64-bit divisions the
// kernel was bound by its instructions (docs/performance.md). The same values as
// pool_nhwc_kernel: a max (NaN never taken, as there) does not depend on the order, and a column
// or row outside the input adds nothing.
template <typename T, int V, int R, int CW, typename I>
__global__ void max_pool_rows_nhwc_kernel(const T* __restrict__ in, T* __restrict__ out, I items, int groups,
                                          int col_groups, Pool2dArgs a) {
  static_assert(CW == 1 || CW == 2, "one or two columns a thread");
  const I cv = static_cast<I>(a.channels / V), cg = static_cast<I>(col_groups), gs = static_cast<I>(groups);
  const I stride = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + threadIdx.x; i < items; i += stride) {
    const int c0 = static_cast<int>(i % cv) * V;
    const I q = i / cv;
    const int ox = static_cast<int>(q % cg) * CW;
    const I q2 = q / cg;
    const int oy0 = static_cast<int>(q2 % gs) * R;
    const int64_t img = static_cast<int64_t>(q2 / gs);
    const int oy_last = min(oy0 + R, a.out_h) - 1;
    // Input rows [ys, ye): the union of the windows of rows oy0..oy_last; columns from x0, the
    // first output's window's first (before clipping).
    const int ys = max(oy0 - a.pad_h, 0);
    const int ye = min(oy_last - a.pad_h + 3, a.in_h);
    const int x0 = ox - a.pad_w;
    const T* src = in + img * a.in_h * a.in_w * a.channels + c0;
    Vec<T, V> lowest;
#pragma unroll
    for (int k = 0; k < V; ++k) lowest.v[k] = to<T>(-INFINITY);
    Vec<T, V> o[R][CW];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < CW; ++c) o[r][c] = lowest;
#pragma unroll
    for (int j = 0; j < R + 2; ++j) {
      const int y = ys + j;
      Vec<T, V> col[CW + 2];
#pragma unroll
      for (int dx = 0; dx < CW + 2; ++dx) {
        const int x = x0 + dx;
        col[dx] = y < ye && x >= 0 && x < a.in_w
                      ? *reinterpret_cast<const Vec<T, V>*>(src + (int64_t(y) * a.in_w + x) * a.channels)
                      : lowest;
      }
      // The row's max over each output's three columns.
      Vec<T, V> row[CW];
      if constexpr (CW == 1) {
        row[0] = col[0];
        max_into(row[0], col[1]);
        max_into(row[0], col[2]);
      } else {
        Vec<T, V> mid = col[1];
        max_into(mid, col[2]);
        row[0] = mid, row[1] = mid;
        max_into(row[0], col[0]);
        max_into(row[1], col[3]);
      }
      // ... into the outputs whose windows hold row y: oy - pad_h <= y < oy - pad_h + 3.
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int d = y - (oy0 + r - a.pad_h);
        if (d >= 0 && d < 3)
#pragma unroll
          for (int c = 0; c < CW; ++c) max_into(o[r][c], row[c]);
      }
    }
    T* dst = out + ((img * a.out_h + oy0) * a.out_w + ox) * a.channels + c0;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (oy0 + r > oy_last) break;
#pragma unroll
      for (int c = 0; c < CW; ++c)
        if (ox + c < a.out_w)
          *reinterpret_cast<Vec<T, V>*>(dst + (int64_t(r) * a.out_w + c) * a.channels) = o[r][c];
    }
  }
}

// pool_by_windows' pools (fixed K x K max windows, K = 2 or 3, any stride and padding: VGG's
// 2x2/2, ResNet's 3x3/2 after the stem, GoogLeNet's and SqueezeNet's ceil_mode 3x3/2), one
// output's V channels a thread. The K x K taps are unrolled, each predicated on lying inside the
// input, so all of a thread's loads are in flight together (no loop bound depends on the data);
// the thread's position is divided out with FastDiv in 32 bits and the maxima are taken in the
// storage format (max_into): pool_nhwc_kernel's runtime window loops, 64-bit divisions and float
// compares made it bound by its instructions (docs/performance.md). The same values as
// pool_nhwc_kernel: a max (NaN never taken, as there) does not depend on the order, and a window
// with no tap inside the input gives -inf there too.
template <typename T, int V, int K>
__global__ void max_pool_windows_nhwc_kernel(const T* __restrict__ in, T* __restrict__ out, unsigned vecs,
                                             FastDiv cv, FastDiv ow, FastDiv oh, Pool2dArgs a) {
  const unsigned stride = gridDim.x * blockDim.x;
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < vecs; i += stride) {
    const int q = fdiv(static_cast<int>(i), cv);
    const int c0 = (static_cast<int>(i) - q * static_cast<int>(cv.d)) * V;
    const int q2 = fdiv(q, ow);
    const int ox = q - q2 * static_cast<int>(ow.d);
    const int img = fdiv(q2, oh);
    const int oy = q2 - img * static_cast<int>(oh.d);
    const int y0 = oy * a.stride_h - a.pad_h, x0 = ox * a.stride_w - a.pad_w;
    const T* src = in + int64_t(img) * a.in_h * a.in_w * a.channels + c0;
    Vec<T, V> o;
#pragma unroll
    for (int k = 0; k < V; ++k) o.v[k] = to<T>(-INFINITY);
#pragma unroll
    for (int dy = 0; dy < K; ++dy) {
      const int y = y0 + dy;
#pragma unroll
      for (int dx = 0; dx < K; ++dx) {
        const int x = x0 + dx;
        if (y >= 0 && y < a.in_h && x >= 0 && x < a.in_w)
          max_into(o, *reinterpret_cast<const Vec<T, V>*>(src + (int64_t(y) * a.in_w + x) * a.channels));
      }
    }
    reinterpret_cast<Vec<T, V>*>(out)[i] = o;
  }
}

template <typename T, int V>
__global__ void concat_kernel(const T* __restrict__ in, int in_c, T* __restrict__ out, int out_c, int offset,
                              int64_t vecs) {
  const int cv = in_c / V;
  GRID_STRIDE(i, vecs) {
    const int64_t p = i / cv;
    const int c = static_cast<int>(i % cv) * V;
    *reinterpret_cast<Vec<T, V>*>(out + p * out_c + offset + c) = reinterpret_cast<const Vec<T, V>*>(in)[i];
  }
}

// The inverse: channels [offset, offset + out_c) of each pixel of `in` (in_c channels).
template <typename T, int V>
__global__ void slice_kernel(const T* __restrict__ in, int in_c, int offset, T* __restrict__ out, int out_c,
                             int64_t vecs) {
  const int cv = out_c / V;
  GRID_STRIDE(i, vecs) {
    const int64_t p = i / cv;
    const int c = static_cast<int>(i % cv) * V;
    reinterpret_cast<Vec<T, V>*>(out)[i] = *reinterpret_cast<const Vec<T, V>*>(in + p * in_c + offset + c);
  }
}

// Channel vectors a block of the whole-plane pool covers (a warp's worth).
constexpr int kGlobalPoolTile = 32;
// Planes of at most this many pixels pool one thread per output vector.
constexpr int kWholePlaneMin = 16;

// The widest of 16 bytes, 2 values or 1 that divides every count given.
template <typename T>
int vec_width(std::initializer_list<int64_t> counts) {
  for (int v = kVec<T>; v > 1; v /= 2) {
    bool ok = true;
    for (int64_t c : counts) ok = ok && c % v == 0;
    if (ok) return v;
  }
  return 1;
}

// kernel<T, V> launched for the V picked (V in {16 bytes, 2, 1}); Launch is a functor template.
template <typename T, typename Launch>
void by_width(int v, Launch launch) {
  if (v == kVec<T>) return launch(std::integral_constant<int, kVec<T>>{});
  if (v == 2) return launch(std::integral_constant<int, 2>{});
  return launch(std::integral_constant<int, 1>{});
}

}  // namespace

void launch_preprocess_nhwc(const uint8_t* in, void* out, Storage t, int64_t n, int channels, int64_t plane,
                            const float* scale, const float* shift, cudaStream_t s) {
  const int64_t count = n * channels * plane;
  if (count <= 0) return;
  // Four pixels a thread where the plane holds whole groups of four and the bytes and values of
  // each group are aligned for its loads and stores (cudaMalloc's buffers are).
  const bool x4 =
      plane % 4 == 0 && reinterpret_cast<uintptr_t>(in) % 4 == 0 && reinterpret_cast<uintptr_t>(out) % 8 == 0;
  with_storage(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (!x4) {
      preprocess_nhwc_kernel<T><<<grid_stride_blocks(count), kGridStrideThreads, 0, s>>>(
          in, static_cast<T*>(out), count, channels, plane, scale, shift);
      return;
    }
    const int64_t quads = n * plane / 4;
    auto go = [&](auto kernel) {
      kernel<<<grid_stride_blocks(quads), kGridStrideThreads, 0, s>>>(in, static_cast<T*>(out), quads,
                                                                      channels, plane, scale, shift);
    };
    if (channels == 3)
      go(preprocess_nhwc_x4_kernel<T, 3>);
    else if (channels == 1)
      go(preprocess_nhwc_x4_kernel<T, 1>);
    else
      go(preprocess_nhwc_x4_kernel<T, 0>);
  });
  CUDA_CHECK_LAUNCH("preprocess_nhwc_kernel");
}

void launch_nchw_to_nhwc(const float* in, void* out, Storage t, int64_t n, int channels, int64_t plane,
                         cudaStream_t s) {
  const int64_t count = n * channels * plane;
  if (count <= 0) return;
  with_storage(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    nchw_to_nhwc_kernel<T><<<grid_stride_blocks(count), kGridStrideThreads, 0, s>>>(in, static_cast<T*>(out),
                                                                                    count, channels, plane);
  });
  CUDA_CHECK_LAUNCH("nchw_to_nhwc_kernel");
}

void launch_nhwc_to_nchw(const void* in, Storage t, float* out, int64_t n, int channels, int64_t plane,
                         cudaStream_t s) {
  const int64_t count = n * channels * plane;
  if (count <= 0) return;
  with_storage(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    nhwc_to_nchw_kernel<T><<<grid_stride_blocks(count), kGridStrideThreads, 0, s>>>(
        static_cast<const T*>(in), out, count, channels, plane);
  });
  CUDA_CHECK_LAUNCH("nhwc_to_nchw_kernel");
}

void launch_to_storage(const float* in, void* out, Storage t, int64_t count, cudaStream_t s) {
  if (count <= 0) return;
  with_storage(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    to_storage_kernel<T>
        <<<grid_stride_blocks(count), kGridStrideThreads, 0, s>>>(in, static_cast<T*>(out), count);
  });
  CUDA_CHECK_LAUNCH("to_storage_kernel");
}

namespace {
void channel_pass(const void* in, void* out, Storage t, int64_t pixels, int channels, const float* scale,
                  const float* shift, ActFn act, cudaStream_t s) {
  if (pixels <= 0 || channels <= 0) return;
  with_storage(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    by_width<T>(vec_width<T>({channels}), [&](auto vw) {
      constexpr int V = decltype(vw)::value;
      const int64_t vecs = pixels * channels / V;
      channel_kernel<T, V><<<grid_stride_blocks(vecs), kGridStrideThreads, 0, s>>>(
          static_cast<const T*>(in), static_cast<T*>(out), vecs, channels, scale, shift, act);
    });
  });
  CUDA_CHECK_LAUNCH("channel_kernel");
}
}  // namespace

void launch_bias_act_nhwc(void* y, Storage t, const float* bias, int64_t pixels, int channels, ActFn act,
                          cudaStream_t s) {
  if (!bias && act.kind == Act::kIdentity) return;
  channel_pass(y, y, t, pixels, channels, nullptr, bias, act, s);
}

void launch_act_storage(const void* in, void* out, Storage t, int64_t count, ActFn act, cudaStream_t s) {
  if (t == Storage::kF32 && !act.fast)  // (activation.cu's kernels: the accurate functions only)
    return launch_act(static_cast<const float*>(in), static_cast<float*>(out), count, act, s);
  // Layout-free: a pass over `count` values of one "channel" with neither factor.
  int64_t width = count % 8 == 0 ? 8 : count % 2 == 0 ? 2 : 1;
  channel_pass(in, out, t, count / width, static_cast<int>(width), nullptr, nullptr, act, s);
}

void launch_add_storage(const std::vector<const void*>& in, void* out, Storage t, int64_t count, ActFn act,
                        cudaStream_t s) {
  if (in.empty() || in.size() > static_cast<size_t>(kMaxInputs))
    throw Error("add: 1 to " + std::to_string(kMaxInputs) + " inputs, found " + std::to_string(in.size()));
  if (count <= 0) return;
  with_storage(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    Inputs<T> a{};
    a.num = static_cast<int>(in.size());
    for (size_t j = 0; j < in.size(); ++j) a.p[j] = static_cast<const T*>(in[j]);
    by_width<T>(vec_width<T>({count}), [&](auto vw) {
      constexpr int V = decltype(vw)::value;
      const int64_t vecs = count / V;
      add_kernel<T, V>
          <<<grid_stride_blocks(vecs), kGridStrideThreads, 0, s>>>(a, static_cast<T*>(out), vecs, act);
    });
  });
  CUDA_CHECK_LAUNCH("add_kernel");
}

void launch_affine_nhwc(const void* in, void* out, Storage t, int64_t pixels, int channels,
                        const float* scale, const float* shift, cudaStream_t s) {
  channel_pass(in, out, t, pixels, channels, scale, shift, ActFn{}, s);
}

void launch_mul_nhwc(const std::vector<MulInputNhwc>& in, void* out, Storage t, int64_t n, int channels,
                     int64_t plane, cudaStream_t s) {
  if (in.empty() || in.size() > static_cast<size_t>(kMaxInputs))
    throw Error("mul: 1 to " + std::to_string(kMaxInputs) + " inputs, found " + std::to_string(in.size()));
  const int64_t count = n * channels * plane;
  if (count <= 0) return;
  with_storage(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    MulArgs<T> a{};
    a.num = static_cast<int>(in.size());
    for (size_t j = 0; j < in.size(); ++j)
      a.p[j] = static_cast<const T*>(in[j].data), a.per_channel[j] = in[j].per_channel;
    by_width<T>(vec_width<T>({channels}), [&](auto vw) {
      constexpr int V = decltype(vw)::value;
      const int64_t image_vecs = plane * channels / V;
      if (image_vecs > INT_MAX) throw Error("mul: more than 2^31 values an image");
      // Blocks per image: enough for the whole image, fewer when the images alone fill the GPU.
      // Threads a block: a warp's multiple that covers a small image (no idle threads past it).
      const int threads =
          static_cast<int>(std::min<int64_t>(kGridStrideThreads, (image_vecs + 31) / 32 * 32));
      // Two inputs, one of them per channel, neither the output: the unrolled kernel (the
      // product of two values is the same in either order).
      const int full =
          in.size() == 2 && in[0].per_channel != in[1].per_channel ? (in[0].per_channel ? 1 : 0) : -1;
      if (full >= 0 && in[0].data != out && in[1].data != out) {
        const int64_t x =
            std::min<int64_t>((image_vecs + threads * kLoadsInFlight - 1) / (threads * kLoadsInFlight),
                              std::max<int64_t>(1, 65536 / n));
        for (int64_t first = 0; first < n; first += 65535) {  // gridDim.y's limit
          const int64_t m = std::min<int64_t>(n - first, 65535);
          scale_kernel<T, V><<<dim3(static_cast<unsigned>(x), static_cast<unsigned>(m)), threads, 0, s>>>(
              a.p[full] + first * image_vecs * V, a.p[1 - full] + first * channels,
              static_cast<T*>(out) + first * image_vecs * V, static_cast<int>(image_vecs), channels);
        }
        return;
      }
      const int64_t x =
          std::min<int64_t>((image_vecs + threads - 1) / threads, std::max<int64_t>(1, 65536 / n));
      for (int64_t first = 0; first < n; first += 65535) {  // gridDim.y's limit
        const int64_t m = std::min<int64_t>(n - first, 65535);
        MulArgs<T> b = a;
        for (int j = 0; j < b.num; ++j) b.p[j] += first * (b.per_channel[j] ? channels : image_vecs * V);
        mul_kernel<T, V><<<dim3(static_cast<unsigned>(x), static_cast<unsigned>(m)), threads, 0, s>>>(
            b, static_cast<T*>(out) + first * image_vecs * V, static_cast<int>(image_vecs), channels);
      }
    });
  });
  CUDA_CHECK_LAUNCH("mul_kernel");
}

// Whether a channels-last pool runs max_pool_rows_nhwc_kernel: a 3x3 max at stride 1 with at
// most one row and column of padding (GoogLeNet's and Inception's branch pools), two rows or more.
bool pool_by_rows(const Pool2dArgs& a) {
  return a.is_max && !a.adaptive && a.kernel_h == 3 && a.kernel_w == 3 && a.stride_h == 1 &&
         a.stride_w == 1 && a.pad_h <= 1 && a.pad_w <= 1 && a.out_h >= 2;
}

int pool_row_cols(Storage t) { return t == Storage::kF32 ? 2 : 1; }

// Whether a channels-last pool runs max_pool_windows_nhwc_kernel: a max over fixed 2x2 or 3x3
// windows that pool_by_rows does not take.
bool pool_by_windows(const Pool2dArgs& a) {
  return a.is_max && !a.adaptive && a.kernel_h == a.kernel_w && (a.kernel_h == 2 || a.kernel_h == 3) &&
         !pool_by_rows(a);
}

void launch_pool2d_nhwc(const void* in, void* out, Storage t, int64_t n, const Pool2dArgs& a, cudaStream_t s,
                        int row_cols) {
  const int64_t values = pool2d_values(a), count = n * values;  // values: one image's outputs
  if (count <= 0) return;
  // One window over the whole plane, divided (an average) by the plane's size; planes of a few
  // pixels (squeeze-and-excitation at 32x32 inputs) keep the thread-per-output kernel, which
  // leaves no thread idle.
  const bool whole =
      a.out_h == 1 && a.out_w == 1 && a.in_h * a.in_w > kWholePlaneMin &&
      (a.adaptive || (a.pad_h == 0 && a.pad_w == 0 && a.kernel_h >= a.in_h && a.kernel_w >= a.in_w));
  with_storage(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    by_width<T>(vec_width<T>({a.channels}), [&](auto vw) {
      constexpr int V = decltype(vw)::value;
      if (whole) {
        const int cv = a.channels / V;
        const int tx = cv < kGlobalPoolTile ? cv : kGlobalPoolTile;
        int ty = 1;  // a power of two, no more than the plane's pixels
        while (ty * 2 * tx <= kGridStrideThreads && ty * 2 <= a.in_h * a.in_w) ty *= 2;
        const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>((cv + tx - 1) / tx));
        global_pool_nhwc_kernel<T, V><<<grid, dim3(tx, ty), sizeof(float) * tx * ty * V, s>>>(
            static_cast<const T*>(in), static_cast<T*>(out), a.in_h * a.in_w, a.channels, a.is_max);
        return;
      }
      if (pool_by_rows(a)) {  // 4 rows a thread (8 ran slower at 28x28: docs/performance.md)
        constexpr int R = 4;
        const int groups = (a.out_h + R - 1) / R;
        auto go = [&](auto cw) {
          constexpr int CW = decltype(cw)::value;
          const int col_groups = (a.out_w + CW - 1) / CW;
          const int64_t items = n * groups * col_groups * (a.channels / V);
          if (items < (int64_t{1} << 31))  // i + the grid's stride stays below 2^32
            max_pool_rows_nhwc_kernel<T, V, R, CW, uint32_t>
                <<<grid_stride_blocks(items), kGridStrideThreads, 0, s>>>(
                    static_cast<const T*>(in), static_cast<T*>(out), static_cast<uint32_t>(items), groups,
                    col_groups, a);
          else
            max_pool_rows_nhwc_kernel<T, V, R, CW, int64_t>
                <<<grid_stride_blocks(items), kGridStrideThreads, 0, s>>>(
                    static_cast<const T*>(in), static_cast<T*>(out), items, groups, col_groups, a);
        };
        if ((row_cols > 0 ? row_cols : pool_row_cols(t)) == 2)
          go(std::integral_constant<int, 2>{});
        else
          go(std::integral_constant<int, 1>{});
        return;
      }
      const int64_t per_image = values / V;
      if (pool_by_windows(a) && per_image < INT_MAX) {  // launched for as many images as 32 bits count
        const int64_t chunk = std::min<int64_t>(n, INT_MAX / per_image);
        const FastDiv cv = make_fastdiv(static_cast<unsigned>(a.channels / V)),
                      ow = make_fastdiv(static_cast<unsigned>(a.out_w)),
                      oh = make_fastdiv(static_cast<unsigned>(a.out_h));
        const int64_t in_image = int64_t(a.in_h) * a.in_w * a.channels, out_image = per_image * V;
        for (int64_t i0 = 0; i0 < n; i0 += chunk) {
          const int64_t m = std::min(chunk, n - i0);
          const unsigned vecs = static_cast<unsigned>(m * per_image);
          const T* x = static_cast<const T*>(in) + i0 * in_image;
          T* y = static_cast<T*>(out) + i0 * out_image;
          if (a.kernel_h == 2)
            max_pool_windows_nhwc_kernel<T, V, 2>
                <<<grid_stride_blocks(vecs), kGridStrideThreads, 0, s>>>(x, y, vecs, cv, ow, oh, a);
          else
            max_pool_windows_nhwc_kernel<T, V, 3>
                <<<grid_stride_blocks(vecs), kGridStrideThreads, 0, s>>>(x, y, vecs, cv, ow, oh, a);
        }
        return;
      }
      const int64_t vecs = count / V;
      pool_nhwc_kernel<T, V><<<grid_stride_blocks(vecs), kGridStrideThreads, 0, s>>>(
          static_cast<const T*>(in), static_cast<T*>(out), vecs, a);
    });
  });
  CUDA_CHECK_LAUNCH("pool_nhwc_kernel");
}

void launch_concat_nhwc(const void* in, int in_channels, void* out, int out_channels, int offset, Storage t,
                        int64_t pixels, cudaStream_t s) {
  if (pixels <= 0 || in_channels <= 0) return;
  with_storage(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    by_width<T>(vec_width<T>({in_channels, out_channels, offset}), [&](auto vw) {
      constexpr int V = decltype(vw)::value;
      const int64_t vecs = pixels * in_channels / V;
      concat_kernel<T, V><<<grid_stride_blocks(vecs), kGridStrideThreads, 0, s>>>(
          static_cast<const T*>(in), in_channels, static_cast<T*>(out), out_channels, offset, vecs);
    });
  });
  CUDA_CHECK_LAUNCH("concat_kernel");
}

void launch_slice_nhwc(const void* in, int in_channels, int offset, void* out, int out_channels, Storage t,
                       int64_t pixels, cudaStream_t s) {
  if (pixels <= 0 || out_channels <= 0) return;
  with_storage(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    by_width<T>(vec_width<T>({in_channels, out_channels, offset}), [&](auto vw) {
      constexpr int V = decltype(vw)::value;
      const int64_t vecs = pixels * out_channels / V;
      slice_kernel<T, V><<<grid_stride_blocks(vecs), kGridStrideThreads, 0, s>>>(
          static_cast<const T*>(in), in_channels, offset, static_cast<T*>(out), out_channels, vecs);
    });
  });
  CUDA_CHECK_LAUNCH("slice_kernel");
}

}  // namespace cnnrun::gpu
