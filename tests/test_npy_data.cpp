// .npy data sets, class lists of any size and unlabelled data: arrays written byte by byte here
// (every layout and dtype the loader takes, and every malformation it promises to name), and the
// CIFAR-10 sample written by NumPy through the cnnrun binary, which must give exactly the binary
// file's predictions.
#include <filesystem>

#include "engine/executor.h"
#include "engine/io/assets.h"
#include "engine/io/dataset.h"
#include "engine/io/npy.h"
#include "engine/network.h"
#include "reference/cpu_executor.h"
#include "tests/test_util.h"

using namespace cnnrun;

namespace {

doctest::Contains has(const std::string& s) { return doctest::Contains(s.c_str()); }

// A .npy file (format 1.0) with the given descr and shape around `data`.
std::string npy(const std::string& descr, const std::vector<int64_t>& dims, const std::string& data,
                const std::string& order = "False") {
  std::string shape = "(";
  for (size_t i = 0; i < dims.size(); ++i)
    shape += std::to_string(dims[i]) + (dims.size() == 1 ? "," : i + 1 < dims.size() ? ", " : "");
  shape += ")";
  std::string h = "{'descr': '" + descr + "', 'fortran_order': " + order + ", 'shape': " + shape + ", }";
  h += std::string((64 - (10 + h.size() + 1) % 64) % 64, ' ') + "\n";
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(h.size() & 0xff);
  out += static_cast<char>(h.size() >> 8);
  return out + h + data;
}

template <class T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

uint8_t pix(int64_t i, int64_t c, int64_t y, int64_t x) {
  return static_cast<uint8_t>((i * 29 + c * 7 + y * 5 + x * 3) & 255);
}

// n images of shape c x h x w, in NCHW or NHWC order.
std::string images(int64_t n, int64_t c, int64_t h, int64_t w, bool channels_last) {
  std::string s;
  for (int64_t i = 0; i < n; ++i)
    if (channels_last) {
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x)
          for (int64_t k = 0; k < c; ++k) s.push_back(static_cast<char>(pix(i, k, y, x)));
    } else {
      for (int64_t k = 0; k < c; ++k)
        for (int64_t y = 0; y < h; ++y)
          for (int64_t x = 0; x < w; ++x) s.push_back(static_cast<char>(pix(i, k, y, x)));
    }
  return s;
}

int64_t pixel_errors(const Dataset& ds, int64_t n, int64_t c, int64_t h, int64_t w) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) bad += ds.image(i)[(k * h + y) * w + x] != pix(i, k, y, x);
  return bad;
}

}  // namespace

TEST_CASE("npy: uint8 NCHW, NHWC and NHW images and integer labels of every width load exactly") {
  std::string d = test::temp_dir("npy-load");
  test::write_file(d + "/chw.npy", npy("|u1", {4, 3, 5, 6}, images(4, 3, 5, 6, false)));
  test::write_file(d + "/hwc.npy", npy("|u1", {4, 5, 6, 3}, images(4, 3, 5, 6, true)));
  test::write_file(d + "/hw.npy", npy("|u1", {4, 5, 6}, images(4, 1, 5, 6, false)));
  test::write_file(d + "/l8.npy", npy("<i8", {4}, raw(std::vector<int64_t>{0, 299, 7, 3})));
  test::write_file(d + "/l4.npy", npy("<i4", {4}, raw(std::vector<int32_t>{0, 299, 7, 3})));
  test::write_file(d + "/l2.npy", npy("<u2", {4}, raw(std::vector<uint16_t>{0, 299, 7, 3})));
  const std::vector<int32_t> want{0, 299, 7, 3};

  Dataset a = load_npy(d + "/chw.npy", d + "/l8.npy", {3, 5, 6}, 300);
  CHECK(a.count == 4);
  CHECK(a.shape == Shape{3, 5, 6});
  CHECK(pixel_errors(a, 4, 3, 5, 6) == 0);
  CHECK(a.labels == want);
  CHECK_FALSE(a.preprocessed());
  Dataset b = load_npy(d + "/hwc.npy", d + "/l4.npy", {3, 5, 6}, 300);
  CHECK(pixel_errors(b, 4, 3, 5, 6) == 0);  // transposed to CHW
  CHECK(b.labels == want);
  CHECK(b.description.find("channels last") != std::string::npos);
  Dataset c = load_npy(d + "/hw.npy", d + "/l2.npy", {1, 5, 6}, 300);
  CHECK(pixel_errors(c, 4, 1, 5, 6) == 0);
  CHECK(c.labels == want);
  Dataset u = load_npy(d + "/chw.npy", "", {3, 5, 6}, 300);
  CHECK_FALSE(u.labelled());
  CHECK(u.description.find("no labels") != std::string::npos);
}

TEST_CASE("npy: float32 NCHW images are taken as preprocessed values") {
  std::string d = test::temp_dir("npy-float");
  std::vector<float> v = test::random_floats(2 * 3 * 4 * 4, 5, -3.f, 3.f);
  test::write_file(d + "/f.npy", npy("<f4", {2, 3, 4, 4}, raw(v)));
  Dataset ds = load_npy(d + "/f.npy", "", {3, 4, 4}, 10);
  CHECK(ds.preprocessed());
  CHECK(ds.pixels.empty());
  CHECK(ds.values == v);
  // Channels last is ambiguous for preprocessed values: refused, naming the layout wanted.
  test::write_file(d + "/fhwc.npy", npy("<f4", {2, 4, 4, 3}, raw(v)));
  CHECK_THROWS_WITH_AS(load_npy(d + "/fhwc.npy", "", {3, 4, 4}, 10), has("must be (N, 3, 4, 4)"), Error);
  std::vector<float> nan = v;
  nan[40] = std::nanf("");
  test::write_file(d + "/nan.npy", npy("<f4", {2, 3, 4, 4}, raw(nan)));
  CHECK_THROWS_WITH_AS(load_npy(d + "/nan.npy", "", {3, 4, 4}, 10), has("value 40 of image 0 is not finite"),
                       Error);
}

TEST_CASE("npy: wrong dtype, byte order, shape, size and labels are errors naming the file") {
  std::string d = test::temp_dir("npy-bad");
  const Shape in{3, 5, 6};
  auto err = [&](const std::string& name, const std::string& bytes, const std::string& labels_name = "",
                 const std::string& label_bytes = "") {
    test::write_file(d + "/" + name, bytes);
    if (!labels_name.empty()) test::write_file(d + "/" + labels_name, label_bytes);
    try {
      load_npy(d + "/" + name, labels_name.empty() ? "" : d + "/" + labels_name, in, 10);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string good = npy("|u1", {2, 3, 5, 6}, images(2, 3, 5, 6, false));
  CHECK(err("f8.npy", npy("<f8", {2, 3, 5, 6}, std::string(2 * 90 * 8, '\0')))
            .find("f8.npy: byte 10: images of dtype '<f8'; expected uint8") != std::string::npos);
  CHECK(err("be.npy", npy(">f4", {2, 3, 5, 6}, std::string(2 * 90 * 4, '\0'))).find("big-endian") !=
        std::string::npos);
  CHECK(err("shape.npy", npy("|u1", {2, 3, 6, 5}, images(2, 3, 6, 5, false)))
            .find("images of shape [2, 3, 6, 5] do not fit the network input 3x5x6; expected (N, 3, 5, 6) or "
                  "(N, 5, 6, 3)") != std::string::npos);
  CHECK(err("short.npy", good.substr(0, good.size() - 1)).find("does not match the shape") !=
        std::string::npos);
  CHECK(err("fortran.npy", npy("|u1", {2, 3, 5, 6}, images(2, 3, 5, 6, false), "True")).find("Fortran") !=
        std::string::npos);
  CHECK(err("magic.npy", "PK\x03\x04 not an array").find("not a .npy file") != std::string::npos);
  CHECK(err("key.npy", npy("|u1", {2, 3, 5, 6}, images(2, 3, 5, 6, false)).replace(12, 5, "dtype"))
            .find("unknown header key 'dtype'") != std::string::npos);
  CHECK(err("empty.npy", npy("|u1", {0, 3, 5, 6}, "")).find("holds no images") != std::string::npos);
  // Labels.
  CHECK(err("i1.npy", good, "few.npy", npy("<i8", {1}, raw(std::vector<int64_t>{1})))
            .find("few.npy holds 1 labels for 2 images") != std::string::npos);
  CHECK(err("i2.npy", good, "range.npy", npy("<i8", {2}, raw(std::vector<int64_t>{1, 10})))
            .find("range.npy: byte 136: label 10 of image 1 is not in 0..9 (10 classes)") !=
        std::string::npos);
  CHECK(err("i3.npy", good, "neg.npy", npy("<i4", {2}, raw(std::vector<int32_t>{-1, 0})))
            .find("label -1 of image 0 is not in 0..9") != std::string::npos);
  CHECK(err("i4.npy", good, "flt.npy", npy("<f4", {2}, raw(std::vector<float>{1, 0})))
            .find("labels of dtype '<f4'; expected an integer array") != std::string::npos);
  CHECK(err("i5.npy", good, "bel.npy", npy(">i8", {2}, std::string(16, '\0'))).find("big-endian") !=
        std::string::npos);
  CHECK(err("i6.npy", good, "2d.npy", npy("<i8", {2, 1}, std::string(16, '\0')))
            .find("expected one dimension") != std::string::npos);
}

TEST_CASE("classes: a list, a count or a file of names; more than 256 allowed") {
  const std::string body =
      "input: {channels: 1, height: 2, width: 2}\nlayers:\n  - {name: f, type: fc, outputs: 1000}\n";
  Network a = parse_netdef_string("classes: 1000\n" + body);
  REQUIRE(a.num_classes() == 1000);
  CHECK(a.classes[999] == "999");
  std::string d = test::temp_dir("classes");
  std::string names;
  for (int i = 0; i < 1000; ++i)
    names += "class " + std::to_string(i) + (i % 2 ? "\r\n" : "  \n") + (i == 5 ? "\n" : "");
  test::write_file(d + "/names.txt", names);
  test::write_file(d + "/net.yaml", "classes: names.txt\n" + body);
  Network b = parse_netdef_file(d + "/net.yaml");
  REQUIRE(b.num_classes() == 1000);
  CHECK(b.classes[0] == "class 0");
  CHECK(b.classes[7] == "class 7");
  auto error_of = [&](const std::string& text) {
    try {
      test::write_file(d + "/e.yaml", text);
      parse_netdef_file(d + "/e.yaml");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_of("classes: 999\n" + body).find("1000 values per image but 999 classes") != std::string::npos);
  CHECK(error_of("classes: 0\n" + body).find("e.yaml:1:10: key 'classes': a class count must be 1..") !=
        std::string::npos);
  CHECK(error_of("classes: missing.txt\n" + body).find("missing.txt") != std::string::npos);
  test::write_file(d + "/blank.txt", "\n  \n");
  CHECK(error_of("classes: blank.txt\n" + body).find("no class names") != std::string::npos);
  // Outside the netdef's directory and the asset roots: refused like every netdef path.
  CHECK(error_of("classes: /etc/passwd\n" + body).find("e.yaml:1:10") != std::string::npos);
}

TEST_CASE("unlabelled and preprocessed data: same predictions, no correct count") {
  Network net = parse_netdef_string(
      "input: {channels: 3, height: 5, width: 6}\npreprocess: {mean: [0.4, 0.5, 0.6], std: [0.2, 0.25, "
      "0.3]}\n"
      "classes: 300\nlayers:\n  - {name: c, type: conv, filters: 4, kernel: 3, pad: 1}\n"
      "  - {name: r, type: relu}\n  - {name: f, type: fc, outputs: 300}\n");
  for (auto& l : net.layers)
    for (const WeightSpec& ws : l->weight_specs(l->in_shapes)) {
      Tensor t(ws.dims);
      t.data = test::random_floats(t.data.size(), static_cast<uint32_t>(t.data.size()));
      l->weights[ws.name] = t;
    }
  std::string d = test::temp_dir("npy-run");
  test::write_file(d + "/x.npy", npy("|u1", {9, 5, 6, 3}, images(9, 3, 5, 6, true)));
  std::vector<int64_t> lab(9);
  for (int i = 0; i < 9; ++i) lab[static_cast<size_t>(i)] = (i * 37) % 300;
  test::write_file(d + "/y.npy", npy("<i8", {9}, raw(lab)));
  Dataset labelled = load_npy(d + "/x.npy", d + "/y.npy", net.input, 300);
  Dataset plain = load_npy(d + "/x.npy", "", net.input, 300);
  // The same images preprocessed by the definition and written as float32.
  std::vector<float> pre(static_cast<size_t>(9 * net.input.size()));
  preprocess_images(net, labelled.pixels.data(), 9, pre.data());
  test::write_file(d + "/f.npy", npy("<f4", {9, 3, 5, 6}, raw(pre)));
  Dataset floats = load_npy(d + "/f.npy", "", net.input, 300);

  auto ex = make_cpu_executor(net);
  RunOptions ro;
  ro.want_probs = true;
  ro.threads = 2;
  ro.block = 4;
  RunResult a = ex->run(labelled, ro), b = ex->run(plain, ro), c = ex->run(floats, ro);
  CHECK(b.predictions == a.predictions);
  CHECK(c.predictions == a.predictions);
  CHECK(c.probs == a.probs);  // preprocessing is the same arithmetic, so the outputs are bit-equal
  int64_t want = 0;
  for (int i = 0; i < 9; ++i)
    want += a.predictions[static_cast<size_t>(i)] == labelled.labels[static_cast<size_t>(i)];
  CHECK(a.correct == want);
  CHECK(b.correct == 0);
  // 300 classes: predictions above 255 survive (labels and predictions are not bytes).
  labelled.labels.assign(9, 0);
  for (int i = 0; i < 9; ++i) labelled.labels[static_cast<size_t>(i)] = a.predictions[static_cast<size_t>(i)];
  CHECK(ex->run(labelled, ro).correct == 9);
}

TEST_CASE("cli: the CIFAR-10 sample written by NumPy as .npy gives exactly the binary file's predictions") {
  const std::string sample = test::shared_dir() + "/data/cifar10-sample/train_2000.bin";
  REQUIRE(test::have_file(sample));
  std::string d = test::temp_dir("npy-cifar");
  std::string out;
  // Channels last with int64 labels, as numpy users hold CIFAR (torchvision's CIFAR10.data).
  const std::string py =
      "import numpy as np, sys\n"
      "r = np.fromfile(sys.argv[1], np.uint8).reshape(-1, 3073)\n"
      "np.save(sys.argv[2] + '/x.npy', np.ascontiguousarray(r[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, "
      "3, 1)))\n"
      "np.save(sys.argv[2] + '/y.npy', r[:, 0].astype(np.int64))\n"
      "np.save(sys.argv[2] + '/xchw.npy', r[:, 1:].reshape(-1, 3, 32, 32))\n"
      "np.save(sys.argv[2] + '/xf.npy', r[:, 1:].reshape(-1, 3, 32, 32).astype(np.float32) / np.float32(255) "
      "- "
      "np.float32(0.5))\n";
  test::write_file(d + "/w.py", py);
  REQUIRE(test::run_command(test::python() + " " + d + "/w.py " + sample + " " + d, &out) == 0);
  const std::string net = std::string(CNNRUN_SOURCE_DIR) + "/netdefs/cifar10.yaml --assets " +
                          test::shared_dir() + " --engine cpu ";
  auto cnnrun = [&](const std::string& args) {
    std::string o;
    int rc = test::run_command(std::string(CNNRUN_BINARY) + " " + net + args, &o);
    INFO(o);
    REQUIRE(rc == 0);
    return o;
  };
  std::string o = cnnrun("--data " + d + "/x.npy," + d + "/y.npy --batch 1200");
  CHECK(o.find("Net accuracy: 78.25 % (939/1200)") != std::string::npos);
  CHECK(o.find("(--data detected as npy from the .npy magic bytes)") != std::string::npos);
  o = cnnrun("--data " + d + "/x.npy," + d + "/y.npy --data-format npy --dump " + d + "/npy.npy");
  CHECK(o.find("Net accuracy: 78.40 % (1568/2000)") != std::string::npos);
  cnnrun("--dump " + d + "/bin.npy");
  CHECK(test::read_file(d + "/npy.npy") == test::read_file(d + "/bin.npy"));
  // Without labels: predictions, no accuracy.
  o = cnnrun("--data " + d + "/xchw.npy --dump " + d + "/unl.npy");
  CHECK(o.find("Net accuracy: none (the data set has no labels)") != std::string::npos);
  CHECK(test::read_file(d + "/unl.npy") == test::read_file(d + "/bin.npy"));
  o = cnnrun("--data " + d + "/xchw.npy --quiet");
  CHECK(o == "images 2000 (no labels: no accuracy)\n");
  // Preprocessed float32 values (byte/255 - 0.5 in float32, as the netdef's scale/shift): the
  // same accuracy, on whichever engine --engine auto picks (the GPU engine reads them too).
  std::string auto_out;
  REQUIRE(test::run_command(std::string(CNNRUN_BINARY) + " " + std::string(CNNRUN_SOURCE_DIR) +
                                "/netdefs/cifar10.yaml --assets " + test::shared_dir() +
                                " --batch 1200 --data " + d + "/xf.npy," + d + "/y.npy",
                            &auto_out) == 0);
  CHECK(auto_out.find("Net accuracy: 78.25 % (939/1200)") != std::string::npos);
}

TEST_CASE("npy: a range of images (uint8 NCHW and NHWC, float32) with its labels") {
  std::string d = test::temp_dir("npy-range");
  const Shape in{3, 4, 5};
  std::vector<int64_t> lab = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  test::write_file(d + "/l.npy", npy("<i8", {9}, raw(lab)));
  for (bool last : {false, true}) {
    CAPTURE(last);
    test::write_file(d + "/u.npy",
                     npy("|u1", last ? std::vector<int64_t>{9, 4, 5, 3} : std::vector<int64_t>{9, 3, 4, 5},
                         images(9, 3, 4, 5, last)));
    DataNeeds needs;
    needs.first = 4;
    needs.max_images = 3;
    Dataset ds = load_npy(d + "/u.npy", d + "/l.npy", in, 10, needs);
    REQUIRE(ds.count == 3);
    CHECK(ds.first == 4);
    CHECK(ds.in_files == 9);
    CHECK(ds.labels == std::vector<int32_t>{4, 5, 6});
    int64_t bad = 0;
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t y = 0; y < 4; ++y)
          for (int64_t x = 0; x < 5; ++x) bad += ds.image(i)[(c * 4 + y) * 5 + x] != pix(4 + i, c, y, x);
    CHECK(bad == 0);
    CHECK(ds.description.find("(images 4..6 of 9 read)") != std::string::npos);
  }
  std::vector<float> f(9 * 60);
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(i) * 0.5f;
  test::write_file(d + "/f.npy", npy("<f4", {9, 3, 4, 5}, raw(f)));
  DataNeeds needs;
  needs.first = 7;
  Dataset ds = load_npy(d + "/f.npy", "", in, 10, needs);
  REQUIRE(ds.count == 2);
  CHECK(ds.values.front() == f[7 * 60]);
  CHECK(ds.values.back() == f.back());
  needs.first = 9;
  CHECK_THROWS_WITH_AS(load_npy(d + "/f.npy", "", in, 10, needs),
                       has("holds 9 images; image 9 was asked for"), Error);
}
