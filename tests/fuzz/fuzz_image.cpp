// The image decoders (PNG through libpng, JPEG through libjpeg-turbo) and the transforms an image
// folder applies (to RGB or grey, resize of the shorter side, centre crop), through the file
// reader the folder source uses (load_image_file). A decoded image has positive sides within
// the pixel limit, 1 or 3 channels and exactly w x h x c bytes; a transformed one fills the
// network input exactly.
#include <vector>

#include "engine/io/image.h"
#include "engine/io/image_folder.h"
#include "tests/fuzz/fuzz_util.h"

using namespace cnnrun;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    Image img = decode_image(data, size);
    FUZZ_CHECK(img.w >= 1 && img.h >= 1 && (img.c == 1 || img.c == 3));
    FUZZ_CHECK(static_cast<int64_t>(img.w) * img.h <= kMaxImagePixels);
    FUZZ_CHECK(img.px.size() == static_cast<size_t>(img.w) * img.h * img.c);
  } catch (const Error& e) {
    fuzz::check_message(e);
  }
  const std::string path = fuzz::scratch().write("input.img", data, size);
  for (const ImageTransform& t :
       {ImageTransform{Shape{3, 8, 8}, 8, 8, 8}, ImageTransform{Shape{1, 5, 7}, 0, 0, 0}}) {
    std::vector<uint8_t> chw(static_cast<size_t>(t.input.size()) + 1, 0xA5);
    try {
      load_image_file(path, t, chw.data());
    } catch (const Error& e) {
      fuzz::check_message(e);
    }
    FUZZ_CHECK(chw.back() == 0xA5);  // nothing written past the input
  }
  return 0;
}
