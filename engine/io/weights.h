// Weight loading. Both formats end in the same place: each layer's `weights` map filled with
// tensors in PyTorch's layouts (conv [F,C,KH,KW], fc [O,I] with I in CHW order), each checked
// against the layer's WeightSpec with expected vs found in the error.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace cnnrun {

struct Network;
class AssetResolver;

// ConvNetJS text format (see docs/netdef.md and ../shared/README.md for its ordering):
//   conv: "KW KH DEPTH FILTERS", weights indexed ((f*KW + x)*KH + y)*DEPTH + d, then biases;
//   fc:   "INPUTS OUTPUTS", each output's inputs ordered (y, x, d), then biases.
// Returns the layer's tensors ("weight", "bias") in PyTorch layout. `in` is the layer's input
// shape (needed to reorder the fc inputs).
std::map<std::string, Tensor> read_convnetjs_conv(const std::string& file);
std::map<std::string, Tensor> read_convnetjs_fc(const std::string& file, const Shape& in);

// A ConvNetJS network snapshot (net.toJSON(), e.g. the CIFAR-10 demo's cifar10_snapshot.json):
// the "weights" ({"weight", "bias"} in PyTorch layout) of its conv and fc layers in file order.
// ConvNetJS keeps a Vol's value (x, y, d) at w[((sx * y) + x) * depth + d]: a conv filter is a
// Vol of KW x KH x C; an fc filter a 1 x 1 x N Vol whose N inputs are the previous volume's w,
// so `fc_inputs[i]` (the C x H x W that fc i reads) reorders them to CHW. A file much larger
// than `max_values` weights (the netdef's count; 0 = no netdef) could need is refused unparsed.
struct ConvnetjsJsonLayer {
  std::string type;  // "conv" or "fc"
  std::map<std::string, Tensor> tensors;
};
std::vector<ConvnetjsJsonLayer> read_convnetjs_json(const std::string& file,
                                                    const std::vector<Shape>& fc_inputs,
                                                    int64_t max_values = 0);

// safetensors: all F32 tensors of the file by name ("conv1.weight"), dims as stored. Any other
// dtype is an error, except that with skip_batch_counters PyTorch's integer batchnorm counters
// ("*.num_batches_tracked", I64) are checked for their place in the file and then left out.
std::map<std::string, Tensor> read_safetensors(const std::string& file, bool skip_batch_counters = false);
// Writes F32 tensors (sorted by name) as safetensors.
void write_safetensors(const std::string& file, const std::map<std::string, Tensor>& tensors);
// The bytes of such a file (write_safetensors writes these).
std::string safetensors_bytes(const std::map<std::string, Tensor>& tensors);

// Loads the network's weights from its WeightsSpec (or `override_path`, a safetensors file or
// convnetjs directory given with --weights), checks every shape, then folds batchnorm layers
// into their producers where possible, and average pools that do not shrink into the fc after
// them (engine/passes.h; net.rewrites says which).
// fold = false keeps the graph and the weights as they are (for `cnnrun convert`, whose output
// must load into the same netdef).
void load_weights(Network& net, const AssetResolver& assets, const std::string& override_path,
                  bool fold = true);

// Loads the weights from tensors already in memory (an imported ONNX model's), named as a
// safetensors file's would be (Layer::tensor_name); `source` names them in errors.
void load_weights_from(Network& net, std::map<std::string, Tensor> tensors, const std::string& source,
                       bool fold = true);

// All weights of the network as Layer::tensor_name ("<layer>.<name>" unless `tensors:` renames) -> tensor
// (the safetensors naming), as the network runs: a folded batchnorm's scale and shift are inside its
// producer's weight and bias, so its own four tensors are left out (written too, a reload would fold them a
// second time). The result fits the netdef with the folded batchnorms removed (and bias on for their
// producers).
std::map<std::string, Tensor> collect_weights(const Network& net);

}  // namespace cnnrun
