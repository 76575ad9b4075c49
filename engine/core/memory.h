// How much host memory this process may still take: the least of the kernel's MemAvailable, what
// the cgroup's limit leaves (v2 memory.max, v1 memory.limit_in_bytes) and what the address-space
// limit (ulimit -v) leaves. The machine's total says nothing in a container, and exceeding any
// of these ends the process with a kill or a failed allocation instead of an error naming what
// needed the memory; so sizes are compared with this before they are allocated.
#pragma once

#include <cstdint>
#include <string>

namespace cnnrun {

struct HostMemory {
  int64_t available = INT64_MAX;  // bytes; INT64_MAX when nothing could be read
  std::string limited_by;         // "MemAvailable", "the cgroup memory limit", "the address-space limit"
  std::string str() const;        // "3.2 GB available by MemAvailable"
};

HostMemory host_memory();

// The most images a block may hold when each of `streams` streams keeps `per_image` bytes per
// image of host buffers, within `budget` bytes: 0 when not even one image fits.
int64_t images_fitting(int64_t per_image, int streams, int64_t budget);

// "1.5 GB", "12.0 MB", "512 bytes" (decimal units).
std::string bytes_str(int64_t bytes);

}  // namespace cnnrun
