// mul: memory-bound, one thread per output value in a grid-stride loop. Up to kMaxIn inputs go in
// one launch (their pointers by value in the kernel's arguments); more are folded in by further
// launches that multiply into the output, which keeps the product's left-to-right order.
#include "engine/gpu/check.h"
#include "engine/gpu/grid_stride.h"
#include "engine/gpu/mul.h"

namespace cnnrun::gpu {

namespace {

constexpr int kMaxIn = 8;

struct MulArgs {
  const float* in[kMaxIn];
  int per_channel[kMaxIn];
  int num;
  int accumulate;  // out already holds the product of the earlier inputs
};

__global__ void mul_kernel(float* out, int64_t count, int64_t plane, MulArgs a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t nc = i / plane;
    float p = a.accumulate ? out[i] : 1.f;
    for (int k = 0; k < a.num; ++k) {
      const float v = __ldg(a.in[k] + (a.per_channel[k] ? nc : i));
      p = (k == 0 && !a.accumulate) ? v : __fmul_rn(p, v);
    }
    out[i] = p;
  }
}

}  // namespace

void launch_mul(const std::vector<MulInput>& in, float* out, int64_t n, int channels, int64_t plane,
                cudaStream_t s) {
  if (in.size() < 2) throw Error("mul: needs at least two inputs");
  const int64_t count = n * channels * plane;
  if (count <= 0) return;
  for (size_t done = 0; done < in.size();) {
    MulArgs a{};
    a.accumulate = done > 0;
    a.num = 0;
    while (done < in.size() && a.num < kMaxIn) {
      // A later launch must not read a full-size input that an earlier one overwrote.
      if (done >= kMaxIn && in[done].data == out && !in[done].per_channel)
        throw Error("mul: the output aliases input " + std::to_string(done) + " past the first " +
                    std::to_string(kMaxIn));
      a.in[a.num] = in[done].data;
      a.per_channel[a.num] = in[done].per_channel ? 1 : 0;
      ++a.num, ++done;
    }
    mul_kernel<<<grid_stride_blocks(count), kGridStrideThreads, 0, s>>>(out, count, plane, a);
    CUDA_CHECK_LAUNCH("mul_kernel");
  }
}

}  // namespace cnnrun::gpu
