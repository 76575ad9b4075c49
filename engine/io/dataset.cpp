// Picks the data files (the netdef's, confined to the asset roots, or the user's --data as
// typed) and checks that the images fit the network before anything runs.
#include "engine/io/dataset.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/io/assets.h"
#include "engine/io/image.h"
#include "engine/io/image_folder.h"
#include "engine/io/source.h"
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
    if (fs::exists(fs::path(first) / "train.bin", ec) || fs::exists(fs::path(first) / "test.bin", ec)) {
      *why = "a directory with CIFAR-100 train.bin/test.bin";
      return "cifar100";
    }
    // Images, or class folders of them; a directory of anything else says nothing.
    fs::directory_iterator it(first, ec), end;
    for (int seen = 0; !ec && it != end && seen < 10000; it.increment(ec), ++seen)
      if (it->is_directory(ec) || is_image_file_name(it->path().filename().string())) {
        *why = "a directory of images or class folders";
        return "images";
      }
    return "";
  }
  const std::string ext = fs::path(first).extension().string();
  if (ext == ".txt" || ext == ".lst" || ext == ".list") {
    *why = "a list file (" + ext + ") of image paths";
    return "images";
  }
  std::ifstream f(first, std::ios::binary);
  if (!f) return "";
  unsigned char m[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  f.read(reinterpret_cast<char*>(m), sizeof m);
  const std::streamsize got = f.gcount();
  if (!image_kind(m, static_cast<size_t>(got)).empty()) {
    *why = "the " + image_kind(m, static_cast<size_t>(got)) + " magic bytes (one image)";
    return "images";
  }
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
  const bool c10 = !ec && size > 0 && size % 3073 == 0, c100 = !ec && size > 0 && size % 3074 == 0;
  if (c10 && !c100) {
    *why = "a whole number of 3073-byte CIFAR-10 records";
    return "cifar10";
  }
  if (c100 && !c10) {
    *why = "a whole number of 3074-byte CIFAR-100 records";
    return "cifar100";
  }
  return "";
}

[[noreturn]] void shape_mismatch(const Network& net, const std::string& override_path,
                                 const std::string& description, const Shape& found) {
  std::string what = "the data set (" + description + ") has images of " + found.str() +
                     " but the network input is " + net.input.str();
  if (!override_path.empty()) throw Error("--data " + override_path + ": " + what);
  fail_at(net.data.loc, "", "", "", what);
}

// The format to read: --data-format, else for --data what its bytes say (noted), else the
// netdef's. `note` gets what the report's Data line should add.
std::string choose_format(const Network& net, const std::string& override_path,
                          const std::string& format_override, std::string* note) {
  const DataSpec& spec = net.data;
  const bool user = !override_path.empty();
  if (!format_override.empty() && !user) throw Error("--data-format needs --data");
  if (!user) {
    if (spec.format.empty())
      throw Error(net.source + ": the netdef has no 'data' section; add one or give --data PATH");
    return spec.format;
  }
  *note = " (--data)";
  if (!format_override.empty()) return format_override;
  std::string why;
  std::string format = detect_format(override_path, &why);
  if (!format.empty()) {
    *note = " (--data detected as " + format + " from " + why + ")";
  } else if (!spec.format.empty()) {
    format = spec.format;
    *note = " (--data read as the netdef's format, " + format + ")";
  } else {
    // Nothing in the file says; the loader's own errors then tell what it is not.
    format = override_path.find("idx") != std::string::npos ? "idx" : "cifar10";
    *note = " (--data read as " + format + ": the file did not tell its format; --data-format says it)";
  }
  return format;
}

std::vector<std::string> data_paths(const Network& net, const AssetResolver& assets,
                                    const std::string& override_path) {
  std::vector<std::string> paths;
  if (!override_path.empty()) {
    for (const auto& p : split_commas(override_path)) {
      if (p.empty()) throw Error("--data '" + override_path + "': empty file name in the list");
      paths.push_back(p);
    }
  } else {
    for (const auto& p : net.data.paths) paths.push_back(assets.resolve(p, net.data.loc, "data file"));
  }
  return paths;
}

// The formats held in memory.
// DataNeeds: only the first max_images images (0: all), and the network's input shape, which
// readers check from a header before a pixel is read (throwing DataShapeMismatch).
Dataset load_format(const Network& net, const AssetResolver& assets, const std::string& override_path,
                    const std::string& format, int64_t max_images, int64_t first) {
  const DataSpec& spec = net.data;
  const bool user = !override_path.empty();
  const int classes = net.num_classes();
  DataNeeds needs;
  needs.first = first;
  needs.max_images = max_images;
  needs.shape = net.input;
  if (format == "cifar10")
    return load_cifar10(data_paths(net, assets, override_path), spec.split, classes, needs);
  if (format == "cifar100") {
    // --data without the netdef's cifar100 section: fine labels unless the network has 20 classes.
    const std::string labels = spec.format == "cifar100" ? spec.labels : classes == 20 ? "coarse" : "fine";
    return load_cifar100(data_paths(net, assets, override_path), spec.split, labels, classes, needs);
  }
  if (format == "idx" || format == "npy") {
    std::string images, labels;
    if (user) {
      std::vector<std::string> parts = split_commas(override_path);
      if (parts.size() > 2 || parts[0].empty() || (parts.size() == 2 && parts[1].empty()))
        throw Error("--data '" + override_path + "': expected IMAGES,LABELS or the images file alone");
      images = parts[0];
      if (parts.size() == 2)
        labels = parts[1];
      else if (format == "idx")
        labels = labels_for(images);
    } else {
      images = assets.resolve(spec.images, spec.loc, "data images file");
      if (!spec.labels.empty()) labels = assets.resolve(spec.labels, spec.loc, "data labels file");
    }
    if (format == "idx") return load_idx(images, labels, classes, &net.input, needs);
    return load_npy(images, labels, net.input, classes, needs);
  }
  throw Error((user ? "--data-format" : net.source) + std::string(": unknown data format '") + format + "'");
}

void check_shape(const Network& net, const std::string& override_path, const Shape& shape,
                 const std::string& description) {
  if (shape != net.input) shape_mismatch(net, override_path, description, shape);
}

}  // namespace

std::string range_str(int64_t first, int64_t count, int64_t in_files) {
  if (first == 0) return "the first " + std::to_string(count);
  return "images " + std::to_string(first) + ".." + std::to_string(first + count - 1) + " of " +
         std::to_string(in_files);
}

int64_t images_to_read(const DataNeeds& needs, int64_t in_files, const std::string& what) {
  if (needs.first < 0 || needs.max_images < 0) throw Error(what + ": negative image range");
  if (needs.first > 0 && needs.first >= in_files)
    throw Error(what + ": holds " + std::to_string(in_files) + " images; image " +
                std::to_string(needs.first) + " was asked for");
  const int64_t left = in_files - needs.first;
  return needs.max_images > 0 ? std::min(needs.max_images, left) : left;
}

const std::vector<std::string>& data_formats() {
  static const std::vector<std::string> f = {"cifar10", "cifar100", "idx", "npy", "images"};
  return f;
}

Dataset load_dataset(const Network& net, const AssetResolver& assets, const std::string& override_path,
                     const std::string& format_override, int64_t max_images) {
  std::unique_ptr<DataSource> src =
      open_data(net, assets, override_path, format_override, 0, false, max_images);
  if (const Dataset* d = src->whole()) return *d;
  Dataset ds;
  src->read(0, src->count(), ds);
  ds.description = src->description();
  return ds;
}

std::unique_ptr<DataSource> open_data(const Network& net, const AssetResolver& assets,
                                      const std::string& override_path, const std::string& format_override,
                                      int threads, bool skip_bad, int64_t max_images, int64_t first,
                                      int64_t* in_files) {
  std::string note;
  const std::string format = choose_format(net, override_path, format_override, &note);
  const bool user = !override_path.empty();
  const bool images = format == "images";
  if (!images && (net.pre.resize || net.pre.crop_h))
    fail_at(net.pre.resize_loc, "", "", "preprocess",
            "resize and crop apply to image files (data format images); this data set is " + format);
  if (!images) {
    Dataset ds;
    try {
      ds = load_format(net, assets, override_path, format, max_images, first);
    } catch (const DataShapeMismatch& e) {  // found from a header, before the pixels were read
      shape_mismatch(net, override_path, e.description, e.found);
    }
    check_shape(net, override_path, ds.shape, ds.description);
    ds.description += note;
    if (in_files) *in_files = ds.in_files > 0 ? ds.in_files : ds.count;
    return memory_source(std::move(ds));
  }
  if (net.input.c != 1 && net.input.c != 3)
    throw Error("image files give 1 (grey) or 3 (RGB) channels, the network input has " +
                std::to_string(net.input.c));
  std::vector<std::string> paths = data_paths(net, assets, override_path);
  if (paths.size() != 1)
    throw Error("image data: give one folder or one list file, found " + std::to_string(paths.size()));
  // A netdef's folder may not lead outside the asset roots (symbolic links inside it included).
  std::vector<std::string> confine;
  if (!user) {
    confine = assets.roots();
    confine.push_back(net.source_dir.empty() ? "." : net.source_dir);
  }
  ImageList list = list_images(paths[0], net.classes, confine);
  const int64_t listed = static_cast<int64_t>(list.paths.size());
  if (in_files) *in_files = listed;
  std::string part;
  if (first > 0 || (max_images > 0 && max_images < listed)) {  // a shard: only its files are read
    DataNeeds range;
    range.first = first;
    range.max_images = max_images;
    const int64_t take = images_to_read(range, listed, paths[0]);
    auto cut = [&](auto& v) {
      if (v.empty()) return;
      v.erase(v.begin(), v.begin() + first);
      v.resize(static_cast<size_t>(take));
    };
    cut(list.paths);
    cut(list.labels);
    part = " (" + range_str(first, take, listed) + ")";
  }
  ImageTransform t;
  t.input = net.input;
  t.resize = net.pre.resize;
  t.crop_h = net.pre.crop_h;
  t.crop_w = net.pre.crop_w;
  std::string d =
      "images: " + paths[0] + ", " + std::to_string(listed) + " images" + part + " (" + list.layout;
  if (!list.label_rule.empty()) d += "; " + list.label_rule;
  if (list.labels.empty()) d += "; no labels";
  if (list.ignored) d += "; " + std::to_string(list.ignored) + " files without an image extension left out";
  d += ")";
  if (t.resize) d += ", resized to " + std::to_string(t.resize);
  if (t.crop_h) d += ", centre crop " + std::to_string(t.crop_h) + "x" + std::to_string(t.crop_w);
  d += note;
  return image_source(std::move(list), t, threads, d, skip_bad);
}

}  // namespace cnnrun
