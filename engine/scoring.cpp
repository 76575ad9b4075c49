// Scores and the predictions file; engine/scoring.h says what they are.
#include "engine/scoring.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "engine/core/error.h"

namespace cnnrun {

std::vector<int32_t> top_k_classes(const float* v, int64_t n, int k) {
  const int64_t m = std::min<int64_t>(k, n);
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + m, idx.end(),
                    [v](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  idx.resize(static_cast<size_t>(m));
  return idx;
}

Scorer::Scorer(int classes, int k) {
  s_.classes = classes;
  s_.k = k;
  s_.per_class_images.assign(static_cast<size_t>(classes), 0);
  s_.per_class_correct.assign(static_cast<size_t>(classes), 0);
  if (classes <= Scores::kMaxConfusion) s_.confusion.assign(static_cast<size_t>(classes) * classes, 0);
}

void Scorer::add(const int32_t* labels, const int32_t* pred, const float* values, int64_t n) {
  const int64_t C = s_.classes;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t l = labels[i], p = pred[i];
    if (l < 0 || l >= C || p < 0 || p >= C) throw Error("label or prediction outside the classes");
    ++s_.images;
    ++s_.per_class_images[static_cast<size_t>(l)];
    if (p == l) {
      ++s_.top1;
      ++s_.per_class_correct[static_cast<size_t>(l)];
    }
    if (!s_.confusion.empty()) ++s_.confusion[static_cast<size_t>(l * C + p)];
    if (s_.k > 1) {
      // Label among the k largest: fewer than k values are larger, counting ties before it as larger.
      const float* v = values + i * C;
      const float lv = v[l];
      int64_t above = 0;
      for (int64_t c = 0; c < C && above < s_.k; ++c) above += v[c] > lv || (v[c] == lv && c < l);
      if (above < s_.k) ++s_.topk;
    }
  }
}

namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace

PredictionsWriter::PredictionsWriter(const std::vector<std::string>& classes, int k)
    : classes_(classes), k_(std::max(1, std::min<int>(k, static_cast<int>(classes.size())))) {
  std::string h = "index,path,label";
  for (int j = 1; j <= k_; ++j) {
    const std::string t = "top" + std::to_string(j);
    h += "," + t + "," + t + "_name," + t + "_value";
  }
  bytes_ = h + "\n";
}

void PredictionsWriter::add(int64_t first, const std::vector<std::string>& paths,
                            const std::vector<int32_t>& labels, const float* values, int64_t n,
                            int64_t classes) {
  std::string out;
  char num[32];
  for (int64_t i = 0; i < n; ++i) {
    out += std::to_string(first + i) + ",";
    if (static_cast<size_t>(i) < paths.size()) out += csv_field(paths[static_cast<size_t>(i)]);
    out += ",";
    if (static_cast<size_t>(i) < labels.size()) out += std::to_string(labels[static_cast<size_t>(i)]);
    const float* v = values + i * classes;
    for (int32_t c : top_k_classes(v, classes, k_)) {
      std::snprintf(num, sizeof num, "%.9g", static_cast<double>(v[c]));
      out += "," + std::to_string(c) + "," + csv_field(classes_[static_cast<size_t>(c)]) + "," + num;
    }
    out += "\n";
  }
  bytes_ += out;
}

}  // namespace cnnrun
