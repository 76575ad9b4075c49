// CIFAR-100 binary records (the "binary version" of the data set: train.bin, test.bin): a coarse
// label byte (0..19), a fine label byte (0..99), then the 3072 pixel bytes in CHW order, as in
// CIFAR-10. The netdef picks which label the network predicts.
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "engine/core/error.h"
#include "engine/io/dataset.h"
#include "engine/io/files.h"

namespace cnnrun {

namespace {

constexpr int64_t kPixels = 3 * 32 * 32;
constexpr int64_t kRecord = kPixels + 2;

}  // namespace

Dataset load_cifar100(const std::vector<std::string>& paths_in, const std::string& split,
                      const std::string& labels, int num_classes, const DataNeeds& needs) {
  namespace fs = std::filesystem;
  if (paths_in.empty()) throw Error("cifar100: no data files given");
  if (labels != "fine" && labels != "coarse")
    throw Error("cifar100: labels must be fine or coarse, found '" + labels + "'");
  std::vector<std::string> paths = paths_in;
  std::error_code ec;
  if (paths.size() == 1 && fs::is_directory(paths[0], ec)) {
    const std::string name = split == "test" ? "test.bin" : "train.bin";
    fs::path p = fs::path(paths[0]) / name;
    if (!fs::is_regular_file(p, ec))
      throw Error(paths[0] + ": directory lacks the official CIFAR-100 file " + name +
                  " (or give the files)");
    paths = {p.string()};
  }
  const int offset = labels == "fine" ? 1 : 0;
  std::vector<int64_t> counts;
  int64_t total = 0;
  // Every file through InputFile: regular files only (a FIFO would hang), recorded as inputs so
  // no output replaces them.
  std::vector<std::unique_ptr<InputFile>> files;
  for (const auto& p : paths) {
    files.push_back(std::make_unique<InputFile>(p));
    const int64_t size = files.back()->size();
    if (size == 0 || size % kRecord != 0)
      fail_file(p, size / kRecord * kRecord,
                "partial record: " + std::to_string(size % kRecord) + " bytes left after " +
                    std::to_string(size / kRecord) + " whole records; CIFAR-100 records are 3074 bytes" +
                    (size % 3073 == 0 ? " (its size fits CIFAR-10 records: use data format cifar10)" : ""));
    counts.push_back(size / kRecord);
    total = checked_add(total, size / kRecord, "CIFAR-100 image count");
  }
  const int64_t take = images_to_read(needs, total, paths[0]);
  Dataset ds;
  ds.shape = {3, 32, 32};
  ds.count = take;
  ds.first = needs.first;
  ds.in_files = total;
  ds.pixels.resize(static_cast<size_t>(checked_mul(take, kPixels, "CIFAR-100 pixel bytes")));
  ds.labels.resize(static_cast<size_t>(take));
  constexpr int64_t kChunk = 1024;
  std::vector<uint8_t> buf(static_cast<size_t>(kChunk * kRecord));
  int64_t img = 0, skip = needs.first;  // skip: records before the first one read
  for (size_t fi = 0; fi < paths.size() && img < take; ++fi) {
    if (skip >= counts[fi]) {
      skip -= counts[fi];
      continue;
    }
    const std::string& p = paths[fi];
    InputFile& f = *files[fi];
    const int64_t start = skip, end = std::min(counts[fi], start + take - img);
    skip = 0;
    for (int64_t done = start; done < end;) {
      const int64_t n = std::min(kChunk, end - done);
      f.read_exact_at(done * kRecord, buf.data(), n * kRecord);
      for (int64_t r = 0; r < n; ++r) {
        const uint8_t* rec = buf.data() + r * kRecord;
        const int label = rec[offset];
        if (label >= num_classes)
          fail_file(p, (done + r) * kRecord + offset,
                    labels + " label " + std::to_string(label) + " of record " + std::to_string(done + r) +
                        " is not below the " + std::to_string(num_classes) + " classes" +
                        (labels == "fine" && num_classes == 20 ? " (a 20-class network wants labels: coarse)"
                                                               : ""));
        ds.labels[static_cast<size_t>(img)] = label;
        std::memcpy(ds.pixels.data() + img * kPixels, rec + 2, kPixels);
        ++img;
      }
      done += n;
    }
  }
  ds.description = "cifar100 (" + labels +
                   " labels): " + (paths.size() == 1 ? paths[0] : std::to_string(paths.size()) + " files") +
                   ", " + std::to_string(total) + " images" +
                   (take < total ? " (" + range_str(needs.first, take, total) + " read)" : "");
  return ds;
}

}  // namespace cnnrun
