// A one-thread kernel that holds a stream for a while: least_ms puts it before each timed call.
#include "engine/gpu/check.h"

namespace cnnrun::gpu {

namespace {

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_kernel(uint64_t ns) {
  const uint64_t start = global_ns();
  while (global_ns() - start < ns) __nanosleep(1000);
}

}  // namespace

void launch_spin(cudaStream_t s, int64_t nanoseconds) {
  spin_kernel<<<1, 1, 0, s>>>(static_cast<uint64_t>(nanoseconds));
  CUDA_CHECK_LAUNCH("spin_kernel");
}

}  // namespace cnnrun::gpu
