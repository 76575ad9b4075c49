// Image folders: decoded pixels equal Pillow's, resized and cropped pixels match torchvision's
// transforms on PIL images, the CIFAR-10 sample as a PNG folder gives exactly the binary file's
// predictions, streaming in blocks changes nothing, and every bad input is one error naming the
// file. The reference images and pixels come from tests/image_reference.py (Debian's Pillow,
// NumPy and torchvision).
#include <png.h>
#include <zlib.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/executor.h"
#include "engine/gpu_api.h"
#include "engine/io/assets.h"
#include "engine/io/image.h"
#include "engine/io/image_folder.h"
#include "engine/io/npy.h"
#include "engine/io/source.h"
#include "engine/io/weights.h"
#include "engine/network.h"
#include "engine/scoring.h"
#include "engine/stream.h"
#include "reference/cpu_executor.h"
#include "tests/test_util.h"

using namespace cnnrun;
namespace fs = std::filesystem;

namespace {

doctest::Contains has(const std::string& s) { return doctest::Contains(s.c_str()); }

std::string python_refs(const std::string& args) {
  std::string out;
  const std::string cmd =
      test::python() + " " + std::string(CNNRUN_SOURCE_DIR) + "/tests/image_reference.py " + args;
  INFO(cmd);
  const int rc = test::run_command(cmd, &out);
  INFO(out);
  REQUIRE(rc == 0);
  return out;
}

std::vector<uint8_t> file_bytes(const std::string& p) {
  std::string s = test::read_file(p);
  return std::vector<uint8_t>(s.begin(), s.end());
}

// Pillow's pixels, written by image_reference.py as float32 (h, w[, c]).
std::vector<float> ref_pixels(const std::string& p, std::vector<int64_t>* dims) { return read_npy(p, dims); }

std::string run_cli(const std::string& args, int want_rc = 0) {
  std::string o;
  const int rc = test::run_command(std::string(CNNRUN_BINARY) + " " + args, &o);
  INFO(args);
  INFO(o);
  CHECK(rc == want_rc);
  return o;
}

// index -> top1 of a --predictions CSV (index column, or the record index in the file name when
// by_name).
std::map<int64_t, int32_t> csv_top1(const std::string& file, bool by_name) {
  std::map<int64_t, int32_t> m;
  std::istringstream in(test::read_file(file));
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    REQUIRE(f.size() >= 4);
    int64_t key = std::stoll(f[0]);
    if (by_name) key = std::stoll(fs::path(f[1]).stem().string());
    m[key] = std::stoi(f[3]);
  }
  return m;
}

}  // namespace

TEST_CASE("images: decoded PNG and JPEG pixels equal Pillow's, in RGB and in grey") {
  const std::string d = test::temp_dir("img-decode");
  python_refs("decode " + d);
  int files = 0;
  for (const auto& e : fs::directory_iterator(d)) {
    const std::string p = e.path().string();
    if (e.path().extension() == ".npy") continue;
    ++files;
    std::vector<uint8_t> bytes = file_bytes(p);
    Image img = decode_image(bytes.data(), bytes.size());
    for (int c : {3, 1}) {
      std::vector<int64_t> dims;
      std::vector<float> ref = ref_pixels(p + (c == 3 ? ".rgb.npy" : ".l.npy"), &dims);
      Image got = convert_channels(img, c);
      INFO(p << " as " << c << " channels");
      REQUIRE(dims[0] == got.h);
      REQUIRE(dims[1] == got.w);
      REQUIRE(ref.size() == got.px.size());
      int64_t bad = 0;
      for (size_t i = 0; i < ref.size(); ++i) bad += static_cast<float>(got.px[i]) != ref[i];
      CHECK(bad == 0);
    }
  }
  CHECK(files == 15);
}

TEST_CASE(
    "images: resize (shorter side) + centre crop match torchvision's Resize + CenterCrop on PIL images") {
  const std::string d = test::temp_dir("img-resize");
  python_refs("resize " + d);
  int cases = 0;
  for (const auto& e : fs::directory_iterator(d)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".npy") continue;
    struct Case {
      int size, crop, channels;
      std::string ref;
    };
    for (const Case& c : {Case{256, 224, 3, ".256.224.npy"}, Case{224, 224, 3, ".224.224.npy"},
                          Case{36, 32, 3, ".36.32.npy"}, Case{256, 224, 1, ".grey.256.224.npy"}}) {
      ImageTransform t;
      t.input = {c.channels, c.crop, c.crop};
      t.resize = c.size;
      t.crop_h = t.crop_w = c.crop;
      std::vector<uint8_t> chw(static_cast<size_t>(t.input.size()));
      load_image_file(e.path().string(), t, chw.data());
      std::vector<int64_t> dims;
      std::vector<float> ref = ref_pixels(e.path().string() + c.ref, &dims);  // h, w[, c]
      REQUIRE(ref.size() == chw.size());
      const int64_t plane = c.crop * c.crop;
      int64_t off = 0, max_diff = 0;
      for (int64_t p = 0; p < plane; ++p)
        for (int k = 0; k < c.channels; ++k) {
          const int64_t diff = std::llabs(static_cast<int64_t>(chw[static_cast<size_t>(k * plane + p)]) -
                                          static_cast<int64_t>(ref[static_cast<size_t>(p * c.channels + k)]));
          off += diff > 1;
          max_diff = std::max(max_diff, diff);
        }
      INFO(name << " resize " << c.size << " crop " << c.crop << " channels " << c.channels << ": max diff "
                << max_diff);
      // The bar is one level on 99 % of pixels; the resampler is Pillow's arithmetic, so
      // it is exact here.
      CHECK(off * 100 <= static_cast<int64_t>(chw.size()));
      CHECK(max_diff == 0);
      ++cases;
    }
  }
  CHECK(cases == 32);
}

TEST_CASE("cli: the CIFAR-10 sample as a PNG class folder gives exactly the binary file's predictions") {
  const std::string sample = test::shared_dir() + "/data/cifar10-sample/train_2000.bin";
  REQUIRE(test::have_file(sample));
  const std::string d = test::temp_dir("img-cifar");
  python_refs("cifar " + sample + " " + d + "/first1200 1200");
  python_refs("cifar " + sample + " " + d + "/all 2000");
  const std::string net = std::string(CNNRUN_SOURCE_DIR) + "/netdefs/cifar10.yaml --assets " +
                          test::shared_dir() + " --engine cpu ";
  std::string o = run_cli(net + "--data " + d + "/first1200");
  CHECK(o.find("Net accuracy: 78.25 % (939/1200)") != std::string::npos);
  CHECK(o.find("(--data detected as images from a directory of images or class folders)") !=
        std::string::npos);
  CHECK(o.find("class folders named after the netdef's classes") != std::string::npos);
  o = run_cli(net + "--data " + d + "/all --predictions " + d + "/folder.csv --json " + d + "/r.json");
  CHECK(o.find("Net accuracy: 78.40 % (1568/2000)") != std::string::npos);
  CHECK(o.find("Decoding: ") != std::string::npos);
  CHECK(o.find("Pipeline: 2000 images in ") != std::string::npos);
  run_cli(net + "--predictions " + d + "/bin.csv");
  std::map<int64_t, int32_t> folder = csv_top1(d + "/folder.csv", true),
                             bin = csv_top1(d + "/bin.csv", false);
  REQUIRE(folder.size() == 2000);
  CHECK(folder == bin);
  // The JSON report: per-class counts add up, the confusion matrix's diagonal is the correct count.
  auto j = nlohmann::json::parse(test::read_file(d + "/r.json"));
  int64_t diag = 0, total = 0;
  for (int l = 0; l < 10; ++l)
    for (int p = 0; p < 10; ++p) {
      const int64_t v = j["confusion_matrix"][l][p].get<int64_t>();
      total += v;
      if (l == p) diag += v;
    }
  CHECK(total == 2000);
  CHECK(diag == 1568);
  CHECK(j["per_class"][0]["name"] == "airplane");
  CHECK(j["pipeline"]["decode_threads"].get<int>() >= 1);
}

TEST_CASE("images: a folder streamed in blocks gives the predictions of the same images in memory") {
  Network net;
  Dataset data;
  if (!test::load_cifar_sample(net, data, "streaming")) return;
  const std::string d = test::temp_dir("img-stream");
  python_refs("cifar " + test::shared_dir() + "/data/cifar10-sample/train_2000.bin " + d + "/f 150");
  ImageTransform t;
  t.input = net.input;
  ImageList list = list_images(d + "/f", net.classes, {});
  REQUIRE(list.paths.size() == 150);
  auto src = image_source(list, t, 2, "test folder");
  auto ex = make_cpu_executor(net);
  RunOptions ro;
  ro.threads = 1;
  std::vector<int64_t> firsts;
  std::vector<int32_t> labels_seen;
  StreamStats st;
  RunResult streamed = run_source(
      *ex, *src, ro, true, 16,
      [&](const Dataset& b, int64_t first, const RunResult& r) {
        firsts.push_back(first);
        CHECK(b.count == r.images);
        CHECK(r.probs.size() == static_cast<size_t>(r.images * 10));  // values for the block's scoring
        labels_seen.insert(labels_seen.end(), b.labels.begin(), b.labels.end());
      },
      &st);
  CHECK(st.blocks == 10);
  CHECK(firsts.front() == 0);
  CHECK(firsts.back() == 144);
  CHECK(streamed.probs.empty());  // not kept: want_probs was not asked
  CHECK(labels_seen == list.labels);
  // The same images from memory, by record index (the file name).
  Dataset whole;
  src->read(0, 150, whole);
  RunResult once = ex->run(whole, ro);
  CHECK(streamed.predictions == once.predictions);
  CHECK(streamed.correct == once.correct);
  int64_t same_as_binary = 0;
  RunResult bin = ex->run(data, ro);
  for (size_t i = 0; i < 150; ++i) {
    const int64_t rec = std::stoll(fs::path(list.paths[i]).stem().string());
    same_as_binary += once.predictions[i] == bin.predictions[static_cast<size_t>(rec)];
  }
  CHECK(same_as_binary == 150);
}

TEST_CASE("images: flat folders and list files are unlabelled; top-k and the predictions file") {
  Network net;
  Dataset data;
  if (!test::load_cifar_sample(net, data, "unlabelled folders")) return;
  const std::string d = test::temp_dir("img-flat");
  python_refs("cifar " + test::shared_dir() + "/data/cifar10-sample/train_2000.bin " + d + "/c 40");
  fs::create_directories(d + "/flat");
  std::string list;
  for (const auto& cls : fs::directory_iterator(d + "/c"))
    for (const auto& f : fs::directory_iterator(cls.path())) {
      fs::copy_file(f.path(), d + "/flat/" + f.path().filename().string());
      list += "flat/" + f.path().filename().string() + "\n";
    }
  test::write_file(d + "/flat/README.txt", "not an image");
  test::write_file(d + "/list.txt", "# the sample\n" + list);
  ImageList flat = list_images(d + "/flat", net.classes, {});
  CHECK(flat.layout == "flat folder");
  CHECK(flat.labels.empty());
  CHECK(flat.ignored == 1);
  REQUIRE(flat.paths.size() == 40);
  CHECK(fs::path(flat.paths[0]).filename() == "00000.png");  // sorted
  ImageList listed = list_images(d + "/list.txt", net.classes, {});
  CHECK(listed.layout == "list file");
  CHECK(listed.paths.size() == 40);
  ImageList one = list_images(flat.paths[0], net.classes, {});
  CHECK(one.layout == "one image");
  CHECK(one.paths == std::vector<std::string>{flat.paths[0]});

  const std::string cli = std::string(CNNRUN_SOURCE_DIR) + "/netdefs/cifar10.yaml --assets " +
                          test::shared_dir() + " --engine cpu --top-k 3 ";
  std::string o = run_cli(cli + "--data " + d + "/list.txt --predictions " + d + "/p.csv");
  CHECK(o.find("Net accuracy: none (the data set has no labels)") != std::string::npos);
  CHECK(o.find("(--data detected as images from a list file (.txt) of image paths)") != std::string::npos);
  std::string csv = test::read_file(d + "/p.csv");
  // One image given alone: detected by its bytes, the same prediction as in the list.
  o = run_cli(cli + "--data " + flat.paths[0] + " --predictions " + d + "/one.csv");
  CHECK(o.find("(--data detected as images from the png magic bytes (one image))") != std::string::npos);
  CHECK(csv_top1(d + "/one.csv", true).at(0) ==
        csv_top1(d + "/p.csv", true).at(0));  // by file name: 00000.png
  CHECK(
      csv.rfind(
          "index,path,label,top1,top1_name,top1_value,top2,top2_name,top2_value,top3,top3_name,top3_value\n",
          0) == 0);
  // Labelled: the top-3 count is at least the top-1 count, and equals a brute-force count.
  o = run_cli(cli + "--data " + d + "/c --json " + d + "/r.json --dump " + d + "/v.npy");
  auto j = nlohmann::json::parse(test::read_file(d + "/r.json"));
  std::vector<int64_t> dims;
  std::vector<float> v = read_npy(d + "/v.npy", &dims);
  REQUIRE(dims == std::vector<int64_t>{40, 10});
  ImageList lab = list_images(d + "/c", net.classes, {});
  int64_t top3 = 0;
  for (int64_t i = 0; i < 40; ++i) {
    const float* x = v.data() + i * 10;
    const int32_t l = lab.labels[static_cast<size_t>(i)];
    int above = 0;
    for (int c = 0; c < 10; ++c) above += x[c] > x[l];
    top3 += above < 3;
  }
  CHECK(j["top_k"]["k"] == 3);
  CHECK(j["top_k"]["correct"].get<int64_t>() == top3);
  CHECK(top3 >= j["correct"].get<int64_t>());
  CHECK(o.find("Top-3 accuracy: ") != std::string::npos);
}

TEST_CASE("scoring: top-k classes break ties to the lower class; top-k counts match them") {
  const float v[6] = {0.1f, 0.5f, 0.5f, 0.2f, 0.9f, 0.5f};
  CHECK(top_k_classes(v, 6, 3) == std::vector<int32_t>{4, 1, 2});
  CHECK(top_k_classes(v, 6, 10).size() == 6);
  Scorer s(6, 3);
  const int32_t labels[3] = {2, 5, 0}, pred[3] = {4, 4, 4};
  float vals[18];
  for (int i = 0; i < 3; ++i) std::copy(v, v + 6, vals + i * 6);
  s.add(labels, pred, vals, 3);
  CHECK(s.scores().topk == 1);  // class 2 is third; class 5 is fourth (tie to 1 and 2); class 0 last
  CHECK(s.scores().top1 == 0);
  CHECK(s.scores().confusion[2 * 6 + 4] == 1);
  CHECK(s.scores().per_class_images[5] == 1);
}

TEST_CASE("images: bad files and folders are one error naming the file (and the image index)") {
  Network net = parse_netdef_string(
      "input: {channels: 3, height: 8, width: 8}\nclasses: [a, b]\nlayers:\n  - {type: fc, outputs: 2}\n");
  const std::string d = test::temp_dir("img-bad");
  python_refs("decode " + d + "/src");
  const std::string png = test::read_file(d + "/src/rgb.png"), jpg = test::read_file(d + "/src/j420.jpg");
  ImageTransform t;
  t.input = net.input;
  t.resize = 8;
  t.crop_h = t.crop_w = 8;
  auto first_error = [&](const std::string& dir) {
    try {
      ImageList l = list_images(dir, net.classes, {});
      auto src = image_source(l, t, 2, dir);
      Dataset out;
      src->read(0, src->count(), out);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto folder = [&](const std::string& name, const std::string& bad_name, const std::string& bad_bytes) {
    const std::string root = d + "/" + name;
    fs::create_directories(root + "/a");
    fs::create_directories(root + "/b");
    for (int i = 0; i < 5; ++i) test::write_file(root + "/a/" + std::to_string(i) + ".png", png);
    test::write_file(root + "/b/0.jpg", jpg);
    if (!bad_name.empty()) test::write_file(root + "/" + bad_name, bad_bytes);
    return root;
  };
  CHECK(first_error(folder("ok", "", "")) == "no error");
  CHECK(first_error(folder("trunc", "a/3.png", png.substr(0, png.size() / 2)))
            .find("trunc/a/3.png: image 3: corrupt PNG") != std::string::npos);
  // Cut in the scan data (libjpeg's "warning") and in the headers.
  const std::string big = test::read_file(d + "/src/big420.jpg");
  CHECK(first_error(folder("truncj", "b/1.jpg", big.substr(0, big.size() * 2 / 3)))
            .find("truncj/b/1.jpg: image 6: corrupt JPEG: Premature end of JPEG file (truncated)") !=
        std::string::npos);
  CHECK(first_error(folder("truncjh", "b/1.jpg", jpg.substr(0, jpg.size() / 2)))
            .find("truncjh/b/1.jpg: image 6: corrupt JPEG: Invalid JPEG file structure") !=
        std::string::npos);
  // Bytes before the end marker: libjpeg warns, Pillow decodes it, and so does cnnrun, to the
  // same pixels as without them.
  {
    const std::vector<uint8_t> clean(jpg.begin(), jpg.end());
    std::string extra = jpg;
    extra.insert(extra.size() - 2, "\x12\x34", 2);
    const std::vector<uint8_t> dirty(extra.begin(), extra.end());
    CHECK(decode_image(dirty.data(), dirty.size()).px == decode_image(clean.data(), clean.size()).px);
  }
  CHECK(first_error(folder("text", "a/2.jpg", "hello, not an image"))
            .find("text/a/2.jpg: image 2: not a PNG or JPEG image") != std::string::npos);
  python_refs("png16 " + d + "/p16.png");
  const std::vector<uint8_t> p16 = file_bytes(d + "/p16.png");
  CHECK_THROWS_WITH_AS(decode_image(p16.data(), p16.size()),
                       has("16-bit PNG (5x4): only 8-bit images are read"), Error);
  fs::create_directories(d + "/empty/a");
  fs::create_directories(d + "/empty/b");
  test::write_file(d + "/empty/a/0.png", png);
  CHECK(first_error(d + "/empty").find("empty/b: empty class folder") != std::string::npos);
  fs::create_directories(d + "/loop/a");
  fs::create_directories(d + "/loop/b");
  test::write_file(d + "/loop/a/0.png", png);
  test::write_file(d + "/loop/b/0.png", png);
  fs::create_directory_symlink("..", d + "/loop/b/up");
  CHECK(first_error(d + "/loop").find("symbolic link loop") != std::string::npos);
  fs::create_directories(d + "/three/a");
  fs::create_directories(d + "/three/b");
  fs::create_directories(d + "/three/c");
  CHECK(first_error(d + "/three").find("3 class folders for the network's 2 classes") != std::string::npos);
  fs::create_directories(d + "/mixed/a");
  test::write_file(d + "/mixed/x.png", png);
  CHECK(first_error(d + "/mixed").find("holds both class folders and 1 image files") != std::string::npos);
  // Without resize, an image of another size is an error naming it.
  t.resize = 0;
  t.crop_h = t.crop_w = 0;
  CHECK(first_error(folder("size", "", "")).find("size/a/0.png: image 0: image is 37x23 (width x height)") !=
        std::string::npos);
  // A netdef may not reach outside the asset roots through a symbolic link in its folder.
  fs::create_directories(d + "/roots/net/imgs/a");
  fs::create_directories(d + "/roots/net/imgs/b");
  test::write_file(d + "/roots/net/imgs/a/0.png", png);
  fs::create_symlink(d + "/src/rgb.png", d + "/roots/net/imgs/b/0.png");
  CHECK_THROWS_WITH_AS(list_images(d + "/roots/net/imgs", net.classes, {d + "/roots/net"}),
                       has("leads outside the asset roots"), Error);
}

TEST_CASE("cli: --skip-bad leaves unreadable images out, counted; without it the first stops the run") {
  const std::string d = test::temp_dir("img-skip");
  python_refs("cifar " + test::shared_dir() + "/data/cifar10-sample/train_2000.bin " + d + "/c 30");
  // Image 0 of class 'bird' truncated, and a text file posing as a JPEG.
  std::string victim;
  for (const auto& f : fs::directory_iterator(d + "/c/bird"))
    if (victim.empty() || f.path().string() < victim) victim = f.path().string();
  const std::string png = test::read_file(victim);
  test::write_file(victim, png.substr(0, png.size() / 3));
  test::write_file(d + "/c/cat/zzz.jpg", "not a JPEG");
  const std::string cli = std::string(CNNRUN_SOURCE_DIR) + "/netdefs/cifar10.yaml --assets " +
                          test::shared_dir() + " --engine cpu --data " + d + "/c ";
  std::string o = run_cli(cli, 1);
  CHECK(o.find(victim + ": image ") != std::string::npos);
  CHECK(o.find("corrupt PNG") != std::string::npos);
  CHECK(std::count(o.begin(), o.end(), '\n') == 1);
  o = run_cli(cli + "--skip-bad --predictions " + d + "/p.csv --json " + d + "/r.json");
  CHECK(o.find("Skipped: 2 unreadable images (--skip-bad); the first: " + victim) != std::string::npos);
  auto j = nlohmann::json::parse(test::read_file(d + "/r.json"));
  CHECK(j["images"] == 29);  // 30 images + 1 non-image file, 2 left out
  CHECK(j["pipeline"]["skipped_images"] == 2);
  const std::string csv = test::read_file(d + "/p.csv");
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 30);  // header + 29 rows
  CHECK(csv.find(victim) == std::string::npos);
}

namespace {

// A PNG written by libpng itself: Adam7-interlaced when asked (Pillow cannot write those).
std::vector<uint8_t> write_png(int w, int h, int color_type, int depth, bool interlaced,
                               const std::vector<uint8_t>& px, int channels) {
  std::vector<uint8_t> out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  REQUIRE((png && info));
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep data, png_size_t n) {
        auto* v = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(p));
        v->insert(v->end(), data, data + n);
      },
      nullptr);
  png_set_IHDR(png, info, static_cast<png_uint_32>(w), static_cast<png_uint_32>(h), depth, color_type,
               interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  std::vector<png_bytep> rows(static_cast<size_t>(h));
  for (int y = 0; y < h; ++y)
    rows[static_cast<size_t>(y)] = const_cast<png_bytep>(px.data()) + static_cast<size_t>(y) * w * channels;
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

}  // namespace

TEST_CASE("images: Adam7-interlaced PNGs (RGB, RGBA, grey) decode to their pixels") {
  const int w = 13, h = 11;
  for (int channels : {3, 4, 1}) {
    std::vector<uint8_t> px(static_cast<size_t>(w * h * channels));
    for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>((i * 37 + i / 7) & 255);
    const int type = channels == 3   ? PNG_COLOR_TYPE_RGB
                     : channels == 4 ? PNG_COLOR_TYPE_RGBA
                                     : PNG_COLOR_TYPE_GRAY;
    for (bool interlaced : {false, true}) {
      std::vector<uint8_t> file = write_png(w, h, type, 8, interlaced, px, channels);
      Image img = decode_image(file.data(), file.size());
      INFO("channels " << channels << " interlaced " << interlaced);
      REQUIRE(img.w == w);
      REQUIRE(img.h == h);
      const int keep = channels == 4 ? 3 : channels;
      REQUIRE(img.c == keep);
      int64_t bad = 0;
      for (int i = 0; i < w * h; ++i)
        for (int c = 0; c < keep; ++c)
          bad += img.px[static_cast<size_t>(i * keep + c)] != px[static_cast<size_t>(i * channels + c)];
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("gpu: an image folder streamed in blocks, labelled and not, gives the CPU reference's predictions" *
          doctest::skip(!test::gpu_present())) {
  Network net;
  Dataset data;
  if (!test::load_cifar_sample(net, data, "GPU streaming")) return;
  const std::string d = test::temp_dir("img-gpu");
  python_refs("cifar " + test::shared_dir() + "/data/cifar10-sample/train_2000.bin " + d + "/f 700");
  ImageTransform t;
  t.input = net.input;
  ImageList list = list_images(d + "/f", net.classes, {});
  auto src = image_source(list, t, 4, "test folder");
  Dataset whole;
  src->read(0, src->count(), whole);
  auto cpu = make_cpu_executor(net);
  RunOptions ro;
  RunResult want = cpu->run(whole, ro);
  auto gpu = make_gpu_executor(net);
  StreamStats st;
  // Blocks of 96 (the last 28): later blocks skip the warm-up, the last one warms up again.
  RunResult got = run_source(*gpu, *src, ro, true, 96, nullptr, &st);
  CHECK(st.blocks == 8);
  CHECK(got.predictions == want.predictions);
  CHECK(got.correct == want.correct);
  // Unlabelled: the GPU counts nothing correct, predicts the same.
  Dataset unl = whole;
  unl.labels.clear();
  RunResult u = gpu->run(unl, ro);
  CHECK(u.correct == 0);
  CHECK(u.predictions == want.predictions);
}

TEST_CASE("images: a PNG that claims more pixels than Pillow's decompression-bomb limit is refused unread") {
  // Signature, an IHDR chunk of 20000 x 10000 grey pixels and an empty IDAT: the header is all
  // that is read.
  auto be = [](uint32_t v) {
    std::string s(4, '\0');
    for (int i = 0; i < 4; ++i) s[static_cast<size_t>(i)] = static_cast<char>((v >> (24 - 8 * i)) & 255);
    return s;
  };
  std::string ihdr = "IHDR" + be(20000) + be(10000) + std::string("\x08\x00\x00\x00\x00", 5);
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(ihdr.data()), static_cast<uInt>(ihdr.size()));
  const uLong idat_crc = crc32(0, reinterpret_cast<const Bytef*>("IDAT"), 4);
  const std::string file = std::string("\x89PNG\r\n\x1a\n", 8) + be(13) + ihdr +
                           be(static_cast<uint32_t>(crc)) + be(0) + "IDAT" +
                           be(static_cast<uint32_t>(idat_crc));
  const std::vector<uint8_t> bytes(file.begin(), file.end());
  CHECK_THROWS_WITH_AS(decode_image(bytes.data(), bytes.size()),
                       has("image 20000x10000 = 200000000 pixels is over the limit of 178956970"), Error);
}

TEST_CASE("images: a JPEG whose frame needs more coded bytes than the file has is refused before decoding") {
  // 341 bytes announcing thousands of pixels a side (the input fuzz_image's 256 MB allocation
  // limit caught): every 8x8 block of a Huffman-coded JPEG costs at least one bit, so it cannot
  // hold them, and nothing of that size is allocated.
  const std::string bytes =
      test::read_file(std::string(CNNRUN_SOURCE_DIR) + "/tests/fuzz/seeds/image/huge_frame_tiny_file.jpg");
  REQUIRE(bytes.size() == 341);
  const auto* d = reinterpret_cast<const uint8_t*>(bytes.data());
  CHECK_THROWS_WITH_AS(decode_image(d, bytes.size()),
                       doctest::Contains("bytes of coded data, the file has 341"), Error);
  // An arithmetic-coded frame has no such bound (a block may cost a fraction of a bit): 262
  // bytes announcing 2316 x 56576 pixels (fuzz_image's 393 MB allocation) are held to Pillow's
  // warning limit instead.
  const std::string arith = test::read_file(std::string(CNNRUN_SOURCE_DIR) +
                                            "/tests/fuzz/seeds/image/huge_arithmetic_frame_tiny_file.jpg");
  REQUIRE(arith.size() == 262);
  CHECK_THROWS_WITH_AS(
      decode_image(reinterpret_cast<const uint8_t*>(arith.data()), arith.size()),
      doctest::Contains("arithmetic-coded JPEG 2316x56576 = 131030016 pixels is over the limit "
                        "of 89478485"),
      Error);
  // The same frame behind an APP0 segment of length 0, which libjpeg reads past (it skips the
  // length and looks for the next marker) and the walk once stopped at, giving no bound at all
  // (fuzz_image again, 248 bytes).
  const std::string hidden = test::read_file(
      std::string(CNNRUN_SOURCE_DIR) + "/tests/fuzz/seeds/image/zero_length_app0_hides_arithmetic_frame.jpg");
  REQUIRE(hidden.size() == 248);
  CHECK_THROWS_WITH_AS(
      decode_image(reinterpret_cast<const uint8_t*>(hidden.data()), hidden.size()),
      doctest::Contains("arithmetic-coded JPEG 2316x56576 = 131030016 pixels is over the limit of 89478485"),
      Error);
  // The seeds that are real JPEGs still decode.
  for (const char* name : {"baseline.jpg", "grey.jpg", "progressive.jpg"}) {
    const std::string ok =
        test::read_file(std::string(CNNRUN_SOURCE_DIR) + "/tests/fuzz/seeds/image/" + name);
    CHECK(decode_image(reinterpret_cast<const uint8_t*>(ok.data()), ok.size()).w >= 1);
  }
}
