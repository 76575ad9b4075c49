// What the predictions say about the labels: top-1 and top-k accuracy, per-class accuracy and
// the confusion matrix, accumulated block by block (a streamed data set is never held whole),
// and the --predictions CSV written as the blocks come. Facts only; report.cpp words them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace cnnrun {

// The k classes with the largest values, largest first; ties go to the lower class (the rule
// of predicted_class, so the first of them is always the prediction).
std::vector<int32_t> top_k_classes(const float* v, int64_t n, int k);

struct Scores {
  int classes = 0;
  int k = 1;                                                 // top-k counted when > 1
  int64_t images = 0;                                        // labelled images scored
  int64_t top1 = 0, topk = 0;                                // correct
  std::vector<int64_t> per_class_images, per_class_correct;  // by true label
  std::vector<int64_t> confusion;  // classes x classes, [true][predicted]; empty above kMaxConfusion
  static constexpr int kMaxConfusion = 1000;
};

class Scorer {
 public:
  Scorer(int classes, int k);
  // n images: their labels, the predictions, and the output values (n x classes; may be null
  // when k == 1).
  void add(const int32_t* labels, const int32_t* predictions, const float* values, int64_t n);
  const Scores& scores() const { return s_; }

 private:
  Scores s_;
};

// --predictions FILE.csv: "index,path,label,top1,top1_name,top1_value,..." one row per image,
// gathered block by block (text only: the values themselves are dropped with their block).
class PredictionsWriter {
 public:
  PredictionsWriter(const std::vector<std::string>& classes, int k);
  void add(int64_t first, const std::vector<std::string>& paths, const std::vector<int32_t>& labels,
           const float* values, int64_t n, int64_t classes);
  // The whole CSV (header and rows); the CLI writes it through OutputFiles with the run's other
  // outputs, all or none.
  std::string take() { return std::move(bytes_); }

 private:
  std::vector<std::string> classes_;
  int k_;
  std::string bytes_;
};

}  // namespace cnnrun
