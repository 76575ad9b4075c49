// A network as loaded from a netdef: the input, preprocessing, class names, where its weights
// and data are, and the layers in an execution order (topological, stable to file order), with
// names resolved to indices and shapes inferred. Executors read it and never change it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/layer.h"

namespace cnnrun {

// y = pixel * scale[c] + shift[c], pixel the raw byte 0..255. Image files are first resized
// (shorter side) and centre-cropped to the input size (engine/io/image.h).
struct Preprocess {
  std::vector<float> scale, shift;  // one per input channel
  int resize = 0;                   // image files: shorter side resized to this (0: not resized)
  int crop_h = 0, crop_w = 0;       // image files: centre crop (0: none)
  SourceLoc resize_loc;             // where resize/crop were written, for errors about them
};

struct DataSpec {
  std::string format;              // "cifar10" | "cifar100" | "idx" | "npy" | "images"
  std::vector<std::string> paths;  // cifar10/100: files or one directory; images: a folder or a list file
  std::string images, labels;      // idx, npy (labels optional for npy)
  std::string split = "train";     // cifar10 directory: "train" (data_batch_1..5) | "test"
  SourceLoc loc;
};

struct WeightsSpec {
  std::string format;                                      // "convnetjs" | "safetensors"
  std::string path;                                        // safetensors file, or convnetjs directory
  std::vector<std::pair<std::string, std::string>> files;  // convnetjs: layer -> file
  SourceLoc loc;
  std::vector<SourceLoc> file_locs;
};

struct Network {
  std::string source;      // the netdef's path as given (or a pseudo-name for strings)
  std::string source_dir;  // directory relative paths in the netdef resolve against
  std::string name;
  Shape input;
  Preprocess pre;
  std::vector<std::string> classes;
  DataSpec data;
  WeightsSpec weights;
  std::vector<std::unique_ptr<Layer>> layers;  // execution order
  int output = -1;                             // index of the output layer
  // What loading the weights changed in the graph beyond batchnorm folds, one sentence each
  // (fold_pools_into_fcs), for the report.
  std::vector<std::string> rewrites;

  int find(const std::string& layer_name) const;  // -1 if none
  Shape shape_of(int index) const {
    return index < 0 ? input : layers[static_cast<size_t>(index)]->out_shape;
  }
  int num_classes() const { return static_cast<int>(classes.size()); }
};

// Parses and checks a netdef (YAML syntax, keys, layer types, parameters, names, cycles,
// shapes). Weights are not loaded here.
Network parse_netdef_file(const std::string& path);
// `dir` is where the text's relative paths resolve (an imported model's directory).
Network parse_netdef_string(const std::string& text, const std::string& name = "<string>",
                            const std::string& dir = ".");

// The multiply-adds one image takes in the network's conv and fc layers (a conv: each output
// value's filter window over its group's channels; an fc: inputs x outputs), the arithmetic the
// usual counts give (torchvision's model documentation); nothing for pools, activations or
// adds. Of the layers as they stand: the netdef as written before load_weights' rewrites (which
// may merge or fold layers), the network as it runs after.
int64_t multiply_adds(const Network& net);

}  // namespace cnnrun
