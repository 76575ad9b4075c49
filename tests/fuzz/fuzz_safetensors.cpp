// The safetensors reader, then load_weights of the same file into a small network with conv,
// batchnorm (folded) and fc layers. An accepted file must give tensors whose sizes match their
// dims, with finite values, that survive a write/read round trip unchanged.
#include <cmath>

#include "engine/io/assets.h"
#include "engine/io/weights.h"
#include "engine/network.h"
#include "tests/fuzz/fuzz_util.h"

using namespace cnnrun;

namespace {

// Tensor names of the seeds: c.weight [4,3,3,3], c.bias [4], b.* [4], f.weight [10,4], f.bias [10].
const char* const kNet = R"(input: {channels: 3, height: 4, width: 4}
classes: [a, b, c, d, e, f, g, h, i, j]
layers:
  - {name: c, type: conv, filters: 4, kernel: 3, pad: 1}
  - {name: b, type: batchnorm}
  - {name: p, type: avgpool, global: true}
  - {name: f, type: fc, outputs: 10}
)";

void check_tensors(const std::map<std::string, Tensor>& m) {
  for (const auto& kv : m) {
    FUZZ_CHECK(numel_of(kv.second.dims) == kv.second.numel());
    for (float v : kv.second.data) FUZZ_CHECK(std::isfinite(v));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::scratch().write("w.safetensors", data, size);
  for (bool skip_counters : {false, true}) {
    try {
      std::map<std::string, Tensor> m = read_safetensors(path, skip_counters);
      check_tensors(m);
      const std::string again = fuzz::scratch().dir() + "/again.safetensors";
      write_safetensors(again, m);
      std::map<std::string, Tensor> r = read_safetensors(again);
      FUZZ_CHECK(r.size() == m.size());
      for (const auto& kv : m) {
        FUZZ_CHECK(r.count(kv.first) && r.at(kv.first).dims == kv.second.dims);
        FUZZ_CHECK(r.at(kv.first).data == kv.second.data);
      }
    } catch (const Error& e) {
      fuzz::check_message(e);
    }
  }
  try {
    Network net = parse_netdef_string(kNet, "fuzz.yaml");
    load_weights(net, AssetResolver(fuzz::scratch().dir(), {}), path);
    for (const auto& l : net.layers) check_tensors(l->weights);
  } catch (const Error& e) {
    fuzz::check_message(e);
  }
  return 0;
}
