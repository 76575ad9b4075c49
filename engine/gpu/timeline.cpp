#include "engine/gpu/timeline.h"

#include <algorithm>

namespace cnnrun::gpu {

Intervals merge(Intervals v) {
  std::sort(v.begin(), v.end());
  Intervals out;
  for (auto& iv : v) {
    if (iv.second <= iv.first) continue;
    if (!out.empty() && iv.first <= out.back().second)
      out.back().second = std::max(out.back().second, iv.second);
    else
      out.push_back(iv);
  }
  return out;
}

double length(const Intervals& v) {
  double s = 0;
  for (auto& iv : v) s += iv.second - iv.first;
  return s;
}

double overlap(const Intervals& a, const Intervals& b) {
  double s = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    double lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) s += hi - lo;
    if (a[i].second < b[j].second)
      ++i;
    else
      ++j;
  }
  return s;
}

void Timeline::add_block(const std::vector<double>& t, const std::vector<bool>& launches) {
  const size_t L = layer_.size();
  h2d_ += t[1] - t[0];
  pre_ += t[2] - t[1];
  for (size_t i = 0; i < L; ++i)
    if (launches[i]) layer_[i] += t[3 + i] - t[2 + i];
  argmax_ += t[L + 3] - t[L + 2];
  d2h_ += t[L + 4] - t[L + 3];
  compute_.push_back({t[1], t[L + 3]});
  copy_.push_back({t[0], t[1]});
  copy_.push_back({t[L + 3], t[L + 4]});
}

double Timeline::unhidden_copies() const {
  const Intervals cm = merge(compute_), cp = merge(copy_);
  return length(cp) - overlap(cp, cm);
}

}  // namespace cnnrun::gpu
