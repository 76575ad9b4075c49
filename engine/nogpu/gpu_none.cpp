// The GPU door of a CPU-only build (no CUDA toolkit where cnnrun was built).
#include "engine/gpu_api.h"

namespace cnnrun {

bool gpu_available(std::string* why) {
  if (why) *why = "this cnnrun was built without CUDA (no CUDA toolkit or cuDNN at build time)";
  return false;
}

int gpu_device_count() { return 0; }

std::unique_ptr<Executor> make_gpu_executor(const Network&, int) {
  throw Error("--engine gpu: this cnnrun was built without CUDA (no CUDA toolkit or cuDNN at build time)");
}

}  // namespace cnnrun
