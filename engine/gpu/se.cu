#include <algorithm>
#include <string>
#include <type_traits>

#include "engine/gpu/activation.cuh"
#include "engine/gpu/check.h"
#include "engine/gpu/cp_async.cuh"
#include "engine/gpu/se.h"
#include "engine/gpu/storage.cuh"

namespace cnnrun::gpu {

namespace {

constexpr int kThreads = 256;
constexpr int kChunk = 8;  // images whose sums a thread keeps at once in the convs
// Shared memory a block may take: two blocks an SM (228 KiB) with room for the runtime's 1 KiB.
constexpr size_t kSmemBudget = size_t(112) << 10;
constexpr size_t kDefaultSmem = size_t(48) << 10;

size_t image_bytes(const SeArgs& a, Storage t) {  // x, the pool/scale values and the hidden ones
  return size_t(a.plane) * size_t(a.channels) * storage_bytes(t) + size_t(a.channels) * sizeof(float) +
         size_t(a.squeeze) * sizeof(float);
}

// Block b: images b * per .. (up to n). Shared memory: their x (T), then FP32 [images][channels]
// (the pool's rounded values, later the scale's) and [images][squeeze] (the hidden values).
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    se_kernel(const T* __restrict__ x, const float* __restrict__ w1, const float* __restrict__ b1,
              const float* __restrict__ w2, const float* __restrict__ b2, T* __restrict__ pooled,
              T* __restrict__ hidden, T* __restrict__ scale, T* __restrict__ y, SeArgs a, int64_t n,
              int per) {
  extern __shared__ __align__(16) unsigned char se_smem[];
  const int C = a.channels, S = a.squeeze;
  const int P = static_cast<int>(a.plane);
  const int64_t img0 = int64_t(blockIdx.x) * per;
  const int g_n = static_cast<int>(n - img0 < per ? n - img0 : int64_t(per));
  const int image_vals = P * C;
  T* xs = reinterpret_cast<T*>(se_smem);
  float* ps = reinterpret_cast<float*>(se_smem + size_t(per) * image_vals * sizeof(T));
  float* hs = ps + size_t(per) * C;
  const int tid = static_cast<int>(threadIdx.x);

  // x of the block's images, contiguous in global memory, in 16-byte copies.
  {
    const int pieces = g_n * image_vals / (16 / static_cast<int>(sizeof(T)));
    const unsigned char* src = reinterpret_cast<const unsigned char*>(x + img0 * image_vals);
    for (int i = tid; i < pieces; i += kThreads) cp_async16(se_smem + size_t(i) * 16, src + size_t(i) * 16);
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();
  }
  // The pool: each (image, channel)'s mean over the plane, rounded as the pool's output is.
  const float inv_den = static_cast<float>(P);
  for (int i = tid; i < g_n * C; i += kThreads) {
    const int g = i / C, c = i - g * C;
    const T* xi = xs + size_t(g) * image_vals + c;
    float sum = 0.f;
    for (int p = 0; p < P; ++p) sum = __fadd_rn(sum, ld(xi[size_t(p) * C]));
    const T m = to<T>(__fdiv_rn(sum, inv_den));
    if (pooled) pooled[(img0 + g) * C + c] = m;
    ps[size_t(g) * C + c] = ld(m);
  }
  __syncthreads();
  // The first conv: a warp per filter, its lanes along the channels, kChunk images at a time
  // (each weight read once for them), the lanes' sums added by shuffles.
  const int lane = tid & 31, warp = tid >> 5;
  for (int j = warp; j < S; j += kThreads / 32) {
    const float* wj = w1 + size_t(j) * C;
    const float bj = b1 ? b1[j] : 0.f;
    for (int g0 = 0; g0 < g_n; g0 += kChunk) {
      float acc[kChunk];
#pragma unroll
      for (int g = 0; g < kChunk; ++g) acc[g] = 0.f;
      for (int c = lane; c < C; c += 32) {
        const float w = __ldg(wj + c);
#pragma unroll
        for (int g = 0; g < kChunk; ++g)
          if (g0 + g < g_n) acc[g] = fmaf(w, ps[size_t(g0 + g) * C + c], acc[g]);
      }
#pragma unroll
      for (int g = 0; g < kChunk; ++g) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[g] = __fadd_rn(acc[g], __shfl_xor_sync(0xffffffffu, acc[g], o));
      }
      if (lane < kChunk && g0 + lane < g_n) {
        float v = 0.f;
#pragma unroll
        for (int g = 0; g < kChunk; ++g)
          if (g == lane) v = acc[g];
        const T h = to<T>(act_eval(a.act1, __fadd_rn(v, bj)));
        hidden[(img0 + g0 + lane) * S + j] = h;
        hs[size_t(g0 + lane) * S + j] = ld(h);
      }
    }
  }
  __syncthreads();
  // The second conv: a thread per channel, kChunk images at a time; its scale replaces the
  // pooled values (read only by the first conv, done).
  for (int c = tid; c < C; c += kThreads) {
    const float* wc = w2 + size_t(c) * S;
    const float bc = b2 ? b2[c] : 0.f;
    for (int g0 = 0; g0 < g_n; g0 += kChunk) {
      float acc[kChunk];
#pragma unroll
      for (int g = 0; g < kChunk; ++g) acc[g] = 0.f;
      for (int j = 0; j < S; ++j) {
        const float w = __ldg(wc + j);
#pragma unroll
        for (int g = 0; g < kChunk; ++g)
          if (g0 + g < g_n) acc[g] = fmaf(w, hs[size_t(g0 + g) * S + j], acc[g]);
      }
#pragma unroll
      for (int g = 0; g < kChunk; ++g) {
        if (g0 + g >= g_n) break;
        const T sv = to<T>(act_eval(a.act2, __fadd_rn(acc[g], bc)));
        scale[(img0 + g0 + g) * C + c] = sv;
        ps[size_t(g0 + g) * C + c] = ld(sv);
      }
    }
  }
  __syncthreads();
  // The mul, V values at a time (a vector never crosses an image: C is a multiple of V); none
  // where it is folded into the conv after it (y null).
  if (!y) return;
  const int vecs = g_n * image_vals / V;
  for (int i = tid; i < vecs; i += kThreads) {
    const int e = i * V, g = e / image_vals, c = (e - g * image_vals) % C;
    const Vec<T, V> v = *reinterpret_cast<const Vec<T, V>*>(xs + e);
    Vec<T, V> out;
#pragma unroll
    for (int k = 0; k < V; ++k) out.v[k] = to<T>(__fmul_rn(ld(v.v[k]), ps[size_t(g) * C + c + k]));
    *reinterpret_cast<Vec<T, V>*>(y + img0 * image_vals + e) = out;
  }
}

}  // namespace

int se_images_per_block(const SeArgs& a, Storage t) {
  if (a.channels < 1 || a.squeeze < 1 || a.squeeze > kSeMaxSqueeze || a.plane < 1 ||
      (size_t(a.channels) * storage_bytes(t)) % 16 != 0 || a.plane * a.channels > (int64_t(1) << 24))
    return 0;
  const int64_t per = static_cast<int64_t>(kSmemBudget / image_bytes(a, t));
  return per < kSeMinImages ? 0 : static_cast<int>(std::min<int64_t>(per, kSeMaxImages));
}

void launch_se_nhwc(const SeArgs& a, const SeTensors& p, Storage t, int64_t n, cudaStream_t s) {
  const int per = se_images_per_block(a, t);
  if (per == 0)
    throw Error("squeeze-and-excitation kernel: " + std::to_string(a.plane) + " pixels x " +
                std::to_string(a.channels) + " channels (squeeze " + std::to_string(a.squeeze) +
                ") are outside its range (se_images_per_block is 0)");
  if (n <= 0) return;
  const int64_t blocks = (n + per - 1) / per;
  if (blocks > INT32_MAX) throw Error("squeeze-and-excitation kernel: too many images");
  const size_t smem = size_t(per) * image_bytes(a, t);
  with_storage(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    constexpr int V = kVec<T>;
    auto kernel = se_kernel<T, V>;
    if (smem > kDefaultSmem)
      CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    kernel<<<static_cast<unsigned>(blocks), kThreads, smem, s>>>(
        static_cast<const T*>(p.x), p.w1, p.b1, p.w2, p.b2, static_cast<T*>(p.pooled),
        static_cast<T*>(p.hidden), static_cast<T*>(p.scale), static_cast<T*>(p.y), a, n, per);
  });
  CUDA_CHECK_LAUNCH("se_kernel");
}

}  // namespace cnnrun::gpu
