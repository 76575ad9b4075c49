// The ONNX importer: an ONNX model (ModelProto, IR versions 3 to 10, opsets 7 to 21) becomes a
// netdef (YAML text, one layer per line, layer names from the graph's nodes, weight tensors named
// as the model's initializers) and the tensors its layers read. The netdef is then parsed by the
// ordinary parser, so an imported network is checked exactly as a written one.
//
// The mapping rules are in onnx_import.cpp; the protobuf reading, limits and external data in
// onnx_model.cpp. This header has no protobuf types, so the CLI and the tests build without the
// generated code (engine/onnx/onnx_none.cpp stands in when protobuf is not found).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/network.h"

namespace cnnrun {

// What an ONNX model does not carry. Each string is written into the netdef as YAML, so it is
// checked there (with the netdef's messages) like a hand-written section.
struct ImportOptions {
  std::string name;          // the netdef's `name` (default: the graph's name, else the file's)
  std::string preprocess;    // a YAML mapping for `preprocess` ("" = the default x / 255)
  std::string classes;       // a YAML list of names or a count ("" = one class per output value)
  std::string data;          // a YAML mapping for `data` ("" = none; give --data when running)
  std::string weights_path;  // the netdef's weights.path (import: OUT.safetensors beside OUT.yaml)
};

struct ImportResult {
  std::string netdef;                     // YAML text
  std::map<std::string, Tensor> tensors;  // what the layers read, by tensor name
  std::vector<std::string> notes;         // folded shape subgraphs, aliased identities, ...
};

// True when this build has the importer (protobuf and onnx.proto were found at configure time).
bool onnx_import_available();

// Imports `path`; external data files resolve inside the model's directory only.
ImportResult import_onnx_file(const std::string& path, const ImportOptions& opt);
// Imports serialized model bytes; `name` names the model in errors, `dir` is where external
// data may be read from ("" = external data is refused).
ImportResult import_onnx_bytes(const std::string& bytes, const std::string& name, const std::string& dir,
                               const ImportOptions& opt);

// Imports in memory and returns the network with its weights loaded (batchnorm folded), as
// parse_netdef_file + load_weights would for the written files.
Network load_onnx_network(const std::string& path, const ImportOptions& opt);

}  // namespace cnnrun
