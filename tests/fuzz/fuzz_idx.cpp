// The IDX reader. The input is tried as the images file (with a valid labels file of the count
// its header announces) and as the labels file (with valid 1x1 images of that count), each plain
// and gzip-compressed, so the gzip path sees the same structures the fuzzer builds. An accepted
// file gives exactly the header's counts and the payload bytes of the IDX stream the reader sees:
// the input's bytes, inflated where they are themselves gzip (the reader tells gzip by its magic,
// whatever the file's name).
#include <zlib.h>

#include <cstring>
#include <utility>
#include <vector>

#include "engine/io/dataset.h"
#include "tests/fuzz/fuzz_util.h"

using namespace cnnrun;

namespace {

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}
void put_be32(std::vector<uint8_t>& v, uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(static_cast<uint8_t>(x >> s));
}

std::string gzip_file(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = fuzz::scratch().dir() + "/" + name;
  gzFile g = gzopen(path.c_str(), "wb1");
  if (!g || (size && gzwrite(g, data, static_cast<unsigned>(size)) != static_cast<int>(size)) ||
      gzclose(g) != Z_OK)
    std::abort();
  return path;
}

// A file's bytes as zlib's gzread gives them: inflated where they are gzip, as they are if not.
// On a corrupt stream, the bytes themselves (the reader must then refuse the file, and an
// accepted one fails the checks against them).
std::vector<uint8_t> stream_of(const std::string& path, const uint8_t* data, size_t size) {
  std::vector<uint8_t> out;
  gzFile g = gzopen(path.c_str(), "rb");
  if (!g) std::abort();
  uint8_t buf[1 << 14];
  int got = 0;
  while ((got = gzread(g, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + got);
  const bool ok = got == 0 && gzclose_r(g) == Z_OK;
  if (!ok) {
    if (got != 0) gzclose_r(g);
    return std::vector<uint8_t>(data, data + size);
  }
  return out;
}

// Valid companions for a count: n zero labels, and n black 1x1 images.
struct Companions {
  uint32_t n = 0;
  std::string labels, images;
  void make(uint32_t count) {
    if (count == n && !labels.empty()) return;
    n = count;
    std::vector<uint8_t> l, i;
    put_be32(l, 0x801);
    put_be32(l, n);
    l.resize(l.size() + n, 0);
    put_be32(i, 0x803);
    put_be32(i, n);
    put_be32(i, 1);
    put_be32(i, 1);
    i.resize(i.size() + n, 0);
    labels = fuzz::scratch().write("labels-idx1-ubyte", l.data(), l.size());
    images = fuzz::scratch().write("images-idx3-ubyte", i.data(), i.size());
  }
};

void as_images(const std::string& path, const std::string& labels, const uint8_t* data, size_t size) {
  try {
    Dataset ds = load_idx(path, labels, 10);
    FUZZ_CHECK(size >= 16 && ds.count == be32(data + 4));
    if (be32(data) == 0x804) {  // colour, N x H x W x C or N x C x H x W: the bytes, maybe transposed
      FUZZ_CHECK(size >= 20 && ds.pixels.size() == size - 20);
      FUZZ_CHECK(static_cast<size_t>(ds.shape.size()) ==
                 size_t{be32(data + 8)} * be32(data + 12) * be32(data + 16));
    } else {
      FUZZ_CHECK(ds.shape.c == 1 && ds.shape.h == be32(data + 8) && ds.shape.w == be32(data + 12));
      FUZZ_CHECK(ds.pixels.size() == size - 16 && std::memcmp(ds.pixels.data(), data + 16, size - 16) == 0);
    }
  } catch (const Error& e) {
    fuzz::check_message(e);
  }
}

void as_labels(const std::string& images, const std::string& path, const uint8_t* data, size_t size) {
  try {
    Dataset ds = load_idx(images, path, 10);
    FUZZ_CHECK(size >= 8 && ds.count == be32(data + 4) && ds.labels.size() == size - 8);
    for (size_t i = 0; i < ds.labels.size(); ++i)
      FUZZ_CHECK(ds.labels[i] == data[8 + i] && ds.labels[i] < 10);
  } catch (const Error& e) {
    fuzz::check_message(e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Companions comp;
  const std::string plain = fuzz::scratch().write("input-idx", data, size);
  const std::string gz = gzip_file("input-idx.gz", data, size);
  // What the reader sees: the plain file's bytes (inflated if they are gzip), and the input itself
  // through the gzip file.
  const std::vector<uint8_t> plain_stream = stream_of(plain, data, size);
  const std::vector<uint8_t> raw(data, data + size);
  for (const auto& [p, st] : {std::pair<const std::string&, const std::vector<uint8_t>&>{plain, plain_stream},
                              std::pair<const std::string&, const std::vector<uint8_t>&>{gz, raw}}) {
    // The count the header announces, bounded so the companions stay small; a larger claim still
    // runs against a companion of the wrong count, which must be refused.
    const uint32_t n = st.size() >= 8 ? be32(st.data() + 4) : 1;
    comp.make(n >= 1 && n <= 65536 ? n : 1);
    as_images(p, comp.labels, st.data(), st.size());
    as_labels(comp.images, p, st.data(), st.size());
  }
  return 0;
}
