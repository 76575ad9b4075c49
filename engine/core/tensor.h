// Shapes and host tensors. Activations are NCHW float32; a Shape is the per-image C x H x W
// (fully connected outputs are C x 1 x 1), the batch dimension is kept apart because blocks of
// images of any size flow through the same network.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cnnrun {

struct Shape {
  int64_t c = 0, h = 0, w = 0;
  int64_t size() const { return c * h * w; }  // valid once the shape is checked at load
  bool operator==(const Shape& o) const { return c == o.c && h == o.h && w == o.w; }
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const;  // "16x32x32"
};

// Host tensor: dims in PyTorch order (weights: conv [F,C,KH,KW], fc [O,I]; activations [N,C,H,W]).
struct Tensor {
  std::vector<int64_t> dims;
  std::vector<float> data;

  Tensor() = default;
  explicit Tensor(std::vector<int64_t> d);  // zero-filled; sizes checked for overflow
  int64_t numel() const { return static_cast<int64_t>(data.size()); }
  std::string dims_str() const;  // "[16, 3, 5, 5]"
  float* ptr() { return data.data(); }
  const float* ptr() const { return data.data(); }
};

int64_t numel_of(const std::vector<int64_t>& dims);  // checked product
std::string dims_str(const std::vector<int64_t>& dims);

}  // namespace cnnrun
