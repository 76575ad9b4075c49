// IDX (MNIST / Fashion-MNIST) files, plain or gzip. The header's dimensions are untrusted: the
// buffer grows only as data actually arrives, and a header claiming more than the file could
// hold (or more than 16 GiB) is rejected before anything is allocated.
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "engine/core/error.h"
#include "engine/io/dataset.h"

namespace cnnrun {

namespace {

constexpr int64_t kMaxBytes = int64_t{1} << 34;
// deflate cannot compress better than about 1032:1; anything beyond that is a lying header.
constexpr int64_t kMaxDeflateRatio = 1032;

// Sequential reader over a plain or gzip file; offsets are in the (decompressed) IDX stream.
class IdxReader {
 public:
  explicit IdxReader(const std::string& path) : path_(path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0)
      fail_file(path, -1, std::string("cannot open: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail_file(path, -1, "not a regular file");
    file_size_ = static_cast<int64_t>(st.st_size);
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) fail_file(path, -1, std::string("cannot open: ") + std::strerror(errno));
    unsigned char m[2] = {0, 0};
    size_t n = std::fread(m, 1, 2, f);
    gzip_ = n == 2 && m[0] == 0x1f && m[1] == 0x8b;
    if (gzip_) {
      std::fclose(f);
      gz_ = gzopen(path.c_str(), "rb");
      if (!gz_) fail_file(path, -1, "cannot open as gzip");
      gzbuffer(gz_, 1 << 20);
    } else {
      std::rewind(f);
      plain_ = f;
    }
  }
  ~IdxReader() {
    if (gz_) gzclose(gz_);
    if (plain_) std::fclose(plain_);
  }
  IdxReader(const IdxReader&) = delete;
  IdxReader& operator=(const IdxReader&) = delete;

  // Reads up to n bytes; fewer only at the end of the data. Throws on a corrupt gzip stream.
  int64_t read(uint8_t* dst, int64_t n) {
    int64_t done = 0;
    while (done < n) {
      unsigned want = static_cast<unsigned>(std::min<int64_t>(n - done, INT_MAX / 2));
      int64_t got;
      if (gz_) {
        int r = gzread(gz_, dst + done, want);
        if (r < 0) {
          int errnum = 0;
          const char* m = gzerror(gz_, &errnum);
          std::string msg = m ? m : "";
          // zlib prefixes the path, which the message already starts with.
          if (msg.compare(0, path_.size() + 2, path_ + ": ") == 0) msg.erase(0, path_.size() + 2);
          fail_file(path_, pos_ + done, "corrupt gzip data: " + (msg.empty() ? "unknown error" : msg));
        }
        got = r;
      } else {
        got = static_cast<int64_t>(std::fread(dst + done, 1, want, plain_));
        if (got == 0 && std::ferror(plain_)) fail_file(path_, pos_ + done, "read error");
      }
      if (got == 0) break;
      done += got;
    }
    pos_ += done;
    return done;
  }

  // Most data bytes after the header that this file could hold.
  int64_t max_payload(int64_t header) const {
    if (!gzip_) return std::max<int64_t>(0, file_size_ - header);
    return std::min(kMaxBytes, checked_mul(file_size_, kMaxDeflateRatio, "IDX bound") + 4096);
  }
  bool gzip() const { return gzip_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int64_t file_size_ = 0;
  bool gzip_ = false;
  gzFile gz_ = nullptr;
  FILE* plain_ = nullptr;
  int64_t pos_ = 0;
};

std::string hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string where(const IdxReader& r) { return r.gzip() ? " (offset in the decompressed data)" : ""; }

// Reads the header and exactly the payload it announces, with its dimensions.
std::vector<uint8_t> read_idx(const std::string& path, uint32_t magic, int ndims, const char* kind,
                              std::vector<int64_t>& dims, bool& gzip) {
  IdxReader r(path);
  gzip = r.gzip();
  const int64_t header = 4 + 4 * static_cast<int64_t>(ndims);
  uint8_t h[4 + 4 * 4];  // magic and up to 4 dimensions
  int64_t got = r.read(h, 4);
  // The magic first: a labels file given as images is "wrong magic", not "short header".
  if (got == 4 && be32(h) != magic)
    fail_file(path, 0,
              std::string("expected IDX magic ") + hex32(magic) + " (" + kind + "), found " + hex32(be32(h)) +
                  where(r));
  if (got == 4) got += r.read(h + 4, header - 4);
  if (got < header)
    fail_file(path, got,
              "truncated IDX header: expected " + std::to_string(header) + " bytes, found " +
                  std::to_string(got) + where(r));
  dims.clear();
  int64_t bytes = 1;
  std::string dstr;
  for (int i = 0; i < ndims; ++i) {
    int64_t d = be32(h + 4 + 4 * i);
    if (d == 0)
      fail_file(path, 4 + 4 * i, std::string("dimension ") + std::to_string(i) + " is 0" + where(r));
    dims.push_back(d);
    dstr += (i ? " x " : "") + std::to_string(d);
    bytes = d > kMaxBytes / bytes ? kMaxBytes + 1 : bytes * d;  // saturates instead of overflowing
  }
  if (bytes > kMaxBytes || bytes > r.max_payload(header)) {
    if (!r.gzip() && bytes <= kMaxBytes)
      fail_file(path, header + r.max_payload(header),
                "truncated: the header announces " + dstr + " = " + std::to_string(bytes) +
                    " data bytes, the file holds only " + std::to_string(r.max_payload(header)));
    fail_file(path, 4,
              "header announces " + dstr + (bytes > kMaxBytes ? " > 16 GiB" : " = " + std::to_string(bytes)) +
                  " data bytes, more than this file can hold" + where(r));
  }
  std::vector<uint8_t> data;
  constexpr int64_t kStep = int64_t{64} << 20;
  int64_t have = 0;
  while (have < bytes) {
    int64_t n = std::min(kStep, bytes - have);
    data.resize(static_cast<size_t>(have + n));
    int64_t k = r.read(data.data() + have, n);
    have += k;
    if (k < n)
      fail_file(path, header + have,
                "truncated: the header announces " + dstr + " = " + std::to_string(bytes) +
                    " data bytes, the file ends after " + std::to_string(have) + where(r));
  }
  uint8_t extra;
  if (r.read(&extra, 1) != 0)
    fail_file(
        path, header + bytes,
        "trailing bytes after the " + std::to_string(bytes) + " data bytes the header announces" + where(r));
  return data;
}

}  // namespace

Dataset load_idx(const std::string& images, const std::string& labels, int num_classes, const Shape* input) {
  std::vector<int64_t> idims, ldims;
  bool igz = false, lgz = false;
  // 4 dimensions (magic 0x00000804) are colour images, N x H x W x C or N x C x H x W.
  bool four = false;
  {
    IdxReader r(images);
    uint8_t m[4];
    four = r.read(m, 4) == 4 && be32(m) == 0x00000804;
  }
  std::vector<uint8_t> pixels =
      four ? read_idx(images, 0x00000804, 4, "unsigned-byte images, 4 dimensions", idims, igz)
           : read_idx(images, 0x00000803, 3, "unsigned-byte images, 3 dimensions", idims, igz);
  std::vector<uint8_t> lab = read_idx(labels, 0x00000801, 1, "unsigned-byte labels, 1 dimension", ldims, lgz);
  if (idims[0] != ldims[0])
    throw Error(images + " holds " + std::to_string(idims[0]) + " images but " + labels + " holds " +
                std::to_string(ldims[0]) + " labels");
  for (size_t i = 0; i < lab.size(); ++i)
    if (lab[i] >= num_classes)
      fail_file(labels, 8 + static_cast<int64_t>(i),
                "label " + std::to_string(lab[i]) + " of image " + std::to_string(i) + " is not below the " +
                    std::to_string(num_classes) + " classes" +
                    (lgz ? " (offset in the decompressed data)" : ""));
  Dataset ds;
  ds.count = idims[0];
  ds.shape = {1, idims[1], idims[2]};
  ds.pixels = std::move(pixels);
  if (four) {
    const Shape chw{idims[1], idims[2], idims[3]}, hwc{idims[3], idims[1], idims[2]};
    // The network's input decides; without one, a last dimension of 1 or 3 is channels.
    const bool last = input ? (*input == hwc && *input != chw) : (idims[3] == 1 || idims[3] == 3);
    ds.shape = last ? hwc : chw;
    if (last) {
      const int64_t plane = ds.shape.h * ds.shape.w, c = ds.shape.c, per = ds.shape.size();
      std::vector<uint8_t> hwc_img(static_cast<size_t>(per));
      for (int64_t i = 0; i < ds.count; ++i) {
        uint8_t* img = ds.pixels.data() + i * per;
        std::copy(img, img + per, hwc_img.begin());
        for (int64_t p = 0; p < plane; ++p)
          for (int64_t k = 0; k < c; ++k) img[k * plane + p] = hwc_img[static_cast<size_t>(p * c + k)];
      }
    }
  }
  ds.labels.assign(lab.begin(), lab.end());
  ds.description = "idx: " + images + ", " + std::to_string(ds.count) + " images " + ds.shape.str();
  return ds;
}

}  // namespace cnnrun
