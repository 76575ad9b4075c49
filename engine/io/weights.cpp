// Fills every layer's weights from either format and checks each tensor against the layer's
// WeightSpec; then the batchnorm folding pass (engine/passes.h) runs unless the caller says not.
// A tensor in the file that no layer uses is an error too: it usually means a layer was renamed
// on one side, which silently ignoring it would hide.
#include "engine/io/weights.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "engine/io/assets.h"
#include "engine/layers/batchnorm.h"
#include "engine/layers/conv.h"
#include "engine/layers/fc.h"
#include "engine/network.h"
#include "engine/passes.h"
#include "engine/yaml_util.h"

namespace cnnrun {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Checks `tensors` against the layer's specs (every spec present with its dims, nothing else)
// and moves them into the layer. `source` names the file for messages.
void assign(Layer& l, std::map<std::string, Tensor> tensors, const std::string& source) {
  for (const auto& spec : l.weight_specs(l.in_shapes)) {
    auto it = tensors.find(spec.name);
    if (it == tensors.end())
      throw Error(source + ": layer '" + l.name + "' " + spec.name + ": missing (expected " +
                  dims_str(spec.dims) + ")");
    if (it->second.dims != spec.dims)
      throw Error(source + ": layer '" + l.name + "' " + spec.name + ": expected " + dims_str(spec.dims) +
                  ", found " + it->second.dims_str());
    l.weights[spec.name] = std::move(it->second);
    tensors.erase(it);
  }
  if (!tensors.empty())
    throw Error(source + ": layer '" + l.name + "' (" + l.type + ") takes no tensor '" +
                tensors.begin()->first + "'" +
                (tensors.begin()->first == "bias" ? " (the netdef says bias: false)" : ""));
}

// The input shape an fc's ConvNetJS (y, x, d) ordering refers to: through a flatten (or another
// identity) the fc sees C*H*W x 1 x 1, but the file was written against the C x H x W volume.
Shape spatial_input(const Network& net, const Layer& fc) {
  Shape s = fc.in_shapes[0];
  int j = fc.inputs[0];
  while (j >= 0) {
    const Layer& p = *net.layers[static_cast<size_t>(j)];
    if (!p.has(kCapIdentity) || p.inputs.size() != 1 || p.in_shapes[0].size() != s.size()) break;
    s = p.in_shapes[0];
    j = p.inputs[0];
  }
  return s;
}

void load_convnetjs(Network& net, const std::string& dir) {
  const WeightsSpec& ws = net.weights;
  AssetResolver local(dir, {});
  std::vector<int> entry_of(net.layers.size(), -1);
  auto loc_of = [&](size_t k) { return k < ws.file_locs.size() ? ws.file_locs[k] : ws.loc; };
  for (size_t k = 0; k < ws.files.size(); ++k) {
    const std::string& lname = ws.files[k].first;
    int idx = net.find(lname);
    if (idx < 0) {
      std::vector<std::string> names;
      for (const auto& l : net.layers)
        if (l->has(kCapWeights)) names.push_back(l->name);
      fail_at(loc_of(k), "", "", "weights.files",
              "names layer '" + lname + "' but the network has no such layer" + suggest(lname, names));
    }
    const Layer& l = *net.layers[static_cast<size_t>(idx)];
    if (!l.has(kCapWeights))
      fail_at(loc_of(k), l.name, l.type, "weights.files", "this layer takes no weights");
    if (l.kind != LayerKind::kConv && l.kind != LayerKind::kFc)
      fail_at(loc_of(k), l.name, l.type, "weights.files", "ConvNetJS files hold only conv and fc weights");
    entry_of[static_cast<size_t>(idx)] = static_cast<int>(k);
  }
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const Layer& l = *net.layers[i];
    if (l.has(kCapWeights) && entry_of[i] < 0)
      fail_at(ws.loc, l.name, l.type, "weights.files",
              "the layer needs weights but 'files' names no file for it");
  }
  for (size_t i = 0; i < net.layers.size(); ++i) {
    if (entry_of[i] < 0) continue;
    Layer& l = *net.layers[i];
    size_t k = static_cast<size_t>(entry_of[i]);
    std::string path = local.resolve(ws.files[k].second, loc_of(k), "ConvNetJS weights file");
    auto t = l.kind == LayerKind::kConv ? read_convnetjs_conv(path)
                                        : read_convnetjs_fc(path, spatial_input(net, l));
    assign(l, std::move(t), path);
  }
}

// A ConvNetJS JSON snapshot: its conv and fc layers, in file order, go to the netdef's layers
// with weights, in execution order; types and every shape must agree.
void load_convnetjs_json(Network& net, const std::string& file) {
  std::vector<Layer*> targets;
  std::vector<Shape> fc_inputs;
  int64_t values = 0;
  for (auto& l : net.layers)
    if (l->has(kCapWeights)) {
      for (const auto& spec : l->weight_specs(l->in_shapes))
        values = checked_add(values, numel_of(spec.dims), "weight count");
      if (l->kind != LayerKind::kConv && l->kind != LayerKind::kFc)
        throw Error(file + ": layer '" + l->name + "' (" + l->type +
                    ") cannot take weights from a ConvNetJS snapshot");
      targets.push_back(l.get());
      if (l->kind == LayerKind::kFc) fc_inputs.push_back(spatial_input(net, *l));
    }
  std::vector<ConvnetjsJsonLayer> layers = read_convnetjs_json(file, fc_inputs, values);
  if (layers.size() != targets.size())
    throw Error(file + ": the snapshot has " + std::to_string(layers.size()) +
                " conv/fc layers, the netdef " + std::to_string(targets.size()));
  for (size_t i = 0; i < layers.size(); ++i) {
    if ((layers[i].type == "conv") != (targets[i]->kind == LayerKind::kConv))
      throw Error(file + ": conv/fc layer " + std::to_string(i + 1) + " of the snapshot is " +
                  layers[i].type + ", the netdef's '" + targets[i]->name + "' is " + targets[i]->type);
    assign(*targets[i], std::move(layers[i].tensors), file);
  }
}

// scale = weight / sqrt(running_var + eps): a negative variance, or finite values whose scale or
// shift overflows float, would make outputs NaN or infinite without a word, so they are refused
// here, where the file can be named.
void check_batchnorm(const BatchnormLayer& bn, const std::string& file) {
  const Tensor& v = bn.weight("running_var");
  for (size_t i = 0; i < v.data.size(); ++i)
    if (!(static_cast<double>(v.data[i]) + bn.p.eps > 0.0))
      throw Error(file + ": layer '" + bn.name + "' running_var: element " + std::to_string(i) + " is " +
                  std::to_string(v.data[i]) + "; a variance must be >= 0 (and running_var + eps > 0)");
  std::vector<float> scale, shift;
  bn.affine(scale, shift);
  for (size_t i = 0; i < scale.size(); ++i)
    if (!std::isfinite(scale[i]) || !std::isfinite(shift[i]))
      throw Error(file + ": layer '" + bn.name + "' channel " + std::to_string(i) +
                  ": weight / sqrt(running_var + eps) or its shift overflows float32 (weight " +
                  std::to_string(bn.weight("weight").data[i]) + ", running_var " + std::to_string(v.data[i]) +
                  ")");
}

// Gives every layer with weights its tensors from `all` (named as Layer::tensor_name says);
// a missing tensor and a tensor no layer takes are errors naming `file`.
void load_tensor_map(Network& net, std::map<std::string, Tensor> all, const std::string& file) {
  std::set<std::string> used;  // a tensor may serve several layers (an ONNX initializer read twice)
  for (auto& lp : net.layers) {
    Layer& l = *lp;
    if (!l.has(kCapWeights)) continue;
    std::map<std::string, Tensor> mine;
    for (const auto& spec : l.weight_specs(l.in_shapes)) {
      auto it = all.find(l.tensor_name(spec.name));
      if (it == all.end())
        throw Error(file + ": layer '" + l.name + "' " + spec.name + ": no tensor '" +
                    l.tensor_name(spec.name) + "' " + dims_str(spec.dims) + " in the file" +
                    (spec.name == "bias" ? " (if the layer has none, write bias: false in the netdef)" : ""));
      mine.emplace(spec.name, it->second);
      used.insert(it->first);
    }
    assign(l, std::move(mine), file);
    if (l.kind == LayerKind::kBatchnorm) check_batchnorm(layer_as<BatchnormLayer>(l), file);
  }
  std::vector<std::string> extra;
  for (const auto& kv : all)
    if (!used.count(kv.first) && !ends_with(kv.first, ".num_batches_tracked")) extra.push_back(kv.first);
  if (!extra.empty()) {
    std::string list;
    for (size_t i = 0; i < extra.size() && i < 10; ++i) list += (i ? ", " : "") + extra[i];
    if (extra.size() > 10) list += " and " + std::to_string(extra.size() - 10) + " more";
    throw Error(file + ": " + std::to_string(extra.size()) +
                " tensor(s) that no layer of the network uses: " + list +
                " (a layer name in the netdef differs from the file's?)");
  }
}

void load_safetensors(Network& net, const std::string& file) {
  load_tensor_map(net, read_safetensors(file, true), file);
}

// The folds that change weights at load: batchnorms into their producers, a conv's taps that
// read only padding, the convs a concat joins merged into one, average pools that do not shrink
// into the fc after them (engine/passes.h).
void fold_all(Network& net, const std::string& source) {
  fold_batchnorms(net, source);
  for (const auto& notes :
       {drop_padding_taps(net), merge_concat_convs(net), fold_pools_into_fcs(net, source)})
    net.rewrites.insert(net.rewrites.end(), notes.begin(), notes.end());
}

}  // namespace

void load_weights(Network& net, const AssetResolver& assets, const std::string& override_path, bool fold) {
  const Layer* first = nullptr;
  for (auto& l : net.layers) {
    if (l->folded)
      throw Error(net.source + ": weights are already loaded (and batchnorm folded) for this network");
    l->weights.clear();
    if (!first && l->has(kCapWeights)) first = l.get();
  }
  if (!first) return;
  const WeightsSpec& ws = net.weights;
  std::string source = override_path;  // names the weights in a folding error
  if (override_path.empty()) {
    if (ws.format.empty())
      fail_at(
          first->loc, first->name, first->type, "",
          "the layer needs weights but the netdef has no 'weights' section; add one or give --weights PATH");
    if (ws.format == "safetensors") {
      source = assets.resolve(ws.path, ws.loc, "weights file");
      load_safetensors(net, source);
    } else {
      source = assets.resolve(ws.path, ws.loc, "weights directory");
      load_convnetjs(net, source);
    }
  } else {
    std::error_code ec;
    if (!fs::exists(override_path, ec) && !fs::is_symlink(override_path, ec))
      throw Error("--weights " + override_path + ": no such file or directory");
    if (ends_with(override_path, ".json")) {
      load_convnetjs_json(net, override_path);  // InputFile refuses directories, FIFOs, devices
    } else if (fs::is_directory(override_path, ec)) {
      if (ws.format != "convnetjs")
        throw Error(
            "--weights " + override_path +
            ": a directory is read as ConvNetJS files, but the netdef has no convnetjs 'weights.files' map");
      load_convnetjs(net, override_path);
    } else {
      load_safetensors(net, override_path);
    }
  }
  if (fold) fold_all(net, source);
}

void load_weights_from(Network& net, std::map<std::string, Tensor> tensors, const std::string& source,
                       bool fold) {
  for (auto& l : net.layers) {
    if (l->folded)
      throw Error(net.source + ": weights are already loaded (and batchnorm folded) for this network");
    l->weights.clear();
  }
  load_tensor_map(net, std::move(tensors), source);
  if (fold) fold_all(net, source);
}

std::map<std::string, Tensor> collect_weights(const Network& net) {
  std::map<std::string, Tensor> out;
  for (const auto& l : net.layers) {
    if (l->folded) continue;  // already inside its producer (see weights.h)
    for (const auto& kv : l->weights) out[l->tensor_name(kv.first)] = kv.second;
  }
  return out;
}

}  // namespace cnnrun
