// Reading an ONNX model's protobuf: the model's limits (size, IR version, opsets) and its
// tensors (initializers, Constant values, external data). Every size taken from the file is
// checked before anything is allocated for it: a tensor's data must be in the file (or in an
// external file inside the model's directory) at the size its dims claim.
// Internal to engine/onnx/: it includes the code protoc generates from Debian's onnx.proto.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "onnx/onnx.pb.h"

namespace cnnrun::onnx_io {

constexpr int64_t kMinIr = 3, kMaxIr = 10;
constexpr int64_t kMinOpset = 7, kMaxOpset = 21;
// A tensor of more elements than this is no CNN weight cnnrun can hold (4 GiB of floats).
constexpr int64_t kMaxTensorElems = int64_t{1} << 30;

// Parses and checks a model: protobuf syntax, IR version, the default domain's opset. Returns
// that opset. `name` names the model in errors.
int64_t parse_model(const std::string& bytes, const std::string& name, onnx::ModelProto& model);

// A constant: float32 (from FLOAT or DOUBLE) or int64 (from INT64, INT32, BOOL) values.
struct Const {
  std::vector<int64_t> dims;
  bool is_int = false;
  std::vector<float> f;
  std::vector<int64_t> i;
  int64_t numel() const { return is_int ? static_cast<int64_t>(i.size()) : static_cast<int64_t>(f.size()); }
};

// Reads a TensorProto's values. `dir` is the model's directory: external data must lie inside
// it ("" refuses external data). `where` prefixes errors ("node 'x' (Conv): initializer 'W'").
Const read_tensor(const onnx::TensorProto& t, const std::string& dir, const std::string& where);

// The data type's name ("FLOAT", "INT64", ...), for messages.
std::string dtype_name(int32_t dt);

}  // namespace cnnrun::onnx_io
