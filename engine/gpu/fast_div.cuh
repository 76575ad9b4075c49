// n / d by a multiply-high and a shift (Granlund-Montgomery), for 0 <= n < 2^31 and run-time
// d >= 1: the kernels' staging and tile arithmetic divide by run-time sizes, and the GPU has no
// integer divider (a 32-bit division is about 20 instructions, a 64-bit one a call of ~70).
#pragma once

#include <cstdint>

namespace cnnrun::gpu {

struct FastDiv {
  unsigned d = 1, m = 1;
  int s = 0;
};

// m = 2^32 (2^s - d) / d + 1 with 2^s the least power of two >= d: below 2^32 for d < 2^31.
inline FastDiv make_fastdiv(unsigned d) {
  FastDiv f;
  f.d = d;
  while ((1ull << f.s) < d) ++f.s;
  f.m = static_cast<unsigned>(((1ull << 32) * ((1ull << f.s) - d)) / d + 1);
  return f;
}

// The sum stays below 2^32 because the high product is below n < 2^31.
__device__ __forceinline__ int fdiv(int n, const FastDiv& f) {
  return static_cast<int>((__umulhi(static_cast<unsigned>(n), f.m) + static_cast<unsigned>(n)) >> f.s);
}

}  // namespace cnnrun::gpu
