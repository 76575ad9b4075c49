// Graph passes: facts about a loaded Network that more than one room needs, computed in one
// place. Each is a plain function of the graph; none allocates device memory or knows an
// executor. A new graph pass goes here (declaration) and in passes.cpp, with a test in
// tests/test_passes.cpp.
//
//   readers            who reads each layer's output and the network input
//   runs_as_identity   the identity rule: which layers alias their input and compute nothing
//   fold_batchnorms    batchnorm folded into the conv/fc before it (changes weights; at load)
//   fold_pools_into_fcs an average pool that does not shrink its input, folded into the fc
//                      that reads it (changes weights and the graph; at load)
//   drop_padding_taps  a conv's taps that read only padding, dropped where its input and
//                      output are one position along an axis (changes weights; at load)
//   merge_concat_convs convs of one input, each the only branch into a concat, merged into
//                      one conv whose filters are the concat's channels (changes weights and
//                      the graph; at load)
//   find_fusions       which layers could run in their producer's kernel, or (a per-channel
//                      mul) in their reader's filters (the GPU planner then keeps those its
//                      kernels accept)
//   layer_lifetimes,   when each layer's output is in use, and which outputs may share memory
//   share_groups       (the CPU reference's run; the GPU planner has its own lifetimes)
#pragma once

#include <algorithm>
#include <cstdint>
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
// batchnorm, a pool that maps each element to itself: pool_is_identity): executors alias the
// input instead of computing anything.
bool runs_as_identity(const Layer& l);
// A max or average pool whose output is its input, bit for bit: the same shape and every window
// one element, counted once (1x1 windows of stride 1 without padding; an adaptive pool to the
// input's size; on a 1x1 plane, any max pool and an average pool that does not count padding in
// its divisor, such as the global pool of a squeeze-and-excitation block on a 1x1 map).
bool pool_is_identity(const Layer& l);

// Folds every batchnorm whose input is a conv or fc that nothing else reads (and that is not the
// network output) into that layer: W' = W * scale per output channel, bias' = bias * scale +
// shift (a bias is added when the layer had none). The batchnorm is marked `folded` and from
// then on runs as identity. `source` names the weights in an overflow error.
void fold_batchnorms(Network& net, const std::string& source);

// Folds every average pool whose output has at least as many positions as its input (an
// adaptive pool that replicates: VGG's 7x7 after a feature map of 1x1 at 32x32 input; or one
// that copies: 7x7 -> 7x7) into the fc that reads it, directly or through flatten/dropout layers,
// each the only reader of the one before, none of them the network output. The pool is linear,
// so fc(pool(x)) = W' x with W'[o][c][y][x] = the sum, over the output positions (Y, X) whose
// window holds (y, x), of W[o][c][Y][X] / that window's divisor (summed in double): the fc then
// reads the pool's input, with C*h*w inputs instead of C*H*W (VGG-11 at 32x32: 25088 -> 512, a
// 49th of the largest layer's work), and the pool is removed from the network (the layers after
// it move up one index). Returns one sentence per fold, for the report. `source` names the
// weights in an overflow error.
std::vector<std::string> fold_pools_into_fcs(Network& net, const std::string& source);

// Along an axis where a conv's input and output are both one position (ResNet-18's layer4 at
// 32x32: 3x3 convs with pad 1 on 512x1x1 maps), its one output reads the input with tap
// pad / dilation of that axis and padding with every other. Those other taps are dropped: the
// kernel becomes 1 along the axis, without pad, stride or dilation (a 3x3 conv on a 1x1 map
// becomes a 1x1 conv with the centre taps, a ninth of the work). No value changes (the dropped
// taps multiply zeros) unless a dropped weight is not finite, and then the conv is left as it
// is, as it is when the input position falls between taps (pad not a multiple of dilation).
// Returns one sentence per conv, for the report.
std::vector<std::string> drop_padding_taps(Network& net);

// Merges the convs whose outputs a concat joins when each of its inputs is a conv (then,
// optionally, an activation), all reading the same tensor, with the same stride and dilation,
// groups 1, the same activation (kind and slope) and the same pinned algorithm, each layer the
// only reader of the one before and none the network output: SqueezeNet's fire modules (a 1x1
// and a 3x3 expand conv, each with a ReLU, concatenated). The concat's channels are one conv's
// filters, in the concat's order: the kernel is the largest (a smaller one sits at the offset
// that reads the same input positions, (merged pad - its pad) / dilation, zeros around it), the
// bias the branches' (zeros where one had none). The first branch's conv becomes that conv and its
// activation the block's output; the concat's readers read it; the other branches and the concat
// are removed (layers after them move up). No concat pass, one conv launch instead of several,
// the input read once; the output is the same for finite inputs (the zero taps of a smaller
// kernel multiply its neighbours: an infinite neighbour would make them NaN). Returns one
// sentence per merge, for the report.
std::vector<std::string> merge_concat_convs(Network& net);

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
  // pool[i] >= 0: layer i is a conv with act[i] >= 0, that activation is not the output, and its
  // only reader is this max or average pool of fixed windows (not global, not adaptive, not an
  // identity pool; any size, stride, padding, ceil_mode). Which kernels can compute it is the GPU
  // planner's to say (the implicit kernel: a 2x2 stride-2 pool without padding that floors, a
  // max-pool after a ReLU or an average pool after any activation; the stem kernel: a max-pool
  // of any window of at most its tile).
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
  // scale[i] >= 0: layer i is a 1x1 conv of stride 1, unpadded, undilated, groups 1, whose input
  // is this mul of two inputs, one per channel (C x 1 x 1, broadcast) and one of the conv's input
  // shape; the conv is the mul's only reader and the mul is not the output. A
  // squeeze-and-excitation block's scale before its projection: the mul can be folded into the
  // conv's filters per image (conv(x * s) = (W diag(s)) x), so that x * s never exists.
  std::vector<int> scale;
  // prepool[i] >= 0: layer i is a 1x1 conv of stride 1, unpadded, undilated, groups 1, whose input
  // is this max-pool of fixed windows (is_fixed_pool: any size, stride, padding, ceil_mode) of a
  // layer's output (not the network input); the conv is the pool's only reader and the pool is
  // not the output. SqueezeNet's pool before a fire module's squeeze, GoogLeNet's branch4: a
  // kernel that takes each window's maximum as it loads the conv's input needs no pooled tensor.
  std::vector<int> prepool;
  // The conv that is the only reader of the network input (it can read the raw pixels), or -1.
  int input_conv = -1;
};
Fusions find_fusions(const Network& net);

// When a buffer is in use, in the steps of one forward pass: from the step that first writes it
// to the last that reads it (first > last: never).
struct Lifetime {
  int first = 0, last = 0;
  void cover(int step) {  // in use at `step` too
    first = std::min(first, step);
    last = std::max(last, step);
  }
};
// Per layer, when its output is in use on an executor that runs every layer but the identities
// in order (the CPU reference): layer i writes at step i; it is read at the step of every layer
// that reads it directly or through identity layers (which alias their input); the network
// output is read at step layers.size() (after the last layer). Identity layers own nothing:
// {layers.size(), layers.size() - 1}.
std::vector<Lifetime> layer_lifetimes(const Network& net);

// Which buffers share one allocation: a group never holds two buffers in use at the same step
// (one's last step before the other's first: a step never writes over what it reads; a buffer
// never in use joins none and gets -1). Greedy in order of first use: each buffer joins, among
// the groups free by then, the smallest that holds it, else the largest (which grows), else a
// new group. Returns each buffer's group (0, 1, ...); *group_sizes (may be null) gets each
// group's size, its largest member's.
std::vector<int> share_groups(const std::vector<Lifetime>& life, const std::vector<int64_t>& sizes,
                              std::vector<int64_t>* group_sizes = nullptr);

}  // namespace cnnrun
