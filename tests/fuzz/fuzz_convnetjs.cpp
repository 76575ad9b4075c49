// The ConvNetJS text reader, as a conv file and as an fc file for a 2x3x4 input (24 inputs).
// An accepted file gives tensors of the header's dims, all finite.
#include <cmath>

#include "engine/io/weights.h"
#include "tests/fuzz/fuzz_util.h"

using namespace cnnrun;

namespace {

void check_tensors(const std::map<std::string, Tensor>& m) {
  FUZZ_CHECK(m.size() == 2 && m.count("weight") && m.count("bias"));
  for (const auto& kv : m) {
    FUZZ_CHECK(numel_of(kv.second.dims) == kv.second.numel());
    for (float v : kv.second.data) FUZZ_CHECK(std::isfinite(v));
  }
  FUZZ_CHECK(m.at("weight").dims[0] == m.at("bias").dims[0]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::scratch().write("layer.txt", data, size);
  try {
    auto m = read_convnetjs_conv(path);
    check_tensors(m);
    FUZZ_CHECK(m.at("weight").dims.size() == 4);
  } catch (const Error& e) {
    fuzz::check_message(e);
  }
  try {
    auto m = read_convnetjs_fc(path, Shape{2, 3, 4});
    check_tensors(m);
    FUZZ_CHECK(m.at("weight").dims.size() == 2 && m.at("weight").dims[1] == 24);
  } catch (const Error& e) {
    fuzz::check_message(e);
  }
  return 0;
}
