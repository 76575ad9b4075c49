// The CPU reference's per-layer forward functions, one file per layer type under
// reference/layers/, and forward_fn, the table from LayerKind to function that
// cpu_executor.cpp builds from CNNRUN_LAYER_TYPES (engine/layer_types.h). Every function runs
// a block of n images in NCHW: in[k] points at input k's n x in_shapes[k] floats, out at
// n x out_shape floats. The functions are the definition the GPU executor is checked against,
// so they are written to be read.
#pragma once

// GCC 12 reports false -W(maybe-)uninitialized inside its own AVX-512 intrinsics when Eigen's
// packet code is inlined (GCC PR 105593). The diagnostic state that counts is the one where the
// intrinsics header is first read, so Eigen is included here, first, with that warning off.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/layer.h"

namespace cnnrun::ref {

// Scratch memory one thread reuses across blocks and layers (im2col columns, per-channel
// constants), so a block allocates nothing once the first block has run.
struct Workspace {
  std::vector<float> cols;
  std::vector<float> scale, shift;
  float* columns(size_t n) {
    if (cols.size() < n) cols.resize(n);
    return cols.data();
  }
};

using ForwardFn = void (*)(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out,
                           Workspace& ws);

void forward_conv(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out, Workspace& ws);
// The floats forward_conv takes from the Workspace (one image's columns, and its padded copy).
int64_t conv_workspace_floats(const Layer& l);
// How forward_conv computes it, for the report: "depthwise" (one input channel per group) or
// "im2col+gemm".
const char* conv_algo(const Layer& l);
void forward_pool(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out, Workspace& ws);
void forward_activation(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out,
                        Workspace& ws);
void forward_fc(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out, Workspace& ws);
void forward_copy(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out, Workspace& ws);
void forward_softmax(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out,
                     Workspace& ws);
void forward_batchnorm(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out,
                       Workspace& ws);
void forward_add(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out, Workspace& ws);
void forward_concat(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out,
                    Workspace& ws);
void forward_mul(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out, Workspace& ws);
void forward_upsample(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out,
                      Workspace& ws);

// The forward function of a layer: the table built from CNNRUN_LAYER_TYPES, indexed by l.kind.
ForwardFn forward_fn(const Layer& l);

}  // namespace cnnrun::ref
