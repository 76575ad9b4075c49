// Labelled image sets. Images stay uint8 (N x C x H x W, CHW per image) until an executor
// preprocesses them, so 50000 CIFAR-10 images take 150 MB, not 600.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/tensor.h"

namespace cnnrun {

struct Dataset {
  int64_t count = 0;
  Shape shape;                  // per image
  std::vector<uint8_t> pixels;  // count * shape.size()
  std::vector<uint8_t> labels;  // count
  std::string description;      // "cifar10: 2 files, 2000 images"

  const uint8_t* image(int64_t i) const { return pixels.data() + i * shape.size(); }
};

// What a run needs of a data set. A loader reads no more than max_images images (0: all of
// them; the rest of the files is not read), and refuses images of another shape than `shape`
// (c == 0: any) from the header, before any pixel is read. What it would hold is checked against
// the host memory available (engine/core/memory.h) before it is allocated.
struct DataNeeds {
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

// IDX images (magic 0x00000803, N x H x W) and labels (0x00000801), plain or gzip (.gz, detected
// by content). Counts must agree; truncation, wrong magic and labels >= num_classes are errors.
Dataset load_idx(const std::string& images, const std::string& labels, int num_classes,
                 const DataNeeds& needs = {});

// Loads what the network's DataSpec names (paths resolved through `assets`), or `override_path`
// when the user gave --data (a file/dir for cifar10; for idx "IMAGES,LABELS" or the images file
// with the labels file found by the usual name swap). Checks the image shape against net.input.
struct Network;
class AssetResolver;
// max_images > 0 reads only the first max_images images (a run of --batch N needs no more).
Dataset load_dataset(const Network& net, const AssetResolver& assets, const std::string& override_path,
                     int64_t max_images = 0);

}  // namespace cnnrun
