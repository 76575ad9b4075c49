// The netdef parser: YAML -> Network. Every error names file:line:column, the layer and the
// key. Checks happen here, at load, so nothing is discovered mid-run: syntax, duplicate and
// unknown keys, layer types, parameters, names, inputs, cycles, shapes, class count.
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>

#include "engine/io/assets.h"
#include "engine/io/files.h"
#include "engine/network.h"
#include "engine/yaml_util.h"

namespace cnnrun {

namespace {

const char* const kInputName = "input";
// Per-image tensors above this are not networks cnnrun can run (executors hold a block of images
// of every layer's output); rejecting them here turns a lying "channels: 1000000000000" into an
// error at its line instead of an allocation the size of the claim.
constexpr int64_t kMaxImageValues = int64_t{1} << 28;
constexpr int64_t kMaxInputChannels = 65536;
constexpr size_t kMaxLayers = 100000;  // after block expansion (the largest real networks have ~1000)  //
                                       // preprocessing keeps a scale and shift per channel

// C*H*W with overflow and the limit above checked; `what` names the tensor for the message.
void check_image_size(const Shape& s, const std::string& what) {
  int64_t n = checked_mul(checked_mul(s.c, s.h, "values per image"), s.w, "values per image");
  if (n > kMaxImageValues)
    throw Error(what + " " + s.str() + " = " + std::to_string(n) + " values per image is over the limit of " +
                std::to_string(kMaxImageValues));
}

// Reads a top-level section map with a fixed set of keys.
class Section {
 public:
  Section(const std::string& file, const YAML::Node& n, const std::string& name)
      : file_(file), n_(n), name_(name) {
    if (!n.IsMap()) fail_at(yaml_loc(file, n), "", "", name, "expected a mapping of keys");
  }
  YAML::Node get(const std::string& key, bool required) {
    used_.push_back(key);
    YAML::Node v = n_[key];
    if (!v && required) {
      // yaml-cpp lets a double-quoted string that is never closed run to the end of the file,
      // swallowing the keys after it: say so rather than only "missing".
      for (auto it = n_.begin(); it != n_.end(); ++it)
        if (it->second.IsScalar() && it->second.Scalar().find(key + ":") != std::string::npos)
          fail_at(yaml_loc(file_, it->second), "", "", name_ + "." + key,
                  "missing; it appears inside the string value of '" + it->first.Scalar() +
                      "' (a quote left open?)");
      fail_at(yaml_loc(file_, n_), "", "", name_ + "." + key, "missing");
    }
    return v;
  }
  int64_t get_int(const std::string& key) {
    YAML::Node v = get(key, true);
    int64_t x = 0;
    std::string why;
    if (!yaml_int(v, x, why)) fail(key, v, why);
    if (x < 1) fail(key, v, "expected a positive integer, found " + std::to_string(x));
    return x;
  }
  std::string get_string(const std::string& key, bool required, const std::string& def = "") {
    YAML::Node v = get(key, required);
    if (!v) return def;
    if (!v.IsScalar()) fail(key, v, "expected a string");
    return v.Scalar();
  }
  [[noreturn]] void fail(const std::string& key, const YAML::Node& v, const std::string& what) {
    fail_at(yaml_loc(file_, v ? v : n_), "", "", name_ + "." + key, what);
  }
  void finish() {
    for (auto it = n_.begin(); it != n_.end(); ++it) {
      std::string k = it->first.Scalar();
      if (std::find(used_.begin(), used_.end(), k) == used_.end())
        fail_at(yaml_loc(file_, it->first), "", "", name_ + "." + k, "unknown key" + suggest(k, used_));
    }
  }

 private:
  std::string file_;
  YAML::Node n_;
  std::string name_;
  std::vector<std::string> used_;
};

// A netdef number as the float32 it runs as: finite as a double is not enough, 1e39 overflows
// float32 and 1e-50 (or a denormal like 1e-45) would silently become 0 or lose its precision.
float to_float(const std::string& file, const YAML::Node& v, const std::string& key, double d) {
  const float f = static_cast<float>(d);
  if (!std::isfinite(f))
    fail_at(yaml_loc(file, v), "", "", key,
            "number " + v.Scalar() + " overflows float32 (largest 3.4e38), in which the network runs");
  if (d != 0 && !std::isnormal(f))
    fail_at(
        yaml_loc(file, v), "", "", key,
        "number " + v.Scalar() + " underflows float32 (smallest normal 1.2e-38), in which the network runs");
  return f;
}

std::vector<float> read_floats(const std::string& file, const YAML::Node& v, const std::string& key,
                               size_t channels) {
  std::vector<float> out;
  std::string why;
  double d = 0;
  if (v.IsSequence()) {
    if (v.size() != channels)
      fail_at(yaml_loc(file, v), "", "", key,
              "expected one value per input channel (" + std::to_string(channels) + "), found " +
                  std::to_string(v.size()));
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!yaml_double(*it, d, why)) fail_at(yaml_loc(file, *it), "", "", key, why);
      out.push_back(to_float(file, *it, key, d));
    }
  } else {
    if (!yaml_double(v, d, why)) fail_at(yaml_loc(file, v), "", "", key, why);
    out.assign(channels, to_float(file, v, key, d));
  }
  return out;
}

void parse_preprocess(Network& net, const std::string& file, const YAML::Node& n) {
  size_t c = static_cast<size_t>(net.input.c);
  net.pre.scale.assign(c, 1.0f / 255.0f);
  net.pre.shift.assign(c, 0.0f);
  if (!n) return;
  Section s(file, n, "preprocess");
  YAML::Node scale = s.get("scale", false), shift = s.get("shift", false);
  YAML::Node mean = s.get("mean", false), stdv = s.get("std", false);
  YAML::Node resize = s.get("resize", false), crop = s.get("crop", false);
  s.finish();
  if (resize) {
    int64_t v = 0;
    std::string why;
    if (!yaml_int(resize, v, why) || v < 1 || v > 65535)
      s.fail("resize", resize, why.empty() ? "expected the shorter side's length, 1..65535" : why);
    net.pre.resize = static_cast<int>(v);
    net.pre.resize_loc = yaml_loc(file, resize);
  }
  if (crop) {
    std::vector<int64_t> hw;
    std::string why;
    int64_t v = 0;
    if (crop.IsSequence() && crop.size() == 2) {
      for (size_t i = 0; i < 2; ++i)
        if (yaml_int(crop[i], v, why)) hw.push_back(v);
    } else if (yaml_int(crop, v, why)) {
      hw = {v, v};
    }
    if (hw.size() != 2) s.fail("crop", crop, "expected a size n or [height, width]");
    if (hw[0] != net.input.h || hw[1] != net.input.w)
      s.fail("crop", crop,
             "the crop " + std::to_string(hw[0]) + "x" + std::to_string(hw[1]) +
                 " must be the input's height x width " + std::to_string(net.input.h) + "x" +
                 std::to_string(net.input.w));
    net.pre.crop_h = static_cast<int>(hw[0]);
    net.pre.crop_w = static_cast<int>(hw[1]);
    if (!resize) net.pre.resize_loc = yaml_loc(file, crop);
  }
  if ((scale || shift) && (mean || stdv))
    s.fail(mean ? "mean" : "std", mean ? mean : stdv, "give either scale/shift or mean/std, not both");
  if (scale) net.pre.scale = read_floats(file, scale, "preprocess.scale", c);
  if (shift) net.pre.shift = read_floats(file, shift, "preprocess.shift", c);
  if (mean || stdv) {
    // y = (x/255 - mean) / std
    std::vector<float> m = mean ? read_floats(file, mean, "preprocess.mean", c) : std::vector<float>(c, 0.f);
    std::vector<float> sd = stdv ? read_floats(file, stdv, "preprocess.std", c) : std::vector<float>(c, 1.f);
    for (size_t i = 0; i < c; ++i) {
      if (!(sd[i] > 0.f)) s.fail("std", stdv, "every std must be positive");
      net.pre.scale[i] = static_cast<float>(1.0 / (255.0 * sd[i]));
      net.pre.shift[i] = static_cast<float>(-static_cast<double>(m[i]) / sd[i]);
    }
  }
  // What the network's input then holds must itself be a float32: pixel 255 * scale + shift.
  for (size_t i = 0; i < c; ++i) {
    const double lo = static_cast<double>(net.pre.shift[i]), hi = 255.0 * net.pre.scale[i] + lo;
    const double worst = std::max(std::fabs(lo), std::fabs(hi));
    if (!std::isfinite(net.pre.scale[i]) || !std::isfinite(net.pre.shift[i]) ||
        !std::isfinite(static_cast<float>(worst)) ||
        (net.pre.scale[i] != 0 && !std::isnormal(net.pre.scale[i]))) {
      const YAML::Node& at = scale ? scale : stdv ? stdv : mean ? mean : shift;
      char buf[160];
      std::snprintf(
          buf, sizeof buf,
          "channel %zu: preprocessing gives pixel values up to %.3g (scale %.3g, shift %.3g), outside "
          "float32's range",
          i, worst, static_cast<double>(net.pre.scale[i]), static_cast<double>(net.pre.shift[i]));
      fail_at(yaml_loc(file, at), "", "",
              scale  ? "preprocess.scale"
              : stdv ? "preprocess.std"
                     : "preprocess",
              buf);
    }
  }
}

std::vector<std::string> string_list(const std::string& file, const YAML::Node& v, const std::string& key) {
  std::vector<std::string> out;
  if (v.IsScalar()) return {v.Scalar()};
  if (!v.IsSequence() || v.size() == 0)
    fail_at(yaml_loc(file, v), "", "", key, "expected a string or a non-empty list of strings");
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it->IsScalar()) fail_at(yaml_loc(file, *it), "", "", key, "expected a string");
    out.push_back(it->Scalar());
  }
  return out;
}

void parse_data(Network& net, const std::string& file, const YAML::Node& n) {
  if (!n) return;
  Section s(file, n, "data");
  net.data.loc = yaml_loc(file, n);
  net.data.format = s.get_string("format", true);
  if (net.data.format == "cifar10") {
    net.data.paths = string_list(file, s.get("path", true), "data.path");
    net.data.split = s.get_string("split", false, "train");
    if (net.data.split != "train" && net.data.split != "test")
      s.fail("split", n["split"], "expected 'train' or 'test', found '" + net.data.split + "'");
  } else if (net.data.format == "idx") {
    net.data.images = s.get_string("images", true);
    net.data.labels = s.get_string("labels", true);
  } else if (net.data.format == "npy") {
    net.data.images = s.get_string("images", true);
    net.data.labels = s.get_string("labels", false);  // unlabelled without
  } else if (net.data.format == "cifar100") {
    net.data.paths = string_list(file, s.get("path", true), "data.path");
    net.data.split = s.get_string("split", false, "train");
    if (net.data.split != "train" && net.data.split != "test")
      s.fail("split", n["split"], "expected 'train' or 'test', found '" + net.data.split + "'");
    net.data.labels = s.get_string("labels", false, "fine");
    if (net.data.labels != "fine" && net.data.labels != "coarse")
      s.fail("labels", n["labels"],
             "expected 'fine' (100 classes) or 'coarse' (20), found '" + net.data.labels + "'");
  } else if (net.data.format == "images") {
    net.data.paths = {s.get_string("path", true)};
  } else {
    s.fail("format", n["format"],
           "unknown data format '" + net.data.format + "'; expected cifar10, cifar100, idx, npy or images");
  }
  s.finish();
}

// classes: a list of names in label order, a count (names "0".."N-1"), or a text file of one
// name per line (blank lines and trailing spaces ignored), resolved like every netdef path.
std::vector<std::string> parse_classes(const std::string& file, const std::string& dir, const YAML::Node& v) {
  // 2^20 classes (ImageNet-21k has 21841) keep the names of a count within a few tens of MB.
  constexpr int64_t kMaxClasses = int64_t{1} << 20;
  std::vector<std::string> out;
  if (v.IsScalar()) {
    int64_t count = 0;
    std::string why;
    const std::string& text = v.Scalar();
    if (!text.empty() && text.find_first_not_of("+-0123456789") == std::string::npos) {
      if (!yaml_int(v, count, why)) fail_at(yaml_loc(file, v), "", "", "classes", why);
      if (count < 1 || count > kMaxClasses)
        fail_at(yaml_loc(file, v), "", "", "classes",
                "a class count must be 1.." + std::to_string(kMaxClasses) + ", found " + text);
      for (int64_t i = 0; i < count; ++i) out.push_back(std::to_string(i));
      return out;
    }
    const SourceLoc loc = yaml_loc(file, v);
    AssetResolver assets(dir, AssetResolver::default_roots({}));
    const std::string path = assets.resolve(text, loc, "classes file");
    // Through InputFile: a regular file (a FIFO would hang), recorded so no output replaces it.
    std::string bytes;
    try {
      InputFile in(path);
      bytes = in.read_all(int64_t{64} << 20, "64 MiB", "not a class names file");
    } catch (const Error& e) {
      fail_at(loc, "", "", "classes",
              std::string("cannot open the class names file ") + path + " (" + e.what() + ")");
    }
    std::istringstream f(bytes);
    std::string line;
    int64_t lineno = 0;
    while (std::getline(f, line)) {
      ++lineno;
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
        line.pop_back();
      if (line.empty()) continue;
      if (static_cast<int64_t>(out.size()) >= kMaxClasses || line.size() > 4096)
        fail_at(loc, "", "", "classes",
                path + ":" + std::to_string(lineno) + ": not a class names file (over " +
                    std::to_string(kMaxClasses) + " names or a line over 4096 bytes)");
      out.push_back(line);
    }
    if (f.bad()) fail_at(loc, "", "", "classes", "read error in " + path);
    if (out.empty()) fail_at(loc, "", "", "classes", path + ": no class names (one per line expected)");
    return out;
  }
  return string_list(file, v, "classes");
}

void parse_weights(Network& net, const std::string& file, const YAML::Node& n) {
  if (!n) return;
  Section s(file, n, "weights");
  net.weights.loc = yaml_loc(file, n);
  net.weights.format = s.get_string("format", true);
  net.weights.path = s.get_string("path", true);
  if (net.weights.format == "convnetjs") {
    YAML::Node f = s.get("files", true);
    if (!f.IsMap()) s.fail("files", f, "expected a mapping of layer name to file name");
    for (auto it = f.begin(); it != f.end(); ++it) {
      if (!it->second.IsScalar()) s.fail("files", it->second, "expected a file name");
      net.weights.files.emplace_back(it->first.Scalar(), it->second.Scalar());
      net.weights.file_locs.push_back(yaml_loc(file, it->first));
    }
  } else if (net.weights.format != "safetensors") {
    s.fail("format", n["format"],
           "unknown weights format '" + net.weights.format + "'; expected convnetjs or safetensors");
  }
  s.finish();
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : ", ") + x;
  return out;
}

// A block: layers written once under the top-level key `blocks` and instantiated by name
// (docs/netdef.md). Its layers' values may be "$param", filled in by each instance.
struct Block {
  std::string name;
  std::vector<std::string> params;
  YAML::Node layers;
};

// "$name" scalars in a layer's values (one level of lists, as [h, w] pairs), with their nodes.
void param_refs(const YAML::Node& v, std::vector<YAML::Node>& out) {
  if (v.IsScalar() && !v.Scalar().empty() && v.Scalar()[0] == '$') out.push_back(v);
  if (v.IsSequence())
    for (auto it = v.begin(); it != v.end(); ++it) param_refs(*it, out);
}

std::map<std::string, Block> parse_blocks(const std::string& file, const YAML::Node& n) {
  std::map<std::string, Block> blocks;
  if (!n) return blocks;
  if (!n.IsMap()) fail_at(yaml_loc(file, n), "", "", "blocks", "expected a mapping of block name to block");
  for (auto it = n.begin(); it != n.end(); ++it) {
    Block b;
    b.name = it->first.Scalar();
    const std::string key = "blocks." + b.name;
    Section s(file, it->second, key);
    if (YAML::Node ps = s.get("params", false)) {
      if (!ps.IsSequence()) s.fail("params", ps, "expected a list of parameter names");
      for (auto p = ps.begin(); p != ps.end(); ++p) {
        const std::string pn = p->IsScalar() ? p->Scalar() : "";
        if (pn.empty() || pn[0] == '$' || pn == "name" || pn == "block" || pn == "inputs" ||
            std::find(b.params.begin(), b.params.end(), pn) != b.params.end())
          fail_at(
              yaml_loc(file, *p), "", "", key + ".params",
              "expected distinct parameter names other than name, block and inputs (written without '$')");
        b.params.push_back(pn);
      }
    }
    b.layers = s.get("layers", true);
    if (!b.layers.IsSequence() || b.layers.size() == 0)
      s.fail("layers", b.layers, "expected a non-empty list of layers");
    s.finish();
    std::vector<bool> used(b.params.size(), false);
    for (auto l = b.layers.begin(); l != b.layers.end(); ++l) {
      if (!l->IsMap()) continue;  // reported with its position when an instance expands it
      if ((*l)["block"])
        fail_at(yaml_loc(file, (*l)["block"]), "", "", key + ".layers",
                "a block's layers cannot instantiate another block");
      for (auto kv = l->begin(); kv != l->end(); ++kv) {
        std::vector<YAML::Node> refs;
        param_refs(kv->second, refs);
        const std::string k = kv->first.Scalar();
        for (const YAML::Node& r : refs) {
          if (k == "name" || k == "inputs")
            fail_at(yaml_loc(file, r), "", "", key + ".layers",
                    "a parameter can give a layer's values and type, not its " + k);
          auto p = std::find(b.params.begin(), b.params.end(), r.Scalar().substr(1));
          if (p == b.params.end())
            fail_at(yaml_loc(file, r), "", "", key + ".layers",
                    "'" + r.Scalar() + "' names no parameter of block '" + b.name + "'" +
                        (b.params.empty() ? std::string(" (it declares none under 'params')")
                                          : suggest(r.Scalar().substr(1), b.params)));
          used[static_cast<size_t>(p - b.params.begin())] = true;
        }
      }
    }
    for (size_t k = 0; k < used.size(); ++k)
      if (!used[k])
        fail_at(yaml_loc(file, it->second["params"]), "", "", key + ".params",
                "parameter '" + b.params[k] + "' is used by none of the block's layers (write it as '$" +
                    b.params[k] + "')");
    blocks[b.name] = b;
  }
  return blocks;
}

// Kahn's algorithm, always taking the earliest ready layer in file order, so a netdef written
// in order runs in order.
std::vector<size_t> topo_order(const std::string& file, const std::vector<std::unique_ptr<Layer>>& L,
                               const std::vector<std::vector<int>>& in_idx) {
  size_t n = L.size();
  std::vector<int> pending(n, 0);
  std::vector<std::vector<size_t>> users(n);
  for (size_t i = 0; i < n; ++i)
    for (int j : in_idx[i])
      if (j >= 0) {
        pending[i]++;
        users[static_cast<size_t>(j)].push_back(i);
      }
  std::vector<size_t> order;
  std::vector<bool> done(n, false);
  std::set<size_t> ready;
  for (size_t i = 0; i < n; ++i)
    if (pending[i] == 0) ready.insert(i);
  while (!ready.empty()) {
    size_t i = *ready.begin();
    ready.erase(ready.begin());
    order.push_back(i);
    done[i] = true;
    for (size_t u : users[i])
      if (--pending[u] == 0) ready.insert(u);
  }
  if (order.size() != n) {
    // Walk back from the first stuck layer along stuck inputs until a layer repeats: that is
    // the cycle.
    size_t start = 0;
    while (done[start]) ++start;
    std::vector<size_t> path{start};
    std::set<size_t> on_path{start};
    for (;;) {
      size_t cur = path.back(), next = cur;
      for (int j : in_idx[cur])
        if (j >= 0 && !done[static_cast<size_t>(j)]) {
          next = static_cast<size_t>(j);
          break;
        }
      if (on_path.count(next)) {
        std::string cyc;
        auto it = std::find(path.begin(), path.end(), next);
        for (; it != path.end(); ++it) cyc += "'" + L[*it]->name + "' <- ";
        cyc += "'" + L[next]->name + "'";
        fail_at(L[next]->loc, L[next]->name, L[next]->type, "inputs", "the layers form a cycle: " + cyc);
      }
      path.push_back(next);
      on_path.insert(next);
    }
  }
  (void)file;
  return order;
}

Network parse_node(const YAML::Node& root, const std::string& file, const std::string& dir) {
  check_duplicate_keys(file, root);
  Network net;
  net.source = file;
  net.source_dir = dir;
  Section top(file, root, "netdef");
  net.name = top.get_string("name", false, file);

  YAML::Node input_node = top.get("input", true);
  Section in(file, input_node, "input");
  net.input = {in.get_int("channels"), in.get_int("height"), in.get_int("width")};
  in.finish();
  try {
    check_image_size(net.input, "input");
    if (net.input.c > kMaxInputChannels)
      throw Error("at most " + std::to_string(kMaxInputChannels) + " input channels are supported, found " +
                  std::to_string(net.input.c));
  } catch (const Error& e) {
    fail_at(yaml_loc(file, input_node), "", "", "input", e.what());
  }

  parse_preprocess(net, file, top.get("preprocess", false));

  YAML::Node classes = top.get("classes", true);
  net.classes = parse_classes(file, dir, classes);
  parse_data(net, file, top.get("data", false));
  parse_weights(net, file, top.get("weights", false));

  YAML::Node layers = top.get("layers", true);
  if (!layers.IsSequence() || layers.size() == 0)
    top.fail("layers", layers, "expected a non-empty list of layers");
  YAML::Node output = top.get("output", false);
  const std::map<std::string, Block> blocks = parse_blocks(file, top.get("blocks", false));
  top.finish();

  // Pass 1: create layers and read their parameters, block instances expanded in place.
  std::vector<std::unique_ptr<Layer>> L;
  std::map<std::string, size_t> by_name;
  std::map<std::string, std::string> instance_output;  // block instance name -> its last layer
  std::map<std::string, SourceLoc> instance_loc;

  // One layer map: `prefix` and `params` are a block instance's ("" and null outside blocks);
  // inside a block, input names are the block's own layers or `input`, the block's input.
  auto add_layer = [&](const YAML::Node& ln, const std::string& where, const std::string& prefix,
                       const std::map<std::string, YAML::Node>* params, const std::string& block_input,
                       bool first_in_block) {
    SourceLoc loc = yaml_loc(file, ln);
    if (!ln.IsMap()) fail_at(loc, "", "", "", where + ": expected a mapping with a 'type'");
    // A block's "$param" type (the parameter checked to exist) reads the instance's value. (A
    // YAML::Node copy refers to the same node; assigning to it would rewrite the block itself.)
    const YAML::Node written = ln["type"];
    const bool param_type =
        params && written && written.IsScalar() && written.Scalar().size() > 1 && written.Scalar()[0] == '$';
    const YAML::Node tn = param_type ? params->at(written.Scalar().substr(1)) : written;
    std::string local = ln["name"] && ln["name"].IsScalar() ? ln["name"].Scalar() : "";
    if (!tn || !tn.IsScalar())
      fail_at(tn ? yaml_loc(file, tn) : loc, local.empty() ? where : prefix + local, "", "type",
              "missing; expected one of the layer types");
    std::string type = tn.Scalar();
    const LayerType* lt = find_layer_type(type);
    if (!lt) fail_at(yaml_loc(file, tn), prefix + local, "", "type", unknown_type_message(type));
    if (local.empty()) {
      if (ln["name"]) fail_at(yaml_loc(file, ln["name"]), "", type, "name", "expected a string");
      local = type + where.substr(where.find_last_of(' ') + 1);
    }
    if (local == kInputName)
      fail_at(yaml_loc(file, ln["name"]), local, type, "name",
              prefix.empty() ? "'input' is reserved for the network input"
                             : "'input' is reserved for the block's input");
    const std::string lname = prefix + local;
    std::unique_ptr<Layer> layer = lt->make();
    layer->name = lname;
    layer->loc = loc;
    if (instance_output.count(lname))
      fail_at(ln["name"] ? yaml_loc(file, ln["name"]) : loc, lname, type, "name",
              "duplicate layer name; a block instance of that name is at " + instance_loc[lname].str());
    if (!by_name.emplace(lname, L.size()).second)
      fail_at(ln["name"] ? yaml_loc(file, ln["name"]) : loc, lname, type, "name",
              "duplicate layer name; first defined at " + L[by_name[lname]]->loc.str());

    ParamReader r(ln, file, lname, type);
    r.set_params(params);
    r.mark_used("name");
    r.mark_used("type");
    r.mark_used("inputs");
    if (YAML::Node a = ln["algo"]) {
      if (layer->kind != LayerKind::kConv) r.fail("algo", "only conv layers take 'algo'");
      r.mark_used("algo");
      const std::string v = a.IsScalar() ? a.Scalar() : "";
      const std::optional<ConvAlgo> algo = parse_conv_algo(v);
      if (!algo) r.fail("algo", std::string("expected ") + kConvAlgoExpected + ", found '" + v + "'");
      layer->algo = *algo;
    }
    if (YAML::Node tn = ln["tensors"]) {
      r.mark_used("tensors");
      if (!tn.IsMap() || tn.size() == 0)
        r.fail("tensors",
               "expected a mapping of weight (weight, bias, ...) to its tensor's name in the file");
      for (auto it = tn.begin(); it != tn.end(); ++it) {
        if (!it->second.IsScalar() || it->second.Scalar().empty())
          fail_at(yaml_loc(file, it->second), lname, type, "tensors", "expected a tensor name");
        layer->tensor_names[it->first.Scalar()] = it->second.Scalar();
      }
    }
    layer->parse(r);
    r.finish();

    const bool in_block = params != nullptr;
    if (YAML::Node inp = ln["inputs"]) {
      std::vector<std::string> names = string_list(file, inp, "inputs");
      for (size_t k = 0; k < names.size(); ++k) {
        layer->input_names.push_back(!in_block                ? names[k]
                                     : names[k] == kInputName ? block_input
                                                              : prefix + names[k]);
        layer->input_locs.push_back(yaml_loc(file, inp.IsSequence() ? inp[k] : inp));
      }
    } else {
      layer->input_names.push_back(first_in_block ? block_input : L.empty() ? kInputName : L.back()->name);
      layer->input_locs.push_back(loc);
    }
    int n_in = static_cast<int>(layer->input_names.size());
    if (n_in < layer->min_inputs() || n_in > layer->max_inputs())
      fail_at(ln["inputs"] ? yaml_loc(file, ln["inputs"]) : loc, lname, type, "inputs",
              layer->min_inputs() == layer->max_inputs()
                  ? "expected exactly " + std::to_string(layer->min_inputs()) + " input(s), found " +
                        std::to_string(n_in)
                  : "expected at least " + std::to_string(layer->min_inputs()) + " inputs, found " +
                        std::to_string(n_in));
    L.push_back(std::move(layer));
  };

  for (size_t i = 0; i < layers.size(); ++i) {
    YAML::Node ln = layers[i];
    const std::string where = "layer " + std::to_string(i + 1);
    if (!ln.IsMap() || !ln["block"]) {
      add_layer(ln, where, "", nullptr, "", false);
      continue;
    }
    // A block instance: {name, block, inputs (one), and a value for each of the block's params}.
    YAML::Node bn = ln["block"];
    const SourceLoc loc = yaml_loc(file, ln);
    YAML::Node nn = ln["name"];
    if (!nn || !nn.IsScalar())
      fail_at(nn ? yaml_loc(file, nn) : loc, "", "", "name",
              "a block instance needs a name (its layers are called '<name>.<layer>')");
    const std::string iname = nn.Scalar();
    if (!bn.IsScalar() || !blocks.count(bn.Scalar())) {
      std::vector<std::string> names;
      for (const auto& kv : blocks) names.push_back(kv.first);
      fail_at(yaml_loc(file, bn), iname, "", "block",
              "no block named '" + (bn.IsScalar() ? bn.Scalar() : std::string("?")) + "' is defined" +
                  (names.empty() ? std::string(" (define blocks under the top-level key 'blocks')")
                                 : suggest(bn.IsScalar() ? bn.Scalar() : "", names)));
    }
    const Block& b = blocks.at(bn.Scalar());
    const std::string itype = "block " + b.name;
    if (ln["type"])
      fail_at(yaml_loc(file, ln["type"]), iname, itype, "type", "a block instance takes no type");
    if (iname == kInputName || by_name.count(iname) || instance_output.count(iname))
      fail_at(yaml_loc(file, nn), iname, itype, "name",
              iname == kInputName
                  ? "'input' is reserved for the network input"
                  : "duplicate name; first defined at " +
                        (by_name.count(iname) ? L[by_name[iname]]->loc.str() : instance_loc[iname].str()));
    std::string block_input = L.empty() ? kInputName : L.back()->name;
    if (YAML::Node inp = ln["inputs"]) {
      std::vector<std::string> names = string_list(file, inp, "inputs");
      if (names.size() != 1)
        fail_at(yaml_loc(file, inp), iname, itype, "inputs",
                "a block takes exactly 1 input, found " + std::to_string(names.size()));
      block_input = names[0];
    }
    std::map<std::string, YAML::Node> values;
    std::vector<std::string> keys{"name", "block", "inputs"};
    keys.insert(keys.end(), b.params.begin(), b.params.end());
    for (auto it = ln.begin(); it != ln.end(); ++it) {
      const std::string k = it->first.Scalar();
      if (std::find(keys.begin(), keys.end(), k) == keys.end())
        fail_at(yaml_loc(file, it->first), iname, itype, k,
                "unknown key for an instance of block '" + b.name + "'" + suggest(k, keys));
      if (k != "name" && k != "block" && k != "inputs") values[k] = it->second;
    }
    for (const std::string& pn : b.params)
      if (!values.count(pn))
        fail_at(loc, iname, itype, pn,
                "missing; block '" + b.name + "' needs a value for each of " + join(b.params));
    instance_loc[iname] = loc;
    // Blocks multiply layers: a few KB of instances of a large block could ask for millions.
    if (L.size() + b.layers.size() > kMaxLayers)
      fail_at(loc, iname, itype, "block",
              "the network expands to over " + std::to_string(kMaxLayers) +
                  " layers; not a netdef cnnrun can run");
    for (size_t k = 0; k < b.layers.size(); ++k)
      add_layer(b.layers[k], "layer " + std::to_string(k + 1), iname + ".", &values, block_input, k == 0);
    instance_output[iname] = L.back()->name;
  }

  // Pass 2: resolve input names.
  std::vector<std::vector<int>> in_idx(L.size());
  for (size_t i = 0; i < L.size(); ++i)
    for (size_t k = 0; k < L[i]->input_names.size(); ++k) {
      std::string nm = L[i]->input_names[k];
      if (auto a = instance_output.find(nm); a != instance_output.end()) nm = a->second;
      if (nm == kInputName) {
        in_idx[i].push_back(-1);
        continue;
      }
      auto it = by_name.find(nm);
      if (it == by_name.end()) {
        std::vector<std::string> names{kInputName};
        for (const auto& kv : by_name) names.push_back(kv.first);
        for (const auto& kv : instance_output) names.push_back(kv.first);
        fail_at(L[i]->input_locs[k], L[i]->name, L[i]->type, "inputs",
                "no layer named '" + nm + "' produces this input" + suggest(nm, names));
      }
      if (it->second == i)
        fail_at(L[i]->input_locs[k], L[i]->name, L[i]->type, "inputs", "a layer cannot take its own output");
      in_idx[i].push_back(static_cast<int>(it->second));
    }

  // Pass 3: order, keep what the output needs, infer shapes.
  std::vector<size_t> order = topo_order(file, L, in_idx);
  size_t out_file_idx = L.size() - 1;
  if (output) {
    std::string oname = output.IsScalar() ? output.Scalar() : "";
    if (auto a = instance_output.find(oname); a != instance_output.end()) oname = a->second;
    if (!by_name.count(oname)) top.fail("output", output, "expected the name of a layer");
    out_file_idx = by_name[oname];
  }
  std::vector<bool> needed(L.size(), false);
  needed[out_file_idx] = true;
  for (auto it = order.rbegin(); it != order.rend(); ++it)
    if (needed[*it])
      for (int j : in_idx[*it])
        if (j >= 0) needed[static_cast<size_t>(j)] = true;
  for (size_t i = 0; i < L.size(); ++i)
    if (!needed[i])
      fail_at(L[i]->loc, L[i]->name, L[i]->type, "",
              "its output reaches no path to the network output '" + L[out_file_idx]->name +
                  "'; remove the layer or name it in another layer's 'inputs' (or set 'output')");

  std::vector<int> new_index(L.size(), -1);
  for (size_t pos = 0; pos < order.size(); ++pos) new_index[order[pos]] = static_cast<int>(pos);
  for (size_t pos = 0; pos < order.size(); ++pos) {
    size_t i = order[pos];
    std::unique_ptr<Layer>& l = L[i];
    for (int j : in_idx[i]) {
      l->inputs.push_back(j < 0 ? -1 : new_index[static_cast<size_t>(j)]);
      l->in_shapes.push_back(j < 0 ? net.input : L[static_cast<size_t>(j)]->out_shape);
    }
    try {
      l->out_shape = l->infer_shape(l->in_shapes);
      check_image_size(l->out_shape, "output");
      for (const auto& ws : l->weight_specs(l->in_shapes)) numel_of(ws.dims);
    } catch (const Error& e) {
      std::string ins;
      for (size_t k = 0; k < l->in_shapes.size(); ++k)
        ins += (k ? ", " : "") + ("'" + l->input_names[k] + "' gives " + l->in_shapes[k].str());
      fail_at(l->loc, l->name, l->type, "", std::string(e.what()) + " (input " + ins + ")");
    }
    std::vector<std::string> roles;
    for (const auto& ws : l->weight_specs(l->in_shapes)) roles.push_back(ws.name);
    for (const auto& kv : l->tensor_names)
      if (std::find(roles.begin(), roles.end(), kv.first) == roles.end())
        fail_at(yaml_loc(file, layers[i]["tensors"]), l->name, l->type, "tensors",
                "'" + kv.first + "' is not a weight of this layer" +
                    (roles.empty() ? std::string(" (it has none)") : suggest(kv.first, roles)));
    l->bind(l->in_shapes);
  }
  for (size_t pos = 0; pos < order.size(); ++pos) net.layers.push_back(std::move(L[order[pos]]));
  net.output = new_index[out_file_idx];

  const Layer& out = *net.layers[static_cast<size_t>(net.output)];
  if (out.out_shape.size() != static_cast<int64_t>(net.classes.size()))
    fail_at(yaml_loc(file, classes), out.name, out.type, "classes",
            "the output layer gives " + out.out_shape.str() + " = " + std::to_string(out.out_shape.size()) +
                " values per image but " + std::to_string(net.classes.size()) + " classes are named");
  return net;
}

std::string dir_of(const std::string& path) {
  size_t p = path.find_last_of('/');
  return p == std::string::npos ? "." : (p == 0 ? "/" : path.substr(0, p));
}

// Counts the documents of a YAML stream and keeps where each starts, building no nodes.
class DocumentStarts : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> marks;
  void OnDocumentStart(const YAML::Mark& mark) override { marks.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
  }
  void OnMapEnd() override {}
};

Network parse_text(const std::string& text, const std::string& file, const std::string& dir) {
  YAML::Node root;
  auto loc_of = [&](const YAML::Mark& m) {
    return SourceLoc{file, m.is_null() ? 0 : m.line + 1, m.is_null() ? 0 : m.column + 1};
  };
  try {
    // The first document only: yaml-cpp 0.7's LoadAll loops forever, allocating, on some
    // malformed text (", a'2- b\n..." reports a document without consuming a token, every
    // time), so documents are never collected in an unbounded loop here.
    root = YAML::Load(text);
    if (root.IsMap()) {
      // A second document (after '---') is an error rather than silently ignored: half a netdef
      // would run. At most two documents are looked at, so the loop above cannot happen.
      std::istringstream in(text);
      YAML::Parser parser(in);
      DocumentStarts starts;
      for (int k = 0; k < 2 && parser.HandleNextDocument(starts); ++k) {
      }
      if (starts.marks.size() > 1)
        fail_at(loc_of(starts.marks[1]), "", "", "",
                "a second YAML document follows the netdef (after '---'); a netdef is one document");
    }
  } catch (const YAML::DeepRecursion& e) {
    fail_at(loc_of(e.mark), "", "", "",
            "YAML nested more than " + std::to_string(e.depth()) + " levels deep");
  } catch (const YAML::Exception& e) {
    fail_at(loc_of(e.mark), "", "", "", "YAML syntax error: " + e.msg);
  }
  if (!root.IsMap())
    fail_at({file, 1, 1}, "", "", "", "expected a YAML mapping with input, classes and layers");
  return parse_node(root, file, dir);
}

}  // namespace

int Network::find(const std::string& layer_name) const {
  for (size_t i = 0; i < layers.size(); ++i)
    if (layers[i]->name == layer_name) return static_cast<int>(i);
  return -1;
}

Network parse_netdef_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(path + ": is a directory, not a netdef");
  InputFile f(path);
  // Reads at most one chunk past the limit, so a data set given as the netdef is refused without
  // being read whole. A real netdef is a few KB; yaml-cpp needs seconds per MB.
  std::string text = f.read_all(int64_t{1} << 20, "1 MiB", "not a netdef");
  return parse_text(text, path, dir_of(path));
}

Network parse_netdef_string(const std::string& text, const std::string& name, const std::string& dir) {
  return parse_text(text, name, dir);
}

}  // namespace cnnrun
