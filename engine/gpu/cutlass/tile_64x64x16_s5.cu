// One CUTLASS 3xTF32 forward convolution kernel (engine/gpu/cutlass/fprop.cuh).
#include "engine/gpu/cutlass/fprop.cuh"

namespace cnnrun::gpu::cutlass_conv {

void run_64x64x16_s5(const Problem& q, cudaStream_t s) { Fprop3xTf32<64, 64, 16, 32, 32, 5>::run(q, s); }

}  // namespace cnnrun::gpu::cutlass_conv
