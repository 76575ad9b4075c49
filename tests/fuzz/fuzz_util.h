// Shared by the fuzz targets. The loaders read files (they stat, open and size them), so each
// input is written to a scratch file and the real entry point reads it: no second, in-memory
// code path that could differ from the one users run. Only cnnrun::Error is a clean rejection;
// any other exception escaping (std::bad_alloc from a huge allocation included) reaches
// std::terminate and libFuzzer reports it as a crash.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "engine/core/error.h"

namespace cnnrun::fuzz {

// This process's scratch directory, removed at exit.
class Scratch {
 public:
  Scratch() {
    const char* t = std::getenv("TMPDIR");
    std::string tmpl = std::string(t && *t ? t : "/tmp") + "/cnnrun-fuzz-XXXXXX";
    if (!mkdtemp(tmpl.data())) std::abort();
    dir_ = tmpl;
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, const void* data, size_t size) const {
    std::string path = dir_ + "/" + name;
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) std::abort();
    return path;
  }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

inline const Scratch& scratch() {
  static Scratch s;
  return s;
}

// What every message must be (error.h): one line, not empty, of bounded length.
inline void check_message(const Error& e) {
  const char* m = e.what();
  size_t n = std::strlen(m);
  if (n == 0 || n > 10000 || std::strchr(m, '\n')) {
    std::fprintf(stderr, "bad error message (%zu bytes): %.300s\n", n, m);
    std::abort();
  }
}

// An invariant of an accepted input broke: a wrong answer rather than a crash, reported as one.
#define FUZZ_CHECK(cond)                                                                \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

}  // namespace cnnrun::fuzz
