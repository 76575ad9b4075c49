// The small kernels: memory-bound elementwise and windowed passes, one thread per output value
// in a grid-stride loop (the grid is capped, so any block size launches). They are a few percent
// of the CIFAR network's time; the convolutions are where the work is. Arithmetic that the CPU
// reference does as a separate multiply and add uses __fmul_rn/__fadd_rn, so nvcc cannot contract
// it into an FMA and the results match bit for bit where the formula is the same.
#include "engine/gpu/check.h"
#include "engine/gpu/grid_stride.h"
#include "engine/gpu/kernels.h"

namespace cnnrun::gpu {

namespace {

__global__ void preprocess_kernel(const uint8_t* __restrict__ in, float* __restrict__ out, int64_t count,
                                  int channels, int64_t plane, const float* __restrict__ scale,
                                  const float* __restrict__ shift) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    int c = static_cast<int>((i / plane) % channels);
    out[i] = __fadd_rn(__fmul_rn(static_cast<float>(in[i]), scale[c]), shift[c]);
  }
}

__global__ void affine_kernel(const float* in, float* out, int64_t count, int channels, int64_t plane,
                              const float* __restrict__ scale, const float* __restrict__ shift) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    int c = static_cast<int>((i / plane) % channels);
    out[i] = __fadd_rn(__fmul_rn(in[i], scale[c]), shift[c]);
  }
}

constexpr int kMaxAddInputs = 8;
struct AddArgs {
  const float* in[kMaxAddInputs];
  int num;
  int accumulate;  // out already holds the sum of earlier inputs
};

__global__ void add_kernel(float* out, int64_t count, AddArgs a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    float s = a.accumulate ? out[i] : a.in[0][i];
    for (int k = a.accumulate ? 0 : 1; k < a.num; ++k) s = __fadd_rn(s, a.in[k][i]);
    out[i] = s;
  }
}

__global__ void softmax_kernel(const float* __restrict__ in, float* __restrict__ out, int64_t positions,
                               int channels, int64_t plane) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < positions;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t n = i / plane, p = i % plane;
    const float* x = in + n * channels * plane + p;
    float* y = out + n * channels * plane + p;
    float m = -INFINITY;
    for (int c = 0; c < channels; ++c) m = fmaxf(m, x[c * plane]);
    float s = 0.f;
    for (int c = 0; c < channels; ++c) {
      float e = expf(x[c * plane] - m);
      y[c * plane] = e;
      s += e;
    }
    for (int c = 0; c < channels; ++c) y[c * plane] = y[c * plane] / s;
  }
}

// Image i's prediction `best` into pred, counted in correct[0] when it is its label (the data set's,
// cycled: labels null, none) and in correct[1] when its outputs were not all finite (the argmax of
// NaNs is no prediction).
__device__ __forceinline__ void record_prediction(int64_t i, int best, bool finite,
                                                  int32_t* __restrict__ pred,
                                                  const int32_t* __restrict__ labels, int64_t first,
                                                  int64_t label_count, unsigned long long* correct) {
  pred[i] = best;
  if (labels && best == labels[(first + i) % label_count]) atomicAdd(correct, 1ull);
  if (!finite) atomicAdd(correct + 1, 1ull);
}

__global__ void argmax_kernel(const float* __restrict__ in, int64_t n, int size, int32_t* __restrict__ pred,
                              const int32_t* __restrict__ labels, int64_t first, int64_t label_count,
                              unsigned long long* correct) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float* x = in + i * size;
    int best = 0;
    float bv = x[0];
    bool finite = isfinite(bv);
    for (int k = 1; k < size; ++k) {
      if (x[k] > bv) bv = x[k], best = k;
      finite = finite && isfinite(x[k]);
    }
    record_prediction(i, best, finite, pred, labels, first, label_count, correct);
  }
}

// The same for outputs of at least a warp's width (ImageNet's 1000 classes): a warp an image,
// its lanes reading the values in turn (coalesced), each keeping its first largest, then the
// warp's: the largest, the lowest index among equals. A NaN is never the largest, as above, and
// where none is larger than -inf, or the first value is a NaN (the loop above keeps index 0:
// nothing compares larger than a NaN), the prediction is 0.
__global__ void argmax_warp_kernel(const float* __restrict__ in, int64_t n, int size,
                                   int32_t* __restrict__ pred, const int32_t* __restrict__ labels,
                                   int64_t first, int64_t label_count, unsigned long long* correct) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t i = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; i < n; i += warps) {
    const float* x = in + i * size;
    float bv = -INFINITY;
    int best = -1;  // none larger than -inf yet
    bool finite = true;
    for (int k = lane; k < size; k += 32) {
      const float v = x[k];
      if (v > bv) bv = v, best = k;
      finite = finite && isfinite(v);
    }
    for (int off = 16; off > 0; off /= 2) {
      const float ov = __shfl_down_sync(0xffffffffu, bv, off);
      const int ob = __shfl_down_sync(0xffffffffu, best, off);
      if (ob >= 0 && (best < 0 || ov > bv || (ov == bv && ob < best))) bv = ov, best = ob;
    }
    finite = __all_sync(0xffffffffu, finite);
    if (lane == 0) {
      if (best < 0 || isnan(x[0])) best = 0;
      record_prediction(i, best, finite, pred, labels, first, label_count, correct);
    }
  }
}

}  // namespace

void launch_preprocess(const uint8_t* in, float* out, int64_t n, int channels, int64_t plane,
                       const float* scale, const float* shift, cudaStream_t s) {
  int64_t count = n * channels * plane;
  preprocess_kernel<<<grid_stride_blocks(count), kGridStrideThreads, 0, s>>>(in, out, count, channels, plane,
                                                                             scale, shift);
  CUDA_CHECK_LAUNCH("preprocess_kernel");
}

void launch_channel_affine(const float* in, float* out, int64_t n, int channels, int64_t plane,
                           const float* scale, const float* shift, cudaStream_t s) {
  int64_t count = n * channels * plane;
  affine_kernel<<<grid_stride_blocks(count), kGridStrideThreads, 0, s>>>(in, out, count, channels, plane,
                                                                         scale, shift);
  CUDA_CHECK_LAUNCH("affine_kernel");
}

void launch_add(const float* const* in, int num_inputs, float* out, int64_t count, cudaStream_t s) {
  for (int done = 0; done < num_inputs;) {
    AddArgs a{};
    a.accumulate = done > 0;
    a.num = 0;
    while (done < num_inputs && a.num < kMaxAddInputs) a.in[a.num++] = in[done++];
    add_kernel<<<grid_stride_blocks(count), kGridStrideThreads, 0, s>>>(out, count, a);
    CUDA_CHECK_LAUNCH("add_kernel");
  }
}

void launch_softmax(const float* in, float* out, int64_t n, int channels, int64_t plane, cudaStream_t s) {
  int64_t positions = n * plane;
  softmax_kernel<<<grid_stride_blocks(positions), kGridStrideThreads, 0, s>>>(in, out, positions, channels,
                                                                              plane);
  CUDA_CHECK_LAUNCH("softmax_kernel");
}

void launch_argmax(const float* in, int64_t n, int size, int32_t* pred, const int32_t* labels, int64_t first,
                   int64_t label_count, unsigned long long* correct, cudaStream_t s) {
  if (size >= 32)  // a warp an image: a thread an image reads its values 4 * size bytes from its neighbours
    argmax_warp_kernel<<<grid_stride_blocks(n * 32), kGridStrideThreads, 0, s>>>(in, n, size, pred, labels,
                                                                                 first, label_count, correct);
  else
    argmax_kernel<<<grid_stride_blocks(n), kGridStrideThreads, 0, s>>>(in, n, size, pred, labels, first,
                                                                       label_count, correct);
  CUDA_CHECK_LAUNCH("argmax_kernel");
}

}  // namespace cnnrun::gpu
