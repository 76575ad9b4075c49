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
  Image img;
  img.w = w;
  img.h = h;
  img.c = colorspace == TJCS_GRAY ? 1 : 3;
  img.px.resize(static_cast<size_t>(w) * h * img.c);
  // TJFLAG_STOPONWARNING: a truncated or damaged file is an error, not a grey bottom half.
  if (tjDecompress2(tj.get(), data, static_cast<unsigned long>(size), img.px.data(), w, 0, h,
                    img.c == 1 ? TJPF_GRAY : TJPF_RGB, TJFLAG_STOPONWARNING) != 0)
    throw Error(std::string("corrupt JPEG: ") + tjGetErrorStr2(tj.get()));
  return img;
}

}  // namespace cnnrun
