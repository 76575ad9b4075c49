// The run's GPU timeline. CUDA events are recorded between the stages of every block on its own
// stream, all read relative to one start event, so each stage is an interval on one timeline. A
// layer's time is the sum of its intervals over all blocks; the copy time not hidden behind
// compute is the part of the copy intervals' union that no compute interval covers.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace cnnrun::gpu {

using Intervals = std::vector<std::pair<double, double>>;

Intervals merge(Intervals v);  // the union, as sorted disjoint intervals
double length(const Intervals& v);
double overlap(const Intervals& a, const Intervals& b);  // both merged

class Timeline {
 public:
  // A block's events: [0] before its copy in, [1] after it, [2] after preprocess, [3 + i] after
  // step i, [3 + L] after argmax, [4 + L] after the copies out.
  static size_t events(size_t steps) { return steps + 5; }

  explicit Timeline(size_t steps) : layer_(steps, 0.0) {}
  // One block's event times in seconds from the start; launches[i]: step i launched something
  // (a step that launches nothing shows only the events' own gap, not counted).
  void add_block(const std::vector<double>& t, const std::vector<bool>& launches);

  const std::vector<double>& layer_seconds() const { return layer_; }
  double preprocess() const { return pre_; }
  double argmax() const { return argmax_; }
  double copy_in() const { return h2d_; }
  double copy_out() const { return d2h_; }
  double busy() const { return length(merge(compute_)); }  // the GPU busy with compute
  double unhidden_copies() const;                          // copy time no compute covers

 private:
  std::vector<double> layer_;
  double pre_ = 0, argmax_ = 0, h2d_ = 0, d2h_ = 0;
  Intervals compute_, copy_;
};

}  // namespace cnnrun::gpu
