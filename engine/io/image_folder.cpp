// Listing image folders (sorted, recursive, symlink loops caught by the real paths on the way
// down) and decoding them in blocks on worker threads.
#include "engine/io/image_folder.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "engine/core/clock.h"
#include "engine/core/error.h"
#include "engine/io/files.h"
#include "engine/io/image.h"

namespace cnnrun {

namespace fs = std::filesystem;

namespace {}  // namespace

bool is_image_file_name(const std::string& name) {
  std::string e = fs::path(name).extension().string();
  for (auto& ch : e) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  // torchvision's IMG_EXTENSIONS: these count as images (and fail clearly if not PNG or JPEG).
  static const std::set<std::string> exts = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                             ".pgm", ".tif",  ".tiff", ".webp"};
  return exts.count(e) > 0;
}

namespace {

bool has_image_extension(const fs::path& p) { return is_image_file_name(p.filename().string()); }

struct Lister {
  std::vector<fs::path> confine;
  int64_t ignored = 0;

  void check_confined(const fs::path& p) const {
    if (confine.empty()) return;
    std::error_code ec;
    fs::path real = fs::canonical(p, ec);
    if (ec) throw Error(p.string() + ": cannot resolve (" + ec.message() + ")");
    for (const auto& r : confine)
      if (path_inside(real, r)) return;
    throw Error(p.string() + ": leads outside the asset roots (to " + real.string() +
                "); a netdef may only read files inside them");
  }

  // Image files under `dir`, recursively, sorted by path (os.walk order as ImageFolder sorts it).
  // `stack`: the real paths of the directories being walked, to catch a symlink back up.
  void walk(const fs::path& dir, std::vector<fs::path>& stack, std::vector<std::string>& out) {
    std::error_code ec;
    fs::path real = fs::canonical(dir, ec);
    if (ec) throw Error(dir.string() + ": cannot read the directory (" + ec.message() + ")");
    if (std::find(stack.begin(), stack.end(), real) != stack.end())
      throw Error(dir.string() + ": symbolic link loop (it leads back to " + real.string() + ")");
    if (stack.size() > 64) throw Error(dir.string() + ": directories nested more than 64 deep");
    stack.push_back(real);
    std::vector<fs::path> entries;
    fs::directory_iterator it(dir, ec), end;
    if (ec) throw Error(dir.string() + ": cannot read the directory (" + ec.message() + ")");
    for (; it != end; it.increment(ec)) {
      if (ec) throw Error(dir.string() + ": cannot read the directory (" + ec.message() + ")");
      entries.push_back(it->path());
    }
    std::sort(entries.begin(), entries.end());
    for (const auto& e : entries) {
      if (fs::is_directory(e, ec)) {
        walk(e, stack, out);
      } else if (has_image_extension(e)) {
        check_confined(e);
        out.push_back(e.string());
      } else {
        ++ignored;
      }
    }
    stack.pop_back();
  }
};

std::vector<std::string> read_list(const std::string& file, Lister& lister) {
  // Through InputFile: a regular file (a FIFO would hang), recorded so no output replaces it.
  std::istringstream f(InputFile(file).read_all(int64_t{256} << 20, "256 MiB", "not an image list"));
  const fs::path base = fs::path(file).parent_path();
  std::vector<std::string> out;
  std::string line;
  int64_t n = 0;
  while (std::getline(f, line)) {
    ++n;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    if (line.find('\0') != std::string::npos)
      throw Error(file + ":" + std::to_string(n) + ": not a text list of image paths");
    fs::path p(line);
    if (p.is_relative()) p = base / p;
    std::error_code ec;
    if (!fs::is_regular_file(p, ec))
      throw Error(file + ":" + std::to_string(n) + ": " + p.string() + " is not a file");
    lister.check_confined(p);
    out.push_back(p.string());
  }
  if (f.bad()) throw Error(file + ": read error");
  return out;
}

}  // namespace

ImageList list_images(const std::string& path, const std::vector<std::string>& classes,
                      const std::vector<std::string>& confine) {
  Lister lister;
  for (const auto& c : confine) {
    std::error_code ec;
    fs::path r = fs::canonical(c, ec);
    if (!ec) lister.confine.push_back(r);
  }
  if (!confine.empty() && lister.confine.empty()) throw Error(path + ": no asset root to read it from");
  ImageList list;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(path + ": no such file or directory");
  if (!fs::is_directory(path, ec)) {
    {                     // one image file, told by its first bytes
      InputFile f(path);  // a FIFO or a device is refused here, never read
      uint8_t head[8] = {0};
      const int64_t got = f.read(head, sizeof head);
      if (!image_kind(head, static_cast<size_t>(got)).empty()) {
        lister.check_confined(path);
        list.paths = {path};
        list.layout = "one image";
        return list;
      }
    }
    list.paths = read_list(path, lister);
    list.layout = "list file";
    if (list.paths.empty()) throw Error(path + ": the list names no images");
    return list;
  }
  std::vector<fs::path> top;
  fs::directory_iterator it(path, ec), end;
  if (ec) throw Error(path + ": cannot read the directory (" + ec.message() + ")");
  for (; it != end; it.increment(ec)) {
    if (ec) throw Error(path + ": cannot read the directory (" + ec.message() + ")");
    top.push_back(it->path());
  }
  std::sort(top.begin(), top.end());
  std::vector<fs::path> dirs;
  int64_t top_images = 0;
  for (const auto& e : top)
    if (fs::is_directory(e, ec))
      dirs.push_back(e);
    else if (has_image_extension(e))
      ++top_images;
  std::vector<fs::path> stack;
  if (dirs.empty()) {
    lister.walk(path, stack, list.paths);
    list.layout = "flat folder";
    if (list.paths.empty())
      throw Error(path + ": no image files (.png, .jpg, ...) and no class folders" +
                  (lister.ignored ? " (" + std::to_string(lister.ignored) + " other files)" : std::string()));
    list.ignored = lister.ignored;
    return list;
  }
  if (top_images)
    throw Error(path + ": holds both class folders and " + std::to_string(top_images) +
                " image files; put every image in its class's folder, or give a flat folder");
  // Labels: by name when every folder is a class name, else by sorted order.
  std::map<std::string, int32_t> by_name;
  for (size_t i = 0; i < classes.size(); ++i) by_name.emplace(classes[i], static_cast<int32_t>(i));
  bool named = true;
  for (const auto& d : dirs) named = named && by_name.count(d.filename().string());
  if (!named && dirs.size() != classes.size())
    throw Error(path + ": " + std::to_string(dirs.size()) + " class folders for the network's " +
                std::to_string(classes.size()) +
                " classes, and the folder names are not all class names (e.g. '" +
                [&] {
                  for (const auto& d : dirs)
                    if (!by_name.count(d.filename().string())) return d.filename().string();
                  return std::string();
                }() +
                "')");
  list.label_rule =
      named ? "class folders named after the netdef's classes"
            : "class index = sorted order of the " + std::to_string(dirs.size()) + " folder names";
  for (size_t i = 0; i < dirs.size(); ++i) {
    const size_t before = list.paths.size();
    lister.walk(dirs[i], stack, list.paths);
    if (list.paths.size() == before) throw Error(dirs[i].string() + ": empty class folder (no image files)");
    const int32_t label = named ? by_name[dirs[i].filename().string()] : static_cast<int32_t>(i);
    list.labels.resize(list.paths.size(), label);
  }
  list.layout = "class folders";
  list.ignored = lister.ignored;
  return list;
}

void load_image_file(const std::string& path, const ImageTransform& t, uint8_t* chw) {
  // Through InputFile: a regular file, recorded as an input (no output replaces it). Its messages
  // start with the path, which the caller puts first already.
  std::string bytes;
  try {
    bytes = InputFile(path).read_all(int64_t{1} << 30, "1 GiB", "not an image file this reader decodes");
  } catch (const Error& e) {
    std::string m = e.what();
    if (m.compare(0, path.size() + 2, path + ": ") == 0) m.erase(0, path.size() + 2);
    throw Error(m);
  }
  Image img = convert_channels(decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
                               static_cast<int>(t.input.c));
  if (t.resize > 0) img = resize_shorter(img, t.resize);
  if (t.crop_h > 0) img = center_crop(img, t.crop_h, t.crop_w);
  if (img.w != t.input.w || img.h != t.input.h)
    throw Error("image is " + std::to_string(img.w) + "x" + std::to_string(img.h) +
                " (width x height) after the netdef's preprocessing, the network input is " +
                std::to_string(t.input.w) + "x" + std::to_string(t.input.h) +
                (t.resize || t.crop_h ? "" : "; add preprocess resize and crop"));
  const int64_t plane = t.input.h * t.input.w;
  const int C = img.c;
  for (int64_t p = 0; p < plane; ++p)
    for (int c = 0; c < C; ++c) chw[c * plane + p] = img.px[static_cast<size_t>(p) * C + c];
}

namespace {

class ImageSource : public DataSource {
 public:
  ImageSource(ImageList list, const ImageTransform& t, int threads, std::string description, bool skip_bad)
      : list_(std::move(list)), t_(t), description_(std::move(description)), skip_bad_(skip_bad) {
    threads_ = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  int64_t count() const override { return static_cast<int64_t>(list_.paths.size()); }
  Shape shape() const override { return t_.input; }
  bool labelled() const override { return !list_.labels.empty(); }
  std::string description() const override { return description_; }
  double decode_seconds() const override { return decode_s_; }
  int decode_threads() const override { return threads_; }
  int64_t skipped() const override { return skipped_; }
  std::string first_skipped() const override { return first_skipped_; }

  void read(int64_t first, int64_t n, Dataset& out) override {
    if (first < 0 || n < 0 || first + n > count()) throw Error("image block outside the folder's images");
    const int64_t size = t_.input.size();
    out.count = n;
    out.shape = t_.input;
    out.pixels.resize(static_cast<size_t>(n * size));
    out.values.clear();
    out.paths.assign(list_.paths.begin() + first, list_.paths.begin() + first + n);
    if (labelled())
      out.labels.assign(list_.labels.begin() + first, list_.labels.begin() + first + n);
    else
      out.labels.clear();
    out.description = description_;
    std::atomic<int64_t> next{0};
    std::mutex mu;
    std::vector<std::pair<int64_t, std::string>> failed;
    double secs = 0;
    auto work = [&] {
      const auto t0 = Clock::now();
      for (int64_t i; (i = next++) < n;) {
        try {
          load_image_file(list_.paths[static_cast<size_t>(first + i)], t_, out.pixels.data() + i * size);
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lock(mu);
          failed.emplace_back(i, e.what());
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      secs += seconds_since(t0);
    };
    const int T = static_cast<int>(std::min<int64_t>(threads_, std::max<int64_t>(n, 1)));
    std::vector<std::thread> pool;
    for (int k = 1; k < T; ++k) pool.emplace_back(work);
    work();
    for (auto& th : pool) th.join();
    decode_s_ += secs;
    if (failed.empty()) return;
    std::sort(failed.begin(), failed.end());  // the lowest index first, whatever the threads' order
    auto message = [&](const std::pair<int64_t, std::string>& f) {
      return list_.paths[static_cast<size_t>(first + f.first)] + ": image " +
             std::to_string(first + f.first) + ": " + f.second;
    };
    if (!skip_bad_) throw Error(message(failed[0]));
    if (skipped_ == 0) first_skipped_ = message(failed[0]);
    skipped_ += static_cast<int64_t>(failed.size());
    // Compact the block: the readable images keep their order.
    int64_t keep = 0;
    size_t f = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (f < failed.size() && failed[f].first == i) {
        ++f;
        continue;
      }
      if (keep != i) {
        std::copy(out.pixels.begin() + i * size, out.pixels.begin() + (i + 1) * size,
                  out.pixels.begin() + keep * size);
        out.paths[static_cast<size_t>(keep)] = out.paths[static_cast<size_t>(i)];
        if (labelled()) out.labels[static_cast<size_t>(keep)] = out.labels[static_cast<size_t>(i)];
      }
      ++keep;
    }
    out.count = keep;
    out.pixels.resize(static_cast<size_t>(keep * size));
    out.paths.resize(static_cast<size_t>(keep));
    if (labelled()) out.labels.resize(static_cast<size_t>(keep));
  }

 private:
  ImageList list_;
  ImageTransform t_;
  std::string description_;
  bool skip_bad_ = false;
  int threads_ = 1;
  double decode_s_ = 0;
  int64_t skipped_ = 0;
  std::string first_skipped_;
};

}  // namespace

std::unique_ptr<DataSource> image_source(ImageList list, const ImageTransform& t, int threads,
                                         const std::string& description, bool skip_bad) {
  return std::make_unique<ImageSource>(std::move(list), t, threads, description, skip_bad);
}

}  // namespace cnnrun
