// PNG decoding with libpng's progressive-free low-level API from memory. libpng reports errors
// by longjmp, so the function holding the setjmp has only trivially destructible locals and
// everything it fills lives in the caller's frame.
#include <png.h>

#include <csetjmp>
#include <cstring>

#include "engine/core/error.h"
#include "engine/io/image.h"

namespace cnnrun {

namespace {

struct Reader {
  const uint8_t* data;
  size_t size, pos;
  char message[256];
};

void read_fn(png_structp png, png_bytep out, png_size_t n) {
  Reader* r = static_cast<Reader*>(png_get_io_ptr(png));
  if (n > r->size - r->pos) png_error(png, "truncated file (the data ends before the image does)");
  std::memcpy(out, r->data + r->pos, n);
  r->pos += n;
}

void error_fn(png_structp png, png_const_charp msg) {
  Reader* r = static_cast<Reader*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof r->message, "%s", msg);
  png_longjmp(png, 1);
}

void warning_fn(png_structp, png_const_charp) {}  // warnings (bad CRC in ancillary chunks...) are not errors

struct Header {
  png_uint_32 w = 0, h = 0;
  int depth = 0, color = 0, channels = 0;
  size_t rowbytes = 0;
};

// Returns 0 on success, 1 on a libpng error (message in r->message), 2 on a 16-bit image.
// `alloc` sizes the caller's buffer once the header is known and returns the row pointers.
template <class Alloc>
int read_png(Reader* r, Header* hd, Alloc& alloc) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, r, error_fn, warning_fn);
  if (!png) {
    std::snprintf(r->message, sizeof r->message, "out of memory");
    return 1;
  }
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
    return 1;
  }
  png_set_read_fn(png, r, read_fn);
  png_set_user_limits(png, 1u << 16, 1u << 16);
  png_read_info(png, info);
  hd->w = png_get_image_width(png, info);
  hd->h = png_get_image_height(png, info);
  hd->depth = png_get_bit_depth(png, info);
  hd->color = png_get_color_type(png, info);
  if (hd->depth == 16) {
    png_destroy_read_struct(&png, &info, nullptr);
    return 2;
  }
  if (hd->color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (hd->color == PNG_COLOR_TYPE_GRAY && hd->depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  hd->channels = png_get_channels(png, info);
  hd->rowbytes = png_get_rowbytes(png, info);
  png_bytepp rows = alloc(*hd);
  png_read_image(png, rows);
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return 0;
}

}  // namespace

Image decode_png(const uint8_t* data, size_t size) {
  Reader r{data, size, 0, {0}};
  Header hd;
  std::vector<uint8_t> buf;
  std::vector<png_bytep> rows;
  auto alloc = [&](const Header& h) {
    buf.resize(h.rowbytes * h.h);
    rows.resize(h.h);
    for (png_uint_32 y = 0; y < h.h; ++y) rows[y] = buf.data() + y * h.rowbytes;
    return rows.data();
  };
  const int rc = read_png(&r, &hd, alloc);
  if (rc == 1) throw Error(std::string("corrupt PNG: ") + r.message);
  if (rc == 2)
    throw Error("16-bit PNG (" + std::to_string(hd.w) + "x" + std::to_string(hd.h) +
                "): only 8-bit images are read; convert it to 8 bits per channel");
  if (hd.channels < 1 || hd.channels > 4 || hd.rowbytes != static_cast<size_t>(hd.w) * hd.channels)
    throw Error("unexpected PNG layout (" + std::to_string(hd.channels) + " channels)");
  Image img;
  img.w = static_cast<int>(hd.w);
  img.h = static_cast<int>(hd.h);
  const int keep = hd.channels >= 3 ? 3 : 1;  // alpha dropped
  img.c = keep;
  if (keep == hd.channels) {
    img.px = std::move(buf);
    return img;
  }
  const size_t n = static_cast<size_t>(img.w) * img.h;
  img.px.resize(n * keep);
  for (size_t i = 0; i < n; ++i)
    for (int k = 0; k < keep; ++k) img.px[i * keep + k] = buf[i * hd.channels + k];
  return img;
}

}  // namespace cnnrun
