// Helpers shared by the test files: where the sample assets are, scratch files, random data,
// and tensor comparison with an absolute + relative tolerance that prints the worst element.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/executor.h"
#include "engine/io/dataset.h"
#include "engine/network.h"
#include "engine/passes.h"

namespace cnnrun::test {

// ../shared beside the checkout, or $CNNRUN_SHARED.
inline std::string shared_dir() {
  const char* e = std::getenv("CNNRUN_SHARED");
  return e && *e ? e : std::string(CNNRUN_SOURCE_DIR) + "/../shared";
}
inline bool have_file(const std::string& p) { return std::ifstream(p).good(); }
// The Python the test fixtures run (NumPy, Pillow): Debian's /usr/bin/python3, or
// $CNNRUN_TEST_PYTHON (a GPU host whose system Python lacks NumPy, its PyTorch venv's has it).
inline std::string python() {
  const char* e = std::getenv("CNNRUN_TEST_PYTHON");
  return e && *e ? e : "/usr/bin/python3";
}

// A fresh directory under /tmp for one test.
std::string temp_dir(const std::string& tag);
void write_file(const std::string& path, const std::string& bytes);
std::string read_file(const std::string& path);

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

struct Compare {
  double max_abs = 0, max_rel = 0;
  size_t worst = 0;
  bool ok = true;
};
// |a-b| <= atol + rtol*|b| for every element; NaN never passes.
Compare compare(const float* a, const float* b, size_t n, double atol, double rtol);

// The data set's first n images (for the GPU cases' shrunk runs under compute-sanitizer).
inline Dataset first_images(const Dataset& d, int64_t n) {
  Dataset s = d;
  s.count = n;
  s.pixels.resize(static_cast<size_t>(n * d.shape.size()));
  s.labels.resize(static_cast<size_t>(n));
  return s;
}

// Whether a usable GPU is there (the reason it is not goes to stderr once): the GPU cases'
// doctest::skip condition.
bool gpu_present();

// CNNRUN_TEST_SANITIZER (non-empty): the suite runs under compute-sanitizer, which slows kernels
// by 100x or more (racecheck), so the heaviest GPU cases shrink to sizes that run the same kernels
// and the same code paths in minutes, and say so.
bool sanitizer_mode();

// The thesis network (netdefs/cifar10.yaml of the source tree as built, or of the current
// directory: a checkout copied to a GPU machine) with ../shared's ConvNetJS weights and 2000
// sample images. False, with a MESSAGE that `what` is skipped, when the sample is not there.
bool load_cifar_sample(Network& net, Dataset& data, const std::string& what);

// The CIFAR-10 sample at the benchmark's size: its 2000 images cycled to 50000 in default
// blocks; under the sanitizer the first 200 cycled to 260 in blocks of 100 (still three
// streams, the captured graphs, a shorter last block and blocks that wrap past the last
// distinct image; 4000 images did not finish racecheck in 530 s), with a MESSAGE saying so.
struct CifarBatch {
  Dataset data;
  int64_t images = 0, block = 0;
};
CifarBatch cifar_batch(const Dataset& sample);

// A netdef head for small graphs: input 3x8x8, classes [a, b, c, d], then "layers:\n".
extern const char* const kSmallHead;
// kSmallHead + `layers` parsed as "t.yaml".
Network parse_layers(const std::string& layers);

// share_groups' promise: every buffer in use has a group, and no two buffers of a group are in
// use at the same step (engine/passes.h). Returns the floats the groups take (their largest
// members summed).
int64_t check_share_groups(const std::vector<Lifetime>& life, const std::vector<int64_t>& sizes,
                           const std::vector<int>& group);

// Runs a shell command, returns its exit status; stdout+stderr go to *out.
int run_command(const std::string& cmd, std::string* out);

// Random weights in each layer's PyTorch shapes, scaled by fan-in so activations stay O(1).
void random_weights(Network& net, uint32_t seed);
// Every weight of every layer uniform in [lo, hi), the layers' tensors seeded seed, seed + 1, ...
// in order (no fan-in scaling: for tests that need plain values).
void uniform_weights(Network& net, uint32_t seed, float lo, float hi);
// count random images of shape s with labels below `classes`.
Dataset gpu_random_data(const Shape& s, int64_t count, int classes, uint32_t seed);
// "[c0, c1, ...]": a netdef's class list of n classes.
std::string classes(int n);

// The largest error seen over several comparisons, and where.
struct MaxErr {
  double abs = 0;
  std::string where;
  void note(double e, const std::string& w) {
    if (e > abs) abs = e, where = w;
  }
};

// forward_layers on both executors (the GPU's run as `opt` says): every materialised layer within
// atol + rtol * |reference|, every empty one reported as fused into its consumer.
void compare_layers(const Network& net, Executor& gpu, Executor& cpu, const Dataset& data, int64_t first,
                    int64_t n, const std::string& what, MaxErr& err, const RunOptions& opt = {},
                    double atol = 1e-4, double rtol = 1e-3);

// The algorithm a test names ("" = the executor's choice).
ConvAlgo algo_of(const std::string& name);

}  // namespace cnnrun::test
