// JPEG decoding with the TurboJPEG API of libjpeg-turbo (the library Pillow links): default
// flags, i.e. the accurate integer DCT and fancy upsampling, Pillow's defaults too.
#include <turbojpeg.h>

#include <memory>

#include "engine/core/error.h"
#include "engine/io/image.h"

namespace cnnrun {

namespace {

struct TjCloser {
  void operator()(void* h) const { tjDestroy(h); }
};

}  // namespace

Image decode_jpeg(const uint8_t* data, size_t size) {
  std::unique_ptr<void, TjCloser> tj(tjInitDecompress());
  if (!tj) throw Error("cannot start the JPEG decoder");
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj.get(), data, static_cast<unsigned long>(size), &w, &h, &subsamp, &colorspace) !=
      0)
    throw Error(std::string("corrupt JPEG: ") + tjGetErrorStr2(tj.get()));
  if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK)
    throw Error("CMYK JPEG: only grey and colour (YCbCr) JPEGs are read");
  if (w < 1 || h < 1 || w > 65535 || h > 65535)
    throw Error("JPEG size " + std::to_string(w) + "x" + std::to_string(h));
  check_image_pixels(w, h);
  Image img;
  img.w = w;
  img.h = h;
  img.c = colorspace == TJCS_GRAY ? 1 : 3;
  img.px.resize(static_cast<size_t>(w) * h * img.c);
  // libjpeg finishes a truncated file with grey and calls it a warning; Pillow refuses it ("image
  // file is truncated"), and so does this. Other warnings (extraneous bytes before a marker) are
  // decoded through, as Pillow does.
  if (tjDecompress2(tj.get(), data, static_cast<unsigned long>(size), img.px.data(), w, 0, h,
                    img.c == 1 ? TJPF_GRAY : TJPF_RGB, 0) != 0) {
    const std::string msg = tjGetErrorStr2(tj.get());
    if (tjGetErrorCode(tj.get()) != TJERR_WARNING || msg.find("Premature end") != std::string::npos)
      throw Error("corrupt JPEG: " + msg +
                  (msg.find("Premature end") != std::string::npos ? " (truncated)" : ""));
  }
  return img;
}

}  // namespace cnnrun
