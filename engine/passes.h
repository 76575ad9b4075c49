// Graph passes: facts about a loaded Network that more than one room needs, computed in one
// place. Each is a plain function of the graph; none allocates device memory or knows an
// executor. A new graph pass goes here (declaration) and in passes.cpp, with a test in
// tests/test_passes.cpp.
//
//   readers            who reads each layer's output and the network input
//   runs_as_identity   the identity rule: which layers alias their input and compute nothing
//   fold_batchnorms    batchnorm folded into the conv/fc before it (changes weights; at load)
//   find_fusions       which layers could run in their producer's kernel (the GPU planner
//                      then keeps those its kernels accept)
#pragma once

#include <string>
#include <vector>

#include "engine/network.h"

namespace cnnrun {

// Readers of every output. A layer that names the same input twice reads it twice.
struct Readers {
  std::vector<std::vector<int>> of;  // of[i]: the layers reading layer i's output, in order
  int input = 0;                     // reads of the network input
  int count(int layer) const { return static_cast<int>(of[static_cast<size_t>(layer)].size()); }
};
Readers readers(const Network& net);

// True when the layer's output is its input unchanged at inference (dropout, flatten, a folded
// batchnorm): executors alias the input instead of computing anything.
bool runs_as_identity(const Layer& l);

// Folds every batchnorm whose input is a conv or fc that nothing else reads (and that is not the
// network output) into that layer: W' = W * scale per output channel, bias' = bias * scale +
// shift (a bias is added when the layer had none). The batchnorm is marked `folded` and from
// then on runs as identity. `source` names the weights in an overflow error.
void fold_batchnorms(Network& net, const std::string& source);

// Layers that can be computed inside their producer's kernel, by the graph alone.
struct Fusions {
  // act[i] >= 0: layer i is a conv or fc, not the output, whose only reader is this pointwise
  // activation (an ActivationLayer: relu, relu6, leaky_relu, hardswish, hardsigmoid, silu, gelu,
  // tanh, sigmoid); it can run in i's epilogue.
  // The activation may also follow layers that run as identity (a batchnorm folded into i:
  // conv -> batchnorm -> relu), each the only reader of the one before and none the output;
  // through[k] = that activation for each such layer k between them (its value is never
  // materialised: the buffer it aliases holds the activation's output).
  std::vector<int> act;
  std::vector<int> through;
  // relu[i] >= 0: act[i] when that activation is a ReLU (the one every library epilogue has).
  std::vector<int> relu;
  // pool[i] >= 0: layer i is a conv with relu[i] >= 0, that ReLU is not the output, and its only
  // reader is this 2x2 stride-2 max-pool without padding that floors (no ceil_mode, not
  // adaptive): the fused pool never computes a partial last window.
  std::vector<int> pool;
  // residual[i] >= 0: layer i is a conv, not the output, with no activation of its own
  // (act[i] < 0), whose value (through identity layers as above, each the only reader of the one
  // before and none the output) is read only by this add of two inputs of i's shape; the add's
  // other input is the network input or a layer before i, so it exists when i runs. The add runs
  // in i's epilogue, y = conv + bias + other, and so does the activation that is the add's only
  // reader when the add is not the output: residual_act[i] (else -1). ResNet's
  // conv -> batchnorm -> add -> relu. through[k] of the identity layers between i and the add
  // is then the last layer fused (the activation, else the add).
  std::vector<int> residual;
  std::vector<int> residual_act;
  // The conv that is the only reader of the network input (it can read the raw pixels), or -1.
  int input_conv = -1;
};
Fusions find_fusions(const Network& net);

}  // namespace cnnrun
