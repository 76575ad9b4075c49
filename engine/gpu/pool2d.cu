// Pooling: one thread per output value in a grid-stride loop. Windows are small and overlap
// little, so the input is read through the cache rather than staged; the pass is memory-bound
// and a few percent of a network's time. The window arithmetic is PyTorch's (pool_window.cuh,
// shared with the channels-last kernel). Max pooling compares as std::max does in the CPU reference.
#include <climits>

#include "engine/gpu/check.h"
#include "engine/gpu/grid_stride.h"
#include "engine/gpu/pool2d.h"
#include "engine/gpu/pool_window.cuh"

namespace cnnrun::gpu {

namespace {

__global__ void pool2d_kernel(const float* __restrict__ in, float* __restrict__ out, int64_t count,
                              Pool2dArgs a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int ox = static_cast<int>(i % a.out_w);
    const int oy = static_cast<int>((i / a.out_w) % a.out_h);
    const int64_t nc = i / (int64_t(a.out_w) * a.out_h);
    const float* src = in + nc * a.in_h * a.in_w;
    const PoolWindow wy = a.adaptive ? adaptive_window(oy, a.in_h, a.out_h)
                                     : fixed_window(oy, a.kernel_h, a.stride_h, a.pad_h, a.in_h);
    const PoolWindow wx = a.adaptive ? adaptive_window(ox, a.in_w, a.out_w)
                                     : fixed_window(ox, a.kernel_w, a.stride_w, a.pad_w, a.in_w);
    float r;
    if (a.is_max) {
      r = -INFINITY;  // padding never wins; an empty window (impossible by shape rules) gives -inf
      for (int y = wy.start; y < wy.end; ++y)
        for (int x = wx.start; x < wx.end; ++x) {
          const float v = __ldg(src + y * a.in_w + x);
          r = r < v ? v : r;  // std::max's comparison, as the CPU reference
        }
    } else {
      float s = 0.f;
      for (int y = wy.start; y < wy.end; ++y)
        for (int x = wx.start; x < wx.end; ++x) s = __fadd_rn(s, __ldg(src + y * a.in_w + x));
      const int cnt = a.adaptive || a.count_pad ? wy.divisor_len * wx.divisor_len
                                                : (wy.end - wy.start) * (wx.end - wx.start);
      r = __fdiv_rn(s, static_cast<float>(cnt));
    }
    out[i] = r;
  }
}

}  // namespace

int64_t pool2d_values(const Pool2dArgs& a) {
  if (a.out_h < 1 || a.out_w < 1 || a.in_h < 1 || a.in_w < 1 || a.channels < 1)
    throw Error("pool2d: empty input or output plane");
  if (!a.adaptive &&
      (a.kernel_h < 1 || a.kernel_w < 1 || a.stride_h < 1 || a.stride_w < 1 || a.pad_h < 0 || a.pad_w < 0))
    throw Error("pool2d: window sizes and strides must be positive, pads not negative");
  return a.channels * int64_t(a.out_h) * a.out_w;
}

void launch_pool2d(const float* in, float* out, int64_t n, const Pool2dArgs& a, cudaStream_t s) {
  const int64_t count = n * pool2d_values(a);
  if (count <= 0) return;
  pool2d_kernel<<<grid_stride_blocks(count), kGridStrideThreads, 0, s>>>(in, out, count, a);
  CUDA_CHECK_LAUNCH("pool2d_kernel");
}

}  // namespace cnnrun::gpu
