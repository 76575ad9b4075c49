// Upsampling: one thread per output value in a grid-stride loop. The source coordinates are
// the CPU reference's (engine/layers/upsample.h), with the ratios it computed on the host, in
// float with rounded intrinsics so the chosen source pixels and weights are the same:
// - nearest: src = dst / factor for a whole factor, else min(floor(dst * ratio), in - 1);
// - bilinear: src = ratio * dst with align_corners, else max(ratio * (dst + 0.5) - 0.5, 0)
//   (an axis whose length does not change: src = dst);
//   i0 = min(int(src), in - 1), i1 = i0 + (i0 < in - 1), l1 = src - i0, l0 = 1 - l1, and
//   out = l0y * (l0x * v00 + l1x * v01) + l1y * (l0x * v10 + l1x * v11).
#include "engine/gpu/check.h"
#include "engine/gpu/grid_stride.h"
#include "engine/gpu/upsample.h"

namespace cnnrun::gpu {

namespace {

struct Lerp {
  int i0, i1;
  float l0, l1;
};

__device__ __forceinline__ Lerp linear_src(int dst, float scale, int in, int out, bool align_corners) {
  if (in == out) return Lerp{dst, dst, 1.f, 0.f};  // a length that does not change is copied
  float src = align_corners ? __fmul_rn(scale, static_cast<float>(dst))
                            : __fadd_rn(__fmul_rn(scale, __fadd_rn(static_cast<float>(dst), 0.5f)), -0.5f);
  if (!align_corners && src < 0.f) src = 0.f;
  Lerp r;
  r.i0 = min(static_cast<int>(src), in - 1);
  r.i1 = r.i0 + (r.i0 < in - 1 ? 1 : 0);
  r.l1 = __fadd_rn(src, -static_cast<float>(r.i0));
  r.l0 = __fadd_rn(1.f, -r.l1);
  return r;
}

__device__ __forceinline__ int nearest_src(int dst, int factor, float ratio, int in) {
  if (factor > 0) return dst / factor;
  return min(static_cast<int>(floorf(__fmul_rn(static_cast<float>(dst), ratio))), in - 1);
}

__global__ void upsample_kernel(const float* __restrict__ in, float* __restrict__ out, int64_t count,
                                UpsampleArgs a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int ox = static_cast<int>(i % a.out_w);
    const int oy = static_cast<int>((i / a.out_w) % a.out_h);
    const int64_t nc = i / (int64_t(a.out_w) * a.out_h);
    const float* src = in + nc * a.in_h * a.in_w;
    if (!a.bilinear) {
      out[i] = __ldg(src + nearest_src(oy, a.factor_h, a.ratio_h, a.in_h) * a.in_w +
                     nearest_src(ox, a.factor_w, a.ratio_w, a.in_w));
      continue;
    }
    const Lerp y = linear_src(oy, a.ratio_h, a.in_h, a.out_h, a.align_corners);
    const Lerp x = linear_src(ox, a.ratio_w, a.in_w, a.out_w, a.align_corners);
    const float v00 = __ldg(src + y.i0 * a.in_w + x.i0), v01 = __ldg(src + y.i0 * a.in_w + x.i1);
    const float v10 = __ldg(src + y.i1 * a.in_w + x.i0), v11 = __ldg(src + y.i1 * a.in_w + x.i1);
    const float top = __fadd_rn(__fmul_rn(x.l0, v00), __fmul_rn(x.l1, v01));
    const float bot = __fadd_rn(__fmul_rn(x.l0, v10), __fmul_rn(x.l1, v11));
    out[i] = __fadd_rn(__fmul_rn(y.l0, top), __fmul_rn(y.l1, bot));
  }
}

}  // namespace

void launch_upsample(const float* in, float* out, int64_t n, const UpsampleArgs& a, cudaStream_t s) {
  if (a.in_h < 1 || a.in_w < 1 || a.channels < 1 || a.out_h < 1 || a.out_w < 1 || a.factor_h < 0 ||
      a.factor_w < 0 || (a.factor_h > 0 && a.out_h != a.in_h * a.factor_h) ||
      (a.factor_w > 0 && a.out_w != a.in_w * a.factor_w) || !(a.ratio_h >= 0.f) || !(a.ratio_w >= 0.f))
    throw Error("upsample: sizes, factors and ratios do not describe an upsampling");
  const int64_t count = n * a.channels * int64_t(a.out_h) * a.out_w;
  if (count <= 0) return;
  upsample_kernel<<<grid_stride_blocks(count), kGridStrideThreads, 0, s>>>(in, out, count, a);
  CUDA_CHECK_LAUNCH("upsample_kernel");
}

}  // namespace cnnrun::gpu
