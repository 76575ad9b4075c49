// Image sets, labelled or not. Images stay uint8 (N x C x H x W, CHW per image) until an executor
// preprocesses them, so 50000 CIFAR-10 images take 150 MB, not 600; a float32 .npy is the one
// source of images that are already preprocessed (`values`). A Dataset is what an executor runs
// at once: the whole of a file format, or one block of a streamed source (engine/io/source.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/tensor.h"

namespace cnnrun {

struct Dataset {
  int64_t count = 0;
  Shape shape;                     // per image
  std::vector<uint8_t> pixels;     // count * shape.size() raw bytes, or empty when `values` is not
  std::vector<float> values;       // count * shape.size() network inputs, preprocessed by the user
  std::vector<int32_t> labels;     // count, or empty: unlabelled (no accuracy)
  std::vector<std::string> paths;  // per image where the images are files, else empty
  std::string description;         // "cifar10: 2 files, 2000 images"
  // Where these images are in the files: image 0 here is image `first` there, of `in_files`
  // (a shard of an MPI run, or the first --batch N, reads only its part).
  int64_t first = 0, in_files = 0;

  bool labelled() const { return !labels.empty(); }
  bool preprocessed() const { return !values.empty(); }
  const uint8_t* image(int64_t i) const { return pixels.data() + i * shape.size(); }
  const float* image_values(int64_t i) const { return values.data() + i * shape.size(); }
  // One image as stored, uint8 pixels or float32 values: its size in bytes, and where image i's
  // begin (what the GPU engine copies to the device as it is).
  int64_t bytes_per_image() const { return shape.size() * (preprocessed() ? int64_t{sizeof(float)} : 1); }
  const uint8_t* image_bytes(int64_t i) const {
    return preprocessed() ? reinterpret_cast<const uint8_t*>(image_values(i)) : image(i);
  }
};

// What a run needs of a data set. A loader reads images first..first+max_images-1 (max_images
// 0: to the end; the rest of the files is not read, its bytes skipped by seeking where the
// format allows), and refuses images of another shape than `shape` (c == 0: any) from the
// header, before any pixel is read. `first` at or past the files' count is an error. What it
// would hold is checked against the host memory available (engine/core/memory.h) before it is
// allocated.
struct DataNeeds {
  int64_t first = 0;
  int64_t max_images = 0;
  Shape shape;
};

// What a loader throws when the images do not have DataNeeds::shape: found from the header (or
// the format), before a pixel is read. load_dataset turns it into its message naming the netdef
// or --data; `description` is what Dataset::description would have been.
class DataShapeMismatch : public Error {
 public:
  DataShapeMismatch(const std::string& msg, Shape found, std::string description)
      : Error(msg), found(found), description(std::move(description)) {}
  Shape found;
  std::string description;
};

// CIFAR-10 binary records (1 label byte + 3072 pixel bytes). `paths` are files, or a single
// directory holding the official names (data_batch_1..5.bin for "train", test_batch.bin for
// "test"). Any whole number of records per file; a partial record or a label >= num_classes
// is an error naming the file and byte offset.
Dataset load_cifar10(const std::vector<std::string>& paths, const std::string& split, int num_classes,
                     const DataNeeds& needs = {});

// CIFAR-100 binary records (coarse label byte, fine label byte, 3072 pixel bytes). `paths` are
// files, or one directory holding train.bin / test.bin (`split`); `labels` is "fine" or "coarse".
Dataset load_cifar100(const std::vector<std::string>& paths, const std::string& split,
                      const std::string& labels, int num_classes, const DataNeeds& needs = {});

// IDX images (magic 0x00000803, N x H x W) and labels (0x00000801), plain or gzip (.gz, detected
// by content). Counts must agree; truncation, wrong magic and labels >= num_classes are errors.
// Colour IDX (0x00000804, N x H x W x C or N x C x H x W: `input`, when given, decides which,
// else needs.shape when set, else a last dimension of 1 or 3 is channels) loads transposed to
// N x C x H x W. `needs`: the images to read, and the shape checked from the header.
Dataset load_idx(const std::string& images, const std::string& labels, int num_classes,
                 const Shape* input = nullptr, const DataNeeds& needs = {});

// NumPy .npy images: uint8 N x C x H x W or N x H x W x C (channels last, transposed here),
// N x H x W for one channel, or float32 N x C x H x W taken as already preprocessed; the layout
// is the one that fits `input`. `labels` (may be empty: unlabelled) is a 1-D integer .npy of N
// labels below num_classes. Wrong dtype, byte order, shape or size is an error naming the file.
// Both files are opened through InputFile (regular files only, recorded as inputs). `needs`:
// the images to read (the labels file, 1 to 8 bytes an image, is read and checked whole).
Dataset load_npy(const std::string& images, const std::string& labels, const Shape& input, int num_classes,
                 const DataNeeds& needs = {});

// Loads what the network's DataSpec names (paths resolved through `assets`), or `override_path`
// when the user gave --data (a file/dir for cifar10; for idx and npy "IMAGES,LABELS", or the idx
// images file with the labels file found by the usual name swap, or the npy images alone).
// `format` (--data-format) says what --data is; empty: the netdef's format when it has one,
// else detected from the file, and the description says it was detected. Checks the image shape
// against net.input.
struct Network;
class AssetResolver;
// The formats load_dataset reads (the values --data-format takes).
const std::vector<std::string>& data_formats();
// max_images > 0 reads only the first max_images images (a run of --batch N needs no more).
Dataset load_dataset(const Network& net, const AssetResolver& assets, const std::string& override_path,
                     const std::string& format = "", int64_t max_images = 0);

// The images first..first+count-1 of a data set's files, or count 0: to the end.
struct ImageRange {
  int64_t first = 0, count = 0;
};
// The first image and the count of an error message: "images 100..199 of 2000".
std::string range_str(int64_t first, int64_t count, int64_t in_files);
// Checks a DataNeeds against the images the files hold (`what`: the file, for the message) and
// returns how many images to read.
int64_t images_to_read(const DataNeeds& needs, int64_t in_files, const std::string& what);

}  // namespace cnnrun
