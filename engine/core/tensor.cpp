#include "engine/core/tensor.h"

#include "engine/core/error.h"

namespace cnnrun {

std::string Shape::str() const {
  return std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w);
}

int64_t numel_of(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n = checked_mul(n, d, "tensor size");
  return n;
}

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

Tensor::Tensor(std::vector<int64_t> d) : dims(std::move(d)), data(static_cast<size_t>(numel_of(dims))) {}

std::string Tensor::dims_str() const { return cnnrun::dims_str(dims); }

}  // namespace cnnrun
