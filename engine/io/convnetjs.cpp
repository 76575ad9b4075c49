// ConvNetJS text weights. The orderings are ConvNetJS's volume layout (x, then y, then depth
// fastest), not PyTorch's; they are converted here, once, so nothing downstream knows about them.
// Numbers are parsed strictly: a stray word or a NaN in a weight file must not become a weight.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/io/files.h"
#include "engine/io/weights.h"

namespace cnnrun {

namespace {

// ConvNetJS orders a volume's values by row, column, then channel (channel fastest); PyTorch's fc
// reads its inputs in C,H,W order. Both fc readers map a ConvNetJS input index k through this.
int64_t chw_of_yxd(const Shape& in, int64_t k) {
  const int64_t d = k % in.c, x = (k / in.c) % in.w, y = k / (in.c * in.w);
  return (d * in.h + y) * in.w + x;
}

struct Token {
  const char* p = nullptr;
  size_t len = 0;
  int line = 1, col = 1;
};

// The numbers of a text weight file, read in order. Tokens are found one at a time and never
// stored: a file of a billion one-byte numbers costs its own bytes, not a token table 24 times
// its size, and its count is checked against the header before any weight is allocated.
class NumberFile {
 public:
  explicit NumberFile(const std::string& file) : file_(file) {
    InputFile f(file);
    text_ = f.read_all(int64_t{1} << 31, "2 GiB", "not a ConvNetJS weight file");
    // A binary file is named as such before its bytes are read as a header.
    const void* nul = std::memchr(text_.data(), '\0', text_.size());
    if (nul) {
      const size_t at = static_cast<size_t>(static_cast<const char*>(nul) - text_.data());
      const size_t nl = text_.rfind('\n', at);
      const int line = 1 + static_cast<int>(std::count(
                               text_.begin(), text_.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
      const int col = static_cast<int>(nl == std::string::npos ? at + 1 : at - nl);
      fail_at({file_, line, col}, "", "", "", "NUL byte in a text weight file");
    }
  }

  // The next token, or false at the end of the file (tok is then the end position).
  bool next(Token* tok) {
    const char* s = text_.data();
    const size_t n = text_.size();
    while (pos_ < n) {
      char c = s[pos_];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v') {
        if (c == '\n') {
          ++line_;
          col_ = 1;
        } else {
          ++col_;
        }
        ++pos_;
        continue;
      }
      size_t j = pos_;
      while (j < n && !std::strchr(" \t\r\n\f\v", s[j]) && s[j] != '\0') ++j;
      if (j == pos_) fail_at({file_, line_, col_}, "", "", "", "NUL byte in a text weight file");
      *tok = {s + pos_, j - pos_, line_, col_};
      col_ += static_cast<int>(j - pos_);
      pos_ = j;
      ++count_;
      return true;
    }
    *tok = {s + n, 0, line_, col_};
    return false;
  }

  static std::string str(const Token& t) { return std::string(t.p, t.len); }
  SourceLoc loc(const Token& t) const { return {file_, t.line, t.col}; }

  // The next token as a header integer, 1 <= value <= max_value.
  int64_t header_int(const char* name, int64_t max_value, const char* header) {
    Token t;
    if (!next(&t))
      fail_file(file_, -1, std::string("expected the header '") + header + "', the file ends before " + name);
    if (count_ == 1) first_ = t;
    bool digits = t.len <= 18;
    for (size_t k = 0; k < t.len && digits; ++k) digits = t.p[k] >= '0' && t.p[k] <= '9';
    int64_t v = digits ? std::strtoll(str(t).c_str(), nullptr, 10) : 0;
    if (!digits || v < 1 || v > max_value)
      fail_at(loc(t), "", "", "",
              std::string("header '") + header + "': " + name + " must be an integer from 1 to " +
                  std::to_string(max_value) + ", found '" + str(t) + "'");
    return v;
  }
  SourceLoc first_loc() const { return loc(first_); }

  // The next value as a finite float.
  float number() {
    Token t;
    if (!next(&t)) fail_file(file_, -1, "the file ends early");  // expect_count rules this out
    bool ok = t.len > 0;
    for (size_t k = 0; k < t.len && ok; ++k) ok = std::strchr("0123456789+-.eE", t.p[k]) != nullptr;
    float v = 0;
    if (ok) {
      errno = 0;
      char* end = nullptr;
      v = std::strtof(t.p, &end);  // the token ends at whitespace or the string's NUL
      ok = end == t.p + t.len && std::isfinite(v);
    }
    if (!ok)
      fail_at(
          loc(t), "", "", "",
          "number " + std::to_string(count_) + ": expected a finite decimal number, found '" + str(t) + "'");
    return v;
  }

  // Checks that exactly `need` tokens follow (counted, not stored), then rewinds to read them.
  void expect_count(int64_t need, const std::string& what) {
    const size_t pos = pos_, count = count_;
    const int line = line_, col = col_;
    int64_t have = 0;
    Token t, extra;
    bool more = false;
    while (next(&t)) {
      if (have == need) {
        extra = t;
        more = true;
        while (next(&t)) ++have;  // the total, for the message
        ++have;
        break;
      }
      ++have;
    }
    if (have < need)
      fail_file(file_, -1,
                "expected " + std::to_string(need) + " numbers after the header (" + what + "), found " +
                    std::to_string(have));
    if (more) {
      const int64_t first = static_cast<int64_t>(count) + need + 1;
      fail_at(loc(extra), "", "", "",
              "number " + std::to_string(first) + " '" + str(extra) + "' is one too many: expected " +
                  std::to_string(need) + " numbers after the header (" + what + "), found " +
                  std::to_string(have));
    }
    pos_ = pos;
    count_ = count;
    line_ = line;
    col_ = col;
  }

  const std::string& file() const { return file_; }

 private:
  std::string file_, text_;
  size_t pos_ = 0, count_ = 0;
  int line_ = 1, col_ = 1;
  Token first_;
};

constexpr int64_t kMaxDim = int64_t{1} << 24;

}  // namespace

std::map<std::string, Tensor> read_convnetjs_conv(const std::string& file) {
  NumberFile nf(file);
  const char* hdr = "KW KH DEPTH FILTERS";
  int64_t kw = nf.header_int("KW", 4096, hdr);
  int64_t kh = nf.header_int("KH", 4096, hdr);
  int64_t depth = nf.header_int("DEPTH", kMaxDim, hdr);
  int64_t filters = nf.header_int("FILTERS", kMaxDim, hdr);
  int64_t need = 0;
  try {
    int64_t nw = checked_mul(checked_mul(checked_mul(filters, kw, "conv weights"), kh, "conv weights"), depth,
                             "conv weights");
    need = checked_add(nw, filters, "conv weights");
  } catch (const Error& e) {
    fail_at(nf.first_loc(), "", "", "", std::string("header '") + hdr + "': " + e.what());
  }
  nf.expect_count(need, std::to_string(filters) + "x" + std::to_string(kw) + "x" + std::to_string(kh) + "x" +
                            std::to_string(depth) + " weights + " + std::to_string(filters) + " biases");

  Tensor w({filters, depth, kh, kw});
  Tensor b({filters});
  for (int64_t f = 0; f < filters; ++f)
    for (int64_t x = 0; x < kw; ++x)
      for (int64_t y = 0; y < kh; ++y)
        for (int64_t d = 0; d < depth; ++d)
          w.data[static_cast<size_t>(((f * depth + d) * kh + y) * kw + x)] = nf.number();
  for (int64_t f = 0; f < filters; ++f) b.data[static_cast<size_t>(f)] = nf.number();
  return {{"weight", std::move(w)}, {"bias", std::move(b)}};
}

std::map<std::string, Tensor> read_convnetjs_fc(const std::string& file, const Shape& in) {
  NumberFile nf(file);
  const char* hdr = "INPUTS OUTPUTS";
  int64_t inputs = nf.header_int("INPUTS", int64_t{1} << 31, hdr);
  int64_t outputs = nf.header_int("OUTPUTS", kMaxDim, hdr);
  if (inputs != in.size())
    fail_at(nf.first_loc(), "", "", "",
            "header says " + std::to_string(inputs) + " inputs but the layer's input " + in.str() + " has " +
                std::to_string(in.size()));
  int64_t nw = checked_mul(outputs, inputs, "fc weights");
  nf.expect_count(checked_add(nw, outputs, "fc weights"), std::to_string(outputs) + "x" +
                                                              std::to_string(inputs) + " weights + " +
                                                              std::to_string(outputs) + " biases");
  Tensor w({outputs, inputs});
  Tensor b({outputs});
  for (int64_t o = 0; o < outputs; ++o)
    for (int64_t k = 0; k < inputs; ++k)
      w.data[static_cast<size_t>(o * inputs + chw_of_yxd(in, k))] = nf.number();
  for (int64_t o = 0; o < outputs; ++o) b.data[static_cast<size_t>(o)] = nf.number();
  return {{"weight", std::move(w)}, {"bias", std::move(b)}};
}

}  // namespace cnnrun

// ConvNetJS JSON snapshots ------------------------------------------------------------------

namespace cnnrun {

namespace {

// A Vol's "w": an object {"0": v0, "1": v1, ...} (how JSON.stringify writes a Float64Array) or
// an array. Checked for its count before anything is allocated for it.
void check_vol(const std::string& file, const nlohmann::json& vol, const std::string& what, int64_t expect) {
  if (!vol.is_object() || !vol.contains("w"))
    throw Error(file + ": " + what + ": expected a Vol object with \"w\"");
  const nlohmann::json& w = vol["w"];
  if (!w.is_object() && !w.is_array())
    throw Error(file + ": " + what + ": \"w\" must be a list or an object of numbers");
  if (static_cast<int64_t>(w.size()) != expect)
    throw Error(file + ": " + what + ": expected " + std::to_string(expect) + " values, found " +
                std::to_string(w.size()));
}

// The values of a Vol checked by check_vol, as float32: a number that is finite as a double but
// overflows float32 (1e39) would become an infinity in the weights, so it is refused here.
std::vector<float> vol_values(const std::string& file, const nlohmann::json& vol, const std::string& what,
                              int64_t expect) {
  check_vol(file, vol, what, expect);
  const nlohmann::json& w = vol["w"];
  std::vector<float> out(static_cast<size_t>(expect));
  for (int64_t i = 0; i < expect; ++i) {
    const nlohmann::json& v =
        w.is_array() ? w[static_cast<size_t>(i)] : w.value(std::to_string(i), nlohmann::json());
    if (!v.is_number() || !std::isfinite(v.get<double>()))
      throw Error(file + ": " + what + ": value " + std::to_string(i) + " is missing or not a finite number");
    const float x = static_cast<float>(v.get<double>());
    if (!std::isfinite(x))
      throw Error(file + ": " + what + ": value " + std::to_string(i) + " (" + v.dump() +
                  ") is outside float32's range (largest 3.4e38)");
    out[static_cast<size_t>(i)] = x;
  }
  return out;
}

int64_t json_dim(const std::string& file, const nlohmann::json& o, const char* key, const std::string& what) {
  if (!o.contains(key) || !o[key].is_number_integer() || o[key].get<int64_t>() < 1 ||
      o[key].get<int64_t>() > (1 << 20))
    throw Error(file + ": " + what + ": \"" + key + "\" must be a positive integer");
  return o[key].get<int64_t>();
}

}  // namespace

std::vector<ConvnetjsJsonLayer> read_convnetjs_json(const std::string& file,
                                                    const std::vector<Shape>& fc_inputs, int64_t max_values) {
  InputFile f(file);
  // A parsed JSON number costs about 100 bytes of memory; a snapshot writes each weight in about
  // 25 bytes of text. The limit keeps a file far larger than the netdef's weights from being
  // parsed at all.
  const int64_t limit = max_values > 0 ? (int64_t{1} << 20) + 64 * max_values : int64_t{1} << 30;
  const std::string text = f.read_all(
      limit, std::to_string(limit) + " bytes",
      "far more than a ConvNetJS snapshot of the netdef's " + std::to_string(max_values) + " weights needs");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(file + ": not a ConvNetJS JSON snapshot: " + e.what());
  }
  if (!j.is_object() || !j.contains("layers") || !j["layers"].is_array())
    throw Error(file + ": not a ConvNetJS JSON snapshot: no \"layers\" list");
  std::vector<ConvnetjsJsonLayer> out;
  size_t fc_seen = 0;
  for (size_t li = 0; li < j["layers"].size(); ++li) {
    const nlohmann::json& L = j["layers"][li];
    const std::string type = L.is_object() ? L.value("layer_type", "") : "";
    if (type != "conv" && type != "fc") continue;
    const std::string what = "layer " + std::to_string(li) + " (" + type + ")";
    if (!L.contains("filters") || !L["filters"].is_array() || L["filters"].empty())
      throw Error(file + ": " + what + ": expected a non-empty \"filters\" list");
    const nlohmann::json& filters = L["filters"];
    const int64_t F = static_cast<int64_t>(filters.size());
    ConvnetjsJsonLayer r;
    r.type = type;
    if (type == "conv") {
      const int64_t kw = json_dim(file, filters[0], "sx", what), kh = json_dim(file, filters[0], "sy", what),
                    c = json_dim(file, filters[0], "depth", what);
      const int64_t per = checked_mul(checked_mul(kw, kh, "filter size"), c, "filter size");
      // Every filter's shape and count first: the tensor is allocated only for values present.
      for (int64_t fi = 0; fi < F; ++fi) {
        if (json_dim(file, filters[static_cast<size_t>(fi)], "sx", what) != kw ||
            json_dim(file, filters[static_cast<size_t>(fi)], "sy", what) != kh ||
            json_dim(file, filters[static_cast<size_t>(fi)], "depth", what) != c)
          throw Error(file + ": " + what + ": filter " + std::to_string(fi) +
                      " differs in shape from filter 0");
        check_vol(file, filters[static_cast<size_t>(fi)], what + " filter " + std::to_string(fi), per);
      }
      Tensor w({F, c, kh, kw});
      for (int64_t fi = 0; fi < F; ++fi) {
        std::vector<float> v =
            vol_values(file, filters[static_cast<size_t>(fi)], what + " filter " + std::to_string(fi), per);
        for (int64_t y = 0; y < kh; ++y)
          for (int64_t x = 0; x < kw; ++x)
            for (int64_t d = 0; d < c; ++d)
              w.data[static_cast<size_t>(((fi * c + d) * kh + y) * kw + x)] =
                  v[static_cast<size_t>((kw * y + x) * c + d)];
      }
      r.tensors["weight"] = std::move(w);
    } else {
      if (fc_seen >= fc_inputs.size())
        throw Error(file + ": " + what + ": the snapshot has more fc layers than the netdef");
      const Shape in = fc_inputs[fc_seen++];
      const int64_t n = in.size();
      for (int64_t o = 0; o < F; ++o)
        check_vol(file, filters[static_cast<size_t>(o)], what + " output " + std::to_string(o), n);
      Tensor w({F, n});
      for (int64_t o = 0; o < F; ++o) {
        std::vector<float> v =
            vol_values(file, filters[static_cast<size_t>(o)], what + " output " + std::to_string(o), n);
        for (int64_t k = 0; k < n; ++k)
          w.data[static_cast<size_t>(o * n + chw_of_yxd(in, k))] = v[static_cast<size_t>(k)];
      }
      r.tensors["weight"] = std::move(w);
    }
    if (!L.contains("biases")) throw Error(file + ": " + what + ": no \"biases\"");
    Tensor bt({F});
    bt.data = vol_values(file, L["biases"], what + " biases", F);
    r.tensors["bias"] = std::move(bt);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace cnnrun
