// Data set loaders: CIFAR-10 records and IDX files (plain and gzip) written byte by byte in
// the test, checked byte-exact, and every malformation the loaders promise to report.
#include <zlib.h>

#include <filesystem>

#include "engine/io/assets.h"
#include "engine/io/dataset.h"
#include "engine/network.h"
#include "tests/test_util.h"

using namespace cnnrun;

namespace {

// doctest::Contains takes a doctest::String, which std::string does not convert to.
doctest::Contains has(const std::string& s) { return doctest::Contains(s.c_str()); }

uint8_t pix(int64_t image, int64_t j) { return static_cast<uint8_t>((image * 31 + j * 7 + (j >> 8)) & 255); }

// CIFAR-10 records for images first..first+n-1 with label (image % 10).
std::string cifar_records(int64_t first, int64_t n) {
  std::string s;
  for (int64_t i = first; i < first + n; ++i) {
    s.push_back(static_cast<char>(i % 10));
    for (int64_t j = 0; j < 3072; ++j) s.push_back(static_cast<char>(pix(i, j)));
  }
  return s;
}

void check_cifar(const Dataset& ds, int64_t count) {
  REQUIRE(ds.count == count);
  CHECK(ds.shape == Shape{3, 32, 32});
  REQUIRE(ds.pixels.size() == static_cast<size_t>(count * 3072));
  REQUIRE(ds.labels.size() == static_cast<size_t>(count));
  int64_t bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (ds.labels[static_cast<size_t>(i)] != i % 10) ++bad;
    for (int64_t j = 0; j < 3072; ++j)
      if (ds.image(i)[j] != pix(i, j)) ++bad;
  }
  CHECK(bad == 0);
}

std::string be32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[static_cast<size_t>(i)] = static_cast<char>((v >> (24 - 8 * i)) & 255);
  return s;
}

std::string idx_images(uint32_t n, uint32_t h, uint32_t w) {
  std::string s = be32(0x803) + be32(n) + be32(h) + be32(w);
  for (uint32_t i = 0; i < n * h * w; ++i) s.push_back(static_cast<char>((i * 37 + 11) & 255));
  return s;
}

std::string idx_labels(uint32_t n, int classes) {
  std::string s = be32(0x801) + be32(n);
  for (uint32_t i = 0; i < n; ++i) s.push_back(static_cast<char>((i * 3) % static_cast<uint32_t>(classes)));
  return s;
}

void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

// dir/im and dir/lb as given, and gzip copies dir/im.gz and dir/lb.gz.
void write_idx_pair(const std::string& dir, const std::string& im, const std::string& lb) {
  test::write_file(dir + "/im", im);
  test::write_file(dir + "/lb", lb);
  write_gz(dir + "/im.gz", im);
  write_gz(dir + "/lb.gz", lb);
}

}  // namespace

TEST_CASE("cifar10: files load byte-exact, in order, across read chunks") {
  std::string d = test::temp_dir("cifar");
  // 1500 + 700 records: the first file spans more than one 1024-record read.
  test::write_file(d + "/a.bin", cifar_records(0, 1500));
  test::write_file(d + "/b.bin", cifar_records(1500, 700));
  Dataset ds = load_cifar10({d + "/a.bin", d + "/b.bin"}, "train", 10);
  check_cifar(ds, 2200);
  CHECK(ds.description == "cifar10: 2 files, 2200 images");
}

TEST_CASE("cifar10: a directory holds the official names") {
  std::string d = test::temp_dir("cifar-dir");
  for (int b = 1; b <= 5; ++b)
    test::write_file(d + "/data_batch_" + std::to_string(b) + ".bin", cifar_records(b - 1, 1));
  test::write_file(d + "/test_batch.bin", cifar_records(0, 3));
  test::write_file(d + "/zzz.bin", "junk that must not be read");
  check_cifar(load_cifar10({d}, "train", 10), 5);  // image i is data_batch_(i+1)'s record
  check_cifar(load_cifar10({d}, "test", 10), 3);

  std::string e = test::temp_dir("cifar-dir-missing");
  test::write_file(e + "/data_batch_1.bin", cifar_records(0, 1));
  test::write_file(e + "/data_batch_4.bin", cifar_records(0, 1));
  CHECK_THROWS_WITH_AS(load_cifar10({e}, "train", 10),
                       has("lacks the official CIFAR-10 train file(s) data_batch_2.bin, data_batch_3.bin, "
                           "data_batch_5.bin"),
                       Error);
  CHECK_THROWS_WITH_AS(load_cifar10({e}, "test", 10), has("test_batch.bin"), Error);
  CHECK_THROWS_WITH_AS(load_cifar10({e, e + "/data_batch_1.bin"}, "train", 10), has("is a directory"), Error);
}

TEST_CASE("cifar10: malformed files name the file and byte offset") {
  std::string d = test::temp_dir("cifar-bad");
  test::write_file(d + "/empty.bin", "");
  CHECK_THROWS_WITH_AS(load_cifar10({d + "/empty.bin"}, "train", 10), has(d + "/empty.bin: empty file"),
                       Error);

  test::write_file(d + "/partial.bin", cifar_records(0, 2) + std::string(100, 'x'));
  CHECK_THROWS_WITH_AS(load_cifar10({d + "/partial.bin"}, "train", 10),
                       has(d + "/partial.bin: byte 6146: partial record: 100 bytes"), Error);

  std::string rec = cifar_records(0, 3);
  rec[3073] = 10;  // record 1's label
  test::write_file(d + "/label.bin", rec);
  CHECK_THROWS_WITH_AS(load_cifar10({d + "/label.bin"}, "train", 10),
                       has(d + "/label.bin: byte 3073: label 10 of record 1"), Error);
  // The same file is fine with more classes.
  CHECK(load_cifar10({d + "/label.bin"}, "train", 11).labels[1] == 10);
  CHECK_THROWS_WITH_AS(load_cifar10({d + "/label.bin"}, "train", 2), has("byte 3073: label 10"), Error);

  CHECK_THROWS_WITH_AS(load_cifar10({d + "/nope.bin"}, "train", 10), has(d + "/nope.bin: cannot open"),
                       Error);
}

TEST_CASE("idx: plain and gzip images and labels load byte-exact") {
  std::string d = test::temp_dir("idx");
  const std::string im = idx_images(3, 4, 5), lb = idx_labels(3, 10);
  write_idx_pair(d, im, lb);
  for (const auto& suffix : {std::string(), std::string(".gz")}) {
    CAPTURE(suffix);
    Dataset ds = load_idx(d + "/im" + suffix, d + "/lb" + suffix, 10);
    REQUIRE(ds.count == 3);
    CHECK(ds.shape == Shape{1, 4, 5});
    REQUIRE(ds.pixels.size() == 60);
    for (size_t i = 0; i < 60; ++i) CHECK(ds.pixels[i] == static_cast<uint8_t>(im[16 + i]));
    CHECK(ds.labels == std::vector<int32_t>{0, 3, 6});
  }
  // Mixed: plain images, gzip labels.
  CHECK(load_idx(d + "/im", d + "/lb.gz", 10).labels[2] == 6);
}

TEST_CASE("idx: malformed files are errors naming file and offset") {
  std::string d = test::temp_dir("idx-bad");
  std::string im = idx_images(3, 4, 5), lb = idx_labels(3, 10);
  test::write_file(d + "/im", im);
  test::write_file(d + "/lb", lb);

  SUBCASE("wrong magic") {
    CHECK_THROWS_WITH_AS(load_idx(d + "/lb", d + "/lb", 10),
                         has(d + "/lb: byte 0: expected IDX magic 0x00000803 (unsigned-byte images, 3 "
                                 "dimensions), found 0x00000801"),
                         Error);
    CHECK_THROWS_WITH_AS(load_idx(d + "/im", d + "/im", 10),
                         has("expected IDX magic 0x00000801 (unsigned-byte labels, 1 dimension), found "
                             "0x00000803"),
                         Error);
  }
  SUBCASE("truncated plain") {
    test::write_file(d + "/t", im.substr(0, im.size() - 7));
    CHECK_THROWS_WITH_AS(load_idx(d + "/t", d + "/lb", 10),
                         has(d + "/t: byte 69: truncated: the header announces 3 x 4 x 5 = 60 data bytes, "
                                 "the file holds only 53"),
                         Error);
    test::write_file(d + "/h", im.substr(0, 10));
    CHECK_THROWS_WITH_AS(load_idx(d + "/h", d + "/lb", 10), has(d + "/h: byte 10: truncated IDX header"),
                         Error);
  }
  SUBCASE("truncated gzip") {
    write_gz(d + "/t.gz", im.substr(0, im.size() - 7));
    CHECK_THROWS_WITH_AS(load_idx(d + "/t.gz", d + "/lb", 10),
                         has(d + "/t.gz: byte 69: truncated: the header announces 3 x 4 x 5 = 60 data "
                                 "bytes, the file ends after 53 (offset in the decompressed data)"),
                         Error);
    // A gzip stream cut short: an error either way, never a silent short read.
    write_gz(d + "/full.gz", idx_images(50, 28, 28));
    std::string gz = test::read_file(d + "/full.gz");
    test::write_file(d + "/cut.gz", gz.substr(0, gz.size() / 2));
    CHECK_THROWS_AS(load_idx(d + "/cut.gz", d + "/lb", 10), Error);
  }
  SUBCASE("trailing garbage") {
    test::write_file(d + "/g", im + "xyz");
    CHECK_THROWS_WITH_AS(load_idx(d + "/g", d + "/lb", 10),
                         has(d + "/g: byte 76: trailing bytes after the 60 data bytes"), Error);
    write_gz(d + "/g.gz", lb + "x");
    CHECK_THROWS_WITH_AS(load_idx(d + "/im", d + "/g.gz", 10),
                         has(d + "/g.gz: byte 11: trailing bytes after the 3 data bytes"), Error);
  }
  SUBCASE("count mismatch") {
    test::write_file(d + "/lb2", idx_labels(2, 10));
    CHECK_THROWS_WITH_AS(load_idx(d + "/im", d + "/lb2", 10),
                         has(d + "/im holds 3 images but " + d + "/lb2 holds 2 labels"), Error);
  }
  SUBCASE("label out of range") {
    std::string bad = lb;
    bad[9] = 10;
    test::write_file(d + "/lb3", bad);
    CHECK_THROWS_WITH_AS(load_idx(d + "/im", d + "/lb3", 10),
                         has(d + "/lb3: byte 9: label 10 of image 1 is not below the 10 classes"), Error);
    CHECK_THROWS_WITH_AS(load_idx(d + "/im", d + "/lb", 5), has("byte 10: label 6 of image 2"), Error);
  }
  SUBCASE("huge header is refused before allocating") {
    test::write_file(d + "/big", be32(0x803) + be32(0xffffffffu) + be32(0xffff) + be32(0xffff) + "abc");
    CHECK_THROWS_WITH_AS(load_idx(d + "/big", d + "/lb", 10), has("more than this file can hold"), Error);
    // Under the 16 GiB cap, but far beyond what deflate can expand a 40-byte file to.
    write_gz(d + "/big.gz", be32(0x803) + be32(10000) + be32(1000) + be32(1000));
    CHECK_THROWS_WITH_AS(load_idx(d + "/big.gz", d + "/lb", 10), has("more than this file can hold"), Error);
    test::write_file(d + "/zero", be32(0x803) + be32(0) + be32(28) + be32(28));
    CHECK_THROWS_WITH_AS(load_idx(d + "/zero", d + "/lb", 10), has("byte 4: dimension 0 is 0"), Error);
  }
}

TEST_CASE("load_dataset: netdef paths, --data overrides and the shape check") {
  std::string d = test::temp_dir("load-dataset");
  test::write_file(d + "/d.bin", cifar_records(0, 4));
  const std::string layers = "layers:\n  - {name: fc, type: fc, outputs: 10}\n";
  const std::string classes = "classes: [a, b, c, d, e, f, g, h, i, j]\n";
  test::write_file(d + "/net.yaml", "input: {channels: 3, height: 32, width: 32}\n" + classes +
                                        "data: {format: cifar10, path: d.bin}\n" + layers);
  Network net = parse_netdef_file(d + "/net.yaml");
  AssetResolver assets(net.source_dir, {});
  check_cifar(load_dataset(net, assets, ""), 4);

  // --data is taken as given, even outside the asset roots.
  std::string other = test::temp_dir("load-dataset-other");
  test::write_file(other + "/x.bin", cifar_records(0, 2));
  check_cifar(load_dataset(net, assets, other + "/x.bin"), 2);

  // A netdef path escaping the roots is refused with the netdef location.
  test::write_file(d + "/esc.yaml", "input: {channels: 3, height: 32, width: 32}\n" + classes +
                                        "data: {format: cifar10, path: ../../etc/passwd}\n" + layers);
  Network esc = parse_netdef_file(d + "/esc.yaml");
  CHECK_THROWS_WITH_AS(load_dataset(esc, AssetResolver(esc.source_dir, {}), ""),
                       has(d + "/esc.yaml:3:7: data file '../../etc/passwd' resolves outside"), Error);

  // Shape check: MNIST-sized input against CIFAR images, and back.
  test::write_file(d + "/m.yaml",
                   "input: {channels: 1, height: 4, width: 5}\n" + classes +
                       "data: {format: idx, images: t-images-idx3-ubyte, labels: t-labels-idx1-ubyte}\n" +
                       layers);
  Network m = parse_netdef_file(d + "/m.yaml");
  test::write_file(d + "/c.yaml", "input: {channels: 1, height: 4, width: 5}\n" + classes +
                                      "data: {format: cifar10, path: d.bin}\n" + layers);
  Network c = parse_netdef_file(d + "/c.yaml");
  CHECK_THROWS_WITH_AS(load_dataset(c, AssetResolver(c.source_dir, {}), ""),
                       has(d + "/c.yaml:3:7: the data set (cifar10: " + d +
                           "/d.bin, 4 images) has images of 3x32x32 but the network input is 1x4x5"),
                       Error);
  test::write_file(other + "/s-images-idx3-ubyte", idx_images(2, 3, 3));
  test::write_file(other + "/s-labels-idx1-ubyte", idx_labels(2, 10));
  CHECK_THROWS_WITH_AS(
      load_dataset(m, AssetResolver(m.source_dir, {}), other + "/s-images-idx3-ubyte"),
      has("--data " + other + "/s-images-idx3-ubyte: the data set (idx: " + other +
          "/s-images-idx3-ubyte, 2 images 1x3x3) has images of 1x3x3 but the network input is 1x4x5"),
      Error);
  CHECK_THROWS_WITH_AS(load_dataset(m, AssetResolver(m.source_dir, {}), ""),
                       has("data images file 't-images-idx3-ubyte' not found"), Error);
  test::write_file(d + "/t-images-idx3-ubyte", idx_images(3, 4, 5));
  test::write_file(d + "/t-labels-idx1-ubyte", idx_labels(3, 10));
  CHECK(load_dataset(m, AssetResolver(m.source_dir, {}), "").count == 3);
  // --data with the labels found by the name swap, or both named.
  write_gz(other + "/u-images-idx3-ubyte.gz", idx_images(2, 4, 5));
  write_gz(other + "/u-labels-idx1-ubyte.gz", idx_labels(2, 10));
  Dataset u = load_dataset(m, AssetResolver(m.source_dir, {}), other + "/u-images-idx3-ubyte.gz");
  CHECK(u.count == 2);
  CHECK(u.labels == std::vector<int32_t>{0, 3});
  CHECK_THROWS_WITH_AS(load_dataset(m, AssetResolver(m.source_dir, {}),
                                    other + "/u-images-idx3-ubyte.gz," + d + "/t-labels-idx1-ubyte"),
                       has("holds 2 images but " + d + "/t-labels-idx1-ubyte holds 3 labels"), Error);
  CHECK_THROWS_WITH_AS(load_dataset(m, AssetResolver(m.source_dir, {}), other + "/u.gz"),
                       has("cannot find the labels file"), Error);
}

TEST_CASE("real data: the CIFAR-10 sample and Fashion-MNIST") {
  std::string train = test::shared_dir() + "/data/cifar10-sample/train_2000.bin";
  if (test::have_file(train)) {
    Dataset ds = load_cifar10({train}, "train", 10);
    std::string raw = test::read_file(train);
    REQUIRE(ds.count == 2000);
    CHECK(ds.labels[0] == static_cast<uint8_t>(raw[0]));
    CHECK(ds.image(0)[0] == static_cast<uint8_t>(raw[1]));
    CHECK(ds.labels[1999] == static_cast<uint8_t>(raw[1999 * 3073]));
    CHECK(ds.image(1999)[3071] == static_cast<uint8_t>(raw[2000 * 3073 - 1]));
  } else {
    MESSAGE("no CIFAR-10 sample at " << train << "; skipped");
  }
  const std::string fm = "/usr/share/datasets/fashion-mnist/";
  if (test::have_file(fm + "t10k-images-idx3-ubyte.gz")) {
    Dataset ds = load_idx(fm + "t10k-images-idx3-ubyte.gz", fm + "t10k-labels-idx1-ubyte.gz", 10);
    CHECK(ds.count == 10000);
    CHECK(ds.shape == Shape{1, 28, 28});
    int64_t per[10] = {};
    for (int32_t l : ds.labels) per[l]++;
    for (int64_t c : per) CHECK(c == 1000);  // the test split is balanced
  }
}

TEST_CASE("cifar10: a range of images reads only those, across files, and says which") {
  std::string d = test::temp_dir("cifar-range");
  test::write_file(d + "/a.bin", cifar_records(0, 1500));
  test::write_file(d + "/b.bin", cifar_records(1500, 700));
  const std::vector<std::string> files = {d + "/a.bin", d + "/b.bin"};
  for (auto [first, n] :
       std::vector<std::pair<int64_t, int64_t>>{{0, 10}, {1400, 300}, {1500, 700}, {2199, 0}}) {
    CAPTURE(first);
    DataNeeds needs;
    needs.first = first;
    needs.max_images = n;
    Dataset ds = load_cifar10(files, "train", 10, needs);
    const int64_t count = n ? n : 2200 - first;
    REQUIRE(ds.count == count);
    CHECK(ds.first == first);
    CHECK(ds.in_files == 2200);
    int64_t bad = 0;
    for (int64_t i = 0; i < count; ++i) {
      if (ds.labels[static_cast<size_t>(i)] != (first + i) % 10) ++bad;
      for (int64_t j = 0; j < 3072; ++j) bad += ds.image(i)[j] != pix(first + i, j);
    }
    CHECK(bad == 0);
    CHECK(ds.description == "cifar10: 2 files, 2200 images (" + range_str(first, count, 2200) + " read)");
  }
  DataNeeds past;
  past.first = 2200;
  CHECK_THROWS_WITH_AS(load_cifar10(files, "train", 10, past),
                       has("holds 2200 images; image 2200 was asked for"), Error);
  // A damaged record inside the range is reported at its own offset; one outside is not read.
  std::string recs = cifar_records(0, 30);
  recs[static_cast<size_t>(20 * 3073)] = 10;
  test::write_file(d + "/c.bin", recs);
  DataNeeds before;
  before.max_images = 20;
  CHECK(load_cifar10({d + "/c.bin"}, "train", 10, before).count == 20);
  DataNeeds inside;
  inside.first = 15;
  CHECK_THROWS_WITH_AS(load_cifar10({d + "/c.bin"}, "train", 10, inside),
                       has("byte " + std::to_string(20 * 3073) + ": label 10 of record 20"), Error);
}

TEST_CASE("idx: a range of images, plain and gzip, with the labels' matching range") {
  std::string d = test::temp_dir("idx-range");
  const std::string im = idx_images(7, 4, 5), lb = idx_labels(7, 10);
  write_idx_pair(d, im, lb);
  for (const auto& suffix : {std::string(), std::string(".gz")}) {
    CAPTURE(suffix);
    DataNeeds needs;
    needs.first = 2;
    needs.max_images = 3;
    Dataset ds = load_idx(d + "/im" + suffix, d + "/lb" + suffix, 10, nullptr, needs);
    REQUIRE(ds.count == 3);
    CHECK(ds.first == 2);
    CHECK(ds.in_files == 7);
    REQUIRE(ds.pixels.size() == 60);
    for (size_t i = 0; i < 60; ++i) CHECK(ds.pixels[i] == static_cast<uint8_t>(im[16 + 40 + i]));
    CHECK(ds.labels == std::vector<int32_t>{6, 9, 2});
    CHECK(ds.description == "idx: " + d + "/im" + suffix + ", 7 images 1x4x5 (images 2..4 of 7 read)");
    // To the end: the trailing-bytes check still applies.
    needs.max_images = 0;
    needs.first = 6;
    CHECK(load_idx(d + "/im" + suffix, d + "/lb" + suffix, 10, nullptr, needs).labels ==
          std::vector<int32_t>{8});
  }
  test::write_file(d + "/im-trail", im + "x");
  DataNeeds tail;
  tail.first = 5;
  CHECK_THROWS_WITH_AS(load_idx(d + "/im-trail", d + "/lb", 10, nullptr, tail), has("trailing bytes"), Error);
}
