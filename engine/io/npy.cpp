#include "engine/io/npy.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "engine/core/error.h"
#include "engine/core/memory.h"
#include "engine/core/tensor.h"
#include "engine/io/dataset.h"
#include "engine/io/files.h"

namespace cnnrun {

std::string npy_bytes(const std::vector<int64_t>& dims, const float* data) {
  std::string shape = "(";
  for (size_t i = 0; i < dims.size(); ++i)
    shape += std::to_string(dims[i]) + (dims.size() == 1 || i + 1 < dims.size() ? "," : "");
  shape += ")";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + header.size() + 1;
  header += std::string((64 - total % 64) % 64, ' ') + "\n";
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  uint16_t hl = static_cast<uint16_t>(header.size());
  out += static_cast<char>(hl & 0xff);
  out += static_cast<char>(hl >> 8);
  out += header;
  size_t n = static_cast<size_t>(numel_of(dims));
  out.append(reinterpret_cast<const char*>(data), n * sizeof(float));
  return out;
}

std::vector<float> read_npy(const std::string& file, std::vector<int64_t>* dims) {
  InputFile f(file);
  std::string b = f.read_all(int64_t{1} << 40, "1 TiB", "not a .npy file this reader can hold");
  if (b.size() < 10 || b.compare(0, 6, "\x93NUMPY") != 0) fail_file(file, 0, "not a .npy file");
  size_t hl = static_cast<unsigned char>(b[8]) | (static_cast<size_t>(static_cast<unsigned char>(b[9])) << 8);
  if (b[6] != 1 || 10 + hl > b.size()) fail_file(file, 6, "unsupported .npy version or truncated header");
  std::string h = b.substr(10, hl);
  if (h.find("'<f4'") == std::string::npos || h.find("'fortran_order': False") == std::string::npos)
    fail_file(file, 10, "expected little-endian float32 in C order");
  size_t p = h.find("'shape': (");
  if (p == std::string::npos) fail_file(file, 10, "no shape in the header");
  std::vector<int64_t> d;
  const char* s = h.c_str() + p + 10;
  while (*s && *s != ')') {
    char* end = nullptr;
    long long v = std::strtoll(s, &end, 10);
    if (end == s) break;
    d.push_back(v);
    s = end;
    while (*s == ',' || *s == ' ') ++s;
  }
  size_t n = 0;
  try {
    n = static_cast<size_t>(numel_of(d));
    checked_mul(static_cast<int64_t>(n), sizeof(float), "data bytes");
  } catch (const Error& e) {
    fail_file(file, 10, std::string("shape ") + dims_str(d) + ": " + e.what());
  }
  if (b.size() - 10 - hl != n * sizeof(float))
    fail_file(file, static_cast<int64_t>(10 + hl), "data size does not match the shape " + dims_str(d));
  std::vector<float> out(n);
  std::memcpy(out.data(), b.data() + 10 + hl, n * sizeof(float));
  if (dims) *dims = d;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Data sets from .npy: the header is parsed as the small Python literal it is (never searched
// for substrings), and the data is read straight into the Dataset's buffers.

namespace {

struct NpyHeader {
  std::string descr;  // "|u1", "<f4", ...
  bool fortran = false;
  std::vector<int64_t> dims;
  int64_t data_offset = 0;
};

// Parses the header dictionary {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
class HeaderParser {
 public:
  HeaderParser(const std::string& file, const std::string& h, int64_t base)
      : file_(file), h_(h), base_(base) {}

  NpyHeader parse() {
    NpyHeader out;
    bool have_descr = false, have_order = false, have_shape = false;
    skip();
    expect('{');
    for (;;) {
      skip();
      if (peek() == '}') break;
      std::string key = quoted();
      skip();
      expect(':');
      skip();
      if (key == "descr") {
        out.descr = quoted();
        have_descr = true;
      } else if (key == "fortran_order") {
        if (h_.compare(p_, 4, "True") == 0) {
          out.fortran = true;
          p_ += 4;
        } else if (h_.compare(p_, 5, "False") == 0) {
          p_ += 5;
        } else {
          fail("fortran_order: expected True or False");
        }
        have_order = true;
      } else if (key == "shape") {
        expect('(');
        for (;;) {
          skip();
          if (peek() == ')') break;
          size_t start = p_;
          int64_t v = 0;
          while (p_ < h_.size() && h_[p_] >= '0' && h_[p_] <= '9') {
            if (v > (int64_t{1} << 50)) fail("shape: dimension too large");
            v = v * 10 + (h_[p_++] - '0');
          }
          if (p_ == start) fail("shape: expected a non-negative integer");
          out.dims.push_back(v);
          skip();
          if (peek() == ',') ++p_;
        }
        ++p_;
        have_shape = true;
      } else {
        fail("unknown header key '" + key + "'");
      }
      skip();
      if (peek() == ',') ++p_;
    }
    if (!have_descr || !have_order || !have_shape) fail("the header lacks descr, fortran_order or shape");
    return out;
  }

 private:
  const std::string& file_;
  const std::string& h_;
  int64_t base_;
  size_t p_ = 0;

  [[noreturn]] void fail(const std::string& what) const {
    fail_file(file_, base_ + static_cast<int64_t>(p_), "bad .npy header: " + what);
  }
  char peek() const { return p_ < h_.size() ? h_[p_] : '\0'; }
  void skip() {
    while (p_ < h_.size() && (h_[p_] == ' ' || h_[p_] == '\t' || h_[p_] == '\n')) ++p_;
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++p_;
  }
  std::string quoted() {
    char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string");
    size_t end = h_.find(q, p_ + 1);
    if (end == std::string::npos) fail("unterminated string");
    std::string s = h_.substr(p_ + 1, end - p_ - 1);
    p_ = end + 1;
    return s;
  }
};

// `f` is opened through InputFile: a regular file, recorded as an input (no output replaces it).
NpyHeader read_npy_header(const std::string& file, InputFile& f, int64_t* file_size) {
  *file_size = f.size();
  unsigned char pre[12];
  const int64_t got = f.read(pre, sizeof pre);
  if (got < 10 || std::memcmp(pre, "\x93NUMPY", 6) != 0)
    fail_file(file, 0, "not a .npy file (no \\x93NUMPY magic)");
  const int major = pre[6];
  int64_t hl = 0, base = 0;
  if (major == 1) {
    hl = pre[8] | (pre[9] << 8);
    base = 10;
  } else if (major == 2 || major == 3) {
    if (got < 12) fail_file(file, 8, "truncated header");
    hl = static_cast<int64_t>(pre[8]) | (static_cast<int64_t>(pre[9]) << 8) |
         (static_cast<int64_t>(pre[10]) << 16) | (static_cast<int64_t>(pre[11]) << 24);
    base = 12;
  } else {
    fail_file(file, 6, "unsupported .npy format version " + std::to_string(major));
  }
  if (hl > (int64_t{1} << 20) || base + hl > *file_size) fail_file(file, 8, "truncated or oversized header");
  std::string h(static_cast<size_t>(hl), '\0');
  f.read_exact_at(base, &h[0], hl);
  NpyHeader out = HeaderParser(file, h, base).parse();
  out.data_offset = base + hl;
  if (out.fortran)
    fail_file(file, base, "Fortran-ordered array; save it in C order (numpy.ascontiguousarray)");
  return out;
}

int64_t element_size(const std::string& descr) {
  if (descr.size() < 3) return 0;
  return std::atoi(descr.c_str() + 2);
}

// Reads `bytes` bytes of the array's data at element offset `first_byte` into dst.
void read_at(InputFile& f, int64_t offset, void* dst, int64_t bytes) { f.read_exact_at(offset, dst, bytes); }

std::vector<int32_t> read_npy_labels(const std::string& file, int64_t count, int num_classes) {
  InputFile f(file);
  int64_t size = 0;
  NpyHeader h = read_npy_header(file, f, &size);
  const std::string& d = h.descr;
  const bool integer = d.size() == 3 && (d[1] == 'u' || d[1] == 'i') &&
                       (d[2] == '1' || d[2] == '2' || d[2] == '4' || d[2] == '8');
  if (!integer)
    fail_file(file, 10, "labels of dtype '" + d + "'; expected an integer array (uint8, int32, int64)");
  const int64_t es = element_size(d);
  if (es > 1 && d[0] != '<')
    fail_file(file, 10, "labels in big-endian byte order ('" + d + "'); save them with .astype('<i8')");
  if (h.dims.size() != 1)
    fail_file(file, 10, "labels of shape " + dims_str(h.dims) + "; expected one dimension (N)");
  if (h.dims[0] != count)
    throw Error(file + " holds " + std::to_string(h.dims[0]) + " labels for " + std::to_string(count) +
                " images");
  if (size - h.data_offset != count * es)
    fail_file(file, h.data_offset,
              "data size " + std::to_string(size - h.data_offset) + " does not match the shape " +
                  dims_str(h.dims));
  std::vector<unsigned char> raw(static_cast<size_t>(count * es));
  read_at(f, h.data_offset, raw.data(), count * es);
  std::vector<int32_t> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const unsigned char* b = raw.data() + i * es;
    uint64_t u = 0;
    for (int64_t k = 0; k < es; ++k) u |= static_cast<uint64_t>(b[k]) << (8 * k);
    int64_t v = static_cast<int64_t>(u);
    if (d[1] == 'i' && es < 8 && (u >> (8 * es - 1)) & 1)
      v = static_cast<int64_t>(u | (~uint64_t{0} << (8 * es)));
    if (v < 0 || v >= num_classes)
      fail_file(file, h.data_offset + i * es,
                "label " + std::to_string(v) + " of image " + std::to_string(i) + " is not in 0.." +
                    std::to_string(num_classes - 1) + " (" + std::to_string(num_classes) + " classes)");
    out[static_cast<size_t>(i)] = static_cast<int32_t>(v);
  }
  return out;
}

}  // namespace

Dataset load_npy(const std::string& images, const std::string& labels, const Shape& input, int num_classes,
                 const DataNeeds& needs) {
  InputFile f(images);
  int64_t size = 0;
  NpyHeader h = read_npy_header(images, f, &size);
  const std::string& d = h.descr;
  const bool u8 = d == "|u1" || d == "<u1" || d == ">u1" || d == "=u1";
  const bool f32 = d == "<f4";
  if (d == ">f4")
    fail_file(images, 10, "float32 in big-endian byte order ('>f4'); save it with .astype('<f4')");
  if (!u8 && !f32)
    fail_file(
        images, 10,
        "images of dtype '" + d + "'; expected uint8 ('|u1': raw pixels) or float32 ('<f4': preprocessed)");
  const std::string want_chw = "(N, " + std::to_string(input.c) + ", " + std::to_string(input.h) + ", " +
                               std::to_string(input.w) + ")";
  const std::string want_hwc = "(N, " + std::to_string(input.h) + ", " + std::to_string(input.w) + ", " +
                               std::to_string(input.c) + ")";
  const auto& s = h.dims;
  bool nchw = false, nhwc = false;
  if (s.size() == 4) {
    nchw = s[1] == input.c && s[2] == input.h && s[3] == input.w;
    nhwc = !nchw && s[1] == input.h && s[2] == input.w && s[3] == input.c;
  } else if (s.size() == 3 && input.c == 1) {
    nchw = s[1] == input.h && s[2] == input.w;  // N x H x W, one channel
  }
  if (nhwc && f32)
    fail_file(images, 10,
              "float32 images of shape " + dims_str(s) +
                  " (channels last); preprocessed float32 images must be " + want_chw + " (N x C x H x W)");
  if (!nchw && !nhwc)
    fail_file(images, 10,
              "images of shape " + dims_str(s) + " do not fit the network input " + input.str() +
                  "; expected " + want_chw + (u8 ? " or " + want_hwc : std::string()) +
                  (input.c == 1 ? " or (N, H, W)" : ""));
  const int64_t n = s[0];
  if (n == 0) fail_file(images, 10, "holds no images (shape " + dims_str(s) + ")");
  const int64_t es = u8 ? 1 : 4;
  int64_t per = 0, bytes = 0;
  try {
    per = checked_mul(checked_mul(input.c, input.h, "values per image"), input.w, "values per image");
    bytes = checked_mul(checked_mul(n, per, "values"), es, "data bytes");
  } catch (const Error& e) {
    fail_file(images, 10, std::string("shape ") + dims_str(s) + ": " + e.what());
  }
  if (size - h.data_offset != bytes)
    fail_file(images, h.data_offset,
              "data size " + std::to_string(size - h.data_offset) + " bytes does not match the shape " +
                  dims_str(s) + " (" + std::to_string(bytes) + " bytes): truncated or not this array");
  // Only the images the run needs: their bytes are read at their offset, the rest is not read.
  const int64_t take = images_to_read(needs, n, images);
  const int64_t first = needs.first, at = h.data_offset + first * per * es, take_bytes = take * per * es;
  Dataset ds;
  ds.count = take;
  ds.shape = input;
  ds.first = first;
  ds.in_files = n;
  const HostMemory mem = host_memory();
  if (take_bytes > mem.available / 10 * 9)
    fail_file(images, at,
              std::to_string(take) + " images = " + bytes_str(take_bytes) + ", more than the host memory (" +
                  mem.str() + ")");
  if (f32) {
    ds.values.resize(static_cast<size_t>(take * per));
    read_at(f, at, ds.values.data(), take_bytes);
    for (size_t i = 0; i < ds.values.size(); ++i)
      if (!std::isfinite(ds.values[i]))
        fail_file(images, at + static_cast<int64_t>(i) * 4,
                  "value " + std::to_string(i % static_cast<size_t>(per)) + " of image " +
                      std::to_string(first + static_cast<int64_t>(i / static_cast<size_t>(per))) +
                      " is not finite");
  } else if (nchw) {
    ds.pixels.resize(static_cast<size_t>(take_bytes));
    read_at(f, at, ds.pixels.data(), take_bytes);
  } else {  // channels last: transposed image by image through one image's buffer
    ds.pixels.resize(static_cast<size_t>(take_bytes));
    std::vector<uint8_t> hwc(static_cast<size_t>(per));
    const int64_t plane = input.h * input.w;
    for (int64_t i = 0; i < take; ++i) {
      read_at(f, at + i * per, hwc.data(), per);
      uint8_t* dst = ds.pixels.data() + i * per;
      for (int64_t p = 0; p < plane; ++p)
        for (int64_t c = 0; c < input.c; ++c) dst[c * plane + p] = hwc[static_cast<size_t>(p * input.c + c)];
    }
  }
  if (!labels.empty()) {
    ds.labels = read_npy_labels(labels, n, num_classes);
    ds.labels.erase(ds.labels.begin(), ds.labels.begin() + first);
    ds.labels.resize(static_cast<size_t>(take));
  }
  ds.description = "npy: " + images + ", " + std::to_string(n) + " images " + input.str() +
                   (f32    ? " float32 (preprocessed)"
                    : nhwc ? " uint8 (channels last)"
                           : " uint8") +
                   (labels.empty() ? ", no labels" : "") +
                   (take < n ? " (" + range_str(first, take, n) + " read)" : "");
  return ds;
}

}  // namespace cnnrun
