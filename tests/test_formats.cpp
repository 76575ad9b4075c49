// CIFAR-100 records, colour (4-dimensional) IDX, and what --data's format is detected as.
#include <filesystem>

#include "engine/io/assets.h"
#include "engine/io/dataset.h"
#include "engine/network.h"
#include "tests/test_util.h"

using namespace cnnrun;

namespace {

doctest::Contains has(const std::string& s) { return doctest::Contains(s.c_str()); }

uint8_t pix(int64_t i, int64_t j) { return static_cast<uint8_t>((i * 13 + j * 5 + (j >> 7)) & 255); }

// n CIFAR-100 records: coarse label i % 20, fine label (i * 7) % 100.
std::string cifar100_records(int64_t n) {
  std::string s;
  for (int64_t i = 0; i < n; ++i) {
    s.push_back(static_cast<char>(i % 20));
    s.push_back(static_cast<char>((i * 7) % 100));
    for (int64_t j = 0; j < 3072; ++j) s.push_back(static_cast<char>(pix(i, j)));
  }
  return s;
}

std::string be32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[static_cast<size_t>(i)] = static_cast<char>((v >> (24 - 8 * i)) & 255);
  return s;
}

std::string net_text(int classes, int c, int h, int w, const std::string& data) {
  return "input: {channels: " + std::to_string(c) + ", height: " + std::to_string(h) +
         ", width: " + std::to_string(w) + "}\nclasses: " + std::to_string(classes) + "\n" + data +
         "layers:\n  - {type: fc, outputs: " + std::to_string(classes) + "}\n";
}

}  // namespace

TEST_CASE("cifar100: fine and coarse labels, pixels byte-exact, directory with the official names") {
  std::string d = test::temp_dir("cifar100");
  test::write_file(d + "/train.bin", cifar100_records(1100));
  Dataset fine = load_cifar100({d + "/train.bin"}, "train", "fine", 100);
  Dataset coarse = load_cifar100({d}, "train", "coarse", 20);
  REQUIRE(fine.count == 1100);
  REQUIRE(coarse.count == 1100);
  int64_t bad = 0;
  for (int64_t i = 0; i < 1100; ++i) {
    bad += fine.labels[static_cast<size_t>(i)] != (i * 7) % 100;
    bad += coarse.labels[static_cast<size_t>(i)] != i % 20;
    for (int64_t j = 0; j < 3072; j += 7) bad += fine.image(i)[j] != pix(i, j);
  }
  CHECK(bad == 0);
  CHECK(fine.description.find("fine labels") != std::string::npos);
  CHECK_THROWS_WITH_AS(load_cifar100({d + "/train.bin"}, "train", "fine", 20),
                       has("fine label 21 of record 3 is not below the 20 classes (a 20-class network wants "
                           "labels: coarse)"),
                       Error);
  test::write_file(d + "/c10.bin", std::string(3073 * 2, '\1'));
  CHECK_THROWS_WITH_AS(
      load_cifar100({d + "/c10.bin"}, "train", "fine", 100),
      has("CIFAR-100 records are 3074 bytes (its size fits CIFAR-10 records: use data format "
          "cifar10)"),
      Error);
  CHECK_THROWS_WITH_AS(load_cifar100({d}, "test", "fine", 100),
                       has("lacks the official CIFAR-100 file test.bin"), Error);
  // Through the netdef, and --data detected by its record size.
  test::write_file(d + "/net.yaml",
                   net_text(20, 3, 32, 32, "data: {format: cifar100, path: train.bin, labels: coarse}\n"));
  Network net = parse_netdef_file(d + "/net.yaml");
  AssetResolver assets(d, {});
  CHECK(load_dataset(net, assets, "").labels[21] == 1);
  test::write_file(d + "/other.bin", cifar100_records(3));
  Dataset det = load_dataset(net, assets, d + "/other.bin");
  CHECK(det.labels == std::vector<int32_t>{0, 1, 2});
  CHECK(det.description.find(
            "(--data detected as cifar100 from a whole number of 3074-byte CIFAR-100 records)") !=
        std::string::npos);
}

TEST_CASE("idx: 4-dimensional colour images, channels last or first as the input decides") {
  std::string d = test::temp_dir("idx4");
  // 2 images 4 (h) x 5 (w) x 3 (c), value = 100*i + 10*c + (y*5+x) % 10 at (y, x, c).
  std::string hwc = be32(0x804) + be32(2) + be32(4) + be32(5) + be32(3);
  for (int i = 0; i < 2; ++i)
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 5; ++x)
        for (int c = 0; c < 3; ++c) hwc.push_back(static_cast<char>(100 * i + 10 * c + (y * 5 + x) % 10));
  test::write_file(d + "/rgb-images-idx3-ubyte", hwc);
  test::write_file(d + "/rgb-labels-idx1-ubyte", be32(0x801) + be32(2) + std::string("\x01\x00", 2));
  const Shape in{3, 4, 5};
  Dataset ds = load_idx(d + "/rgb-images-idx3-ubyte", d + "/rgb-labels-idx1-ubyte", 2, &in);
  REQUIRE(ds.shape == in);
  int64_t bad = 0;
  for (int i = 0; i < 2; ++i)
    for (int c = 0; c < 3; ++c)
      for (int p = 0; p < 20; ++p) bad += ds.image(i)[c * 20 + p] != 100 * i + 10 * c + p % 10;
  CHECK(bad == 0);
  CHECK(ds.labels == std::vector<int32_t>{1, 0});
  // The same bytes read as channels first when the network's input is 4 x 5 x 3.
  const Shape first{4, 5, 3};
  Dataset f = load_idx(d + "/rgb-images-idx3-ubyte", d + "/rgb-labels-idx1-ubyte", 2, &first);
  CHECK(f.shape == first);
  CHECK(std::equal(f.pixels.begin(), f.pixels.end(), hwc.begin() + 20,
                   [](uint8_t a, char b) { return a == static_cast<uint8_t>(b); }));
}

TEST_CASE("data: --data's format is detected and said, or given with --data-format") {
  std::string d = test::temp_dir("detect");
  test::write_file(d + "/net.yaml", net_text(10, 3, 32, 32, ""));
  Network net = parse_netdef_file(d + "/net.yaml");
  AssetResolver assets(d, {});
  std::string rec(3073, '\0');
  test::write_file(d + "/a.dat", rec + rec);
  CHECK(load_dataset(net, assets, d + "/a.dat")
            .description.find(
                "(--data detected as cifar10 from a whole number of 3073-byte CIFAR-10 records)") !=
        std::string::npos);
  CHECK(load_dataset(net, assets, d + "/a.dat", "cifar10").description.find("(--data)") != std::string::npos);
  CHECK_THROWS_WITH_AS(load_dataset(net, assets, d + "/a.dat", "npy"), has("not a .npy file"), Error);
  CHECK_THROWS_WITH_AS(load_dataset(net, assets, "", "npy"), has("--data-format needs --data"), Error);
  // Neither the file nor the netdef says: read as CIFAR-10, whose error tells what it is not, and
  // the description would have said so.
  test::write_file(d + "/b.dat", "just some text\n");
  CHECK_THROWS_WITH_AS(load_dataset(net, assets, d + "/b.dat"), has("(it starts like a text file)"), Error);
  // resize/crop belong to image files.
  test::write_file(d + "/r.yaml",
                   "input: {channels: 3, height: 32, width: 32}\npreprocess: {resize: 40, crop: 32}\n"
                   "classes: 10\ndata: {format: cifar10, path: a.dat}\nlayers:\n  - {type: fc, "
                   "outputs: 10}\n");
  Network r = parse_netdef_file(d + "/r.yaml");
  CHECK_THROWS_WITH_AS(load_dataset(r, assets, ""),
                       has("r.yaml:2:22: key 'preprocess': resize and crop apply to image files (data format "
                           "images); this data set is cifar10"),
                       Error);
  CHECK_THROWS_WITH_AS(
      parse_netdef_string("input: {channels: 3, height: 32, width: 32}\npreprocess: {crop: 30}\n"
                          "classes: 10\nlayers:\n  - {type: fc, outputs: 10}\n"),
      has("key 'preprocess.crop': the crop 30x30 must be the input's height x width 32x32"), Error);
}
