// Picks the data files (the netdef's, confined to the asset roots, or the user's --data as
// typed) and checks that the images fit the network before anything runs.
#include "engine/io/dataset.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/io/assets.h"
#include "engine/network.h"

namespace cnnrun {

namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t end = s.find(',', start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

// "train-images-idx3-ubyte.gz" -> "train-labels-idx1-ubyte.gz" (the swap applies to the name only).
std::string labels_for(const std::string& images) {
  const std::string from = "images-idx3", to = "labels-idx1";
  size_t slash = images.find_last_of('/');
  size_t name_start = slash == std::string::npos ? 0 : slash + 1;
  size_t p = images.rfind(from);
  if (p == std::string::npos || p < name_start)
    throw Error("--data " + images + ": cannot find the labels file (the name has no '" + from +
                "' to swap for '" + to + "'); give --data IMAGES,LABELS");
  return images.substr(0, p) + to + images.substr(p + from.size());
}

// What --data holds, from its bytes (magic numbers, record sizes) or, for a directory, the names
// in it; "" when nothing tells. `why` says what gave it away, for the report.
std::string detect_format(const std::string& data, std::string* why) {
  namespace fs = std::filesystem;
  std::vector<std::string> parts = split_commas(data);
  const std::string& first = parts[0];
  std::error_code ec;
  if (fs::is_directory(first, ec)) {
    if (fs::exists(fs::path(first) / "data_batch_1.bin", ec) ||
        fs::exists(fs::path(first) / "test_batch.bin", ec)) {
      *why = "a directory with CIFAR-10 batch files";
      return "cifar10";
    }
    return "";
  }
  std::ifstream f(first, std::ios::binary);
  if (!f) return "";
  unsigned char m[6] = {0, 0, 0, 0, 0, 0};
  f.read(reinterpret_cast<char*>(m), sizeof m);
  const std::streamsize got = f.gcount();
  if (got >= 6 && std::memcmp(m, "\x93NUMPY", 6) == 0) {
    *why = "the .npy magic bytes";
    return "npy";
  }
  if (got >= 4 && m[0] == 0 && m[1] == 0 && m[2] == 8 && m[3] >= 1 && m[3] <= 4) {
    *why = "the IDX magic bytes";
    return "idx";
  }
  if (got >= 2 && m[0] == 0x1f && m[1] == 0x8b && first.find("idx") != std::string::npos) {
    *why = "gzip data named like IDX";
    return "idx";
  }
  const auto size = fs::file_size(first, ec);
  if (!ec && size > 0 && size % 3073 == 0) {
    *why = "a whole number of 3073-byte CIFAR-10 records";
    return "cifar10";
  }
  return "";
}

}  // namespace

const std::vector<std::string>& data_formats() {
  static const std::vector<std::string> f = {"cifar10", "idx", "npy"};
  return f;
}

Dataset load_dataset(const Network& net, const AssetResolver& assets, const std::string& override_path,
                     const std::string& format_override) {
  const DataSpec& spec = net.data;
  const bool user = !override_path.empty();
  std::string format = user ? format_override : spec.format, detected;
  if (!format_override.empty() && !user) throw Error("--data-format needs --data");
  if (format.empty()) {
    if (!user) throw Error(net.source + ": the netdef has no 'data' section; add one or give --data PATH");
    std::string why;
    format = detect_format(override_path, &why);
    if (!format.empty()) {
      detected = " (--data detected as " + format + " from " + why + ")";
    } else if (!spec.format.empty()) {
      format = spec.format;
      detected = " (--data read as the netdef's format, " + format + ")";
    } else {
      // Nothing in the file says; the loader's own errors then tell what it is not.
      format = override_path.find("idx") != std::string::npos ? "idx" : "cifar10";
      detected = " (--data read as " + format + ": the file did not tell its format; --data-format says it)";
    }
  }
  const int classes = net.num_classes();
  Dataset ds;
  if (format == "cifar10") {
    std::vector<std::string> paths;
    if (user) {
      for (const auto& p : split_commas(override_path)) {
        if (p.empty()) throw Error("--data '" + override_path + "': empty file name in the list");
        paths.push_back(p);
      }
    } else {
      for (const auto& p : spec.paths) paths.push_back(assets.resolve(p, spec.loc, "data file"));
    }
    ds = load_cifar10(paths, spec.split, classes);
  } else if (format == "idx") {
    std::string images, labels;
    if (user) {
      std::vector<std::string> parts = split_commas(override_path);
      if (parts.size() > 2 || parts[0].empty() || (parts.size() == 2 && parts[1].empty()))
        throw Error("--data '" + override_path + "': expected IMAGES,LABELS or the images file alone");
      images = parts[0];
      labels = parts.size() == 2 ? parts[1] : labels_for(images);
    } else {
      images = assets.resolve(spec.images, spec.loc, "data images file");
      labels = assets.resolve(spec.labels, spec.loc, "data labels file");
    }
    ds = load_idx(images, labels, classes);
  } else if (format == "npy") {
    std::string images, labels;
    if (user) {
      std::vector<std::string> parts = split_commas(override_path);
      if (parts.size() > 2 || parts[0].empty() || (parts.size() == 2 && parts[1].empty()))
        throw Error("--data '" + override_path +
                    "': expected IMAGES.npy,LABELS.npy or the images file alone");
      images = parts[0];
      if (parts.size() == 2) labels = parts[1];
    } else {
      images = assets.resolve(spec.images, spec.loc, "data images file");
      if (!spec.labels.empty()) labels = assets.resolve(spec.labels, spec.loc, "data labels file");
    }
    ds = load_npy(images, labels, net.input, classes);
  } else {
    throw Error((user ? "--data-format" : net.source) + std::string(": unknown data format '") + format +
                "'");
  }
  if (ds.shape != net.input) {
    std::string what = "the data set (" + ds.description + ") has images of " + ds.shape.str() +
                       " but the network input is " + net.input.str();
    if (user) throw Error("--data " + override_path + ": " + what);
    fail_at(spec.loc, "", "", "", what);
  }
  if (user) ds.description += detected.empty() ? " (--data)" : detected;
  return ds;
}

}  // namespace cnnrun
