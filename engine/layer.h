// The layer interface. A layer type is one file pair under engine/layers/: a parameter struct
// that every executor (CPU reference, GPU algorithms) reads, and a Layer subclass that parses
// those parameters from the netdef, infers its output shape and names the weights it needs.
// The types are listed once, in layer_types.h; the parser and every executor index that list
// by LayerKind, so adding a layer type never touches the parser or another layer (like ncnn's
// src/layer/).
#pragma once

#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/conv_algo.h"
#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "engine/layer_types.h"

namespace YAML {
class Node;
}

namespace cnnrun {

// Reads one layer's keys from its YAML map. Every key read is marked; finish() rejects the rest
// (a typo must not be silently ignored) and suggests the nearest known key. Getter errors
// (missing, malformed, out of range) are thrown by finish(), after the unknown-key check.
class ParamReader {
 public:
  ParamReader(const YAML::Node& map, const std::string& file, const std::string& layer,
              const std::string& type);
  ~ParamReader();

  bool has(const std::string& key) const;
  // Integer >= min_value; `def` is used when the key is absent (no default -> required).
  int64_t get_int(const std::string& key, int64_t min_value = 1);
  int64_t get_int(const std::string& key, int64_t def, int64_t min_value);
  // A scalar n meaning (n, n), or a two-element list [h, w].
  std::pair<int64_t, int64_t> get_pair(const std::string& key, int64_t min_value = 1);
  std::pair<int64_t, int64_t> get_pair(const std::string& key, std::pair<int64_t, int64_t> def,
                                       int64_t min_value);
  // A number x meaning (x, x), or a two-element list [h, w] of numbers (required).
  std::pair<double, double> get_number_pair(const std::string& key);
  double get_double(const std::string& key, double def);
  bool get_bool(const std::string& key, bool def);
  std::string get_string(const std::string& key, const std::string& def);
  // A block instance's parameter values: a value written "$name" in the block's layers reads
  // as params[name] (whose position the errors then name). Null outside blocks.
  void set_params(const std::map<std::string, YAML::Node>* params);
  // Marks keys the caller handles itself (name, type, inputs, algo).
  void mark_used(const std::string& key);
  // Keys the type takes that this parse may not read (a global pool's size): they complete the
  // list an unknown key's message offers, without being accepted here.
  void also_known(std::initializer_list<const char*> keys);
  // A key that names a real concept the type does not support: present -> an error saying why.
  void unsupported(const std::string& key, const std::string& why);
  // Throws for the first key that no get_* read, else for the first getter error.
  void finish() const;

  [[noreturn]] void fail(const std::string& key, const std::string& what) const;
  SourceLoc loc_of(const std::string& key) const;  // the key's value, or the map if absent

 private:
  void defer(const std::string& key, const std::string& what);
  void check_unknown() const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Capability flags, so executors ask what a layer can do instead of comparing type names.
enum LayerCaps : unsigned {
  kCapWeights = 1u << 0,     // needs weights from the weights file
  kCapIdentity = 1u << 1,    // output == input at inference (dropout, flatten's data)
  kCapFoldable = 1u << 2,    // an affine per-channel op that can be folded into conv/fc (batchnorm)
  kCapFoldTarget = 1u << 3,  // conv/fc: can absorb a following kCapFoldable layer
};

struct WeightSpec {
  std::string name;  // "weight", "bias", "running_mean", ...
  std::vector<int64_t> dims;
};

class Layer {
 public:
  virtual ~Layer() = default;

  // Reads the type's own keys.
  virtual void parse(ParamReader& p) = 0;
  // Output shape from the input shapes (already counted against min/max_inputs). Throws
  // cnnrun::Error with a message saying what was expected; the caller prefixes the location.
  virtual Shape infer_shape(const std::vector<Shape>& in) const = 0;
  // Weights this layer needs given its input shapes, in PyTorch's layouts.
  virtual std::vector<WeightSpec> weight_specs(const std::vector<Shape>& /*in*/) const { return {}; }
  // Called once the input shapes are known and infer_shape accepted them, to fill the derived
  // fields of the parameter struct (input sizes, a global pool's window).
  virtual void bind(const std::vector<Shape>& /*in*/) {}
  virtual unsigned caps() const { return 0; }
  virtual int min_inputs() const { return 1; }
  virtual int max_inputs() const { return 1; }

  // Set by the type's factory (layer_types()).
  LayerKind kind = LayerKind::kConv;
  std::string type;  // the netdef name of `kind`, for messages
  // Filled by the netdef loader.
  std::string name;
  SourceLoc loc;                         // the layer's map in the netdef
  std::vector<std::string> input_names;  // as written (or the previous layer)
  std::vector<SourceLoc> input_locs;
  std::vector<int> inputs;  // resolved: index into Network::layers, -1 = network input
  std::vector<Shape> in_shapes;
  Shape out_shape;
  ConvAlgo algo = ConvAlgo::kAuto;        // conv: pinned algorithm (kAuto = executor's choice)
  std::map<std::string, Tensor> weights;  // loaded weights, keyed by WeightSpec::name
  // The netdef's `tensors:` map: WeightSpec::name -> the tensor's name in the weights file, for
  // files whose names are not "<layer>.<name>" (an ONNX model's initializers).
  std::map<std::string, std::string> tensor_names;
  bool folded = false;  // a batchnorm folded into its producer: runs as identity

  bool has(unsigned cap) const { return (caps() & cap) != 0; }
  const Tensor& weight(const std::string& n) const;  // throws if absent
  // The name weight `n` has in a safetensors file: tensor_names[n], else "<layer>.<n>".
  std::string tensor_name(const std::string& n) const;
};

// The layer's concrete class, for an executor that has dispatched on l.kind (the class of each
// kind is in layer_types.h); a mismatch is a programming error, reported rather than undefined.
template <class T>
const T& layer_as(const Layer& l) {
  const T* p = dynamic_cast<const T*>(&l);
  if (!p) throw Error("layer '" + l.name + "' (" + l.type + "): unexpected layer class for its kind");
  return *p;
}
template <class T>
T& layer_as(Layer& l) {
  return const_cast<T&>(layer_as<T>(static_cast<const Layer&>(l)));
}

// The message for a layer type the registry lacks: the cnnrun name when the type is another
// framework's name for the same math, "X is not supported" for a real concept cnnrun lacks, or
// the list of types. Never a nearest-name guess, which could change what the network computes.
std::string unknown_type_message(const std::string& type);

// Output size of a sliding window: floor((in + 2*pad - k) / stride) + 1; throws if < 1.
int64_t window_out(int64_t in, int64_t k, int64_t stride, int64_t pad, const char* dim);

}  // namespace cnnrun
