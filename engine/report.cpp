#include "engine/report.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

namespace cnnrun {

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Per-type totals in order of first appearance.
std::vector<std::pair<std::string, double>> by_type(const RunResult& r) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& l : r.layers) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == l.type; });
    if (it == out.end())
      out.emplace_back(l.type, l.seconds);
    else
      it->second += l.seconds;
  }
  return out;
}

double accuracy(const RunResult& r) {
  return r.images ? 100.0 * static_cast<double>(r.correct) / static_cast<double>(r.images) : 0.0;
}

}  // namespace

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      size_t p = line.find(':');
      return p == std::string::npos ? line : line.substr(p + 2);
    }
  return "unknown";
}

std::string report_text(const Report& r) {
  std::string s;
  s += "cnnrun " + r.version + ": " + r.net_name + " (" + r.netdef + ")\n";
  s += "Engine: " + r.run.engine + "\n";
  if (r.run.precision != Precision::kFp32)
    s += std::string("Precision: ") + precision_name(r.run.precision) +
         " (conv and fc operands may be rounded to it, FP32 accumulation; each layer's algorithm says what "
         "ran)\n";
  for (const auto& n : r.notes) s += "Note: " + n + "\n";
  for (const auto& n : r.run.notes) s += "Note: " + n + "\n";
  s += "Data: " + r.data_description + "\n";
  s += "Weights: " + r.weights_description + "\n";
  s += "Images: " + std::to_string(r.run.images);
  if (r.distinct_images < r.run.images) s += " (" + std::to_string(r.distinct_images) + " distinct, cycled)";
  s += "\n\n";
  s += "Load data time:            " + fmt("%.6f", r.load_data_s) + " s\n";
  s += "Create network time:       " + fmt("%.6f", r.build_net_s) + " s\n";
  s += "Load network weights time: " + fmt("%.6f", r.load_weights_s) + " s\n\n";
  double thr = r.run.forward_seconds > 0 ? static_cast<double>(r.run.images) / r.run.forward_seconds : 0;
  s += "Net forward total time: " + fmt("%.6f", r.run.forward_seconds) + " s (" + fmt("%.0f", thr) +
       " images/s)\n";
  double sum = 0;
  size_t wname = 4, walgo = 0;
  for (const auto& l : r.run.layers) {
    sum += l.seconds;
    wname = std::max(wname, l.name.size());
    walgo = std::max(walgo, l.algo.size());
  }
  for (const auto& l : r.run.layers) {
    std::string line = "    " + l.name + std::string(wname - l.name.size() + 2, ' ') + l.type +
                       std::string(l.type.size() < 10 ? 10 - l.type.size() : 1, ' ');
    if (walgo) line += l.algo + std::string(walgo - l.algo.size() + 2, ' ');
    line += fmt("%.6f s", l.seconds) + fmt("  %5.1f %%", sum > 0 ? 100.0 * l.seconds / sum : 0.0);
    s += line + "\n";
  }
  s += "\n";
  for (const auto& [type, secs] : by_type(r.run))
    s += "  " + type + ":" + std::string(type.size() < 10 ? 10 - type.size() : 1, ' ') + fmt("%.6f s", secs) +
         "\n";
  if (r.run.transfer_seconds > 0)
    s += "  (copies not hidden by compute: " + fmt("%.6f s", r.run.transfer_seconds) + ")\n";
  if (sum > r.run.forward_seconds * 1.05 && r.run.forward_seconds > 0)
    s += "  (layer times add up to more than the wall time: blocks ran concurrently on several "
         "streams/threads)\n";
  s += "\n";
  if (r.validated) {
    const Validation& v = r.validation;
    s += "Validation against the CPU reference (" + std::to_string(v.images) + " images, tolerance " +
         fmt("%.0e", v.tolerance) + " relative to each layer's largest value):\n";
    for (const auto& c : v.layers) {
      std::string line = "    " + c.name + std::string(wname - c.name.size() + 2, ' ');
      if (!c.fused_into.empty())
        line += "fused into " + c.fused_into + ", checked there";
      else
        line += "max abs " + fmt("%.3e", c.max_abs) + "  max rel " + fmt("%.3e", c.max_rel) +
                (c.pass ? "  pass" : "  FAIL");
      s += line + "\n";
    }
    s += "  predictions differing: " + std::to_string(v.prediction_mismatches) + "\n";
    s += v.pass ? "  Validation: PASS\n\n"
                : "  Validation: FAIL (first failing layer: " + v.first_failure + ")\n\n";
  }
  s += "Net accuracy: " + fmt("%.2f", accuracy(r.run)) + " % (" + std::to_string(r.run.correct) + "/" +
       std::to_string(r.run.images) + ")\n";
  s += "Total time: " + fmt("%.6f", r.total_s) + " s\n";
  return printable(s);  // names and paths come from files: no terminal escapes, only valid UTF-8
}

std::string report_json(const Report& r) {
  using nlohmann::json;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  json j;
  j["cnnrun_version"] = r.version;
  j["netdef"] = r.netdef;
  j["network"] = r.net_name;
  j["environment"] = {{"host", host},
                      {"cpu", cpu_model()},
                      {"hardware_threads", std::thread::hardware_concurrency()},
                      {"engine", r.run.engine}};
  j["precision"] = precision_name(r.run.precision);
  j["notes"] = r.notes;
  for (const auto& n : r.run.notes) j["notes"].push_back(n);
  j["data"] = r.data_description;
  j["weights"] = r.weights_description;
  j["images"] = r.run.images;
  j["distinct_images"] = r.distinct_images;
  j["times"] = {{"load_data_s", r.load_data_s},
                {"create_network_s", r.build_net_s},
                {"load_weights_s", r.load_weights_s},
                {"forward_s", r.run.forward_seconds},
                {"unhidden_transfer_s", r.run.transfer_seconds},
                {"total_s", r.total_s}};
  j["throughput_images_per_s"] =
      r.run.forward_seconds > 0 ? static_cast<double>(r.run.images) / r.run.forward_seconds : 0.0;
  json layers = json::array();
  for (const auto& l : r.run.layers)
    layers.push_back({{"name", l.name}, {"type", l.type}, {"algo", l.algo}, {"seconds", l.seconds}});
  j["layers"] = layers;
  json types = json::object();
  for (const auto& [type, secs] : by_type(r.run)) types[type] = secs;
  j["seconds_by_type"] = types;
  j["correct"] = r.run.correct;
  j["accuracy_percent"] = accuracy(r.run);
  if (r.validated) {
    const Validation& v = r.validation;
    json checks = json::array();
    for (const auto& c : v.layers) {
      json e = {{"name", c.name}, {"type", c.type}};
      if (!c.fused_into.empty())
        e["fused_into"] = c.fused_into;
      else
        e.update({{"max_abs", c.max_abs}, {"max_rel", c.max_rel}, {"max_ref", c.max_ref}, {"pass", c.pass}});
      checks.push_back(e);
    }
    j["validation"] = {{"images", v.images},
                       {"tolerance", v.tolerance},
                       {"pass", v.pass},
                       {"first_failure", v.first_failure},
                       {"prediction_mismatches", v.prediction_mismatches},
                       {"layers", checks}};
  }
  // Strings from files that are not valid UTF-8 (a Latin-1 layer name) become U+FFFD instead of
  // failing the report after the whole run.
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace cnnrun
