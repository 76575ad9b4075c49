// ConvNetJS text weights. The orderings are ConvNetJS's volume layout (x, then y, then depth
// fastest), not PyTorch's; they are converted here, once, so nothing downstream knows about them.
// Numbers are parsed strictly: a stray word or a NaN in a weight file must not become a weight.
#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/core/error.h"
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
  const char* p;
  size_t len;
  int line, col;
};

class NumberFile {
 public:
  explicit NumberFile(const std::string& file) : file_(file) {
    struct stat st;
    if (::stat(file.c_str(), &st) != 0)
      fail_file(file, -1, std::string("cannot open: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail_file(file, -1, "not a regular file");
    if (st.st_size > (int64_t{1} << 31)) fail_file(file, -1, "over 2 GiB; not a ConvNetJS weight file");
    std::ifstream f(file, std::ios::binary);
    if (!f) fail_file(file, -1, std::string("cannot open: ") + std::strerror(errno));
    std::ostringstream ss;
    ss << f.rdbuf();
    text_ = ss.str();
    int line = 1, col = 1;
    const char* s = text_.c_str();
    for (size_t i = 0; i < text_.size();) {
      char c = s[i];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v') {
        if (c == '\n') {
          ++line;
          col = 1;
        } else {
          ++col;
        }
        ++i;
        continue;
      }
      size_t j = i;
      while (j < text_.size() && !std::strchr(" \t\r\n\f\v", s[j]) && s[j] != '\0') ++j;
      if (j == i) fail_at({file, line, col}, "", "", "", "NUL byte in a text weight file");
      toks_.push_back({s + i, j - i, line, col});
      col += static_cast<int>(j - i);
      i = j;
    }
  }

  size_t size() const { return toks_.size(); }
  std::string tok(size_t i) const { return std::string(toks_[i].p, toks_[i].len); }
  SourceLoc loc(size_t i) const { return {file_, toks_[i].line, toks_[i].col}; }

  // Header integer i, 1 <= value <= max_value.
  int64_t header_int(size_t i, const char* name, int64_t max_value, const char* header) const {
    if (i >= toks_.size())
      fail_file(file_, -1, std::string("expected the header '") + header + "', the file ends before " + name);
    const Token& t = toks_[i];
    bool digits = t.len <= 18;
    for (size_t k = 0; k < t.len && digits; ++k) digits = t.p[k] >= '0' && t.p[k] <= '9';
    int64_t v = digits ? std::strtoll(tok(i).c_str(), nullptr, 10) : 0;
    if (!digits || v < 1 || v > max_value)
      fail_at(loc(i), "", "", "",
              std::string("header '") + header + "': " + name + " must be an integer from 1 to " +
                  std::to_string(max_value) + ", found '" + tok(i) + "'");
    return v;
  }

  // Value i (counted from the first token) as a finite float.
  float number(size_t i) const {
    const Token& t = toks_[i];
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
          loc(i), "", "", "",
          "number " + std::to_string(i + 1) + ": expected a finite decimal number, found '" + tok(i) + "'");
    return v;
  }

  // Checks the token count is exactly header + need.
  void expect_count(size_t header, int64_t need, const std::string& what) const {
    int64_t have = static_cast<int64_t>(toks_.size()) - static_cast<int64_t>(header);
    if (have < need)
      fail_file(file_, -1,
                "expected " + std::to_string(need) + " numbers after the header (" + what + "), found " +
                    std::to_string(have));
    if (have > need) {
      size_t first = header + static_cast<size_t>(need);
      fail_at(loc(first), "", "", "",
              "number " + std::to_string(first + 1) + " '" + tok(first) + "' is one too many: expected " +
                  std::to_string(need) + " numbers after the header (" + what + "), found " +
                  std::to_string(have));
    }
  }

  const std::string& file() const { return file_; }

 private:
  std::string file_, text_;
  std::vector<Token> toks_;
};

constexpr int64_t kMaxDim = int64_t{1} << 24;

}  // namespace

std::map<std::string, Tensor> read_convnetjs_conv(const std::string& file) {
  NumberFile nf(file);
  const char* hdr = "KW KH DEPTH FILTERS";
  int64_t kw = nf.header_int(0, "KW", 4096, hdr);
  int64_t kh = nf.header_int(1, "KH", 4096, hdr);
  int64_t depth = nf.header_int(2, "DEPTH", kMaxDim, hdr);
  int64_t filters = nf.header_int(3, "FILTERS", kMaxDim, hdr);
  int64_t need = 0;
  try {
    int64_t nw = checked_mul(checked_mul(checked_mul(filters, kw, "conv weights"), kh, "conv weights"), depth,
                             "conv weights");
    need = checked_add(nw, filters, "conv weights");
  } catch (const Error& e) {
    fail_at(nf.loc(0), "", "", "", std::string("header '") + hdr + "': " + e.what());
  }
  nf.expect_count(4, need,
                  std::to_string(filters) + "x" + std::to_string(kw) + "x" + std::to_string(kh) + "x" +
                      std::to_string(depth) + " weights + " + std::to_string(filters) + " biases");

  Tensor w({filters, depth, kh, kw});
  Tensor b({filters});
  size_t n = 4;
  for (int64_t f = 0; f < filters; ++f)
    for (int64_t x = 0; x < kw; ++x)
      for (int64_t y = 0; y < kh; ++y)
        for (int64_t d = 0; d < depth; ++d)
          w.data[static_cast<size_t>(((f * depth + d) * kh + y) * kw + x)] = nf.number(n++);
  for (int64_t f = 0; f < filters; ++f) b.data[static_cast<size_t>(f)] = nf.number(n++);
  return {{"weight", std::move(w)}, {"bias", std::move(b)}};
}

std::map<std::string, Tensor> read_convnetjs_fc(const std::string& file, const Shape& in) {
  NumberFile nf(file);
  const char* hdr = "INPUTS OUTPUTS";
  int64_t inputs = nf.header_int(0, "INPUTS", int64_t{1} << 31, hdr);
  int64_t outputs = nf.header_int(1, "OUTPUTS", kMaxDim, hdr);
  if (inputs != in.size())
    fail_at(nf.loc(0), "", "", "",
            "header says " + std::to_string(inputs) + " inputs but the layer's input " + in.str() + " has " +
                std::to_string(in.size()));
  int64_t nw = checked_mul(outputs, inputs, "fc weights");
  nf.expect_count(2, checked_add(nw, outputs, "fc weights"),
                  std::to_string(outputs) + "x" + std::to_string(inputs) + " weights + " +
                      std::to_string(outputs) + " biases");
  Tensor w({outputs, inputs});
  Tensor b({outputs});
  size_t n = 2;
  for (int64_t o = 0; o < outputs; ++o)
    for (int64_t k = 0; k < inputs; ++k)
      w.data[static_cast<size_t>(o * inputs + chw_of_yxd(in, k))] = nf.number(n++);
  for (int64_t o = 0; o < outputs; ++o) b.data[static_cast<size_t>(o)] = nf.number(n++);
  return {{"weight", std::move(w)}, {"bias", std::move(b)}};
}

}  // namespace cnnrun

// ConvNetJS JSON snapshots ------------------------------------------------------------------

namespace cnnrun {

namespace {

// A Vol's "w": an object {"0": v0, "1": v1, ...} (how JSON.stringify writes a Float64Array) or
// an array.
std::vector<double> vol_values(const std::string& file, const nlohmann::json& vol, const std::string& what,
                               int64_t expect) {
  if (!vol.is_object() || !vol.contains("w"))
    throw Error(file + ": " + what + ": expected a Vol object with \"w\"");
  const nlohmann::json& w = vol["w"];
  std::vector<double> out(static_cast<size_t>(expect));
  if (static_cast<int64_t>(w.size()) != expect)
    throw Error(file + ": " + what + ": expected " + std::to_string(expect) + " values, found " +
                std::to_string(w.size()));
  for (int64_t i = 0; i < expect; ++i) {
    const nlohmann::json& v =
        w.is_array() ? w[static_cast<size_t>(i)] : w.value(std::to_string(i), nlohmann::json());
    if (!v.is_number() || !std::isfinite(v.get<double>()))
      throw Error(file + ": " + what + ": value " + std::to_string(i) + " is missing or not a finite number");
    out[static_cast<size_t>(i)] = v.get<double>();
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
                                                    const std::vector<Shape>& fc_inputs) {
  std::ifstream f(file, std::ios::binary);
  if (!f) throw Error(file + ": cannot open the ConvNetJS snapshot");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
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
      Tensor w({F, c, kh, kw});
      for (int64_t fi = 0; fi < F; ++fi) {
        if (json_dim(file, filters[static_cast<size_t>(fi)], "sx", what) != kw ||
            json_dim(file, filters[static_cast<size_t>(fi)], "sy", what) != kh ||
            json_dim(file, filters[static_cast<size_t>(fi)], "depth", what) != c)
          throw Error(file + ": " + what + ": filter " + std::to_string(fi) +
                      " differs in shape from filter 0");
        std::vector<double> v =
            vol_values(file, filters[static_cast<size_t>(fi)], what + " filter " + std::to_string(fi),
                       checked_mul(checked_mul(kw, kh, "filter size"), c, "filter size"));
        for (int64_t y = 0; y < kh; ++y)
          for (int64_t x = 0; x < kw; ++x)
            for (int64_t d = 0; d < c; ++d)
              w.data[static_cast<size_t>(((fi * c + d) * kh + y) * kw + x)] =
                  static_cast<float>(v[static_cast<size_t>((kw * y + x) * c + d)]);
      }
      r.tensors["weight"] = std::move(w);
    } else {
      if (fc_seen >= fc_inputs.size())
        throw Error(file + ": " + what + ": the snapshot has more fc layers than the netdef");
      const Shape in = fc_inputs[fc_seen++];
      const int64_t n = in.size();
      Tensor w({F, n});
      for (int64_t o = 0; o < F; ++o) {
        std::vector<double> v =
            vol_values(file, filters[static_cast<size_t>(o)], what + " output " + std::to_string(o), n);
        for (int64_t k = 0; k < n; ++k)
          w.data[static_cast<size_t>(o * n + chw_of_yxd(in, k))] =
              static_cast<float>(v[static_cast<size_t>(k)]);
      }
      r.tensors["weight"] = std::move(w);
    }
    if (!L.contains("biases")) throw Error(file + ": " + what + ": no \"biases\"");
    std::vector<double> b = vol_values(file, L["biases"], what + " biases", F);
    Tensor bt({F});
    for (int64_t i = 0; i < F; ++i)
      bt.data[static_cast<size_t>(i)] = static_cast<float>(b[static_cast<size_t>(i)]);
    r.tensors["bias"] = std::move(bt);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace cnnrun
