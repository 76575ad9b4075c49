// Checked CUDA and cuBLAS calls, and RAII owners of device and pinned memory. Every call into
// the CUDA runtime or a CUDA library goes through one of these macros, so a failure becomes a
// cnnrun::Error naming the call and engine/gpu/<file>:<line> instead of a silent wrong answer
// (cuDNN has its own macro inside conv2d_cudnn.cpp, the one file that sees cudnn.h).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "engine/core/error.h"

namespace cnnrun::gpu {

// Throws Error("<file>:<line>: <call> failed: <what>"), the file shortened to engine/...
[[noreturn]] void fail_call(const char* call, const char* file, int line, const std::string& what);

inline void check_cuda(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear a sticky launch error so the next check sees its own
    fail_call(call, file, line, std::string(cudaGetErrorString(e)) + " (" + cudaGetErrorName(e) + ")");
  }
}

const char* cublas_status_name(cublasStatus_t s);

inline void check_cublas(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS) fail_call(call, file, line, cublas_status_name(s));
}

}  // namespace cnnrun::gpu

#define CUDA_CHECK(call) ::cnnrun::gpu::check_cuda((call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(call) ::cnnrun::gpu::check_cublas((call), #call, __FILE__, __LINE__)
// After a kernel launch: launch-configuration errors surface here, named by the kernel.
#define CUDA_CHECK_LAUNCH(kernel_name) \
  ::cnnrun::gpu::check_cuda(cudaGetLastError(), "launch of " kernel_name, __FILE__, __LINE__)

namespace cnnrun::gpu {

// Device memory (cudaMalloc, never managed memory).
class DevBuf {
 public:
  DevBuf() = default;
  explicit DevBuf(size_t bytes) { alloc(bytes); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  DevBuf(DevBuf&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)), own_(std::exchange(o.own_, true)) {}
  DevBuf& operator=(DevBuf&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
      own_ = std::exchange(o.own_, true);
    }
    return *this;
  }
  ~DevBuf() { reset(); }
  // `bytes` at `p` inside memory another DevBuf owns (which must outlive it): never freed here.
  static DevBuf view(void* p, size_t bytes) {
    DevBuf b;
    b.p_ = p;
    b.n_ = bytes;
    b.own_ = false;
    return b;
  }

  void alloc(size_t bytes) {
    reset();
    if (bytes == 0) return;
    CUDA_CHECK(cudaMalloc(&p_, bytes));
    n_ = bytes;
  }
  void reset() {
    if (p_ && own_) cudaFree(p_);  // no check: called from destructors, and a failed free leaks at worst
    p_ = nullptr;
    n_ = 0;
    own_ = true;
  }
  template <typename T = float>
  T* as() const {
    return static_cast<T*>(p_);
  }
  void* get() const { return p_; }
  size_t bytes() const { return n_; }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
  bool own_ = true;
};

// Page-locked host memory (cudaHostAlloc), so asynchronous copies really are asynchronous.
class PinnedBuf {
 public:
  PinnedBuf() = default;
  PinnedBuf(const PinnedBuf&) = delete;
  PinnedBuf& operator=(const PinnedBuf&) = delete;
  PinnedBuf(PinnedBuf&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  PinnedBuf& operator=(PinnedBuf&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  ~PinnedBuf() { reset(); }
  void alloc(size_t bytes) {
    reset();
    if (bytes == 0) return;
    CUDA_CHECK(cudaHostAlloc(&p_, bytes, cudaHostAllocDefault));
    n_ = bytes;
  }
  void reset() {
    if (p_) cudaFreeHost(p_);
    p_ = nullptr;
    n_ = 0;
  }
  template <typename T = uint8_t>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return n_; }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

// A CUDA event for timing, destroyed with its scope (also when an error unwinds it).
class CudaEvent {
 public:
  CudaEvent() { CUDA_CHECK(cudaEventCreate(&e_)); }
  ~CudaEvent() { cudaEventDestroy(e_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// The current device's streaming multiprocessors (asked once per process: a process keeps its
// device). For kernels that size their grid to fill the GPU.
int sm_count();

// Holds stream s for `nanoseconds` (one thread on one SM, sleeping).
void launch_spin(cudaStream_t s, int64_t nanoseconds);

// How long least_ms holds the stream before each call: longer than a call's host work before its
// kernels are queued (cuDNN's calls spend tens to hundreds of microseconds there).
constexpr int64_t kTimingLeadNs = 1000000;

// The least time in ms, by CUDA events on stream s, of `repeats` calls of `call`, each timed
// alone (the caller runs any warm-up first). Each call is queued while launch_spin holds the
// stream, so the events time the GPU's work alone, without the host's time to queue it: the
// forward runs as CUDA graphs, where that host time is not spent (docs/performance.md, Session
// 33). Waits for each: not while s is being captured.
template <typename F>
float least_ms(cudaStream_t s, int repeats, F&& call) {
  const CudaEvent e0, e1;
  float least = 1e30f;
  for (int r = 0; r < repeats; ++r) {
    launch_spin(s, kTimingLeadNs);
    CUDA_CHECK(cudaEventRecord(e0.get(), s));
    call();
    CUDA_CHECK(cudaEventRecord(e1.get(), s));
    CUDA_CHECK(cudaEventSynchronize(e1.get()));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0.get(), e1.get()));
    least = std::min(least, ms);
  }
  return least;
}

// Copies a host vector to a new device buffer (synchronously: weights, once).
template <typename T>
DevBuf upload(const T* data, size_t count) {
  DevBuf b(count * sizeof(T));
  if (count) CUDA_CHECK(cudaMemcpy(b.get(), data, count * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}

}  // namespace cnnrun::gpu
