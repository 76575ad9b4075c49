#include "engine/layer.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>

#include "engine/layer_types.h"
#include "engine/yaml_util.h"

namespace cnnrun {

// Names other frameworks (mostly PyTorch) give layer types cnnrun has, with identical math.
static const std::map<std::string, std::string>& type_aliases() {
  static const std::map<std::string, std::string> m = {
      {"conv2d", "conv"},
      {"convolution", "conv"},
      {"linear", "fc"},
      {"dense", "fc"},
      {"fully_connected", "fc"},
      {"innerproduct", "fc"},
      {"maxpool2d", "maxpool"},
      {"max_pool", "maxpool"},
      {"avgpool2d", "avgpool"},
      {"avg_pool", "avgpool"},
      {"batchnorm2d", "batchnorm"},
      {"batch_norm", "batchnorm"},
      {"bn", "batchnorm"},
      {"cat", "concat"},
      {"concatenate", "concat"},
      {"sum", "add"},
      {"multiply", "mul"},
      {"swish", "silu"},
      {"hswish", "hardswish"},
      {"hard_swish", "hardswish"},
      {"hsigmoid", "hardsigmoid"},
      {"hard_sigmoid", "hardsigmoid"},
      {"leakyrelu", "leaky_relu"},
      {"lrelu", "leaky_relu"},
      {"interpolate", "upsample"},
      {"adaptiveavgpool2d", "avgpool (with output: [h, w])"},
      {"adaptivemaxpool2d", "maxpool (with output: [h, w])"},
      {"adaptive_avgpool", "avgpool (with output: [h, w])"},
      {"adaptive_maxpool", "maxpool (with output: [h, w])"},
      {"identity", "dropout (identity at inference)"},
  };
  return m;
}

// Real layer types cnnrun does not have; their names must not be "corrected" into a type that
// computes something else (relu6 -> relu would silently change the network).
static const std::map<std::string, std::string>& unsupported_types() {
  static const std::map<std::string, std::string> m = {
      {"elu", "the ELU activation"},
      {"selu", "the SELU activation"},
      {"celu", "the CELU activation"},
      {"prelu", "the PReLU activation (learned slopes)"},
      {"rrelu", "the randomized leaky ReLU"},
      {"mish", "the Mish activation"},
      {"softplus", "the softplus activation"},
      {"softsign", "the softsign activation"},
      {"hardtanh", "the hardtanh activation"},
      {"logsoftmax", "log-softmax"},
      {"log_softmax", "log-softmax"},
      {"layernorm", "layer normalization"},
      {"groupnorm", "group normalization"},
      {"instancenorm", "instance normalization"},
      {"lrn", "local response normalization"},
      {"deconv", "transposed convolution"},
      {"conv_transpose", "transposed convolution"},
      {"convtranspose2d", "transposed convolution"},
      {"conv1d", "1-D convolution"},
      {"conv3d", "3-D convolution"},
      {"lppool", "power-average pooling"},
      {"pixel_shuffle", "pixel shuffle"},
      {"channel_shuffle", "channel shuffle"},
      {"lstm", "recurrent layers"},
      {"gru", "recurrent layers"},
      {"rnn", "recurrent layers"},
      {"attention", "attention"},
      {"multiheadattention", "attention"},
      {"embedding", "embeddings"},
      {"sub", "elementwise subtraction"},
      {"div", "elementwise division"},
      {"pad", "a separate padding layer (conv and pool take 'pad')"},
      {"reshape", "reshaping other than flatten"},
      {"transpose", "transposes"},
      {"glu", "the gated linear unit"},
      {"softmin", "softmin"},
      {"minpool", "min pooling"},
      {"max", "an elementwise maximum"},
      {"min", "an elementwise minimum"},
      {"tanhshrink", "tanhshrink"},
      {"hardshrink", "hardshrink"},
      {"softshrink", "softshrink"},
      {"logsigmoid", "log-sigmoid"},
      {"threshold", "a thresholding activation"},
  };
  return m;
}

std::string unknown_type_message(const std::string& type) {
  std::string lower;
  for (char c : type) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string list;
  std::vector<std::string> names;
  for (const LayerType& t : layer_types()) names.push_back(t.name);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  auto a = type_aliases().find(lower);
  if (a != type_aliases().end())
    return "unknown layer type '" + type + "'; the same layer is called " + a->second + " in a netdef";
  auto u = unsupported_types().find(lower);
  if (u != unsupported_types().end())
    return "layer type '" + type + "': " + u->second +
           " is not supported by cnnrun; the layer types are: " + list;
  if (lower != type && find_layer_type(lower))
    return "unknown layer type '" + type + "'; layer types are lower case: '" + lower + "'";
  // A nearest-name hint only for what looks like a typo: at most two letters apart and no digit
  // involved, so "relu6" or "conv3d" is never "corrected" into another computation.
  const bool has_digit = std::any_of(lower.begin(), lower.end(), [](char c) { return std::isdigit(c) != 0; });
  if (!has_digit && lower.size() >= 4) {
    const std::string hint = suggest(lower, names);
    if (hint.rfind("; did you mean", 0) == 0) return "unknown layer type '" + type + "'" + hint;
  }
  return "unknown layer type '" + type + "'; expected one of: " + list;
}

int64_t window_out(int64_t in, int64_t k, int64_t stride, int64_t pad, const char* dim) {
  int64_t padded = checked_add(in, checked_mul(2, pad, "padded size"), "padded size");
  if (stride < 1) throw Error(std::string("stride must be positive"));
  if (padded < k)
    throw Error(std::string("window of ") + dim + " " + std::to_string(k) + " does not fit the input " + dim +
                " " + std::to_string(in) + " with pad " + std::to_string(pad));
  return (padded - k) / stride + 1;
}

const Tensor& Layer::weight(const std::string& n) const {
  auto it = weights.find(n);
  if (it == weights.end()) throw Error("layer '" + name + "': weight '" + n + "' was not loaded");
  return it->second;
}

std::string Layer::tensor_name(const std::string& n) const {
  auto it = tensor_names.find(n);
  return it == tensor_names.end() ? name + "." + n : it->second;
}

struct ParamReader::Impl {
  YAML::Node map;
  std::string file, layer, type;
  std::set<std::string> used;
  std::set<std::string> known;  // keys the type takes but this parse did not read
  const std::map<std::string, YAML::Node>* params = nullptr;  // a block's "$name" values

  // The key's value, a "$name" scalar replaced by the block instance's value for it.
  YAML::Node value(const YAML::Node& n) const {
    if (params && n && n.IsScalar() && !n.Scalar().empty() && n.Scalar()[0] == '$') {
      auto it = params->find(n.Scalar().substr(1));
      if (it != params->end()) return it->second;
    }
    return n;
  }
  YAML::Node get(const std::string& key) const { return value(map[key]); }
  std::string pending;  // first getter error, thrown by finish() after the unknown-key check
};

ParamReader::ParamReader(const YAML::Node& map, const std::string& file, const std::string& layer,
                         const std::string& type)
    : impl_(std::make_unique<Impl>()) {
  impl_->map = map;
  impl_->file = file;
  impl_->layer = layer;
  impl_->type = type;
}

ParamReader::~ParamReader() = default;

bool ParamReader::has(const std::string& key) const { return static_cast<bool>(impl_->map[key]); }

SourceLoc ParamReader::loc_of(const std::string& key) const {
  YAML::Node n = impl_->get(key);
  return yaml_loc(impl_->file, n ? n : impl_->map);
}

void ParamReader::fail(const std::string& key, const std::string& what) const {
  fail_at(loc_of(key), impl_->layer, impl_->type, key, what);
}

void ParamReader::mark_used(const std::string& key) { impl_->used.insert(key); }

void ParamReader::set_params(const std::map<std::string, YAML::Node>* params) { impl_->params = params; }

void ParamReader::also_known(std::initializer_list<const char*> keys) {
  for (const char* k : keys) impl_->known.insert(k);
}

void ParamReader::unsupported(const std::string& key, const std::string& why) {
  if (!has(key)) return;
  impl_->used.insert(key);
  defer(key, why);
}

// Getters record their first error and return a harmless value, so that parsing goes on and
// marks every key: finish() can then report a misspelt key ("did you mean 'filters'?") before
// the missing key it explains.
void ParamReader::defer(const std::string& key, const std::string& what) {
  if (!impl_->pending.empty()) return;
  try {
    fail(key, what);
  } catch (const Error& e) {
    impl_->pending = e.what();
  }
}

int64_t ParamReader::get_int(const std::string& key, int64_t min_value) {
  impl_->used.insert(key);
  YAML::Node n = impl_->get(key);
  if (!n) {
    defer(key, "missing; expected an integer >= " + std::to_string(min_value));
    return std::max<int64_t>(min_value, 1);
  }
  int64_t v = 0;
  std::string why;
  if (!yaml_int(n, v, why)) {
    defer(key, why);
    return std::max<int64_t>(min_value, 1);
  }
  if (v < min_value) {
    defer(key, "expected an integer >= " + std::to_string(min_value) + ", found " + std::to_string(v));
    return std::max<int64_t>(min_value, 1);
  }
  return v;
}

int64_t ParamReader::get_int(const std::string& key, int64_t def, int64_t min_value) {
  if (!has(key)) {
    impl_->used.insert(key);
    return def;
  }
  return get_int(key, min_value);
}

std::pair<int64_t, int64_t> ParamReader::get_pair(const std::string& key, int64_t min_value) {
  impl_->used.insert(key);
  YAML::Node n = impl_->get(key);
  std::string want = "an integer >= " + std::to_string(min_value) + " or a list [height, width]";
  if (!n) {
    defer(key, "missing; expected " + want);
    return std::make_pair(std::max<int64_t>(min_value, 1), std::max<int64_t>(min_value, 1));
  }
  int64_t a = 0, b = 0;
  std::string why;
  if (n.IsSequence()) {
    if (n.size() != 2) {
      defer(key, "expected " + want + ", found a list of " + std::to_string(n.size()));
      return std::make_pair(std::max<int64_t>(min_value, 1), std::max<int64_t>(min_value, 1));
    }
    if (!yaml_int(impl_->value(n[0]), a, why) || !yaml_int(impl_->value(n[1]), b, why)) {
      defer(key, why);
      return std::make_pair(std::max<int64_t>(min_value, 1), std::max<int64_t>(min_value, 1));
    }
  } else {
    if (!yaml_int(n, a, why)) {
      defer(key, why);
      return std::make_pair(std::max<int64_t>(min_value, 1), std::max<int64_t>(min_value, 1));
    }
    b = a;
  }
  if (a < min_value || b < min_value) {
    defer(key, "expected " + want + ", found " + std::to_string(a) +
                   (n.IsSequence() ? ", " + std::to_string(b) : ""));
    return std::make_pair(std::max<int64_t>(min_value, 1), std::max<int64_t>(min_value, 1));
  }
  return {a, b};
}

std::pair<int64_t, int64_t> ParamReader::get_pair(const std::string& key, std::pair<int64_t, int64_t> def,
                                                  int64_t min_value) {
  if (!has(key)) {
    impl_->used.insert(key);
    return def;
  }
  return get_pair(key, min_value);
}

std::pair<double, double> ParamReader::get_number_pair(const std::string& key) {
  impl_->used.insert(key);
  YAML::Node n = impl_->get(key);
  const std::string want = "a number or a list [height, width]";
  if (!n) {
    defer(key, "missing; expected " + want);
    return {1, 1};
  }
  double a = 0, b = 0;
  std::string why;
  if (n.IsSequence()) {
    if (n.size() != 2) {
      defer(key, "expected " + want + ", found a list of " + std::to_string(n.size()));
      return {1, 1};
    }
    if (!yaml_double(impl_->value(n[0]), a, why) || !yaml_double(impl_->value(n[1]), b, why)) {
      defer(key, why);
      return {1, 1};
    }
    return {a, b};
  }
  if (!yaml_double(n, a, why)) {
    defer(key, why);
    return {1, 1};
  }
  return {a, a};
}

double ParamReader::get_double(const std::string& key, double def) {
  impl_->used.insert(key);
  YAML::Node n = impl_->get(key);
  if (!n) return def;
  double v = 0;
  std::string why;
  if (!yaml_double(n, v, why)) {
    defer(key, why);
    return def;
  }
  return v;
}

bool ParamReader::get_bool(const std::string& key, bool def) {
  impl_->used.insert(key);
  YAML::Node n = impl_->get(key);
  if (!n) return def;
  std::string why;
  bool v = false;
  if (!yaml_bool(n, v, why)) {
    defer(key, why);
    return def;
  }
  return v;
}

std::string ParamReader::get_string(const std::string& key, const std::string& def) {
  impl_->used.insert(key);
  YAML::Node n = impl_->get(key);
  if (!n) return def;
  if (!n.IsScalar()) {
    defer(key, "expected a string");
    return def;
  }
  return n.Scalar();
}

void ParamReader::finish() const {
  check_unknown();
  if (!impl_->pending.empty()) throw Error(impl_->pending);
}

// PyTorch's argument names for keys cnnrun spells its own way: the hint names the cnnrun key,
// which means the same thing.
static const std::map<std::string, std::string>& pytorch_key_names() {
  static const std::map<std::string, std::string> m = {
      {"out_channels", "filters"}, {"kernel_size", "kernel"},          {"padding", "pad"},
      {"negative_slope", "slope"}, {"count_include_pad", "count_pad"}, {"scale_factor", "scale"},
      {"out_features", "outputs"}, {"output_size", "output"},          {"p", "rate"},
  };
  return m;
}

void ParamReader::check_unknown() const {
  std::set<std::string> all(impl_->used);
  all.insert(impl_->known.begin(), impl_->known.end());
  std::vector<std::string> known(all.begin(), all.end());
  for (auto it = impl_->map.begin(); it != impl_->map.end(); ++it) {
    std::string k = it->first.Scalar();
    if (impl_->used.count(k)) continue;
    auto alias = pytorch_key_names().find(k);
    if (alias != pytorch_key_names().end() && all.count(alias->second))
      fail_at(yaml_loc(impl_->file, it->first), impl_->layer, impl_->type, k,
              "unknown key; PyTorch's '" + k + "' is '" + alias->second + "' in a netdef");
    fail_at(yaml_loc(impl_->file, it->first), impl_->layer, impl_->type, k,
            "unknown key" + suggest(k, known));
  }
}

}  // namespace cnnrun
