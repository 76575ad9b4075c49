// Errors. The library never exits: every failure is a cnnrun::Error carrying a one-line message
// that starts with where it happened (file:line:column for netdefs, file and byte offset for
// binary files, file:line and the call for CUDA), so the CLI prints it verbatim and exits 1.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace cnnrun {

// A position in a text file, 1-based. line == 0 means "the whole file".
struct SourceLoc {
  std::string file;
  int line = 0;
  int column = 0;
  std::string str() const;  // "file:line:column", "file" when line == 0
};

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(one_line(msg)) {}

  // Messages quote file contents (a YAML key, a token, a tensor name), which can hold newlines,
  // terminal escapes or megabytes: control bytes become \n, \t, \xNN, and past 2000 bytes the
  // middle is left out, so a message stays one printable line.
  static std::string one_line(const std::string& msg);
};

// Text for a terminal, as one_line escapes it but keeping newlines and whole: a report prints
// names read from files (netdef and layer names, paths), which may hold escape sequences.
std::string printable(const std::string& text);

// Error at a place in a netdef: "file:l:c: layer 'conv1' (conv): key 'filters': <what>".
// layer and key may be empty.
[[noreturn]] void fail_at(const SourceLoc& loc, const std::string& layer, const std::string& type,
                          const std::string& key, const std::string& what);

// Error in a binary file: "file: byte N: <what>" (offset < 0 omits the byte).
[[noreturn]] void fail_file(const std::string& file, int64_t offset, const std::string& what);

// Checked size arithmetic: every size made from file contents goes through these.
int64_t checked_mul(int64_t a, int64_t b, const char* what);
int64_t checked_add(int64_t a, int64_t b, const char* what);

}  // namespace cnnrun
