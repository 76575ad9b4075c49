// Asynchronous global-to-shared copies (cp.async, sm_80 and later), shared by the kernels that
// stage their input in shared memory: a copy is issued without waiting for its data, so a thread
// keeps many loads in flight, and a zero-filled copy stands for padding.
#pragma once

namespace cnnrun::gpu {

// 4 bytes, through L1 (.ca); !valid writes a zero and reads nothing (src must still be a global
// address).
__device__ __forceinline__ void cp_async4(float* dst, const float* src, bool valid) {
  unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 4 : 0));
}
// 16 bytes, around L1 (.cg); both addresses 16-byte aligned.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
// 16 bytes, around L1; !valid writes zeros and reads nothing (src must still be a global address).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }
// All but the most recently committed group complete (a double buffer: the current stage has
// arrived while the next one's copies are still in flight).
__device__ __forceinline__ void cp_async_wait_prior() { asm volatile("cp.async.wait_group 1;\n" ::); }

}  // namespace cnnrun::gpu
