#include "engine/io/npy.h"

#include <cstdio>
#include <cstring>

#include "engine/core/error.h"
#include "engine/core/tensor.h"
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

}  // namespace cnnrun
