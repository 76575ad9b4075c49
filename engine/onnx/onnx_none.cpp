// The importer's stand-in for builds without protobuf or onnx.proto (see CMakeLists.txt): every
// entry point says why there is no importer.
#include "engine/onnx/onnx_import.h"

namespace cnnrun {

namespace {
[[noreturn]] void no_importer(const std::string& what) {
  throw Error(
      what +
      ": this cnnrun was built without the ONNX importer (protobuf, protoc or onnx/onnx.proto was not "
      "found at configure time; install libprotobuf-dev, protobuf-compiler and libonnx-dev)");
}
}  // namespace

bool onnx_import_available() { return false; }

ImportResult import_onnx_file(const std::string& path, const ImportOptions&) { no_importer(path); }

ImportResult import_onnx_bytes(const std::string&, const std::string& name, const std::string&,
                               const ImportOptions&) {
  no_importer(name);
}

Network load_onnx_network(const std::string& path, const ImportOptions&) { no_importer(path); }

}  // namespace cnnrun
