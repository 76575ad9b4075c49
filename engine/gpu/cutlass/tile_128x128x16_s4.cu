// One CUTLASS 3xTF32 forward convolution kernel (engine/gpu/cutlass/fprop.cuh).
#include "engine/gpu/cutlass/fprop.cuh"

namespace cnnrun::gpu::cutlass_conv {

void run_128x128x16_s4(const Problem& q, cudaStream_t s) { Fprop3xTf32<128, 128, 16, 64, 64, 4>::run(q, s); }

}  // namespace cnnrun::gpu::cutlass_conv
