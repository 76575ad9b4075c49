// The CPU reference's per-layer forward functions, one file per layer type under
// reference/layers/, and the registry from type name to function (one line per type, in
// cpu_executor.cpp). Every function runs a block of n images in NCHW:
// in[k] points at input k's n x in_shapes[k] floats, out at n x out_shape floats. The functions
// are the definition the GPU executor is checked against, so they are written to be read.
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

// The layer's concrete class; a mismatch means the registries disagree, a programming error.
template <class T>
const T& layer_as(const Layer& l) {
  const T* p = dynamic_cast<const T*>(&l);
  if (!p)
    throw Error("layer '" + l.name + "' (" + l.type + "): unexpected layer class for the CPU reference");
  return *p;
}

void forward_conv(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out, Workspace& ws);
// The floats forward_conv takes from the Workspace (one image's columns, and its padded copy).
int64_t conv_workspace_floats(const Layer& l);
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

// type name -> forward function, every type of layer_registry().
const std::map<std::string, ForwardFn>& cpu_forward_registry();

// True when the layer's output is its input unchanged (dropout, flatten, a folded batchnorm):
// the executor then aliases the input instead of calling the function.
inline bool runs_as_identity(const Layer& l) {
  return l.has(kCapIdentity) || (l.has(kCapFoldable) && l.folded);
}

}  // namespace cnnrun::ref
