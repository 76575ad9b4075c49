// Decoded images and the torchvision-style transforms an image folder goes through: decode
// (PNG with libpng, JPEG with libjpeg-turbo), conversion to RGB or grey as Pillow's
// Image.convert does it, resize of the shorter side (Pillow's antialiased bilinear resampling,
// what torchvision's Resize does to a PIL image) and centre crop (torchvision's CenterCrop).
// Every function throws an Error whose message the caller prefixes with the file's name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cnnrun {

struct Image {
  int w = 0, h = 0, c = 0;  // c: 1 (grey) or 3 (RGB)
  std::vector<uint8_t> px;  // h x w x c, interleaved, row-major
};

// "png", "jpeg" or "" from the first bytes.
std::string image_kind(const uint8_t* data, size_t size);

// PNG: 1/2/4/8-bit grey, grey+alpha, RGB, RGBA and palette images; alpha is dropped (as
// Pillow's convert("RGB") does), interlaced images are read whole. 16-bit PNGs are refused.
Image decode_png(const uint8_t* data, size_t size);
// JPEG: baseline and progressive, grey or YCbCr, with libjpeg's default (accurate) DCT and
// fancy upsampling, as Pillow decodes it. CMYK JPEGs are refused.
Image decode_jpeg(const uint8_t* data, size_t size);
// By content (image_kind); anything else is an error that says what the bytes look like.
Image decode_image(const uint8_t* data, size_t size);

// To `channels` (1 or 3): grey -> RGB repeats the value; RGB -> grey is Pillow's "L" conversion
// (ITU-R 601-2 luma, L = (19595 R + 38470 G + 7471 B + 32768) >> 16).
Image convert_channels(Image img, int channels);

// Resizes so that the shorter side is `size` and the longer int(size * long / short), as
// torchvision's Resize(size) computes it, with Pillow's bilinear filter (support scaled by the
// reduction factor: antialiased), 8-bit fixed-point coefficients, horizontal pass first.
Image resize_shorter(const Image& img, int size);
// Resizes to exactly w x h with the same filter.
Image resize_to(const Image& img, int w, int h);
// The centre h x w window, offsets rounded as torchvision's CenterCrop rounds them (half to
// even); an image smaller than the window is an error.
Image center_crop(const Image& img, int h, int w);

}  // namespace cnnrun
