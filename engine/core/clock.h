// The one clock host-side times are read from (load times, forward times, setup).
#pragma once

#include <chrono>

namespace cnnrun {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace cnnrun
