// Files the engine reads and writes, in one place so that every reader and every output gets the
// same guarantees.
//
// Inputs: InputFile refuses anything but a regular file before it reads a byte (a FIFO would
// block forever, /dev/zero never ends, a directory gives an obscure stream error) and records
// the file's device and inode in the process's set of inputs. Outputs compare against that set,
// so an output never replaces a file the run read, whatever path (link, '..', another spelling)
// names it.
//
// Outputs: OutputFiles writes all of a run's outputs or none. A regular file is written through
// a unique temporary file in its own directory (created exclusively, never through a link) and
// renamed over the target only when every output is complete; an existing file keeps its
// permissions. Character devices, FIFOs and the process's own stdout/stderr are written
// directly, never replaced. Paths that cannot be written are refused before the run.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace cnnrun {

// A file's identity: two paths name the same file when these agree.
struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const FileId& o) const { return dev == o.dev && ino == o.ino; }
};

// A regular file opened for reading. Throws cnnrun::Error naming the path when it does not
// exist, cannot be opened or is not a regular file ("is a FIFO", "is a directory", ...).
class InputFile {
 public:
  explicit InputFile(const std::string& path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }  // at open time
  int64_t position() const { return pos_; }
  int fd() const { return fd_; }
  // Gives the descriptor away (to zlib's gzdopen); the caller closes it.
  int release();

  // Reads up to n bytes at the current position; fewer only at the end of the file. Throws on
  // a read error, naming the file and the offset.
  int64_t read(void* dst, int64_t n);
  // Moves the read position n bytes on without reading them (a shard of a data set starts
  // there); past the end, the next read() returns 0.
  void skip(int64_t n);
  // Reads n bytes at `offset`, or throws "file ended early" naming the offset.
  void read_exact_at(int64_t offset, void* dst, int64_t n);
  // The whole file if it holds at most max_bytes; otherwise throws "PATH: over <limit>; <why>".
  // Reads at most max_bytes + 1 bytes whatever the size claims.
  std::string read_all(int64_t max_bytes, const std::string& limit, const std::string& why);

 private:
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
  int64_t pos_ = 0;
};

// Checks that `path` is a regular file without opening it for reading (a directory argument
// is checked by the caller); the same messages as InputFile.
void check_regular_file(const std::string& path);

// The files opened through InputFile since the process started (or since forget_inputs()).
bool is_opened_input(const FileId& id);
void forget_inputs();  // tests only: each test case starts with no inputs

// The identity of an existing file (links followed); false when it does not exist.
bool file_id(const std::string& path, FileId* id);

// A run's output files, written all or none.
class OutputFiles {
 public:
  OutputFiles();
  ~OutputFiles();  // removes temporary files of an unfinished commit
  OutputFiles(const OutputFiles&) = delete;
  OutputFiles& operator=(const OutputFiles&) = delete;

  // Adds an output given by `option` ("--json"; used in messages). Checks now what can be
  // checked before a run: the name is not empty, no other output names the same file, the
  // target is not a directory or a block device, its directory exists and a file can be
  // created there (or the device or FIFO is writable), it is not an input opened so far.
  // Returns the handle for set().
  size_t add(const std::string& option, const std::string& path);
  // Refuses any output that is a file opened as an input since (call after loading, before
  // the run, and commit() checks again).
  void check_not_inputs() const;
  // Also refuses these paths as outputs (names the user typed for inputs that may not have been
  // opened through InputFile, e.g. a directory of weights).
  void protect(const std::string& input_path);
  void set(size_t handle, std::string bytes);

  // Writes every output. Regular files are written to temporary files first, then devices and
  // FIFOs directly; then `before_publish` runs (may be empty; the CLI prints its report there),
  // then this process's stdout/stderr targets are written and the temporary files renamed over
  // their targets. An error before the renames (a failed report on stdout included) leaves
  // every regular output untouched and removes the temporary files. Throws cnnrun::Error naming
  // the file.
  void commit(const std::function<void()>& before_publish = {});

 private:
  struct Target;
  std::vector<std::unique_ptr<Target>> targets_;
  std::vector<std::string> protected_;
  void check_target(const Target& t) const;
};

// One output file written through OutputFiles (the convenience for `cnnrun convert` and tools):
// refuses `inputs` (paths the user typed) and every opened input.
void write_output_file(const std::string& path, const std::string& bytes,
                       const std::vector<std::string>& inputs);

// Writes all of `bytes` to a descriptor (a regular file or stdout), retrying short writes;
// throws "<what>: write failed (<strerror>)".
void write_all(int fd, const std::string& bytes, const std::string& what);

// Whether the real (canonical) path `real` lies inside the real directory `root`, compared
// component by component: "/a/bc" is not inside "/a/b". How paths written in a netdef or an ONNX
// model are confined to their directories.
bool path_inside(const std::filesystem::path& real, const std::filesystem::path& root);

}  // namespace cnnrun
