// JPEG decoding with the TurboJPEG API of libjpeg-turbo (the library Pillow links): default
// flags, i.e. the accurate integer DCT and fancy upsampling, Pillow's defaults too.
#include <turbojpeg.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "engine/core/error.h"
#include "engine/io/image.h"

namespace cnnrun {

namespace {

constexpr int64_t kMaxArithmeticJpegPixels = 89478485;

struct TjCloser {
  void operator()(void* h) const { tjDestroy(h); }
};

// The fewest bytes a Huffman-coded JPEG of its frame can have: each 8x8 block of each component
// is coded in a DC scan with a Huffman code of at least one bit. Checked before the pixels are
// allocated, so that a few hundred bytes announcing 9600 x 9600 pixels are refused, not given
// 270 MB. 0 when there is no such bound: the frame is arithmetic-coded (*arithmetic true), or its
// header was not found before a scan (*arithmetic false). The markers are walked as libjpeg reads
// them: bytes between markers are skipped (its "extraneous bytes" warning), and a segment length
// under 2 skips only the length itself.
uint64_t least_huffman_bytes(const uint8_t* d, size_t n, bool* arithmetic) {
  *arithmetic = false;
  size_t i = 2;  // after SOI
  while (i + 4 <= n) {
    if (d[i] != 0xFF) {  // extraneous bytes: libjpeg looks for the next marker
      ++i;
      continue;
    }
    const uint8_t m = d[i + 1];
    if (m == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {  // standalone markers
      i += 2;
      continue;
    }
    const size_t len = (static_cast<size_t>(d[i + 2]) << 8) | d[i + 3];
    const bool sof = m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
    if (m == 0xDA || m == 0xD9) return 0;  // scan or end before any frame
    if (!sof) {
      i += 2 + std::max<size_t>(len, 2);
      continue;
    }
    *arithmetic = m >= 0xC9;
    if (m >= 0xC9 || len < 8 || i + 2 + len > n) return 0;  // arithmetic-coded, or cut short
    const uint8_t* f = d + i + 4;                           // precision, height, width, components
    const uint64_t h = (static_cast<uint64_t>(f[1]) << 8) | f[2],
                   w = (static_cast<uint64_t>(f[3]) << 8) | f[4];
    const int comps = f[5];
    if (len < 8 + 3 * static_cast<size_t>(comps) || comps < 1) return 0;
    int hmax = 1, vmax = 1;
    for (int c = 0; c < comps; ++c) {
      hmax = std::max(hmax, f[6 + 3 * c + 1] >> 4);
      vmax = std::max(vmax, f[6 + 3 * c + 1] & 15);
    }
    uint64_t blocks = 0;
    for (int c = 0; c < comps; ++c) {
      const uint64_t hs = static_cast<uint64_t>(f[6 + 3 * c + 1] >> 4), vs = f[6 + 3 * c + 1] & 15u;
      const uint64_t cw = (w * hs + static_cast<uint64_t>(hmax) - 1) / static_cast<uint64_t>(hmax);
      const uint64_t ch = (h * vs + static_cast<uint64_t>(vmax) - 1) / static_cast<uint64_t>(vmax);
      blocks += ((cw + 7) / 8) * ((ch + 7) / 8);
    }
    return blocks / 8;
  }
  return 0;
}

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
  bool arithmetic = false;
  const uint64_t least = least_huffman_bytes(data, size, &arithmetic);
  // An arithmetic coder can spend a small fraction of a bit on a block, so a few hundred bytes
  // may announce any size: such frames, and frames whose header the walk above did not reach
  // (no bound either), are held to Pillow's decompression-bomb warning limit (MAX_IMAGE_PIXELS,
  // 89478485 pixels: at most 256 MiB of RGB pixels).
  if (least == 0 && int64_t(w) * h > kMaxArithmeticJpegPixels)
    throw Error((arithmetic ? "arithmetic-coded JPEG " : "JPEG ") + std::to_string(w) + "x" +
                std::to_string(h) + " = " + std::to_string(int64_t(w) * h) + " pixels is over the limit of " +
                std::to_string(kMaxArithmeticJpegPixels) +
                (arithmetic ? " for arithmetic-coded JPEGs (Pillow's decompression-bomb warning limit; their "
                              "file size bounds nothing)"
                            : " for JPEGs whose frame header is not found before the first scan (Pillow's "
                              "decompression-bomb warning limit; their file size bounds nothing)"));
  if (size < least)
    throw Error("corrupt JPEG: " + std::to_string(w) + "x" + std::to_string(h) + " pixels need at least " +
                std::to_string(least) + " bytes of coded data, the file has " + std::to_string(size) +
                " (truncated)");
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
