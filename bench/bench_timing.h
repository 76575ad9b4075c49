// The kernel workbenches' timing (bench/*_bench.*): the median of `repeats` runs of f on stream
// s, each between two events, after one warm-up run.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "engine/gpu/check.h"

namespace cnnrun::bench {

inline float median_ms(cudaStream_t s, int repeats, const std::function<void()>& f) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  f();  // warm-up
  std::vector<float> t;
  for (int r = 0; r < repeats; ++r) {
    CUDA_CHECK(cudaEventRecord(a, s));
    f();
    CUDA_CHECK(cudaEventRecord(b, s));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::nth_element(t.begin(), t.begin() + static_cast<long>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

}  // namespace cnnrun::bench
