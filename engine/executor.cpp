#include "engine/executor.h"

namespace cnnrun {

void preprocess_images(const Network& net, const uint8_t* pixels, int64_t n, float* out) {
  const int64_t plane = net.input.h * net.input.w;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < net.input.c; ++c) {
      const float s = net.pre.scale[static_cast<size_t>(c)], t = net.pre.shift[static_cast<size_t>(c)];
      const uint8_t* src = pixels + (i * net.input.c + c) * plane;
      float* dst = out + (i * net.input.c + c) * plane;
      for (int64_t k = 0; k < plane; ++k) dst[k] = static_cast<float>(src[k]) * s + t;
    }
}

}  // namespace cnnrun
