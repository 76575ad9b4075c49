// CIFAR-10 binary records. A record is the label byte followed by the image already in CHW
// order, so loading is a split of each record into two arrays; files are read a few MB at a
// time so 50000 images (150 MB) load at disk speed without a second full-size buffer.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "engine/core/error.h"
#include "engine/core/memory.h"
#include "engine/io/dataset.h"
#include "engine/io/files.h"

namespace cnnrun {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kPixels = 3 * 32 * 32;
constexpr int64_t kRecord = kPixels + 1;

// Returns the byte size of a regular file, or throws naming it.
int64_t regular_file_size(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    fail_file(path, -1, std::string("cannot open: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode))
    fail_file(path, -1,
              "is a directory; give CIFAR-10 record files, or one directory holding the official files");
  check_regular_file(path);  // "is a FIFO, not a regular file", ...
  return static_cast<int64_t>(st.st_size);
}

// For the error of a file whose size is no whole number of records: what it looks like instead
// (only called on that path, so a CIFAR-10 file that happens to start like these still loads).
std::string format_hint(const std::string& path, int64_t size) {
  unsigned char b[16] = {0};
  InputFile f(path);
  size_t n = static_cast<size_t>(f.read(b, sizeof b));
  if (n >= 2 && b[0] == 0x1f && b[1] == 0x8b) return " (it is gzip data: unpack it first)";
  if (n >= 4 && b[0] == 0 && b[1] == 0 && b[2] == 0x08)
    return " (it starts like an IDX file: use data format idx)";
  if (n >= 9 && b[8] == '{') {
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | b[i];
    if (hlen + 8 <= static_cast<uint64_t>(size)) return " (it starts like a safetensors weights file)";
  }
  bool text = n > 0;
  for (size_t i = 0; i < n && text; ++i)
    text = (b[i] >= 0x20 && b[i] < 0x7f) || b[i] == '\n' || b[i] == '\t' || b[i] == '\r';
  if (text) return " (it starts like a text file)";
  return "";
}

std::vector<std::string> official_files(const std::string& dir, const std::string& split) {
  std::vector<std::string> names;
  if (split == "train") {
    for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  } else if (split == "test") {
    names.push_back("test_batch.bin");
  } else {
    throw Error(dir + ": unknown CIFAR-10 split '" + split + "'; expected train or test");
  }
  std::vector<std::string> paths, missing;
  for (const auto& n : names) {
    fs::path p = fs::path(dir) / n;
    std::error_code ec;
    if (fs::is_regular_file(p, ec))
      paths.push_back(p.string());
    else
      missing.push_back(n);
  }
  if (!missing.empty()) {
    std::string m;
    for (size_t i = 0; i < missing.size(); ++i) m += (i ? ", " : "") + missing[i];
    throw Error(
        dir + ": directory lacks the official CIFAR-10 " + split + " file(s) " + m +
        " (a directory must hold data_batch_1..5.bin for train, test_batch.bin for test; or give the files)");
  }
  return paths;
}

}  // namespace

Dataset load_cifar10(const std::vector<std::string>& paths_in, const std::string& split, int num_classes,
                     const DataNeeds& needs) {
  if (paths_in.empty()) throw Error("cifar10: no data files given");
  const Shape cifar{3, 32, 32};
  std::vector<std::string> paths = paths_in;
  std::error_code ec;
  if (paths.size() == 1 && fs::is_directory(paths[0], ec)) paths = official_files(paths[0], split);

  std::vector<int64_t> counts;
  int64_t total = 0;
  for (const auto& p : paths) {
    int64_t size = regular_file_size(p);
    if (size == 0) fail_file(p, -1, "empty file; expected CIFAR-10 records of 3073 bytes");
    if (size % kRecord != 0)
      fail_file(p, size / kRecord * kRecord,
                "partial record: " + std::to_string(size % kRecord) + " bytes left after " +
                    std::to_string(size / kRecord) + " whole records; CIFAR-10 records are 3073 bytes" +
                    format_hint(p, size));
    counts.push_back(size / kRecord);
    total = checked_add(total, size / kRecord, "CIFAR-10 image count");
  }

  if (needs.shape.c != 0 && needs.shape != cifar) {
    const std::string desc =
        "cifar10: " + (paths.size() == 1 ? paths[0] : std::to_string(paths.size()) + " files") + ", " +
        std::to_string(total) + " images";
    throw DataShapeMismatch(
        paths[0] + ": CIFAR-10 images are " + cifar.str() + " but the network input is " + needs.shape.str(),
        cifar, desc);
  }
  // Only the images the run needs are read. A netdef can list one big file many times: what the
  // rest adds up to must fit in memory, or the error should say so here rather than as a failed
  // (or, overcommitted, fatal) allocation.
  const int64_t take = images_to_read(needs, total, paths[0]);
  const int64_t bytes = checked_mul(take, kPixels, "CIFAR-10 pixel bytes");
  const HostMemory mem = host_memory();
  if (checked_add(bytes, take, "CIFAR-10 bytes") > mem.available / 10 * 9)
    throw Error("cifar10: " + std::to_string(paths.size()) + " file(s) hold " + std::to_string(total) +
                " images; the " + std::to_string(take) + " this run reads = " + std::to_string(bytes) +
                " bytes, more than the host memory (" + mem.str() + "; first file " + paths[0] + ")");
  Dataset ds;
  ds.shape = cifar;
  ds.count = take;
  ds.first = needs.first;
  ds.in_files = total;
  ds.pixels.resize(static_cast<size_t>(bytes));
  ds.labels.resize(static_cast<size_t>(take));

  constexpr int64_t kChunkRecords = 1024;  // 3 MB per read
  std::vector<uint8_t> buf(static_cast<size_t>(kChunkRecords * kRecord));
  int64_t img = 0, skip = needs.first;  // skip: records before the first one read
  for (size_t fi = 0; fi < paths.size() && img < take; ++fi) {
    if (skip >= counts[fi]) {  // a file wholly before the range is not opened
      skip -= counts[fi];
      continue;
    }
    const std::string& p = paths[fi];
    InputFile f(p);
    const int64_t start = skip;  // this file's first record read
    skip = 0;
    f.skip(start * kRecord);
    const int64_t here = std::min(counts[fi] - start, take - img);
    for (int64_t done = 0; done < here;) {
      int64_t n = std::min(kChunkRecords, here - done);
      size_t want = static_cast<size_t>(n * kRecord);
      size_t got = static_cast<size_t>(f.read(buf.data(), static_cast<int64_t>(want)));
      if (got != want)
        fail_file(p, (start + done) * kRecord + static_cast<int64_t>(got),
                  "file ended early (changed while reading?)");
      for (int64_t r = 0; r < n; ++r) {
        const uint8_t* rec = buf.data() + r * kRecord;
        const int64_t record = start + done + r;
        if (rec[0] >= num_classes)
          fail_file(p, record * kRecord,
                    "label " + std::to_string(rec[0]) + " of record " + std::to_string(record) +
                        " is not below the " + std::to_string(num_classes) + " classes");
        ds.labels[static_cast<size_t>(img)] = rec[0];
        std::memcpy(ds.pixels.data() + img * kPixels, rec + 1, kPixels);
        ++img;
      }
      done += n;
    }
  }
  ds.description = "cifar10: " + (paths.size() == 1 ? paths[0] : std::to_string(paths.size()) + " files") +
                   ", " + std::to_string(total) + " images" +
                   (take < total ? " (" + range_str(needs.first, take, total) + " read)" : "");
  return ds;
}

}  // namespace cnnrun
