// The CIFAR-10 record reader. An accepted file holds whole records, all labels below the class
// count, and the pixels are the records' bytes after each label.
#include <cstring>

#include "engine/io/dataset.h"
#include "tests/fuzz/fuzz_util.h"

using namespace cnnrun;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::scratch().write("data.bin", data, size);
  try {
    Dataset ds = load_cifar10({path}, "train", 10);
    FUZZ_CHECK(ds.count >= 1 && static_cast<size_t>(ds.count) * 3073 == size);
    FUZZ_CHECK(ds.pixels.size() == static_cast<size_t>(ds.count) * 3072);
    FUZZ_CHECK(ds.labels.size() == static_cast<size_t>(ds.count));
    for (int64_t i = 0; i < ds.count; ++i) {
      FUZZ_CHECK(ds.labels[static_cast<size_t>(i)] == data[i * 3073] && data[i * 3073] < 10);
      FUZZ_CHECK(std::memcmp(ds.image(i), data + i * 3073 + 1, 3072) == 0);
    }
  } catch (const Error& e) {
    fuzz::check_message(e);
  }
  return 0;
}
