#include "engine/core/error.h"

namespace cnnrun {

std::string SourceLoc::str() const {
  if (line <= 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

void fail_at(const SourceLoc& loc, const std::string& layer, const std::string& type, const std::string& key,
             const std::string& what) {
  std::string msg = loc.str() + ": ";
  if (!layer.empty()) {
    msg += "layer '" + layer + "'";
    if (!type.empty()) msg += " (" + type + ")";
    msg += ": ";
  }
  if (!key.empty()) msg += "key '" + key + "': ";
  msg += what;
  throw Error(msg);
}

void fail_file(const std::string& file, int64_t offset, const std::string& what) {
  std::string msg = file + ": ";
  if (offset >= 0) msg += "byte " + std::to_string(offset) + ": ";
  throw Error(msg + what);
}

int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r))
    throw Error(std::string("size overflow computing ") + what + " (" + std::to_string(a) + " x " +
                std::to_string(b) + ")");
  return r;
}

int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r))
    throw Error(std::string("size overflow computing ") + what + " (" + std::to_string(a) + " + " +
                std::to_string(b) + ")");
  return r;
}

}  // namespace cnnrun
