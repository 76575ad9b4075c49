// Image folders as users have them: torchvision's ImageFolder layout (one subdirectory per
// class, searched recursively), a flat directory of unlabelled images, or a text file listing
// image paths (one a line, relative to the list's directory; unlabelled). Files are PNG or JPEG,
// told by content; files without an image extension are left out (as ImageFolder does) and
// counted in the description.
#pragma once

#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/io/source.h"

namespace cnnrun {

struct ImageList {
  std::vector<std::string> paths;
  std::vector<int32_t> labels;  // empty: unlabelled
  std::string layout;           // "class folders", "flat folder", "list file"
  std::string label_rule;       // how folder names became labels
  int64_t ignored = 0;          // files without an image extension
};

// Lists `path`. With class folders, a folder named like one of `classes` takes that class's
// index; otherwise the folders must be exactly as many as the classes and take the index of
// their sorted order (torchvision's rule). `confine`: when not empty, every file's real path
// must lie inside one of these real directories (paths written in a netdef). Empty class
// folders, no images, symlink loops and unreadable directories are errors naming the path.
ImageList list_images(const std::string& path, const std::vector<std::string>& classes,
                      const std::vector<std::string>& confine);

// The transforms from a file to the network input: decode, RGB or grey, resize (shorter side,
// 0 = none), centre crop (0 = none), then a check against the input size.
struct ImageTransform {
  Shape input;     // channels (1 or 3), height, width
  int resize = 0;  // shorter side
  int crop_h = 0, crop_w = 0;
};

// One file through the transforms into `chw` (input.size() bytes, channels first).
void load_image_file(const std::string& path, const ImageTransform& t, uint8_t* chw);

std::unique_ptr<DataSource> image_source(ImageList list, const ImageTransform& t, int threads,
                                         const std::string& description);

}  // namespace cnnrun
