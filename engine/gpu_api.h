// The GPU executor's door: the only header the CLI and tests include to reach it. In a build
// without CUDA, gpu_available() says so and make_gpu_executor() throws that reason.
#pragma once

#include <memory>
#include <string>

#include "engine/executor.h"

namespace cnnrun {

// True when this build has the GPU executor and a CUDA device is usable; otherwise false with
// the reason in *why ("built without CUDA", "no CUDA device: <driver's words>").
bool gpu_available(std::string* why);

// CUDA devices this process sees (0 without a usable driver or without CUDA in the build).
int gpu_device_count();

// The GPU executor on CUDA device `device` (an MPI rank's: its rank on the machine modulo the
// devices), made current on the calling thread, which then runs it.
std::unique_ptr<Executor> make_gpu_executor(const Network& net, int device = 0);

}  // namespace cnnrun
