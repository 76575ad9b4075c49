// Picks the data files (the netdef's, confined to the asset roots, or the user's --data as
// typed) and checks that the images fit the network before anything runs.
#include "engine/io/dataset.h"

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

std::string guess_format(const std::string& override_path) {
  if (override_path.find(',') != std::string::npos && override_path.find("idx") != std::string::npos)
    return "idx";
  if (override_path.find("idx3") != std::string::npos || override_path.find("idx1") != std::string::npos)
    return "idx";
  return "cifar10";
}

[[noreturn]] void shape_mismatch(const Network& net, const std::string& override_path,
                                 const std::string& description, const Shape& found) {
  std::string what = "the data set (" + description + ") has images of " + found.str() +
                     " but the network input is " + net.input.str();
  if (!override_path.empty()) throw Error("--data " + override_path + ": " + what);
  fail_at(net.data.loc, "", "", "", what);
}

Dataset load_checked(const Network& net, const AssetResolver& assets, const std::string& override_path,
                     int64_t max_images) {
  const DataSpec& spec = net.data;
  const bool user = !override_path.empty();
  std::string format = spec.format;
  if (format.empty()) {
    if (!user) throw Error(net.source + ": the netdef has no 'data' section; add one or give --data PATH");
    format = guess_format(override_path);
  }
  const int classes = net.num_classes();
  DataNeeds needs;
  needs.max_images = max_images;
  needs.shape = net.input;
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
    ds = load_cifar10(paths, spec.split, classes, needs);
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
    ds = load_idx(images, labels, classes, needs);
  } else {
    throw Error(net.source + ": unknown data format '" + format + "'");
  }
  if (ds.shape != net.input) shape_mismatch(net, override_path, ds.description, ds.shape);
  if (user) ds.description += " (--data)";
  return ds;
}

}  // namespace

Dataset load_dataset(const Network& net, const AssetResolver& assets, const std::string& override_path,
                     int64_t max_images) {
  try {
    return load_checked(net, assets, override_path, max_images);
  } catch (const DataShapeMismatch& e) {  // found from a header, before the pixels were read
    shape_mismatch(net, override_path, e.description, e.found);
  }
}

}  // namespace cnnrun
