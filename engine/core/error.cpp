#include "engine/core/error.h"

#include <algorithm>

namespace cnnrun {

namespace {

// Appends msg[i, end) with control bytes, C1 controls and bytes that are not valid UTF-8 (which a
// terminal might take for a control sequence) escaped as \xNN (\n, \t); valid UTF-8 stays.
void put_escaped(std::string& out, const std::string& msg, size_t i, size_t end, bool keep_newlines) {
  auto escape = [&](unsigned char c) {
    static const char* hex = "0123456789abcdef";
    out += "\\x";
    out += hex[c >> 4];
    out += hex[c & 15];
  };
  while (i < end) {
    auto c = static_cast<unsigned char>(msg[i]);
    if (c == '\n') {
      out += keep_newlines ? "\n" : "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      escape(c);
    } else if (c >= 0x80) {
      size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
      bool ok = len > 0 && i + len <= end && !(c == 0xc2 && static_cast<unsigned char>(msg[i + 1]) < 0xa0);
      for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(msg[i + k]) & 0xc0) == 0x80;
      if (!ok) {
        escape(c);
      } else {
        out.append(msg, i, len);
        i += len;
        continue;
      }
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
}

}  // namespace

std::string Error::one_line(const std::string& msg) {
  constexpr size_t kMax = 2000, kHead = 1500, kTail = 400;
  std::string out;
  out.reserve(std::min(msg.size(), kMax) + 64);
  if (msg.size() <= kMax) {
    put_escaped(out, msg, 0, msg.size(), false);
  } else {
    put_escaped(out, msg, 0, kHead, false);
    out += " [... " + std::to_string(msg.size() - kHead - kTail) + " bytes left out ...] ";
    put_escaped(out, msg, msg.size() - kTail, msg.size(), false);
  }
  return out;
}

std::string printable(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  put_escaped(out, text, 0, text.size(), true);
  return out;
}

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
