// The CPU reference executor: Eigen, written to be read. It is the specification the GPU
// executor is judged by: convolution as im2col + GEMM over a block of images, the other layers
// as plain loops. Blocks of images are spread over threads; each thread runs one block through
// all layers with its own buffers.
#pragma once

#include <memory>

#include "engine/executor.h"

namespace cnnrun {

std::unique_ptr<Executor> make_cpu_executor(const Network& net);

}  // namespace cnnrun
