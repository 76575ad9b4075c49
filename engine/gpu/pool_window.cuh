// The windows of PyTorch's pooling, shared by the NCHW (pool2d.cu) and channels-last (nhwc.cu)
// kernels so that both pool exactly the same values:
// - fixed windows start at o * stride - pad and end at min(start + kernel, in + pad); an average
//   divides by that length (count_include_pad) before both ends are clipped to the input, so a
//   ceil_mode window that hangs past the padding is averaged over what it covers;
// - adaptive windows are [floor(o * in / out), ceil((o + 1) * in / out)).
#pragma once

#include <cstdint>

namespace cnnrun::gpu {

struct PoolWindow {
  int start, end, divisor_len;  // [start, end) inside the input; the average's divisor length
};

__device__ __forceinline__ PoolWindow fixed_window(int o, int k, int stride, int pad, int in) {
  const int s = o * stride - pad;
  const int e = min(s + k, in + pad);
  return {max(s, 0), min(e, in), e - s};
}

__device__ __forceinline__ PoolWindow adaptive_window(int o, int in, int out) {
  const int s = static_cast<int>((static_cast<int64_t>(o) * in) / out);
  const int e = static_cast<int>((static_cast<int64_t>(o + 1) * in + out - 1) / out);
  return {s, e, e - s};
}

}  // namespace cnnrun::gpu
