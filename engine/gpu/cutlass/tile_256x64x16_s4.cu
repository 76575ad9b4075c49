// One CUTLASS 3xTF32 forward convolution kernel (engine/gpu/cutlass/fprop.cuh).
#include "engine/gpu/cutlass/fprop.cuh"

namespace cnnrun::gpu::cutlass_conv {

void run_256x64x16_s4(const Problem& q, cudaStream_t s) { Fprop3xTf32<256, 64, 16, 64, 64, 4>::run(q, s); }

}  // namespace cnnrun::gpu::cutlass_conv
