// The elementwise product of two or more tensors of one image shape C x H x W, where any input
// may instead be C x 1 x 1 and is then broadcast over H x W (squeeze-and-excitation's scaling).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace cnnrun::gpu {

struct MulInput {
  const float* data = nullptr;
  bool per_channel = false;  // C x 1 x 1, broadcast over the plane
};

// out = in[0] * in[1] * ... left to right (each product rounded, as the CPU reference computes
// it), for n images of channels x plane values. out may alias a full-size input.
void launch_mul(const std::vector<MulInput>& in, float* out, int64_t n, int channels, int64_t plane,
                cudaStream_t s);

}  // namespace cnnrun::gpu
