// Format sniffing, channel conversion, resampling and cropping for decoded images. The resampler
// is written from the description of Pillow's (two separable passes of a triangle filter whose
// support grows with the reduction factor, coefficients normalised per output pixel and rounded
// to 22-bit fixed point, each pass rounded and clamped to 8 bits), because "torchvision's Resize
// on a PIL image" is what users' accuracy numbers were measured with.
#include "engine/io/image.h"

#include <cmath>
#include <cstring>

#include "engine/core/error.h"

namespace cnnrun {

std::string image_kind(const uint8_t* d, size_t n) {
  if (n >= 8 && std::memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0) return "png";
  if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return "jpeg";
  return "";
}

Image decode_image(const uint8_t* data, size_t size) {
  const std::string kind = image_kind(data, size);
  if (kind == "png") return decode_png(data, size);
  if (kind == "jpeg") return decode_jpeg(data, size);
  if (size == 0) throw Error("empty file; expected a PNG or JPEG image");
  std::string what = "not a PNG or JPEG image";
  if (size >= 2 && data[0] == 'B' && data[1] == 'M') what += " (it starts like a BMP)";
  if (size >= 4 && std::memcmp(data, "GIF8", 4) == 0) what += " (it starts like a GIF)";
  if (size >= 12 && std::memcmp(data, "RIFF", 4) == 0 && std::memcmp(data + 8, "WEBP", 4) == 0)
    what += " (it starts like a WebP)";
  throw Error(what);
}

Image convert_channels(Image img, int channels) {
  if (img.c == channels) return img;
  const size_t n = static_cast<size_t>(img.w) * img.h;
  Image out;
  out.w = img.w;
  out.h = img.h;
  out.c = channels;
  out.px.resize(n * channels);
  if (img.c == 1 && channels == 3) {
    for (size_t i = 0; i < n; ++i) out.px[3 * i] = out.px[3 * i + 1] = out.px[3 * i + 2] = img.px[i];
  } else if (img.c == 3 && channels == 1) {
    for (size_t i = 0; i < n; ++i) {
      const uint32_t r = img.px[3 * i], g = img.px[3 * i + 1], b = img.px[3 * i + 2];
      out.px[i] = static_cast<uint8_t>((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16);
    }
  } else {
    throw Error("cannot convert a " + std::to_string(img.c) + "-channel image to " +
                std::to_string(channels) + " channels");
  }
  return out;
}

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// For each output position: the first input index, the count, and fixed-point weights.
struct Coeffs {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> w;  // out_size x ksize
};

Coeffs coefficients(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = 1.0 * filterscale;
  Coeffs c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(static_cast<size_t>(out_size));
  c.count.resize(static_cast<size_t>(out_size));
  c.w.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  std::vector<double> k(static_cast<size_t>(c.ksize));
  for (int o = 0; o < out_size; ++o) {
    const double center = (o + 0.5) * scale;
    int lo = static_cast<int>(center - support + 0.5);
    if (lo < 0) lo = 0;
    int hi = static_cast<int>(center + support + 0.5);
    if (hi > in_size) hi = in_size;
    const int n = hi - lo;
    double sum = 0;
    const double ss = 1.0 / filterscale;
    for (int x = 0; x < n; ++x) {
      k[static_cast<size_t>(x)] = triangle((x + lo - center + 0.5) * ss);
      sum += k[static_cast<size_t>(x)];
    }
    for (int x = 0; x < n; ++x) {
      const double v = sum != 0.0 ? k[static_cast<size_t>(x)] / sum : k[static_cast<size_t>(x)];
      const double f = v * (1 << kPrecisionBits);
      c.w[static_cast<size_t>(o) * c.ksize + x] =
          static_cast<int32_t>(v < 0 ? std::trunc(f - 0.5) : std::trunc(f + 0.5));
    }
    c.first[static_cast<size_t>(o)] = lo;
    c.count[static_cast<size_t>(o)] = n;
  }
  return c;
}

uint8_t clip8(int64_t acc) {
  const int64_t v = acc >> kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

}  // namespace

Image resize_to(const Image& img, int w, int h) {
  if (w < 1 || h < 1) throw Error("resize to " + std::to_string(w) + "x" + std::to_string(h));
  if (w == img.w && h == img.h) return img;
  const int C = img.c;
  // Horizontal pass over every input row (when the width changes).
  Image mid;
  if (w != img.w) {
    const Coeffs cx = coefficients(img.w, w);
    mid.w = w;
    mid.h = img.h;
    mid.c = C;
    mid.px.resize(static_cast<size_t>(w) * img.h * C);
    for (int y = 0; y < img.h; ++y) {
      const uint8_t* row = img.px.data() + static_cast<size_t>(y) * img.w * C;
      uint8_t* dst = mid.px.data() + static_cast<size_t>(y) * w * C;
      for (int x = 0; x < w; ++x) {
        const int32_t* k = cx.w.data() + static_cast<size_t>(x) * cx.ksize;
        const int lo = cx.first[static_cast<size_t>(x)], n = cx.count[static_cast<size_t>(x)];
        for (int c = 0; c < C; ++c) {
          int64_t acc = int64_t{1} << (kPrecisionBits - 1);
          for (int i = 0; i < n; ++i) acc += static_cast<int64_t>(row[(lo + i) * C + c]) * k[i];
          dst[x * C + c] = clip8(acc);
        }
      }
    }
  } else {
    mid = img;
  }
  if (h == mid.h) return mid;
  const Coeffs cy = coefficients(mid.h, h);
  Image out;
  out.w = w;
  out.h = h;
  out.c = C;
  out.px.resize(static_cast<size_t>(w) * h * C);
  const size_t stride = static_cast<size_t>(w) * C;
  for (int y = 0; y < h; ++y) {
    const int32_t* k = cy.w.data() + static_cast<size_t>(y) * cy.ksize;
    const int lo = cy.first[static_cast<size_t>(y)], n = cy.count[static_cast<size_t>(y)];
    uint8_t* dst = out.px.data() + y * stride;
    for (size_t j = 0; j < stride; ++j) {
      int64_t acc = int64_t{1} << (kPrecisionBits - 1);
      for (int i = 0; i < n; ++i) acc += static_cast<int64_t>(mid.px[(lo + i) * stride + j]) * k[i];
      dst[j] = clip8(acc);
    }
  }
  return out;
}

Image resize_shorter(const Image& img, int size) {
  if (img.w <= img.h) {
    const int h = static_cast<int>(static_cast<int64_t>(size) * img.h / img.w);
    return resize_to(img, size, h);
  }
  const int w = static_cast<int>(static_cast<int64_t>(size) * img.w / img.h);
  return resize_to(img, w, size);
}

Image center_crop(const Image& img, int h, int w) {
  if (img.w < w || img.h < h)
    throw Error("image " + std::to_string(img.w) + "x" + std::to_string(img.h) +
                " (width x height) is smaller than the " + std::to_string(w) + "x" + std::to_string(h) +
                " crop; add a resize");
  if (img.w == w && img.h == h) return img;
  const int top = static_cast<int>(std::nearbyint((img.h - h) / 2.0));
  const int left = static_cast<int>(std::nearbyint((img.w - w) / 2.0));
  Image out;
  out.w = w;
  out.h = h;
  out.c = img.c;
  out.px.resize(static_cast<size_t>(w) * h * img.c);
  for (int y = 0; y < h; ++y)
    std::memcpy(out.px.data() + static_cast<size_t>(y) * w * img.c,
                img.px.data() + (static_cast<size_t>(top + y) * img.w + left) * img.c,
                static_cast<size_t>(w) * img.c);
  return out;
}

}  // namespace cnnrun
