// Layer-by-layer validation of one executor against another (the GPU against the CPU
// reference). Images are compared in chunks so that validating 50000 images needs the memory
// of one chunk, not of every layer's output for the whole run.
#pragma once

#include <string>
#include <vector>

#include "engine/executor.h"

namespace cnnrun {

struct LayerCheck {
  std::string name, type;
  std::string fused_into;  // non-empty: output not materialised, checked through this layer
  double max_abs = 0;      // max |test - ref|
  double max_ref = 0;      // max |ref|, the layer's scale
  double max_rel = 0;      // max_abs / max(max_ref, tiny): error relative to the layer's scale
  bool pass = true;
};

struct Validation {
  int64_t images = 0;
  double tolerance = 0;  // pass if max_rel <= tolerance
  std::vector<LayerCheck> layers;
  std::string first_failure;  // name of the first layer in execution order that failed
  bool pass = true;
  int64_t prediction_mismatches = 0;  // argmax of the output differs
};

// Compares every layer's output of `test` and `ref` on images [0, n) of data (n <= count);
// the tolerance is validation_tolerance (engine/core/precision.h) of the run's format.
Validation validate(Executor& test, Executor& ref, const Network& net, const Dataset& data, int64_t n,
                    double tolerance = kFp32Tolerance, int64_t chunk = 256);

}  // namespace cnnrun
