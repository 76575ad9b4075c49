// NumPy .npy writing (format 1.0, little-endian float32, C order), for --dump: the output
// probabilities go to a file numpy.load and PyTorch read directly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/io/files.h"  // write_output_file

namespace cnnrun {

std::string npy_bytes(const std::vector<int64_t>& dims, const float* data);
// Reads a float32 .npy written by npy_bytes or numpy (tests, tools); throws on anything else.
std::vector<float> read_npy(const std::string& file, std::vector<int64_t>* dims);

}  // namespace cnnrun
