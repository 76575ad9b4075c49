// The ONNX importer on arbitrary bytes (written as model.onnx in a scratch directory, so external
// data resolves there). Beyond "no crash, only cnnrun::Error, no allocation the input does not
// justify": an accepted model's netdef must parse and its tensors load into it, as
// `cnnrun import` and running an .onnx directly rely on.
#include "engine/io/weights.h"
#include "engine/network.h"
#include "engine/onnx/onnx_import.h"
#include "tests/fuzz/fuzz_util.h"

using namespace cnnrun;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::scratch().write("model.onnx", data, size);
  ImportResult r;
  try {
    r = import_onnx_file(path, {});
  } catch (const Error& e) {
    fuzz::check_message(e);
    return 0;
  }
  // What `cnnrun import` guarantees: the netdef parses and the tensors load into it as written.
  try {
    Network net = parse_netdef_string(r.netdef, "imported.yaml", fuzz::scratch().dir());
    load_weights_from(net, r.tensors, path, /*fold=*/false);
    FUZZ_CHECK(!net.layers.empty());
  } catch (const Error& e) {
    std::fprintf(stderr, "an imported model does not load: %s\n", e.what());
    std::abort();
  }
  // Running the model folds batchnorms into the weights, which may overflow float32 for
  // values the file holds: that is a clean error about the values, never a crash.
  try {
    Network net = parse_netdef_string(r.netdef, "imported.yaml", fuzz::scratch().dir());
    load_weights_from(net, std::move(r.tensors), path);
  } catch (const Error& e) {
    fuzz::check_message(e);
  }
  return 0;
}
