#include "engine/layer.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>

#include "engine/yaml_util.h"

namespace cnnrun {

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
  YAML::Node n = impl_->map[key];
  return yaml_loc(impl_->file, n ? n : impl_->map);
}

void ParamReader::fail(const std::string& key, const std::string& what) const {
  fail_at(loc_of(key), impl_->layer, impl_->type, key, what);
}

void ParamReader::mark_used(const std::string& key) { impl_->used.insert(key); }

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
  YAML::Node n = impl_->map[key];
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
  YAML::Node n = impl_->map[key];
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
    if (!yaml_int(n[0], a, why) || !yaml_int(n[1], b, why)) {
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

double ParamReader::get_double(const std::string& key, double def) {
  impl_->used.insert(key);
  YAML::Node n = impl_->map[key];
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
  YAML::Node n = impl_->map[key];
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
  YAML::Node n = impl_->map[key];
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

void ParamReader::check_unknown() const {
  std::vector<std::string> known(impl_->used.begin(), impl_->used.end());
  for (auto it = impl_->map.begin(); it != impl_->map.end(); ++it) {
    std::string k = it->first.Scalar();
    if (!impl_->used.count(k))
      fail_at(yaml_loc(impl_->file, it->first), impl_->layer, impl_->type, k,
              "unknown key" + suggest(k, known));
  }
}

}  // namespace cnnrun
