// ONNX graph -> netdef. The graph is walked once in topological order. Every value is one of:
// - a constant (initializers, Constant nodes, and everything computed from constants alone,
//   including Shape of an activation: cnnrun's shapes are static, so the Shape -> Gather ->
//   Unsqueeze -> Concat -> Reshape chains torch.onnx.export writes fold to a constant here);
// - an activation: a batch of N x C x H x W (rank 4) or N x F (rank 2, held as F x 1 x 1), made
//   by one netdef layer (or the network input);
// - unknown: made by a node that cannot be imported (so its readers are not reported twice).
// Each node that computes on an activation becomes one layer named after the node. Everything
// that cannot be mapped is collected and reported in one error at the end.
#include "engine/onnx/onnx_import.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "engine/io/weights.h"
#include "engine/layer.h"
#include "engine/onnx/onnx_model.h"

namespace cnnrun {

namespace {

using onnx_io::Const;

// Stands for the batch size inside folded shape constants: Shape of an N x C x H x W activation
// is [kBatch, C, H, W].
constexpr int64_t kBatch = std::numeric_limits<int64_t>::min() / 2;
// The netdef parser's limit on values per image, checked here so the error names the node.
constexpr int64_t kMaxImageValues = int64_t{1} << 28;

std::string q(const std::string& s) {  // a YAML double-quoted scalar
  std::string o = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      o += '\\';
      o += static_cast<char>(ch);
    } else if (ch < 0x20 || ch == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", ch);
      o += b;
    } else {
      o += static_cast<char>(ch);
    }
  }
  return o + "\"";
}

// The shortest decimal that reads back as the same float (ONNX attributes are float32).
std::string num(double v) {
  char b[40];
  for (int digits = 6; digits <= 9; ++digits) {
    std::snprintf(b, sizeof b, "%.*g", digits, v);
    if (static_cast<float>(std::strtod(b, nullptr)) == static_cast<float>(v)) return b;
  }
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

std::string pair_str(int64_t a, int64_t b) {
  return a == b ? std::to_string(a) : "[" + std::to_string(a) + ", " + std::to_string(b) + "]";
}

std::string ints_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t k = 0; k < v.size(); ++k)
    s += (k ? ", " : "") + (v[k] == kBatch ? std::string("N") : std::to_string(v[k]));
  return s + "]";
}

struct Val {
  enum Kind { kUnknown, kConst, kAct } kind = kUnknown;
  Const c;            // kConst
  int rank = 0;       // kAct: 4 or 2
  Shape shape;        // kAct: per image (rank 2: F x 1 x 1)
  std::string layer;  // kAct: the producing layer, "input" for the network input
};

struct LayerOut {
  std::string name, type;
  std::vector<std::pair<std::string, std::string>> keys;  // key -> YAML value
  std::vector<std::string> inputs;
  std::vector<std::pair<std::string, std::string>> tensors;  // role -> tensor name
};

class Importer {
 public:
  Importer(const onnx::ModelProto& m, int64_t opset, std::string model, std::string dir)
      : m_(m), g_(m.graph()), opset_(opset), model_(std::move(model)), dir_(std::move(dir)) {}

  ImportResult run(const ImportOptions& opt);

 private:
  // One node's reading context: attributes read are marked, the rest reported as unsupported.
  struct Node {
    const onnx::NodeProto* n;
    std::string label;  // "node 'x' (Conv)"
    std::set<std::string> read;
  };

  const onnx::AttributeProto* attr(Node& nd, const std::string& key) {
    nd.read.insert(key);
    for (const auto& a : nd.n->attribute())
      if (a.name() == key) return &a;
    return nullptr;
  }
  int64_t attr_int(Node& nd, const std::string& key, int64_t def) {
    const auto* a = attr(nd, key);
    return a ? a->i() : def;
  }
  double attr_float(Node& nd, const std::string& key, double def) {
    const auto* a = attr(nd, key);
    return a ? a->f() : def;
  }
  std::string attr_string(Node& nd, const std::string& key, const std::string& def) {
    const auto* a = attr(nd, key);
    return a ? a->s() : def;
  }
  std::vector<int64_t> attr_ints(Node& nd, const std::string& key, std::vector<int64_t> def) {
    const auto* a = attr(nd, key);
    return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : def;
  }
  void unsupported(Node& nd, const std::string& what) { problems_.push_back(nd.label + ": " + what); }
  void unread_attrs(Node& nd) {
    for (const auto& a : nd.n->attribute())
      if (!nd.read.count(a.name())) unsupported(nd, "attribute '" + a.name() + "' is not supported");
  }
  [[noreturn]] void fail(const Node& nd, const std::string& what) {
    throw Error(model_ + ": " + nd.label + ": " + what);
  }

  Val& val(const std::string& name) { return vals_[name]; }
  const Val* input(const Node& nd, int k) {
    if (k >= nd.n->input_size() || nd.n->input(k).empty()) return nullptr;
    return &vals_[nd.n->input(k)];
  }
  void set_out(const Node& nd, int k, Val v) {
    if (k < nd.n->output_size() && !nd.n->output(k).empty()) vals_[nd.n->output(k)] = std::move(v);
  }
  bool output_used(const Node& nd, int k) {
    return k < nd.n->output_size() && !nd.n->output(k).empty() && readers_[nd.n->output(k)] > 0;
  }

  std::string layer_name(const Node& nd);
  std::string add_tensor(const std::string& name, Tensor t);
  void emit(LayerOut l, const Node& nd, int rank, const Shape& s);
  void node(Node& nd);
  bool fold(Node& nd);
  bool gelu_erf(Node& nd);
  const onnx::NodeProto* only_reader(const std::string& value, const char* op) const;
  bool const_near(const std::string& value, double want) const;
  void conv(Node& nd, const Val& x);
  void pool(Node& nd, const Val& x, bool max);
  void gemm(Node& nd, const Val& x);
  void matmul(Node& nd, const Val& x);
  void reshape(Node& nd, const Val& x);
  void resize(Node& nd, const Val& x);
  struct Window {
    int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, oh = 0, ow = 0;
    bool ceil = false;
  };
  bool window(Node& nd, const Val& x, int64_t kh, int64_t kw, Window& w, bool conv);
  const Const* const_input(Node& nd, int k, const char* what, bool required);

  const onnx::ModelProto& m_;
  const onnx::GraphProto& g_;
  int64_t opset_;
  std::string model_, dir_;
  std::map<std::string, Val> vals_;
  std::map<std::string, int> readers_;  // value -> number of node inputs (and graph outputs) reading it
  std::map<std::string, int> reader_;   // value -> index of a node reading it (the one where readers_ is 1)
  // Nodes (by first output) folded into a layer emitted for another node: the Add of a MatMul's
  // bias, the rest of a Gelu written with Erf.
  std::set<std::string> absorbed_;
  std::vector<std::string> problems_;
  std::vector<LayerOut> layers_;
  std::set<std::string> layer_names_{"input"};
  int64_t input_batch_ = 0;  // the graph input's declared batch size, 0 = symbolic
  ImportResult res_;
};

std::string Importer::layer_name(const Node& nd) {
  std::string base = nd.n->name();
  if (base.empty()) base = nd.n->output_size() ? nd.n->output(0) : nd.n->op_type();
  if (base.empty()) base = nd.n->op_type();
  std::string nm = base;
  for (int k = 2; layer_names_.count(nm); ++k) nm = base + "_" + std::to_string(k);
  layer_names_.insert(nm);
  return nm;
}

// Tensors keep their initializer's name; a second, different tensor under one name (a weight
// transposed for one reader and not another) gets a suffix.
std::string Importer::add_tensor(const std::string& name, Tensor t) {
  std::string nm = name;
  for (int k = 2;; ++k) {
    auto it = res_.tensors.find(nm);
    if (it == res_.tensors.end()) break;
    if (it->second.dims == t.dims && it->second.data == t.data) return nm;
    nm = name + "_" + std::to_string(k);
  }
  res_.tensors.emplace(nm, std::move(t));
  return nm;
}

void Importer::emit(LayerOut l, const Node& nd, int rank, const Shape& s) {
  int64_t n = 0;
  try {
    n = checked_mul(checked_mul(s.c, s.h, "values per image"), s.w, "values per image");
  } catch (const Error&) {
    n = kMaxImageValues + 1;
  }
  if (s.c < 1 || s.h < 1 || s.w < 1 || n > kMaxImageValues)
    throw Error(model_ + ": " + nd.label + ": output " + std::to_string(s.c) + "x" + std::to_string(s.h) +
                "x" + std::to_string(s.w) + " per image is empty or over the limit of " +
                std::to_string(kMaxImageValues) + " values");
  Val v;
  v.kind = Val::kAct;
  v.rank = rank;
  v.shape = s;
  v.layer = l.name;
  set_out(nd, 0, v);
  layers_.push_back(std::move(l));
}

const Const* Importer::const_input(Node& nd, int k, const char* what, bool required) {
  const Val* v = input(nd, k);
  if (!v) {
    if (required) unsupported(nd, std::string("input ") + what + " is missing");
    return nullptr;
  }
  if (v->kind == Val::kConst) return &v->c;
  if (v->kind == Val::kAct)
    unsupported(nd, std::string("input ") + what + " ('" + nd.n->input(k) +
                        "') is computed at run time; cnnrun needs it constant (an initializer)");
  return nullptr;
}

// Strides and symmetric pads of a 2-D window from strides/pads/auto_pad/dilations/ceil_mode.
bool Importer::window(Node& nd, const Val& x, int64_t kh, int64_t kw, Window& w, bool conv) {
  bool ok = true;
  std::vector<int64_t> st = attr_ints(nd, "strides", {1, 1});
  std::vector<int64_t> pads = attr_ints(nd, "pads", {0, 0, 0, 0});
  std::vector<int64_t> dil = attr_ints(nd, "dilations", {1, 1});
  std::string ap = attr_string(nd, "auto_pad", "NOTSET");
  w.ceil = conv ? false : attr_int(nd, "ceil_mode", 0) != 0;
  if (st.size() != 2 || st[0] < 1 || st[1] < 1 || st[0] > (1 << 20) || st[1] > (1 << 20)) {
    unsupported(nd, "strides " + ints_str(st) + " (two positive values expected)");
    return false;
  }
  w.sh = st[0];
  w.sw = st[1];
  if (dil.size() != 2 || dil[0] < 1 || dil[1] < 1 || dil[0] > (1 << 20) || dil[1] > (1 << 20)) {
    unsupported(nd, "dilations " + ints_str(dil) + " (two positive values expected)");
    return false;
  }
  if (!conv && dil != std::vector<int64_t>{1, 1}) {
    unsupported(nd, "dilations " + ints_str(dil) + " (cnnrun's pools take none)");
    ok = false;
  }
  w.dh = dil[0];
  w.dw = dil[1];
  const int64_t eh = (kh - 1) * w.dh + 1, ew = (kw - 1) * w.dw + 1;  // the window's extent
  if (ap == "VALID") {
    w.ph = w.pw = 0;
  } else if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
    auto same = [](int64_t in, int64_t k, int64_t s) {
      int64_t out = (in + s - 1) / s;
      return std::max<int64_t>(0, (out - 1) * s + k - in);
    };
    int64_t th = same(x.shape.h, eh, w.sh), tw = same(x.shape.w, ew, w.sw);
    if (th % 2 || tw % 2) {
      unsupported(nd, "auto_pad " + ap + " needs asymmetric padding here (cnnrun pads both sides alike)");
      return false;
    }
    w.ph = th / 2;
    w.pw = tw / 2;
  } else if (ap == "NOTSET" || ap.empty()) {
    if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3] || pads[0] < 0 || pads[1] < 0 ||
        pads[0] > (1 << 20) || pads[1] > (1 << 20)) {
      unsupported(nd, "pads " + ints_str(pads) + " (cnnrun pads both sides of a dimension alike)");
      return false;
    }
    w.ph = pads[0];
    w.pw = pads[1];
  } else {
    unsupported(nd, "auto_pad '" + ap + "'");
    return false;
  }
  // Output size, PyTorch's rule (what cnnrun's layers compute): with ceil_mode a last window
  // that starts inside the right padding is dropped.
  auto out = [&](int64_t in, int64_t e, int64_t s, int64_t p, const char* dim) {
    if (!w.ceil) return window_out(in, e, s, p, dim);
    int64_t span = checked_add(in, 2 * p, "padded size") - e;
    if (span < 0) return window_out(in, e, s, p, dim);  // says why
    int64_t o = (span + s - 1) / s + 1;
    if ((o - 1) * s >= in + p) --o;
    return o;
  };
  try {
    w.oh = out(x.shape.h, eh, w.sh, w.ph, "height");
    w.ow = out(x.shape.w, ew, w.sw, w.pw, "width");
  } catch (const Error& e) {
    fail(nd, e.what());
  }
  return ok;
}

void Importer::conv(Node& nd, const Val& x) {
  const Const* w = const_input(nd, 1, "W (weights)", true);
  const Const* b = nd.n->input_size() > 2 ? const_input(nd, 2, "B (bias)", false) : nullptr;
  if (nd.n->input_size() > 2 && !nd.n->input(2).empty() && !b) return;
  int64_t group = attr_int(nd, "group", 1);
  std::vector<int64_t> ks = attr_ints(nd, "kernel_shape", {});
  if (!w) return;
  if (x.rank != 4) return unsupported(nd, "input X is not N x C x H x W");
  if (w->is_int || w->dims.size() != 4)
    return unsupported(nd, "W must be a 4-D float tensor (2-D convolution)");
  const int64_t f = w->dims[0], kh = w->dims[2], kw = w->dims[3];
  if (!ks.empty() && ks != std::vector<int64_t>{kh, kw})
    fail(nd, "kernel_shape " + ints_str(ks) + " differs from W's " + ints_str(w->dims));
  if (group < 1 || x.shape.c % group || f % group)
    fail(nd, "group " + std::to_string(group) + " does not divide the " + std::to_string(x.shape.c) +
                 " input channels and " + std::to_string(f) + " filters");
  if (w->dims[1] * group != x.shape.c)
    fail(nd, "W " + ints_str(w->dims) + " with group " + std::to_string(group) + " expects " +
                 std::to_string(w->dims[1] * group) + " input channels, X has " + std::to_string(x.shape.c));
  if (f < 1 || kh < 1 || kw < 1) fail(nd, "W " + ints_str(w->dims) + " is empty");
  if (b && (b->is_int || b->numel() != f))
    fail(nd, "B " + ints_str(b->dims) + " must hold one float per filter (" + std::to_string(f) + ")");
  Window win;
  if (!window(nd, x, kh, kw, win, true)) return;
  const Shape out{f, win.oh, win.ow};
  LayerOut l{layer_name(nd), "conv", {}, {x.layer}, {}};
  l.keys = {{"filters", std::to_string(f)}, {"kernel", pair_str(kh, kw)}};
  if (win.sh != 1 || win.sw != 1) l.keys.emplace_back("stride", pair_str(win.sh, win.sw));
  if (win.ph || win.pw) l.keys.emplace_back("pad", pair_str(win.ph, win.pw));
  if (win.dh != 1 || win.dw != 1) l.keys.emplace_back("dilation", pair_str(win.dh, win.dw));
  if (group != 1) l.keys.emplace_back("groups", std::to_string(group));
  Tensor wt;
  wt.dims = w->dims;
  wt.data = w->f;
  l.tensors.emplace_back("weight", add_tensor(nd.n->input(1), std::move(wt)));
  if (b) {
    Tensor bt;
    bt.dims = {f};
    bt.data = b->f;
    l.tensors.emplace_back("bias", add_tensor(nd.n->input(2), std::move(bt)));
  } else {
    l.keys.emplace_back("bias", "false");
  }
  emit(std::move(l), nd, 4, out);
}

void Importer::pool(Node& nd, const Val& x, bool max) {
  std::vector<int64_t> ks = attr_ints(nd, "kernel_shape", {});
  int64_t count_pad = max ? 0 : attr_int(nd, "count_include_pad", 0);
  if (max) {
    if (attr_int(nd, "storage_order", 0) != 0) unsupported(nd, "storage_order 1");
    if (output_used(nd, 1)) unsupported(nd, "output Indices is read (cnnrun pools give values only)");
  }
  if (x.rank != 4) return unsupported(nd, "input X is not N x C x H x W");
  if (ks.size() != 2 || ks[0] < 1 || ks[1] < 1 || ks[0] > (1 << 20) || ks[1] > (1 << 20))
    return unsupported(nd, "kernel_shape " + ints_str(ks) + " (two positive values expected)");
  Window win;
  if (!window(nd, x, ks[0], ks[1], win, false)) return;
  if (2 * win.ph > ks[0] || 2 * win.pw > ks[1])
    return unsupported(nd, "pads larger than half the kernel (" + pair_str(win.ph, win.pw) + " for " +
                               pair_str(ks[0], ks[1]) + ")");
  const Shape out{x.shape.c, win.oh, win.ow};
  LayerOut l{layer_name(nd), max ? "maxpool" : "avgpool", {}, {x.layer}, {}};
  l.keys = {{"size", pair_str(ks[0], ks[1])}, {"stride", pair_str(win.sh, win.sw)}};
  if (win.ph || win.pw) l.keys.emplace_back("pad", pair_str(win.ph, win.pw));
  if (win.ceil) l.keys.emplace_back("ceil_mode", "true");
  if (!max && (win.ph || win.pw || win.ceil)) l.keys.emplace_back("count_pad", count_pad ? "true" : "false");
  emit(std::move(l), nd, 4, out);
}

void Importer::gemm(Node& nd, const Val& x) {
  const Const* b = const_input(nd, 1, "B (weights)", true);
  const Const* c = nd.n->input_size() > 2 ? const_input(nd, 2, "C (bias)", false) : nullptr;
  if (nd.n->input_size() > 2 && !nd.n->input(2).empty() && !c) return;
  double alpha = attr_float(nd, "alpha", 1.0), beta = attr_float(nd, "beta", 1.0);
  int64_t ta = attr_int(nd, "transA", 0), tb = attr_int(nd, "transB", 0);
  if (opset_ < 7) attr_int(nd, "broadcast", 0);
  if (ta) return unsupported(nd, "transA 1 (the batch must be A's first dimension)");
  if (!b) return;
  if (x.rank != 2) return unsupported(nd, "input A is not N x F");
  if (b->is_int || b->dims.size() != 2) fail(nd, "B must be a 2-D float tensor, found " + ints_str(b->dims));
  const int64_t k = tb ? b->dims[1] : b->dims[0], o = tb ? b->dims[0] : b->dims[1];
  if (k != x.shape.c)
    fail(nd, "B " + ints_str(b->dims) + (tb ? " (transposed)" : "") + " takes " + std::to_string(k) +
                 " inputs, A has " + std::to_string(x.shape.c));
  if (o < 1) fail(nd, "B " + ints_str(b->dims) + " has no outputs");
  if (c && (c->is_int || (c->numel() != o && c->numel() != 1)))
    fail(nd, "C " + ints_str(c->dims) + " must hold one float per output (" + std::to_string(o) + ") or one");
  Tensor wt({o, k});
  for (int64_t r = 0; r < o; ++r)
    for (int64_t q2 = 0; q2 < k; ++q2)
      wt.data[static_cast<size_t>(r * k + q2)] =
          static_cast<float>(alpha * b->f[static_cast<size_t>(tb ? r * k + q2 : q2 * o + r)]);
  LayerOut l{layer_name(nd), "fc", {{"outputs", std::to_string(o)}}, {x.layer}, {}};
  l.tensors.emplace_back("weight", add_tensor(nd.n->input(1), std::move(wt)));
  if (c && beta != 0.0) {
    Tensor bt({o});
    for (int64_t r = 0; r < o; ++r)
      bt.data[static_cast<size_t>(r)] =
          static_cast<float>(beta * c->f[c->numel() == 1 ? 0 : static_cast<size_t>(r)]);
    l.tensors.emplace_back("bias", add_tensor(nd.n->input(2), std::move(bt)));
  } else {
    l.keys.emplace_back("bias", "false");
  }
  emit(std::move(l), nd, 2, {o, 1, 1});
}

// MatMul(A, B) with B constant [K, N], and when its only reader is Add(., C) with C constant of
// N values (or one), that Add too: one fc layer, named after the MatMul.
void Importer::matmul(Node& nd, const Val& x) {
  const Const* b = const_input(nd, 1, "B (weights)", true);
  if (!b) return;
  if (x.rank != 2) return unsupported(nd, "input A is not N x F");
  if (b->is_int || b->dims.size() != 2)
    return unsupported(nd, "B must be a 2-D float tensor, found " + ints_str(b->dims));
  const int64_t k = b->dims[0], o = b->dims[1];
  if (k != x.shape.c)
    fail(nd, "B " + ints_str(b->dims) + " takes " + std::to_string(k) + " inputs, A has " +
                 std::to_string(x.shape.c));
  if (o < 1) fail(nd, "B " + ints_str(b->dims) + " has no outputs");
  Tensor wt({o, k});
  for (int64_t r = 0; r < o; ++r)
    for (int64_t q2 = 0; q2 < k; ++q2)
      wt.data[static_cast<size_t>(r * k + q2)] = b->f[static_cast<size_t>(q2 * o + r)];
  LayerOut l{layer_name(nd), "fc", {{"outputs", std::to_string(o)}}, {x.layer}, {}};
  l.tensors.emplace_back("weight", add_tensor(nd.n->input(1), std::move(wt)));
  // The Add that takes this MatMul's output and a constant bias, if it is the only reader.
  const std::string& y = nd.n->output(0);
  const onnx::NodeProto* add = only_reader(y, "Add");
  std::string bias_name;
  if (add && add->input_size() == 2) {
    bias_name = add->input(0) == y ? add->input(1) : add->input(0);
    auto it = vals_.find(bias_name);
    if (it == vals_.end() || it->second.kind != Val::kConst || it->second.c.is_int ||
        (it->second.c.numel() != o && it->second.c.numel() != 1))
      add = nullptr;
  } else {
    add = nullptr;
  }
  if (add) {
    const Const& c = vals_[bias_name].c;
    Tensor bt({o});
    for (int64_t r = 0; r < o; ++r)
      bt.data[static_cast<size_t>(r)] = c.f[c.numel() == 1 ? 0 : static_cast<size_t>(r)];
    l.tensors.emplace_back("bias", add_tensor(bias_name, std::move(bt)));
    absorbed_.insert(add->output(0));
    emit(std::move(l), nd, 2, {o, 1, 1});
    vals_[add->output(0)] = vals_[y];
  } else {
    l.keys.emplace_back("bias", "false");
    emit(std::move(l), nd, 2, {o, 1, 1});
  }
}

// Reshape of an activation to N x F (rank 2, or rank 4 with trailing ones) is a flatten; to its
// own shape, nothing. The target comes from a constant, usually folded from Shape.
void Importer::reshape(Node& nd, const Val& x) {
  int64_t allowzero = opset_ >= 14 ? attr_int(nd, "allowzero", 0) : 0;
  std::vector<int64_t> t;
  if (opset_ < 5) {
    t = attr_ints(nd, "shape", {});
  } else {
    const Const* s = const_input(nd, 1, "shape", true);
    if (!s) return;
    if (!s->is_int || s->dims.size() != 1) fail(nd, "shape must be a 1-D int64 tensor");
    t = s->i;
  }
  const std::vector<int64_t> in = x.rank == 4 ? std::vector<int64_t>{kBatch, x.shape.c, x.shape.h, x.shape.w}
                                              : std::vector<int64_t>{kBatch, x.shape.c};
  if (t.empty()) fail(nd, "empty target shape");
  // Resolve 0 (copy) and the batch; count the rest.
  std::vector<int64_t> r = t;
  int infer = -1;
  int64_t known = 1;
  for (size_t k = 0; k < r.size(); ++k) {
    if (r[k] == 0 && !allowzero) {
      if (k >= in.size()) fail(nd, "shape " + ints_str(t) + ": 0 at a dimension the input does not have");
      r[k] = in[k];
    }
    if (k == 0 && (r[0] == kBatch || (input_batch_ > 0 && r[0] == input_batch_))) {
      r[0] = kBatch;
      continue;
    }
    if (r[k] == -1) {
      if (infer >= 0) fail(nd, "shape " + ints_str(t) + " has two -1");
      infer = static_cast<int>(k);
      continue;
    }
    if (r[k] < 0 || r[k] == kBatch)
      return unsupported(nd, "reshape to " + ints_str(t) + " (the batch must stay the first dimension)");
    known = r[k] && known <= kMaxImageValues ? known * r[k] : kMaxImageValues + 1;
  }
  const int64_t per = x.shape.size();
  if (r[0] != kBatch) {
    // [-1, F...]: the batch is inferred.
    if (infer == 0 && known == per) {
      r[0] = kBatch;
      infer = -1;
    } else {
      return unsupported(nd, "reshape to " + ints_str(t) + " (the batch must stay the first dimension)");
    }
  }
  if (infer > 0) {
    if (known == 0 || per % known)
      fail(nd, "cannot reshape " + std::to_string(per) + " values to " + ints_str(t));
    r[static_cast<size_t>(infer)] = per / known;
    known = per;
  }
  if (known != per)
    fail(nd, "cannot reshape " + ints_str(in) + " (" + std::to_string(per) + " per image) to " + ints_str(t));
  if (r == in) {  // nothing changes
    set_out(nd, 0, x);
    res_.notes.push_back(nd.label + ": reshape to its own shape, imported as nothing");
    return;
  }
  bool to_2d = r.size() == 2 || (r.size() == 4 && r[2] == 1 && r[3] == 1);
  if (!to_2d) return unsupported(nd, "reshape to " + ints_str(r) + " (cnnrun reshapes only to N x F)");
  if (x.rank == 2) {
    set_out(nd, 0, x);
    return;
  }
  LayerOut l{layer_name(nd), "flatten", {}, {x.layer}, {}};
  emit(std::move(l), nd, r.size() == 2 ? 2 : 4, {per, 1, 1});
  if (r.size() == 4) vals_[nd.n->output(0)].rank = 2;  // N x F x 1 x 1 holds like N x F
}

// Resize (opset 10+) and Upsample (7-9) of height and width by whole or fractional factors, or to
// given sizes: cnnrun's upsample, nearest (PyTorch's nearest: floor(dst / scale)) or bilinear
// (half-pixel centres, or align_corners). Other modes and coordinate rules are not what that layer
// computes.
void Importer::resize(Node& nd, const Val& x) {
  const onnx::NodeProto& n = *nd.n;
  std::string mode = attr_string(nd, "mode", "nearest");
  std::string ct = "asymmetric", nm = "floor";
  if (n.op_type() == "Resize" && opset_ >= 11) {
    ct = attr_string(nd, "coordinate_transformation_mode", "half_pixel");
    nm = attr_string(nd, "nearest_mode", "round_prefer_floor");
    attr_float(nd, "cubic_coeff_a", -0.75);
    if (attr_int(nd, "exclude_outside", 0) != 0) unsupported(nd, "exclude_outside 1");
    attr_float(nd, "extrapolation_value", 0.0);
    if (opset_ >= 18) {
      if (attr_ints(nd, "axes", {}).size()) unsupported(nd, "axes");
      if (attr_string(nd, "keep_aspect_ratio_policy", "stretch") != "stretch")
        unsupported(nd, "keep_aspect_ratio_policy other than stretch");
      attr_int(nd, "antialias", 0);
    }
  } else if (n.op_type() == "Resize") {
    nm = "round_prefer_floor";  // Resize-10: asymmetric, rounding as in opset 11's default
  }
  if (x.rank != 4) return unsupported(nd, "input X is not N x C x H x W");
  // The scales (or sizes) input: Upsample-7 has an attribute, Upsample-9 and Resize-10 input 1,
  // Resize-11+ input 2 (scales) or 3 (sizes).
  std::vector<double> sc;
  int64_t size_h = 0, size_w = 0;  // the sizes input, when it gave the output size
  if (n.op_type() == "Upsample" && opset_ < 9) {
    const auto* a = attr(nd, "scales");
    if (a) sc.assign(a->floats().begin(), a->floats().end());
  } else {
    int si = n.op_type() == "Upsample" || opset_ < 11 ? 1 : 2;
    const Val* sv = input(nd, si);
    if (sv && !(sv->kind == Val::kConst && sv->c.numel() == 0)) {
      const Const* c = const_input(nd, si, "scales", false);
      if (!c) return;
      for (float v : c->f) sc.push_back(v);
      for (int64_t v : c->i) sc.push_back(static_cast<double>(v));
    } else if (si == 2 && n.input_size() > 3 && !n.input(3).empty()) {
      const Const* c = const_input(nd, 3, "sizes", false);
      if (!c) return;
      if (!c->is_int || c->numel() != 4) fail(nd, "sizes must be 4 int64 values");
      const int64_t in[4] = {0, x.shape.c, x.shape.h, x.shape.w};
      sc = {1.0, 1.0, 0, 0};
      for (int k = 1; k < 4; ++k)
        sc[static_cast<size_t>(k)] =
            static_cast<double>(c->i[static_cast<size_t>(k)]) / static_cast<double>(in[k]);
      size_h = c->i[2], size_w = c->i[3];
    }
  }
  if (sc.size() != 4) return unsupported(nd, "no scales or sizes for N x C x H x W");
  auto integer = [](double v) { return v >= 1 && v <= (1 << 16) && v == std::floor(v); };
  auto positive = [](double v) { return v > 0 && v <= (1 << 16); };
  if (sc[0] != 1 || sc[1] != 1 || !positive(sc[2]) || !positive(sc[3]))
    return unsupported(nd, "scales [" + num(sc[0]) + ", " + num(sc[1]) + ", " + num(sc[2]) + ", " +
                               num(sc[3]) + "] (cnnrun resizes height and width only, by positive factors)");
  const bool whole = integer(sc[2]) && integer(sc[3]);
  // The output: whole factors multiply; fractional scales floor (ONNX's and PyTorch's rule); sizes
  // are as given.
  int64_t out_h = 0, out_w = 0;
  if (size_h > 0) {
    out_h = size_h, out_w = size_w;
  } else if (whole) {
    out_h = checked_mul(x.shape.h, static_cast<int64_t>(sc[2]), "height");
    out_w = checked_mul(x.shape.w, static_cast<int64_t>(sc[3]), "width");
  } else {
    out_h = static_cast<int64_t>(std::floor(static_cast<double>(x.shape.h) * sc[2]));
    out_w = static_cast<int64_t>(std::floor(static_cast<double>(x.shape.w) * sc[3]));
  }
  if (out_h < 1 || out_w < 1)
    return unsupported(nd, "an output of " + std::to_string(out_h) + " x " + std::to_string(out_w));
  std::vector<std::pair<std::string, std::string>> keys;
  if (whole) {
    keys.emplace_back("scale", pair_str(static_cast<int64_t>(sc[2]), static_cast<int64_t>(sc[3])));
  } else if (size_h > 0) {
    keys.emplace_back("size", pair_str(out_h, out_w));
  } else {
    // Written with float32's round-trip precision: cnnrun maps output to input coordinates by
    // the float 1 / scale, as PyTorch's interpolate(scale_factor=) does.
    auto f = [](double v) {
      char b[32];
      std::snprintf(b, sizeof b, "%.9g", v);
      return std::string(b);
    };
    keys.emplace_back("scale", "[" + f(sc[2]) + ", " + f(sc[3]) + "]");
  }
  const bool half = ct == "half_pixel" || ct == "pytorch_half_pixel";
  if (mode == "nearest") {
    // Source index floor(dst / f): half-pixel centres rounded to the nearest (whole factors never
    // tie), or asymmetric with floor (or with round_prefer_floor up to a factor of 2). Fractional
    // factors and sizes: asymmetric with floor only (half-pixel centres pick other pixels).
    const bool nearest_round = nm == "round_prefer_floor" || nm == "round_prefer_ceil";
    const int64_t fh = whole ? static_cast<int64_t>(sc[2]) : 0, fw = whole ? static_cast<int64_t>(sc[3]) : 0;
    bool floor_like = ct == "asymmetric" && nm == "floor";
    if (whole)
      floor_like = floor_like || (half && nearest_round) ||
                   (ct == "asymmetric" && nm == "round_prefer_floor" && fh <= 2 && fw <= 2);
    if (!floor_like)
      return unsupported(nd, "nearest with coordinate_transformation_mode " + ct + " and nearest_mode " + nm +
                                 (whole ? std::string() : " at a fractional factor"));
    keys.emplace_back("mode", "nearest");
  } else if (mode == "linear" || mode == "bilinear") {
    if (n.op_type() == "Upsample" || (!half && ct != "align_corners"))
      return unsupported(nd, "linear with coordinate_transformation_mode " + ct +
                                 " (cnnrun's bilinear is half_pixel or align_corners)");
    // pytorch_half_pixel maps a one-pixel output to input 0; cnnrun, as PyTorch's interpolate
    // does today, to the centre of the input.
    if (ct == "pytorch_half_pixel" && ((out_h == 1 && x.shape.h > 1) || (out_w == 1 && x.shape.w > 1)))
      return unsupported(nd, "pytorch_half_pixel to an output one pixel high or wide");
    // align_corners at fractional scales: ONNX maps by the floored output size, cnnrun (with
    // PyTorch's interpolate) by the scale.
    if (ct == "align_corners" && !whole && size_h == 0)
      return unsupported(nd, "align_corners at fractional scales (give sizes instead)");
    keys.emplace_back("mode", "bilinear");
    if (ct == "align_corners") keys.emplace_back("align_corners", "true");
  } else {
    return unsupported(nd, "mode '" + mode + "' (nearest or linear)");
  }
  LayerOut l{layer_name(nd), "upsample", std::move(keys), {x.layer}, {}};
  emit(std::move(l), nd, 4, {x.shape.c, out_h, out_w});
}

// Ops over constants only (the shape subgraphs), computed here. Returns false when the node is
// not one of them or an input is not constant.
// The one node reading `value`, when it is the only reader and of type `op`; else null.
const onnx::NodeProto* Importer::only_reader(const std::string& value, const char* op) const {
  auto r = readers_.find(value);
  if (r == readers_.end() || r->second != 1) return nullptr;
  auto k = reader_.find(value);
  if (k == reader_.end()) return nullptr;  // read by a graph output only
  const onnx::NodeProto& n = g_.node(k->second);
  return n.op_type() == op && n.output_size() == 1 ? &n : nullptr;
}

// A float scalar constant within float rounding of `want`.
bool Importer::const_near(const std::string& value, double want) const {
  auto it = vals_.find(value);
  if (it == vals_.end() || it->second.kind != Val::kConst || it->second.c.is_int || it->second.c.numel() != 1)
    return false;
  return std::fabs(static_cast<double>(it->second.c.f[0]) - want) <= 1e-6 * std::fabs(want);
}

// Gelu written out with Erf, as exporters emit it where the opset has no Gelu (torch.onnx
// before opset 20): y = Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5), the Div possibly a Mul by
// 1/sqrt 2, each Add and Mul's operands in either order, every intermediate read only by the
// next node. Seen at its first node: the chain becomes one gelu layer (exact, the erf form) and
// its other nodes are skipped. Anything else is left to the nodes' own handling.
bool Importer::gelu_erf(Node& nd) {
  const onnx::NodeProto& n0 = *nd.n;
  if (n0.input_size() != 2 || n0.output_size() != 1) return false;
  const Val* x = input(nd, 0);
  std::string xname = n0.input(0), cname = n0.input(1);
  if (n0.op_type() == "Mul" && (!x || x->kind != Val::kAct)) {
    std::swap(xname, cname);
    x = input(nd, 1);
  }
  if (!x || x->kind != Val::kAct) return false;
  const bool scaled =
      n0.op_type() == "Div" ? const_near(cname, std::sqrt(2.0)) : const_near(cname, std::sqrt(0.5));
  if (!scaled) return false;
  const onnx::NodeProto* erf = only_reader(n0.output(0), "Erf");
  if (!erf) return false;
  const onnx::NodeProto* add = only_reader(erf->output(0), "Add");
  if (!add || add->input_size() != 2) return false;
  const std::string& one = add->input(0) == erf->output(0) ? add->input(1) : add->input(0);
  if (!const_near(one, 1.0)) return false;
  const onnx::NodeProto* mx = only_reader(add->output(0), "Mul");
  if (!mx || mx->input_size() != 2) return false;
  const std::string& other = mx->input(0) == add->output(0) ? mx->input(1) : mx->input(0);
  if (other != xname) return false;
  const onnx::NodeProto* half = only_reader(mx->output(0), "Mul");
  if (!half || half->input_size() != 2) return false;
  const std::string& h = half->input(0) == mx->output(0) ? half->input(1) : half->input(0);
  if (!const_near(h, 0.5)) return false;

  const Val xv = *x;
  LayerOut l{layer_name(nd), "gelu", {}, {xv.layer}, {}};
  emit(std::move(l), nd, xv.rank, xv.shape);
  for (const onnx::NodeProto* p : {erf, add, mx, half}) absorbed_.insert(p->output(0));
  vals_[half->output(0)] = vals_[n0.output(0)];
  res_.notes.push_back(nd.label + " .. " + half->op_type() + " '" + half->output(0) +
                       "': Gelu written with Erf, imported as one gelu layer");
  return true;
}

bool Importer::fold(Node& nd) {
  const std::string& op = nd.n->op_type();
  static const std::set<std::string> foldable = {"Shape",  "Gather",   "Unsqueeze", "Squeeze",
                                                 "Concat", "Identity", "Cast",      "Constant"};
  if (!foldable.count(op)) return false;
  if (op == "Shape") {
    const Val* x = input(nd, 0);
    if (!x || x->kind == Val::kUnknown) return false;
    Const c;
    c.is_int = true;
    if (x->kind == Val::kConst)
      c.i = x->c.dims;
    else
      c.i = x->rank == 4 ? std::vector<int64_t>{kBatch, x->shape.c, x->shape.h, x->shape.w}
                         : std::vector<int64_t>{kBatch, x->shape.c};
    int64_t r = static_cast<int64_t>(c.i.size());
    int64_t s = attr_int(nd, "start", 0), e = attr_int(nd, "end", r);
    if (s < 0) s += r;
    if (e < 0) e += r;
    s = std::clamp<int64_t>(s, 0, r);
    e = std::clamp<int64_t>(e, s, r);
    c.i = std::vector<int64_t>(c.i.begin() + s, c.i.begin() + e);
    c.dims = {static_cast<int64_t>(c.i.size())};
    set_out(nd, 0, Val{Val::kConst, c, 0, {}, ""});
    return true;
  }
  if (op == "Constant") {
    Const c;
    bool got = false;
    for (const auto& a : nd.n->attribute()) {
      nd.read.insert(a.name());
      if (a.name() == "value") {
        c = onnx_io::read_tensor(a.t(), dir_, model_ + ": " + nd.label + ": value");
      } else if (a.name() == "value_float") {
        c.f = {a.f()};
      } else if (a.name() == "value_floats") {
        c.f.assign(a.floats().begin(), a.floats().end());
        c.dims = {static_cast<int64_t>(c.f.size())};
      } else if (a.name() == "value_int") {
        c.is_int = true;
        c.i = {a.i()};
      } else if (a.name() == "value_ints") {
        c.is_int = true;
        c.i.assign(a.ints().begin(), a.ints().end());
        c.dims = {static_cast<int64_t>(c.i.size())};
      } else {
        unsupported(nd, "attribute '" + a.name() + "' is not supported");
        continue;
      }
      got = true;
    }
    if (!got) return true;  // reported above (or an empty Constant); its output stays unknown
    set_out(nd, 0, Val{Val::kConst, c, 0, {}, ""});
    return true;
  }
  // The rest need all inputs constant.
  for (int k = 0; k < nd.n->input_size(); ++k)
    if (!nd.n->input(k).empty() && vals_[nd.n->input(k)].kind != Val::kConst) return false;
  const Val* x = input(nd, 0);
  if (!x) return false;
  Const c = x->c;
  if (op == "Identity") {
  } else if (op == "Cast") {
    int64_t to = attr_int(nd, "to", 0);
    if (to == onnx::TensorProto::INT64 || to == onnx::TensorProto::INT32) {
      if (!c.is_int) {
        for (float v : c.f) {
          if (!std::isfinite(v) || std::fabs(v) > 9e18) fail(nd, "Cast of a value out of int64's range");
          c.i.push_back(static_cast<int64_t>(v));
        }
        c.f.clear();
        c.is_int = true;
      }
    } else if (to == onnx::TensorProto::FLOAT || to == onnx::TensorProto::DOUBLE) {
      if (c.is_int) {
        for (int64_t v : c.i) c.f.push_back(static_cast<float>(v));
        c.i.clear();
        c.is_int = false;
      }
    } else {
      unsupported(nd, "Cast to " + onnx_io::dtype_name(static_cast<int32_t>(to)));
      return true;
    }
  } else if (op == "Gather") {
    const Val* ix = input(nd, 1);
    int64_t axis = attr_int(nd, "axis", 0);
    if (!ix || !ix->c.is_int || ix->c.dims.size() > 1 || c.dims.size() != 1 || (axis != 0 && axis != -1)) {
      unsupported(nd, "Gather other than from a 1-D constant (a shape)");
      return true;
    }
    Const o;
    o.is_int = c.is_int;
    o.dims = ix->c.dims;
    const int64_t n = c.dims[0];
    for (int64_t i : ix->c.i) {
      if (i < -n || i >= n) fail(nd, "index " + std::to_string(i) + " out of range for " + std::to_string(n));
      size_t j = static_cast<size_t>(i < 0 ? i + n : i);
      if (c.is_int)
        o.i.push_back(c.i[j]);
      else
        o.f.push_back(c.f[j]);
    }
    c = o;
  } else if (op == "Unsqueeze" || op == "Squeeze") {
    std::vector<int64_t> axes;
    if (opset_ >= 13) {
      const Val* a = input(nd, 1);
      if (a) {
        if (!a->c.is_int) fail(nd, "axes must be int64");
        axes = a->c.i;
      }
    } else {
      axes = attr_ints(nd, "axes", {});
    }
    if (op == "Unsqueeze") {
      const int64_t r = static_cast<int64_t>(c.dims.size() + axes.size());
      std::vector<bool> at(static_cast<size_t>(r), false);
      for (int64_t a : axes) {
        if (a < -r || a >= r) fail(nd, "axis " + std::to_string(a) + " out of range");
        at[static_cast<size_t>(a < 0 ? a + r : a)] = true;
      }
      std::vector<int64_t> d;
      size_t src = 0;
      for (int64_t k = 0; k < r; ++k) d.push_back(at[static_cast<size_t>(k)] ? 1 : c.dims[src++]);
      if (src != c.dims.size()) fail(nd, "repeated axes");
      c.dims = d;
    } else {
      const int64_t r = static_cast<int64_t>(c.dims.size());
      std::vector<int64_t> d;
      for (int64_t k = 0; k < r; ++k) {
        bool drop =
            axes.empty()
                ? c.dims[static_cast<size_t>(k)] == 1
                : std::count(axes.begin(), axes.end(), k) + std::count(axes.begin(), axes.end(), k - r) > 0;
        if (!drop) d.push_back(c.dims[static_cast<size_t>(k)]);
      }
      c.dims = d;
    }
  } else if (op == "Concat") {
    int64_t axis = attr_int(nd, "axis", 0);
    Const o;
    o.is_int = c.is_int;
    for (int k = 0; k < nd.n->input_size(); ++k) {
      const Val* v = input(nd, k);
      if (!v) continue;
      if (v->c.dims.size() != 1 || v->c.is_int != c.is_int || (axis != 0 && axis != -1)) {
        unsupported(nd, "Concat of constants other than 1-D ones of one type");
        return true;
      }
      o.i.insert(o.i.end(), v->c.i.begin(), v->c.i.end());
      o.f.insert(o.f.end(), v->c.f.begin(), v->c.f.end());
    }
    o.dims = {o.numel()};
    c = o;
  }
  unread_attrs(nd);
  set_out(nd, 0, Val{Val::kConst, c, 0, {}, ""});
  return true;
}

void Importer::node(Node& nd) {
  const onnx::NodeProto& n = *nd.n;
  const std::string& op = n.op_type();
  if (!n.domain().empty() && n.domain() != "ai.onnx") {
    unsupported(nd, "op domain '" + n.domain() + "' is not supported");
    return;
  }
  if (absorbed_.count(n.output_size() ? n.output(0) : "")) return;  // inside another node's layer
  if (fold(nd)) return;
  if ((op == "Div" || op == "Mul") && gelu_erf(nd)) return;

  static const std::set<std::string> ops = {"Clip",
                                            "LeakyRelu",
                                            "HardSwish",
                                            "HardSigmoid",
                                            "Gelu",
                                            "Mul",
                                            "Resize",
                                            "Upsample",
                                            "Conv",
                                            "MaxPool",
                                            "AveragePool",
                                            "GlobalAveragePool",
                                            "GlobalMaxPool",
                                            "Gemm",
                                            "MatMul",
                                            "Add",
                                            "Concat",
                                            "Relu",
                                            "Tanh",
                                            "Sigmoid",
                                            "Softmax",
                                            "Flatten",
                                            "Reshape",
                                            "Dropout",
                                            "BatchNormalization",
                                            "Identity"};
  if (!ops.count(op)) {
    unsupported(nd, "op " + op + " is not supported");
    return;
  }
  // The first input is the activation; a node whose activation is unknown was made unknown by
  // an earlier problem, already reported.
  std::vector<const Val*> acts;
  for (int k = 0; k < n.input_size(); ++k) {
    const Val* v = input(nd, k);
    if (v && v->kind == Val::kUnknown) return;
  }
  const Val* x = input(nd, 0);
  if (!x) fail(nd, "input 0 is missing");
  if (x->kind != Val::kAct) {
    unsupported(nd, "input '" + n.input(0) + "' is a constant; cnnrun layers compute on the network input");
    return;
  }
  const Val xv = *x;
  auto simple = [&](const std::string& type, std::vector<std::pair<std::string, std::string>> keys = {}) {
    LayerOut l{layer_name(nd), type, std::move(keys), {xv.layer}, {}};
    emit(std::move(l), nd, xv.rank, xv.shape);
  };

  if (op == "Conv") {
    conv(nd, xv);
  } else if (op == "MaxPool" || op == "AveragePool") {
    pool(nd, xv, op == "MaxPool");
  } else if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
    if (xv.rank != 4) {
      unsupported(nd, "input X is not N x C x H x W");
    } else {
      LayerOut l{layer_name(nd),
                 op == "GlobalMaxPool" ? "maxpool" : "avgpool",
                 {{"global", "true"}},
                 {xv.layer},
                 {}};
      emit(std::move(l), nd, 4, {xv.shape.c, 1, 1});
    }
  } else if (op == "Gemm") {
    gemm(nd, xv);
  } else if (op == "MatMul") {
    matmul(nd, xv);
  } else if (op == "Relu" || op == "Tanh" || op == "Sigmoid") {
    simple(op == "Relu" ? "relu" : op == "Tanh" ? "tanh" : "sigmoid");
  } else if (op == "Clip") {
    // relu6 = Clip(0, 6) (torch's ReLU6 and hardtanh(0, 6)), relu = Clip(0, inf).
    double lo = -INFINITY, hi = INFINITY;
    if (opset_ < 11) {
      lo = attr_float(nd, "min", lo);
      hi = attr_float(nd, "max", hi);
    } else {
      for (int k : {1, 2}) {
        if (k >= n.input_size() || n.input(k).empty()) continue;
        const Const* c = const_input(nd, k, k == 1 ? "min" : "max", false);
        if (!c) return;
        if (c->is_int || c->numel() != 1)
          fail(nd, std::string(k == 1 ? "min" : "max") + " must be one float");
        (k == 1 ? lo : hi) = c->f[0];
      }
    }
    if (lo == 0 && hi == 6)
      simple("relu6");
    else if (lo == 0 && hi == INFINITY)
      simple("relu");
    else
      unsupported(nd, "Clip(" + num(lo) + ", " + num(hi) +
                          ") (cnnrun has Clip(0, 6) as relu6 and Clip(0, inf) as relu)");
  } else if (op == "LeakyRelu") {
    simple("leaky_relu", {{"slope", num(attr_float(nd, "alpha", 0.01))}});
  } else if (op == "HardSwish") {
    simple("hardswish");
  } else if (op == "HardSigmoid") {
    // PyTorch's hardsigmoid is relu6(x + 3) / 6 = HardSigmoid(alpha 1/6, beta 0.5).
    double alpha = attr_float(nd, "alpha", 0.2), beta = attr_float(nd, "beta", 0.5);
    if (static_cast<float>(alpha) == static_cast<float>(1.0 / 6.0) && beta == 0.5)
      simple("hardsigmoid");
    else
      unsupported(nd, "alpha " + num(alpha) + ", beta " + num(beta) +
                          " (cnnrun's hardsigmoid is alpha 1/6, beta 0.5)");
  } else if (op == "Gelu") {
    std::string a = attr_string(nd, "approximate", "none");
    if (a != "none" && a != "tanh") return unsupported(nd, "approximate '" + a + "'");
    simple("gelu", a == "none" ? std::vector<std::pair<std::string, std::string>>{}
                               : std::vector<std::pair<std::string, std::string>>{{"approximate", "tanh"}});
  } else if (op == "Mul") {
    if (opset_ < 7) attr_int(nd, "broadcast", 0);
    const Val* y = input(nd, 1);
    if (!y || y->kind != Val::kAct) {
      unsupported(nd, "input '" + (n.input_size() > 1 ? n.input(1) : std::string()) +
                          "' is a constant (cnnrun's mul multiplies computed tensors)");
    } else if (y->rank != xv.rank || !(y->shape == xv.shape || (xv.rank == 4 && y->shape.c == xv.shape.c &&
                                                                ((y->shape.h == 1 && y->shape.w == 1) ||
                                                                 (xv.shape.h == 1 && xv.shape.w == 1))))) {
      unsupported(nd, "inputs of shapes " + xv.shape.str() + " and " + y->shape.str() +
                          " (cnnrun multiplies equal shapes, or scales channels by C x 1 x 1)");
    } else {
      Shape out = xv.shape.h * xv.shape.w >= y->shape.h * y->shape.w ? xv.shape : y->shape;
      LayerOut l{layer_name(nd), "mul", {}, {xv.layer, y->layer}, {}};
      emit(std::move(l), nd, xv.rank, out);
    }
  } else if (op == "Resize" || op == "Upsample") {
    resize(nd, xv);
  } else if (op == "Identity") {
    set_out(nd, 0, xv);
  } else if (op == "Add" || op == "Concat") {
    LayerOut l{layer_name(nd), op == "Add" ? "add" : "concat", {}, {}, {}};
    int64_t axis = op == "Concat" ? attr_int(nd, "axis", 1) : 1;
    if (op == "Add" && opset_ < 7) attr_int(nd, "broadcast", 0);
    if (axis < 0) axis += xv.rank;
    Shape out = xv.shape;
    out.c = 0;
    bool ok = true;
    for (int k = 0; k < n.input_size(); ++k) {
      const Val* v = input(nd, k);
      if (!v) continue;
      if (v->kind != Val::kAct) {
        unsupported(nd, "input '" + n.input(k) + "' is a constant (cnnrun's " + l.type +
                            " joins computed tensors; a bias Add belongs after a MatMul)");
        ok = false;
        break;
      }
      if (v->rank != xv.rank ||
          (op == "Add" ? v->shape != xv.shape : (v->shape.h != xv.shape.h || v->shape.w != xv.shape.w))) {
        unsupported(
            nd, "inputs of shapes " + xv.shape.str() + " and " + v->shape.str() +
                    (op == "Add" ? " (broadcasting is not supported)" : " (different heights or widths)"));
        ok = false;
        break;
      }
      l.inputs.push_back(v->layer);
      out.c += v->shape.c;
    }
    if (ok && op == "Concat" && axis != 1) {
      unsupported(nd, "axis " + std::to_string(axis) + " (cnnrun concatenates channels, axis 1)");
      ok = false;
    }
    if (ok && l.inputs.size() == 1) {  // one input: nothing to join
      set_out(nd, 0, xv);
    } else if (ok) {
      emit(std::move(l), nd, xv.rank, op == "Add" ? xv.shape : out);
    }
  } else if (op == "Softmax") {
    int64_t axis = attr_int(nd, "axis", opset_ >= 13 ? -1 : 1);
    if (axis < 0) axis += xv.rank;
    bool per_channel =
        xv.rank == 2 ? axis == 1 : axis == 1 && (opset_ >= 13 || (xv.shape.h == 1 && xv.shape.w == 1));
    if (!per_channel)
      unsupported(nd, "axis " + std::to_string(axis) + " of a rank-" + std::to_string(xv.rank) +
                          " input (cnnrun's softmax is over the channels)");
    else
      simple("softmax");
  } else if (op == "Flatten") {
    int64_t axis = attr_int(nd, "axis", 1);
    if (axis < 0) axis += xv.rank;
    if (axis != 1) {
      unsupported(nd, "axis " + std::to_string(axis) + " (only 1: N x F)");
    } else if (xv.rank == 2) {
      set_out(nd, 0, xv);
    } else {
      LayerOut l{layer_name(nd), "flatten", {}, {xv.layer}, {}};
      emit(std::move(l), nd, 2, {xv.shape.size(), 1, 1});
    }
  } else if (op == "Reshape") {
    reshape(nd, xv);
  } else if (op == "Dropout") {
    double rate = 0.5;
    if (opset_ < 12) {
      rate = attr_float(nd, "ratio", 0.5);
      attr_int(nd, "is_test", 0);
    } else if (n.input_size() > 1 && !n.input(1).empty()) {
      const Const* r = const_input(nd, 1, "ratio", false);
      if (!r) return;
      if (r->is_int || r->numel() != 1) fail(nd, "ratio must be one float");
      rate = r->f[0];
    }
    if (n.input_size() > 2 && !n.input(2).empty()) {
      const Const* t = const_input(nd, 2, "training_mode", false);
      if (!t) return;
      if ((t->is_int && t->numel() == 1 && t->i[0]) || (!t->is_int && t->numel() == 1 && t->f[0] != 0.f))
        return unsupported(nd, "training_mode true (cnnrun runs inference)");
    }
    if (output_used(nd, 1)) return unsupported(nd, "output mask is read");
    if (!(rate >= 0 && rate < 1)) return unsupported(nd, "ratio " + num(rate) + " (must be in [0, 1))");
    simple("dropout", {{"rate", num(rate)}});
  } else if (op == "BatchNormalization") {
    double eps = attr_float(nd, "epsilon", 1e-5);
    attr_float(nd, "momentum", 0.9);
    if (opset_ < 9 && attr_int(nd, "spatial", 1) != 1) unsupported(nd, "spatial 0");
    if (opset_ < 7) attr_int(nd, "is_test", 0);
    if (opset_ >= 14 && attr_int(nd, "training_mode", 0) != 0) unsupported(nd, "training_mode 1");
    for (int k = 1; k < 5; ++k)
      if (output_used(nd, k)) return unsupported(nd, "a training output is read");
    const char* names[4] = {"scale", "B", "input_mean", "input_var"};
    const char* roles[4] = {"weight", "bias", "running_mean", "running_var"};
    const Const* t[4];
    for (int k = 0; k < 4; ++k) t[k] = const_input(nd, k + 1, names[k], true);
    for (int k = 0; k < 4; ++k)
      if (!t[k]) return;
    for (int k = 0; k < 4; ++k)
      if (t[k]->is_int || t[k]->numel() != xv.shape.c)
        fail(nd, std::string(names[k]) + " " + ints_str(t[k]->dims) + " must hold one float per channel (" +
                     std::to_string(xv.shape.c) + ")");
    if (!(eps > 0) || !std::isfinite(eps)) fail(nd, "epsilon " + num(eps) + " must be positive");
    LayerOut l{layer_name(nd), "batchnorm", {{"eps", num(eps)}}, {xv.layer}, {}};
    for (int k = 0; k < 4; ++k) {
      Tensor tt;
      tt.dims = {xv.shape.c};
      tt.data = t[k]->f;
      l.tensors.emplace_back(roles[k], add_tensor(n.input(k + 1), std::move(tt)));
    }
    emit(std::move(l), nd, xv.rank, xv.shape);
  }
  unread_attrs(nd);
}

ImportResult Importer::run(const ImportOptions& opt) {
  // Initializers, then the one graph input that is not one.
  std::set<std::string> produced;
  for (const auto& t : g_.initializer()) {
    if (t.name().empty()) throw Error(model_ + ": an initializer has no name");
    if (!produced.insert(t.name()).second)
      throw Error(model_ + ": initializer '" + t.name() + "' is given twice");
    Val v;
    v.kind = Val::kConst;
    v.c = onnx_io::read_tensor(t, dir_, model_ + ": initializer '" + t.name() + "'");
    vals_[t.name()] = std::move(v);
  }
  std::vector<const onnx::ValueInfoProto*> inputs;
  for (const auto& in : g_.input())
    if (!produced.count(in.name())) inputs.push_back(&in);
  if (inputs.size() != 1) {
    std::string names;
    for (const auto* in : inputs) names += (names.empty() ? "" : ", ") + ("'" + in->name() + "'");
    throw Error(model_ + ": the graph has " + std::to_string(inputs.size()) +
                " inputs that are not initializers" + (names.empty() ? "" : " (" + names + ")") +
                "; a cnnrun network has one");
  }
  const onnx::ValueInfoProto& gin = *inputs[0];
  produced.insert(gin.name());
  const std::string in_where = model_ + ": graph input '" + gin.name() + "'";
  if (!gin.type().has_tensor_type()) throw Error(in_where + ": not a tensor");
  const auto& tt = gin.type().tensor_type();
  if (tt.elem_type() != onnx::TensorProto::FLOAT)
    throw Error(in_where + ": element type " + onnx_io::dtype_name(tt.elem_type()) +
                "; cnnrun networks take FLOAT");
  if (!tt.has_shape()) throw Error(in_where + ": no shape; cnnrun needs C x H x W (or F) fixed");
  std::vector<int64_t> d;
  for (int k = 0; k < tt.shape().dim_size(); ++k) {
    const auto& dim = tt.shape().dim(k);
    if (dim.has_dim_value()) {
      if (dim.dim_value() < 1 || dim.dim_value() > kMaxImageValues)
        throw Error(in_where + ": dimension " + std::to_string(k) + " is " + std::to_string(dim.dim_value()) +
                    " (1 to " + std::to_string(kMaxImageValues) + " expected)");
      d.push_back(dim.dim_value());
    } else if (k == 0) {
      d.push_back(0);  // a symbolic batch
    } else {
      throw Error(in_where + ": dimension " + std::to_string(k) + " is symbolic ('" + dim.dim_param() +
                  "'); cnnrun needs C x H x W fixed");
    }
  }
  Val x;
  x.kind = Val::kAct;
  x.layer = "input";
  if (d.size() == 4) {
    x.rank = 4;
    x.shape = {d[1], d[2], d[3]};
  } else if (d.size() == 2) {
    x.rank = 2;
    x.shape = {d[1], 1, 1};
  } else {
    throw Error(in_where + ": rank " + std::to_string(d.size()) +
                "; cnnrun networks take an N x C x H x W (or N x F) batch");
  }
  if (checked_mul(checked_mul(x.shape.c, x.shape.h, "input size"), x.shape.w, "input size") > kMaxImageValues)
    throw Error(in_where + ": " + x.shape.str() + " is over the limit of " + std::to_string(kMaxImageValues) +
                " values per image");
  input_batch_ = d[0];
  vals_[gin.name()] = x;

  // Order the nodes: every input made before it is read; a cycle or an input nothing makes is
  // an error naming the node.
  const int nn = g_.node_size();
  std::map<std::string, int> maker;
  for (int i = 0; i < nn; ++i)
    for (const auto& o : g_.node(i).output()) {
      if (o.empty()) continue;
      if (produced.count(o) || !maker.emplace(o, i).second) {
        const auto& n = g_.node(i);
        throw Error(model_ + ": node '" + n.name() + "' (" + n.op_type() + "): output '" + o +
                    "' is also made by another node, an initializer or the input");
      }
    }
  // An unnamed node (ONNX's node tests have many) is named by its first output.
  auto label = [&](int i) {
    const onnx::NodeProto& n = g_.node(i);
    if (n.name().empty() && n.output_size() && !n.output(0).empty())
      return "node making '" + n.output(0) + "' (" + n.op_type() + ")";
    return "node '" + n.name() + "' (" + n.op_type() + ")";
  };
  std::vector<int> pending(static_cast<size_t>(nn), 0);
  std::vector<std::vector<int>> users(static_cast<size_t>(nn));
  for (int i = 0; i < nn; ++i)
    for (const auto& in : g_.node(i).input()) {
      if (in.empty()) continue;
      readers_[in]++;
      reader_[in] = i;
      auto it = maker.find(in);
      if (it != maker.end()) {
        pending[static_cast<size_t>(i)]++;
        users[static_cast<size_t>(it->second)].push_back(i);
      } else if (!produced.count(in)) {
        throw Error(model_ + ": " + label(i) + ": input '" + in +
                    "' is made by no node, initializer or graph input (a missing initializer?)");
      }
    }
  for (const auto& o : g_.output()) readers_[o.name()]++;
  std::vector<int> order;
  std::set<int> ready;
  for (int i = 0; i < nn; ++i)
    if (!pending[static_cast<size_t>(i)]) ready.insert(i);
  while (!ready.empty()) {
    int i = *ready.begin();
    ready.erase(ready.begin());
    order.push_back(i);
    for (int u : users[static_cast<size_t>(i)])
      if (--pending[static_cast<size_t>(u)] == 0) ready.insert(u);
  }
  if (static_cast<int>(order.size()) != nn) {
    std::string stuck;
    int count = 0;
    for (int i = 0; i < nn; ++i)
      if (pending[static_cast<size_t>(i)] && count++ < 8) stuck += (stuck.empty() ? "" : ", ") + label(i);
    throw Error(model_ + ": the graph has a cycle: " + stuck + (count > 8 ? " and more" : "") +
                " wait on each other's outputs");
  }

  for (int i : order) {
    Node nd{&g_.node(i), label(i), {}};
    node(nd);
  }

  if (g_.output_size() != 1)
    problems_.push_back("the graph has " + std::to_string(g_.output_size()) +
                        " outputs; a cnnrun network has one");
  if (!problems_.empty()) {
    std::string all;
    for (size_t k = 0; k < problems_.size(); ++k) all += (k ? "; " : "") + problems_[k];
    throw Error(model_ + ": cannot import " + std::to_string(problems_.size()) + " thing(s): " + all);
  }
  const std::string& out_name = g_.output(0).name();
  auto ov = vals_.find(out_name);
  if (ov == vals_.end() || ov->second.kind != Val::kAct)
    throw Error(model_ + ": graph output '" + out_name + "' is " +
                (ov == vals_.end() ? "made by nothing" : "a constant") +
                "; cnnrun networks compute their output");
  if (ov->second.layer == "input" || layers_.empty())
    throw Error(model_ + ": graph output '" + out_name + "' is the input itself; there is no layer to run");

  // The netdef: header, sections, one layer per line.
  std::ostringstream y;
  y << "# Imported from " << model_ << " by cnnrun import (IR version " << m_.ir_version() << ", opset "
    << opset_;
  if (!m_.producer_name().empty()) y << ", made by " << m_.producer_name() << " " << m_.producer_version();
  y << ")\n";
  std::string name = !opt.name.empty() ? opt.name : !g_.name().empty() ? g_.name() : model_;
  y << "name: " << q(name) << "\n";
  y << "input: {channels: " << x.shape.c << ", height: " << x.shape.h << ", width: " << x.shape.w << "}\n";
  if (!opt.preprocess.empty()) y << "preprocess: " << opt.preprocess << "\n";
  const int64_t n_out = ov->second.shape.size();
  y << "classes: " << (opt.classes.empty() ? std::to_string(n_out) : opt.classes) << "\n";
  if (!opt.weights_path.empty() && !res_.tensors.empty())
    y << "weights: {format: safetensors, path: " << q(opt.weights_path) << "}\n";
  if (!opt.data.empty()) y << "data: " << opt.data << "\n";
  y << "output: " << q(ov->second.layer) << "\n";
  y << "layers:\n";
  std::string prev = "input";
  for (const LayerOut& l : layers_) {
    y << "  - {name: " << q(l.name) << ", type: " << l.type;
    for (const auto& kv : l.keys) y << ", " << kv.first << ": " << kv.second;
    if (!(l.inputs.size() == 1 && l.inputs[0] == prev)) {
      y << ", inputs: [";
      for (size_t k = 0; k < l.inputs.size(); ++k) y << (k ? ", " : "") << q(l.inputs[k]);
      y << "]";
    }
    std::string tens;
    for (const auto& kv : l.tensors)
      if (kv.second != l.name + "." + kv.first)
        tens += (tens.empty() ? "" : ", ") + kv.first + ": " + q(kv.second);
    if (!tens.empty()) y << ", tensors: {" << tens << "}";
    y << "}\n";
    prev = l.name;
  }
  res_.netdef = y.str();
  return std::move(res_);
}

std::string read_model_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(path + ": is a directory, not an ONNX model");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(path + ": cannot open the ONNX model");
  f.seekg(0, std::ios::end);
  std::streamoff size = f.tellg();
  // protobuf refuses messages of 2 GiB and more; larger weights belong in external data.
  if (size < 0 || size >= (std::streamoff{1} << 31))
    throw Error(path + ": " + std::to_string(size) + " bytes; an ONNX model file must be under 2 GiB");
  f.seekg(0);
  std::string bytes(static_cast<size_t>(size), '\0');
  f.read(bytes.data(), size);
  if (!f) throw Error(path + ": read error");
  return bytes;
}

std::string dir_of(const std::string& path) {
  std::filesystem::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : ".";
}

}  // namespace

bool onnx_import_available() { return true; }

ImportResult import_onnx_bytes(const std::string& bytes, const std::string& name, const std::string& dir,
                               const ImportOptions& opt) {
  onnx::ModelProto m;
  int64_t opset = onnx_io::parse_model(bytes, name, m);
  ImportResult r = Importer(m, opset, name, dir).run(opt);
  // What every caller relies on: the netdef parses and the tensors load into it, their values
  // checked too (a negative variance, a NaN), so `cnnrun import` never writes a model that
  // cnnrun then refuses. (Folding batchnorms, done when the model runs, checks the products.)
  Network net = parse_netdef_string(r.netdef, name + " (imported)", dir.empty() ? "." : dir);
  load_weights_from(net, r.tensors, name, /*fold=*/false);
  return r;
}

ImportResult import_onnx_file(const std::string& path, const ImportOptions& opt) {
  return import_onnx_bytes(read_model_file(path), path, dir_of(path), opt);
}

Network load_onnx_network(const std::string& path, const ImportOptions& opt) {
  ImportOptions o = opt;
  o.weights_path.clear();  // the weights stay in memory
  ImportResult r = import_onnx_file(path, o);
  Network net = parse_netdef_string(r.netdef, path + " (imported)", dir_of(path));
  load_weights_from(net, std::move(r.tensors), path);
  return net;
}

}  // namespace cnnrun
