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
  int64_t nonfinite = 0;   // NaN or infinite values, in either executor's output
  bool pass = true;
};

struct Validation {
  int64_t images = 0;
  double tolerance = 0;  // pass if max_rel <= tolerance
  std::vector<LayerCheck> layers;
  // The first layer in execution order that failed; when any layer gives a NaN or an infinity
  // (in either executor), the first such layer: a later layer fails because of it, and an
  // earlier one that merely differs is not the cause.
  std::string first_failure;
  bool nonfinite = false;  // first_failure gives non-finite values
  bool pass = true;
  int64_t prediction_mismatches = 0;  // argmax of the output differs
};

// Compares every layer's output of `test`, run as `opt` says, with `ref` (the CPU reference, run
// with default options) on images [0, n) of data (n <= count); the tolerance is
// validation_tolerance (engine/core/precision.h) of opt.precision.
Validation validate(Executor& test, Executor& ref, const Network& net, const Dataset& data, int64_t n,
                    const RunOptions& opt = {}, int64_t chunk = 256);

// Sets each layer's max_rel and pass, and the validation's pass, nonfinite and first_failure,
// from the layers' max_abs, max_ref and nonfinite (validate() ends with it; ranks that validated
// their shards merge those and judge again).
void judge(Validation& v, double tolerance);

// The first layer, in execution order, whose output holds a NaN or an infinity for any of images
// [0, n) of `data` as `ex` computes them (a layer fused into its consumer is judged there), or
// "" when none does. Runs forward_layers in chunks: the diagnosis of a run whose output was not
// finite, so it costs one more pass only when there is something to name.
std::string first_nonfinite_layer(Executor& ex, const Network& net, const Dataset& data, int64_t n,
                                  const RunOptions& opt, int64_t chunk = 256);

}  // namespace cnnrun
