// The .npy reader (load_npy). The input is tried as the images file for three networks' inputs
// (3x4x4, 1x5x5, 3x2x2: channels first or last, one channel without an axis, uint8 or float32),
// and as the labels file beside valid images of 4 images. An accepted file gives exactly the
// input's shape, as many values as images times that, and labels below the class count.
#include <cstring>
#include <vector>

#include "engine/io/dataset.h"
#include "tests/fuzz/fuzz_util.h"

using namespace cnnrun;

namespace {

constexpr int kClasses = 10;

// 4 uint8 images of 1x2x2, as numpy.save writes them.
std::string companion_images() {
  std::string header = "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 1, 2, 2), }";
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::string f("\x93NUMPY\x01\x00", 8);
  f += static_cast<char>(header.size() & 0xff);
  f += static_cast<char>(header.size() >> 8);
  f += header;
  f += std::string(16, '\x07');
  return fuzz::scratch().write("companion.npy", f.data(), f.size());
}

void as_images(const std::string& path, const Shape& input) {
  try {
    Dataset ds = load_npy(path, "", input, kClasses);
    FUZZ_CHECK(ds.count >= 0 && ds.shape == input && ds.labels.empty());
    const size_t want = static_cast<size_t>(ds.count * input.size());
    FUZZ_CHECK(ds.preprocessed() ? ds.values.size() == want && ds.pixels.empty() : ds.pixels.size() == want);
  } catch (const Error& e) {
    fuzz::check_message(e);
  }
}

void as_labels(const std::string& images, const std::string& path) {
  try {
    Dataset ds = load_npy(images, path, Shape{1, 2, 2}, kClasses);
    FUZZ_CHECK(ds.count == 4 && ds.labels.size() == 4);
    for (int32_t l : ds.labels) FUZZ_CHECK(l >= 0 && l < kClasses);
  } catch (const Error& e) {
    fuzz::check_message(e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string images = companion_images();
  const std::string path = fuzz::scratch().write("input.npy", data, size);
  for (const Shape& s : {Shape{3, 4, 4}, Shape{1, 5, 5}, Shape{3, 2, 2}}) as_images(path, s);
  as_labels(images, path);
  return 0;
}
