// IDX (MNIST / Fashion-MNIST) files, plain or gzip. The header's dimensions are untrusted: the
// buffer grows only as data actually arrives, and a header claiming more than the file could
// hold (or more than 16 GiB) is rejected before anything is allocated.
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "engine/core/error.h"
#include "engine/core/memory.h"
#include "engine/io/dataset.h"
#include "engine/io/files.h"

namespace cnnrun {

namespace {

constexpr int64_t kMaxBytes = int64_t{1} << 34;
// deflate cannot compress better than about 1032:1; anything beyond that is a lying header.
constexpr int64_t kMaxDeflateRatio = 1032;

// Sequential reader over a plain or gzip file; offsets are in the (decompressed) IDX stream.
// gzip is inflated here rather than through gzread, which silently ignores bytes after the
// last gzip member: a file with such bytes is damaged (as a plain IDX file with trailing bytes
// is), and is refused. Concatenated gzip members are valid gzip and are read as one stream.
class IdxReader {
 public:
  explicit IdxReader(const std::string& path) : in_(path) {
    file_size_ = in_.size();
    unsigned char m[2] = {0, 0};
    const int64_t got = in_.read(m, 2);
    gzip_ = got == 2 && m[0] == 0x1f && m[1] == 0x8b;
    if (gzip_) {
      std::memcpy(inbuf_, m, 2);
      in_have_ = 2;
      if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK) fail_file(path, -1, "cannot start zlib");
      z_ready_ = true;
    } else {
      std::memcpy(pending_, m, 2);
      pending_n_ = static_cast<int>(got);
    }
  }
  ~IdxReader() {
    if (z_ready_) inflateEnd(&z_);
  }
  IdxReader(const IdxReader&) = delete;
  IdxReader& operator=(const IdxReader&) = delete;

  // Reads up to n bytes; fewer only at the end of the data. Throws on a corrupt gzip stream.
  int64_t read(uint8_t* dst, int64_t n) {
    int64_t done = 0;
    while (done < n && pending_n_ > 0) {  // the two bytes read to tell gzip from plain
      dst[done++] = pending_[0];
      pending_[0] = pending_[1];
      --pending_n_;
    }
    if (!gzip_) {
      done += in_.read(dst + done, n - done);
    } else {
      while (done < n && !z_end_) {
        if (z_.avail_in == 0) {
          if (in_have_ == 0) in_have_ = in_.read(inbuf_, sizeof inbuf_);
          z_.next_in = inbuf_;
          z_.avail_in = static_cast<uInt>(in_have_);
          in_have_ = 0;
        }
        z_.next_out = dst + done;
        z_.avail_out = static_cast<uInt>(std::min<int64_t>(n - done, INT_MAX / 2));
        const uInt before_out = z_.avail_out;
        const bool no_input = z_.avail_in == 0;
        int r = inflate(&z_, Z_NO_FLUSH);
        done += before_out - z_.avail_out;
        if (r == Z_STREAM_END) {
          next_member();
        } else if (r == Z_BUF_ERROR && no_input) {
          fail_file(in_.path(), pos_ + done,
                    "corrupt gzip data: unexpected end of file (offset in the decompressed data)");
        } else if (r != Z_OK && r != Z_BUF_ERROR) {
          fail_file(in_.path(), 0, std::string("corrupt gzip data: ") + (z_.msg ? z_.msg : "unknown error"));
        }
      }
    }
    pos_ += done;
    return done;
  }

  // Passes over n bytes of data: a plain file seeks, a gzip stream decompresses them into a
  // scratch buffer. Returns the bytes passed (fewer only at the end of the data).
  int64_t skip(int64_t n) {
    if (!gzip_ && pending_n_ == 0) {
      const int64_t left = std::max<int64_t>(0, file_size_ - in_.position());
      const int64_t k = std::min(n, left);
      in_.skip(k);
      pos_ += k;
      return k;
    }
    std::vector<uint8_t> scratch(static_cast<size_t>(std::min<int64_t>(n, int64_t{1} << 20)));
    int64_t done = 0;
    while (done < n) {
      const int64_t k =
          read(scratch.data(), std::min<int64_t>(n - done, static_cast<int64_t>(scratch.size())));
      done += k;
      if (k == 0) break;
    }
    return done;
  }

  // Most data bytes after the header that this file could hold.
  int64_t max_payload(int64_t header) const {
    if (!gzip_) return std::max<int64_t>(0, file_size_ - header);
    return std::min(kMaxBytes, checked_mul(file_size_, kMaxDeflateRatio, "IDX bound") + 4096);
  }
  bool gzip() const { return gzip_; }
  const std::string& path() const { return in_.path(); }

 private:
  // After a gzip member: the end of the file, another member, or damage.
  void next_member() {
    if (z_.avail_in == 0) {
      in_have_ = in_.read(inbuf_, sizeof inbuf_);
      z_.next_in = inbuf_;
      z_.avail_in = static_cast<uInt>(in_have_);
      in_have_ = 0;
    }
    if (z_.avail_in == 0) {
      z_end_ = true;
      return;
    }
    if (z_.avail_in >= 2 && z_.next_in[0] == 0x1f && z_.next_in[1] == 0x8b) {
      inflateReset(&z_);
      return;
    }
    const int64_t at = file_size_ - static_cast<int64_t>(z_.avail_in) - remaining_unread();
    fail_file(in_.path(), at,
              "bytes after the end of the gzip stream (the file is damaged or has something appended)");
  }
  int64_t remaining_unread() const {
    struct stat st;
    off_t cur = ::lseek(in_.fd(), 0, SEEK_CUR);
    if (cur < 0 || ::fstat(in_.fd(), &st) != 0) return 0;
    return static_cast<int64_t>(st.st_size) - static_cast<int64_t>(cur);
  }

  InputFile in_;
  int64_t file_size_ = 0;
  bool gzip_ = false;
  unsigned char pending_[2] = {0, 0};
  int pending_n_ = 0;
  z_stream z_{};
  bool z_ready_ = false, z_end_ = false;
  unsigned char inbuf_[1 << 16];
  int64_t in_have_ = 0;
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

// Reads the header and the payload it announces, with its dimensions: all of it, or items
// first..first+max_items-1 (max_items 0: to the end; the rest is not read, so not checked).
// `check(dims, where)` sees the dimensions before any payload is read.
template <class Check>
std::vector<uint8_t> read_idx(const std::string& path, uint32_t magic, int ndims, const char* kind,
                              std::vector<int64_t>& dims, bool& gzip, int64_t first, int64_t max_items,
                              Check check) {
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
  check(dims, where(r));
  DataNeeds range;
  range.first = first;
  range.max_images = max_items;
  const int64_t items = images_to_read(range, dims[0], path);
  const int64_t item_bytes = bytes / dims[0], want = item_bytes * items, skipped = item_bytes * first;
  const HostMemory mem = host_memory();
  if (want > mem.available / 10 * 9)
    fail_file(path, header,
              std::to_string(items) + " items of " + std::to_string(bytes / dims[0]) + " bytes = " +
                  bytes_str(want) + ", more than the host memory (" + mem.str() + ")" + where(r));
  if (r.skip(skipped) < skipped)
    fail_file(
        path, header + skipped,
        "truncated: the header announces " + dstr + " = " + std::to_string(bytes) + " data bytes" + where(r));
  std::vector<uint8_t> data;
  constexpr int64_t kStep = int64_t{64} << 20;
  int64_t have = 0;
  while (have < want) {
    int64_t n = std::min(kStep, want - have);
    data.resize(static_cast<size_t>(have + n));
    int64_t k = r.read(data.data() + have, n);
    have += k;
    if (k < n)
      fail_file(path, header + skipped + have,
                "truncated: the header announces " + dstr + " = " + std::to_string(bytes) +
                    " data bytes, the file ends after " + std::to_string(skipped + have) + where(r));
  }
  uint8_t extra;
  if (skipped + want == bytes && r.read(&extra, 1) != 0)
    fail_file(
        path, header + bytes,
        "trailing bytes after the " + std::to_string(bytes) + " data bytes the header announces" + where(r));
  return data;
}

}  // namespace

Dataset load_idx(const std::string& images, const std::string& labels, int num_classes, const Shape* input,
                 const DataNeeds& needs) {
  if (!input && needs.shape.c != 0) input = &needs.shape;
  std::vector<int64_t> idims, ldims;
  bool igz = false, lgz = false;
  // 4 dimensions (magic 0x00000804) are colour images, N x H x W x C or N x C x H x W.
  bool four = false;
  {
    IdxReader r(images);
    uint8_t m[4];
    four = r.read(m, 4) == 4 && be32(m) == 0x00000804;
  }
  // The layout of a 4-D file: the network's input decides; without one, a last dimension of 1
  // or 3 is channels.
  auto channels_last = [&](const std::vector<int64_t>& d) {
    const Shape chw{d[1], d[2], d[3]}, hwc{d[3], d[1], d[2]};
    return input ? (*input == hwc && *input != chw) : (d[3] == 1 || d[3] == 3);
  };
  auto image_shape = [&](const std::vector<int64_t>& d) {
    if (d.size() == 3) return Shape{1, d[1], d[2]};
    return channels_last(d) ? Shape{d[3], d[1], d[2]} : Shape{d[1], d[2], d[3]};
  };
  // The shape against the network's before a pixel is read: a header of 1 x 62600 x 62600 is
  // refused at byte 8, not after 4 GB of decompression.
  auto check = [&](const std::vector<int64_t>& d, const std::string& where) {
    const Shape s = image_shape(d);
    if (needs.shape.c != 0 && s != needs.shape)
      throw DataShapeMismatch(images + ": byte 8: the data set has images of " + s.str() +
                                  " but the network input is " + needs.shape.str() + where,
                              s, "idx: " + images + ", " + std::to_string(d[0]) + " images " + s.str());
  };
  std::vector<uint8_t> pixels = four ? read_idx(images, 0x00000804, 4, "unsigned-byte images, 4 dimensions",
                                                idims, igz, needs.first, needs.max_images, check)
                                     : read_idx(images, 0x00000803, 3, "unsigned-byte images, 3 dimensions",
                                                idims, igz, needs.first, needs.max_images, check);
  std::vector<uint8_t> lab =
      read_idx(labels, 0x00000801, 1, "unsigned-byte labels, 1 dimension", ldims, lgz, needs.first,
               needs.max_images, [](const std::vector<int64_t>&, const std::string&) {});
  if (idims[0] != ldims[0])
    throw Error(images + " holds " + std::to_string(idims[0]) + " images but " + labels + " holds " +
                std::to_string(ldims[0]) + " labels");
  for (size_t i = 0; i < lab.size(); ++i)
    if (lab[i] >= num_classes)
      fail_file(labels, 8 + needs.first + static_cast<int64_t>(i),
                "label " + std::to_string(lab[i]) + " of image " +
                    std::to_string(needs.first + static_cast<int64_t>(i)) + " is not below the " +
                    std::to_string(num_classes) + " classes" +
                    (lgz ? " (offset in the decompressed data)" : ""));
  Dataset ds;
  ds.count = static_cast<int64_t>(lab.size());
  ds.shape = {1, idims[1], idims[2]};
  ds.pixels = std::move(pixels);
  if (four) {
    const bool last = channels_last(idims);
    ds.shape = image_shape(idims);
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
  ds.first = needs.first;
  ds.in_files = idims[0];
  ds.description = "idx: " + images + ", " + std::to_string(idims[0]) + " images " + ds.shape.str();
  if (ds.count < idims[0]) ds.description += " (" + range_str(needs.first, ds.count, idims[0]) + " read)";
  return ds;
}

}  // namespace cnnrun
