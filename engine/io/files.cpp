#include "engine/io/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>

#include "engine/core/error.h"

namespace cnnrun {

namespace {

std::string errno_text(int e) { return std::strerror(e); }

// What a non-regular file is, for "PATH: is a FIFO, not a regular file".
std::string kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISLNK(m)) return "a symbolic link";
  return "not a regular file";
}

[[noreturn]] void not_regular(const std::string& path, mode_t m) {
  throw Error(path + ": is " + kind_of(m) + ", not a regular file");
}

[[noreturn]] void cannot_open(const std::string& path, int e) {
  throw Error(path +
              ": cannot open: " + (e == ENOENT ? std::string("no such file or directory") : errno_text(e)));
}

std::mutex g_inputs_mu;
std::vector<FileId>& inputs() {
  static std::vector<FileId> v;
  return v;
}

void note_input(const FileId& id) {
  std::lock_guard<std::mutex> lock(g_inputs_mu);
  auto& v = inputs();
  if (std::find(v.begin(), v.end(), id) == v.end()) v.push_back(id);
}

std::string dir_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string real_path(const std::string& path) {
  char* r = ::realpath(path.c_str(), nullptr);
  if (!r) return "";
  std::string s = r;
  std::free(r);
  return s;
}

// A unique temporary file beside `final_path`, created exclusively and never through a link:
// a planted file or symlink of the same name makes the next name be tried, never followed.
int create_temp(const std::string& final_path, std::string* tmp) {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}() ^ (static_cast<uint64_t>(::getpid()) << 32));
  const std::string dir = dir_of(final_path), base = base_of(final_path);
  for (int attempt = 0; attempt < 100; ++attempt) {
    uint64_t r;
    {
      std::lock_guard<std::mutex> lock(mu);
      r = rng();
    }
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, "%012llx", static_cast<unsigned long long>(r & 0xffffffffffffULL));
    std::string name = (dir == "/" ? "/" : dir + "/") + "." + base.substr(0, 200) + ".cnnrun-" + suffix;
    int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd >= 0) {
      *tmp = name;
      return fd;
    }
    if (errno != EEXIST) return -errno;
  }
  return -EEXIST;
}

}  // namespace

// --- inputs -------------------------------------------------------------------------------------

InputFile::InputFile(const std::string& path) : path_(path) {
  if (path.empty()) throw Error("empty file name");
  struct stat st;
  // stat first: opening a FIFO for reading blocks until a writer comes.
  if (::stat(path.c_str(), &st) != 0) cannot_open(path, errno);
  if (!S_ISREG(st.st_mode)) not_regular(path, st.st_mode);
  // O_NONBLOCK: should the path be swapped for a FIFO between the stat and the open, the open
  // still returns, and the fstat below refuses it.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd_ < 0) cannot_open(path, errno);
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    mode_t m = st.st_mode;
    ::close(fd_);
    fd_ = -1;
    not_regular(path, m);
  }
  int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  size_ = static_cast<int64_t>(st.st_size);
  note_input({st.st_dev, st.st_ino});
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

int InputFile::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void InputFile::skip(int64_t n) {
  if (n <= 0) return;
  if (::lseek(fd_, static_cast<off_t>(n), SEEK_CUR) < 0)
    fail_file(path_, pos_, "seek error: " + errno_text(errno));
  pos_ += n;
}

int64_t InputFile::read(void* dst, int64_t n) {
  auto* p = static_cast<char*>(dst);
  int64_t done = 0;
  while (done < n) {
    size_t want = static_cast<size_t>(std::min<int64_t>(n - done, INT_MAX / 2));
    ssize_t k = ::read(fd_, p + done, want);
    if (k < 0) {
      if (errno == EINTR) continue;
      fail_file(path_, pos_ + done, "read error: " + errno_text(errno));
    }
    if (k == 0) break;
    done += k;
  }
  pos_ += done;
  return done;
}

void InputFile::read_exact_at(int64_t offset, void* dst, int64_t n) {
  if (::lseek(fd_, static_cast<off_t>(offset), SEEK_SET) < 0)
    fail_file(path_, offset, "cannot seek: " + errno_text(errno));
  pos_ = offset;
  int64_t got = read(dst, n);
  if (got != n) fail_file(path_, offset + got, "file ended early (changed while reading?)");
}

std::string InputFile::read_all(int64_t max_bytes, const std::string& limit, const std::string& why) {
  std::string out;
  if (size_ <= max_bytes) out.reserve(static_cast<size_t>(size_));
  char buf[1 << 16];
  for (;;) {
    int64_t k = read(buf, sizeof buf);
    if (k == 0) break;
    out.append(buf, static_cast<size_t>(k));
    if (static_cast<int64_t>(out.size()) > max_bytes) throw Error(path_ + ": over " + limit + "; " + why);
  }
  return out;
}

void check_regular_file(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) cannot_open(path, errno);
  if (!S_ISREG(st.st_mode)) not_regular(path, st.st_mode);
}

bool is_opened_input(const FileId& id) {
  std::lock_guard<std::mutex> lock(g_inputs_mu);
  const auto& v = inputs();
  return std::find(v.begin(), v.end(), id) != v.end();
}

void forget_inputs() {
  std::lock_guard<std::mutex> lock(g_inputs_mu);
  inputs().clear();
}

bool file_id(const std::string& path, FileId* id) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return false;
  *id = {st.st_dev, st.st_ino};
  return true;
}

void write_all(int fd, const std::string& bytes, const std::string& what) {
  size_t done = 0;
  while (done < bytes.size()) {
    size_t want = std::min<size_t>(bytes.size() - done, INT_MAX / 2);
    ssize_t k = ::write(fd, bytes.data() + done, want);
    if (k < 0) {
      if (errno == EINTR) continue;
      throw Error(what + ": write failed (" + errno_text(errno) + ")");
    }
    if (k == 0) throw Error(what + ": write failed (no progress)");
    done += static_cast<size_t>(k);
  }
}

// --- outputs ------------------------------------------------------------------------------------

struct OutputFiles::Target {
  std::string option, path;
  // Where a regular file is finally written: the path itself, or the file a link points to
  // (renaming over the link would replace the link, not the file it names).
  std::string final_path;
  bool direct = false;  // device, FIFO, or our own stdout/stderr: written in place
  int std_fd = -1;      // 1 or 2 when the target is this process's stdout or stderr
  bool exists = false;
  FileId id;        // when it exists
  mode_t mode = 0;  // the existing file's permissions, kept
  uid_t uid = 0;
  gid_t gid = 0;
  std::string key;  // identity for "two outputs name one file"
  std::string bytes;
  bool has_bytes = false;
  std::string tmp;  // temporary file during commit
  int tmp_fd = -1;
};

OutputFiles::OutputFiles() = default;

OutputFiles::~OutputFiles() {
  for (auto& t : targets_) {
    if (t->tmp_fd >= 0) ::close(t->tmp_fd);
    if (!t->tmp.empty()) ::unlink(t->tmp.c_str());
  }
}

size_t OutputFiles::add(const std::string& option, const std::string& path) {
  auto t = std::make_unique<Target>();
  t->option = option;
  t->path = path;
  const std::string name = option.empty() ? path : option + " " + path;
  if (path.empty()) throw Error((option.empty() ? std::string("output") : option) + ": empty file name");
  if (path.back() == '/') throw Error(name + ": names a directory; give a file name");
  struct stat lst, st;
  if (::lstat(path.c_str(), &lst) == 0) {
    if (::stat(path.c_str(), &st) != 0)
      throw Error(name + ": is a symbolic link to a missing file (" + errno_text(errno) +
                  "); refusing to write through it");
    if (S_ISDIR(st.st_mode)) throw Error(name + ": is a directory; give a file name");
    if (S_ISBLK(st.st_mode)) throw Error(name + ": is a block device; refusing to write to it");
    t->exists = true;
    t->id = {st.st_dev, st.st_ino};
    t->key = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
    for (int fd : {1, 2}) {
      struct stat s;
      if (::fstat(fd, &s) == 0 && s.st_dev == st.st_dev && s.st_ino == st.st_ino) t->std_fd = fd;
    }
    if (t->std_fd >= 0 || S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) {
      t->direct = true;
      if (t->std_fd < 0 && ::access(path.c_str(), W_OK) != 0)
        throw Error(name + ": cannot write (" + errno_text(errno) + ")");
    } else if (S_ISREG(st.st_mode)) {
      t->final_path = S_ISLNK(lst.st_mode) ? real_path(path) : path;
      if (t->final_path.empty()) throw Error(name + ": cannot resolve the link (" + errno_text(errno) + ")");
      t->mode = st.st_mode & 07777;
      t->uid = st.st_uid;
      t->gid = st.st_gid;
    } else {
      throw Error(name + ": is " + kind_of(st.st_mode) + "; refusing to write to it");
    }
  } else {
    if (errno != ENOENT) throw Error(name + ": cannot write (" + errno_text(errno) + ")");
    t->final_path = path;
    struct stat d;
    const std::string dir = dir_of(path);
    if (::stat(dir.c_str(), &d) != 0)
      throw Error(name + ": cannot write: directory " + dir + ": " +
                  (errno == ENOENT ? std::string("no such file or directory") : errno_text(errno)));
    if (!S_ISDIR(d.st_mode)) throw Error(name + ": cannot write: " + dir + " is not a directory");
    std::string rd = real_path(dir);
    t->key = (rd.empty() ? dir : rd) + "/" + base_of(path);
  }
  if (!t->direct) {
    // Creating (and removing) the temporary file now proves the directory is writable before
    // the run, not after it.
    std::string probe;
    int fd = create_temp(t->final_path, &probe);
    if (fd < 0)
      throw Error(name + ": cannot create a file in " + dir_of(t->final_path) + " (" + errno_text(-fd) + ")");
    ::close(fd);
    ::unlink(probe.c_str());
  }
  for (const auto& o : targets_)
    if (o->key == t->key || o->path == path)
      throw Error(name + ": names the same file as " +
                  (o->option.empty() ? o->path : o->option + " " + o->path) +
                  "; give each output its own file");
  check_target(*t);
  targets_.push_back(std::move(t));
  return targets_.size() - 1;
}

void OutputFiles::protect(const std::string& input_path) {
  if (!input_path.empty()) protected_.push_back(input_path);
}

void OutputFiles::check_target(const Target& t) const {
  FileId now;
  bool exists = file_id(t.path, &now);
  bool hit = exists && is_opened_input(now);
  for (const auto& p : protected_) {
    FileId pid;
    if (hit) break;
    hit = exists && file_id(p, &pid) && pid == now;
  }
  if (hit)
    throw Error((t.option.empty() ? t.path : t.option + " " + t.path) +
                ": refusing to overwrite an input file with an output (it is a file this run reads)");
}

void OutputFiles::check_not_inputs() const {
  for (const auto& t : targets_) check_target(*t);
}

void OutputFiles::set(size_t handle, std::string bytes) {
  Target& t = *targets_.at(handle);
  t.bytes = std::move(bytes);
  t.has_bytes = true;
}

void OutputFiles::commit(const std::function<void()>& before_publish) {
  check_not_inputs();
  auto discard = [&] {
    for (auto& t : targets_) {
      if (t->tmp_fd >= 0) ::close(t->tmp_fd);
      t->tmp_fd = -1;
      if (!t->tmp.empty()) ::unlink(t->tmp.c_str());
      t->tmp.clear();
    }
  };
  try {
    for (auto& tp : targets_) {
      Target& t = *tp;
      if (!t.has_bytes) throw Error(t.path + ": internal error: output has no content");
      if (t.direct) continue;
      const std::string name = t.option.empty() ? t.path : t.option + " " + t.path;
      int fd = create_temp(t.final_path, &t.tmp);
      if (fd < 0)
        throw Error(name + ": cannot create a file in " + dir_of(t.final_path) + " (" + errno_text(-fd) +
                    ")");
      t.tmp_fd = fd;
      if (t.exists) {
        // Keep the replaced file's permissions (and owner, where we may: as root).
        if (::geteuid() == 0) (void)::fchown(fd, t.uid, t.gid);
        (void)::fchmod(fd, t.mode);
      }
      write_all(fd, t.bytes, name);
      if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS)
        throw Error(name + ": write failed (" + errno_text(errno) + ")");
      int rc = ::close(fd);
      t.tmp_fd = -1;
      if (rc != 0) throw Error(name + ": write failed (" + errno_text(errno) + ")");
    }
    // Devices and FIFOs next (they cannot be rolled back, but a failure there still stops the
    // report and the renames), then the report, then our own stdout/stderr after it.
    for (auto& tp : targets_) {
      Target& t = *tp;
      if (!t.direct || t.std_fd >= 0) continue;
      const std::string name = t.option.empty() ? t.path : t.option + " " + t.path;
      int fd = ::open(t.path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
      if (fd < 0) throw Error(name + ": cannot write (" + errno_text(errno) + ")");
      try {
        write_all(fd, t.bytes, name);
      } catch (...) {
        ::close(fd);
        throw;
      }
      if (::close(fd) != 0) throw Error(name + ": write failed (" + errno_text(errno) + ")");
    }
    if (before_publish) before_publish();
    for (auto& tp : targets_) {
      Target& t = *tp;
      if (t.std_fd < 0) continue;
      if (t.std_fd == 1) std::fflush(stdout);
      write_all(t.std_fd, t.bytes, t.option.empty() ? t.path : t.option + " " + t.path);
    }
    for (auto& tp : targets_) {
      Target& t = *tp;
      if (t.direct) continue;
      if (std::rename(t.tmp.c_str(), t.final_path.c_str()) != 0)
        throw Error((t.option.empty() ? t.path : t.option + " " + t.path) + ": cannot write (" +
                    errno_text(errno) + ")");
      t.tmp.clear();
    }
  } catch (...) {
    discard();
    throw;
  }
}

void write_output_file(const std::string& path, const std::string& bytes,
                       const std::vector<std::string>& inputs) {
  OutputFiles out;
  for (const auto& in : inputs) out.protect(in);
  size_t h = out.add("", path);
  out.set(h, bytes);
  out.commit();
}

bool path_inside(const std::filesystem::path& real, const std::filesystem::path& root) {
  auto r = root.begin(), p = real.begin();
  for (; r != root.end(); ++r, ++p) {
    if (r->empty()) continue;  // a trailing separator yields an empty last component
    if (p == real.end() || *p != *r) return false;
  }
  return true;
}

}  // namespace cnnrun
