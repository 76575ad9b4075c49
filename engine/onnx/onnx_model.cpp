#include "engine/onnx/onnx_model.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <cstring>
#include <filesystem>

#include "engine/core/error.h"
#include "engine/io/files.h"

namespace cnnrun::onnx_io {

namespace fs = std::filesystem;

namespace {

size_t elem_size(int32_t dt) {
  switch (dt) {
    case onnx::TensorProto::FLOAT:
    case onnx::TensorProto::INT32:
      return 4;
    case onnx::TensorProto::INT64:
    case onnx::TensorProto::DOUBLE:
      return 8;
    case onnx::TensorProto::BOOL:
      return 1;
    default:
      return 0;
  }
}

int64_t parse_nonneg(const std::string& v, const std::string& where, const std::string& key) {
  if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos)
    throw Error(where + ": external_data " + key + " '" + v + "' is not a non-negative integer");
  return std::stoll(v);
}

// The bytes of an external tensor: `location` relative to the model's directory and inside it
// (after symbolic links), `offset` and `length` inside the file, `length` what the dims need.
std::string read_external(const onnx::TensorProto& t, const std::string& dir, const std::string& where,
                          uint64_t want) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : t.external_data()) {
    if (kv.key() == "location")
      location = kv.value();
    else if (kv.key() == "offset")
      offset = parse_nonneg(kv.value(), where, "offset");
    else if (kv.key() == "length")
      length = parse_nonneg(kv.value(), where, "length");
    else if (kv.key() != "checksum")
      throw Error(where + ": external_data key '" + kv.key() +
                  "' is not one of location, offset, length, checksum");
  }
  if (dir.empty())
    throw Error(where + ": external data ('" + location + "') is not read from a model in memory");
  if (location.empty()) throw Error(where + ": external data without a location");
  fs::path loc(location);
  if (loc.is_absolute())
    throw Error(where + ": external data location '" + location +
                "' is absolute; it must be relative to the model");
  std::error_code ec;
  fs::path root = fs::canonical(dir, ec);
  if (ec) throw Error(where + ": model directory '" + dir + "': " + ec.message());
  fs::path real = fs::canonical(root / loc, ec);
  if (ec) {
    fs::path weak = fs::weakly_canonical(root / loc, ec);
    if (!ec && !path_inside(weak, root))
      throw Error(where + ": external data location '" + location + "' lies outside the model's directory");
    throw Error(where + ": external data file '" + location + "' not found in " + root.string());
  }
  if (!path_inside(real, root))
    throw Error(where + ": external data location '" + location + "' lies outside the model's directory " +
                root.string());
  if (!fs::is_regular_file(real, ec)) throw Error(where + ": external data '" + location + "' is not a file");
  // Through InputFile: opened once (a FIFO never blocks), recorded as an input of the run.
  InputFile f(real.string());
  const uint64_t size = static_cast<uint64_t>(f.size());
  if (length >= 0 && static_cast<uint64_t>(length) != want)
    throw Error(where + ": external data length " + std::to_string(length) + " bytes, the dims need " +
                std::to_string(want));
  if (static_cast<uint64_t>(offset) > size || size - static_cast<uint64_t>(offset) < want)
    throw Error(where + ": external data '" + location + "' has " + std::to_string(size) + " bytes; offset " +
                std::to_string(offset) + " + " + std::to_string(want) + " bytes do not fit");
  std::string bytes(want, '\0');
  if (want) f.read_exact_at(offset, bytes.data(), static_cast<int64_t>(want));
  return bytes;
}

template <class T>
void decode_raw(const std::string& raw, std::vector<T>& out, size_t n) {
  out.resize(n);
  if (n) std::memcpy(out.data(), raw.data(), n * sizeof(T));
}

}  // namespace

std::string dtype_name(int32_t dt) {
  if (onnx::TensorProto::DataType_IsValid(dt))
    return onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(dt));
  return "data type " + std::to_string(dt);
}

int64_t parse_model(const std::string& bytes, const std::string& name, onnx::ModelProto& model) {
  google::protobuf::io::ArrayInputStream raw(bytes.data(), static_cast<int>(bytes.size()));
  google::protobuf::io::CodedInputStream in(&raw);
  in.SetRecursionLimit(64);
  if (!model.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
    throw Error(name + ": not an ONNX model: the protobuf is malformed or truncated (" +
                std::to_string(bytes.size()) + " bytes)");
  if (!model.has_graph()) throw Error(name + ": not an ONNX model: no graph");
  if (!model.has_ir_version() || model.ir_version() < kMinIr || model.ir_version() > kMaxIr)
    throw Error(name + ": IR version " + std::to_string(model.ir_version()) + " is not supported (" +
                std::to_string(kMinIr) + " to " + std::to_string(kMaxIr) + ")");
  int64_t opset = -1;
  for (const auto& o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
  if (opset < 0) throw Error(name + ": the model imports no opset of the default domain (ai.onnx)");
  if (opset < kMinOpset || opset > kMaxOpset)
    throw Error(name + ": opset " + std::to_string(opset) + " is not supported (" +
                std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset) + ")");
  return opset;
}

Const read_tensor(const onnx::TensorProto& t, const std::string& dir, const std::string& where) {
  Const c;
  int64_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0) throw Error(where + ": negative dimension " + std::to_string(d));
    if (d > kMaxTensorElems || (d && n > kMaxTensorElems / d))
      throw Error(where + ": dims " +
                  [&] {
                    std::string s;
                    for (int k = 0; k < t.dims_size(); ++k) s += (k ? "x" : "") + std::to_string(t.dims(k));
                    return s;
                  }() +
                  " exceed " + std::to_string(kMaxTensorElems) + " elements");
    n *= d;
    c.dims.push_back(d);
  }
  const int32_t dt = t.data_type();
  const size_t es = elem_size(dt);
  if (!es)
    throw Error(where + ": data type " + dtype_name(dt) +
                " is not supported (FLOAT, DOUBLE, INT64, INT32, BOOL)");
  if (t.has_segment()) throw Error(where + ": segmented tensors are not supported");
  const size_t un = static_cast<size_t>(n);
  const uint64_t want = static_cast<uint64_t>(n) * es;
  const bool external = t.data_location() == onnx::TensorProto::EXTERNAL;
  std::string ext;
  const std::string* raw = nullptr;
  if (external) {
    ext = read_external(t, dir, where, want);
    raw = &ext;
  } else if (t.has_raw_data()) {
    if (t.raw_data().size() != want)
      throw Error(where + ": raw_data has " + std::to_string(t.raw_data().size()) + " bytes, the dims need " +
                  std::to_string(want));
    raw = &t.raw_data();
  }
  c.is_int = dt != onnx::TensorProto::FLOAT && dt != onnx::TensorProto::DOUBLE;
  auto count_check = [&](int got) {
    if (static_cast<int64_t>(got) != n)
      throw Error(where + ": " + std::to_string(got) + " values for dims of " + std::to_string(n) +
                  " elements");
  };
  switch (dt) {
    case onnx::TensorProto::FLOAT:
      if (raw) {
        decode_raw(*raw, c.f, un);
      } else {
        count_check(t.float_data_size());
        c.f.assign(t.float_data().begin(), t.float_data().end());
      }
      break;
    case onnx::TensorProto::DOUBLE: {
      std::vector<double> d;
      if (raw) {
        decode_raw(*raw, d, un);
      } else {
        count_check(t.double_data_size());
        d.assign(t.double_data().begin(), t.double_data().end());
      }
      c.f.assign(d.begin(), d.end());
      break;
    }
    case onnx::TensorProto::INT64:
      if (raw) {
        decode_raw(*raw, c.i, un);
      } else {
        count_check(t.int64_data_size());
        c.i.assign(t.int64_data().begin(), t.int64_data().end());
      }
      break;
    case onnx::TensorProto::INT32: {
      std::vector<int32_t> v;
      if (raw) {
        decode_raw(*raw, v, un);
      } else {
        count_check(t.int32_data_size());
        v.assign(t.int32_data().begin(), t.int32_data().end());
      }
      c.i.assign(v.begin(), v.end());
      break;
    }
    default: {  // BOOL: one byte each raw, or int32_data
      if (raw) {
        std::vector<uint8_t> v;
        decode_raw(*raw, v, un);
        for (uint8_t b : v) c.i.push_back(b != 0);
      } else {
        count_check(t.int32_data_size());
        for (int32_t b : t.int32_data()) c.i.push_back(b != 0);
      }
    }
  }
  return c;
}

}  // namespace cnnrun::onnx_io
