#include "tests/test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <system_error>
#include <vector>

#include "engine/executor.h"
#include "engine/gpu_api.h"
#include "engine/io/assets.h"
#include "engine/io/weights.h"

namespace cnnrun::test {

const char* const kSmallHead = R"(input: {channels: 3, height: 8, width: 8}
classes: [a, b, c, d]
layers:
)";

Network parse_layers(const std::string& layers) { return parse_netdef_string(kSmallHead + layers, "t.yaml"); }

int64_t check_share_groups(const std::vector<Lifetime>& life, const std::vector<int64_t>& sizes,
                           const std::vector<int>& group) {
  REQUIRE(group.size() == life.size());
  std::vector<int64_t> floats;
  for (size_t a = 0; a < life.size(); ++a) {
    CAPTURE(a);
    if (life[a].first > life[a].last) {
      CHECK(group[a] == -1);  // never in use
      continue;
    }
    REQUIRE(group[a] >= 0);
    const auto g = static_cast<size_t>(group[a]);
    if (floats.size() <= g) floats.resize(g + 1, 0);
    floats[g] = std::max(floats[g], sizes[a]);
    for (size_t b = a + 1; b < life.size(); ++b) {
      if (group[a] != group[b]) continue;
      CAPTURE(b);
      CHECK((life[a].last < life[b].first || life[b].last < life[a].first));
    }
  }
  int64_t t = 0;
  for (int64_t f : floats) t += f;
  return t;
}

bool gpu_present() {
  static const bool present = [] {
    std::string why;
    bool ok = gpu_available(&why);
    if (!ok) std::fprintf(stderr, "GPU tests skipped: %s\n", why.c_str());
    return ok;
  }();
  return present;
}

bool sanitizer_mode() {
  const char* v = std::getenv("CNNRUN_TEST_SANITIZER");
  return v != nullptr && *v != '\0';
}

CifarBatch cifar_batch(const Dataset& sample) {
  if (!sanitizer_mode()) return {sample, 50000, 0};
  MESSAGE(
      "shrunk for CNNRUN_TEST_SANITIZER: the first 200 CIFAR-10 images cycled to 260 in blocks of 100 "
      "instead of 2000 cycled to 50000 (too slow under compute-sanitizer)");
  return {first_images(sample, 200), 260, 100};
}

bool load_cifar_sample(Network& net, Dataset& data, const std::string& what) {
  const std::string shared = shared_dir();
  if (!have_file(shared + "/data/cifar10-sample/train_2000.bin") ||
      !have_file(shared + "/models/convnetjs-cifar10/layer1_conv.txt")) {
    MESSAGE("CIFAR-10 sample not found under " << shared << "; " << what << " skipped");
    return false;
  }
  std::string netdef = std::string(CNNRUN_SOURCE_DIR) + "/netdefs/cifar10.yaml";
  if (!have_file(netdef)) netdef = "netdefs/cifar10.yaml";
  net = parse_netdef_file(netdef);
  AssetResolver assets(net.source_dir, {shared});
  load_weights(net, assets, "");
  data = load_dataset(net, assets, "");
  return true;
}

namespace {

// The folders temp_dir made, removed when the test process ends; only by the process that made
// them, so that a forked child's exit cannot take its parent's files.
struct TempDirs {
  std::vector<std::filesystem::path> made;
  pid_t owner = getpid();
  ~TempDirs() {
    if (getpid() != owner) return;
    std::error_code ec;
    for (const auto& p : made) std::filesystem::remove_all(p, ec);
  }
};

TempDirs& temp_dirs() {
  static TempDirs t;
  return t;
}

}  // namespace

std::string temp_dir(const std::string& tag) {
  static int counter = 0;
  auto p = std::filesystem::temp_directory_path() /
           ("cnnrun-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" + tag);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  temp_dirs().made.push_back(p);
  return p.string();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Compare compare(const float* a, const float* b, size_t n, double atol, double rtol) {
  Compare c;
  for (size_t i = 0; i < n; ++i) {
    double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    double rel = d / std::max(1e-30, std::fabs(static_cast<double>(b[i])));
    bool good = d <= atol + rtol * std::fabs(static_cast<double>(b[i]));
    if (std::isnan(a[i]) || std::isnan(b[i])) good = false, d = INFINITY;
    if (d > c.max_abs) c.max_abs = d, c.worst = i;
    if (d > atol) c.max_rel = std::max(c.max_rel, rel);
    if (!good) c.ok = false;
  }
  return c;
}

int run_command(const std::string& cmd, std::string* out) {
  std::string full = cmd + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (!p) return -1;
  std::array<char, 4096> buf;
  std::string s;
  size_t k;
  while ((k = fread(buf.data(), 1, buf.size(), p)) > 0) s.append(buf.data(), k);
  int st = pclose(p);
  if (out) *out = s;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void random_weights(Network& net, uint32_t seed) {
  for (auto& l : net.layers) {
    if (!l->has(kCapWeights)) continue;
    for (const WeightSpec& ws : l->weight_specs(l->in_shapes)) {
      Tensor t(ws.dims);
      float lo = -0.5f, hi = 0.5f;
      if (ws.name == "weight" && ws.dims.size() > 1) {
        int64_t fan_in = 1;
        for (size_t d = 1; d < ws.dims.size(); ++d) fan_in *= ws.dims[d];
        hi = 1.5f / std::sqrt(static_cast<float>(fan_in));
        lo = -hi;
      } else if (ws.name == "weight" || ws.name == "running_var") {
        lo = 0.5f, hi = 1.5f;
      }
      t.data = random_floats(static_cast<size_t>(t.numel()), seed++, lo, hi);
      l->weights[ws.name] = std::move(t);
    }
  }
}

void uniform_weights(Network& net, uint32_t seed, float lo, float hi) {
  for (auto& l : net.layers)
    for (const WeightSpec& ws : l->weight_specs(l->in_shapes)) {
      Tensor t(ws.dims);
      t.data = random_floats(static_cast<size_t>(t.numel()), seed++, lo, hi);
      l->weights[ws.name] = std::move(t);
    }
}

Dataset gpu_random_data(const Shape& s, int64_t count, int classes, uint32_t seed) {
  Dataset d;
  d.count = count;
  d.shape = s;
  d.description = "random";
  std::mt19937 g(seed);
  d.pixels.resize(static_cast<size_t>(count * s.size()));
  for (auto& p : d.pixels) p = static_cast<uint8_t>(g() & 255);
  d.labels.resize(static_cast<size_t>(count));
  for (auto& l : d.labels) l = static_cast<uint8_t>(g() % static_cast<unsigned>(classes));
  return d;
}

std::string classes(int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", c" : "c") + std::to_string(i);
  return s + "]";
}

void compare_layers(const Network& net, Executor& gpu, Executor& cpu, const Dataset& data, int64_t first,
                    int64_t n, const std::string& what, MaxErr& err, const RunOptions& opt, double atol,
                    double rtol) {
  std::vector<Tensor> g = gpu.forward_layers(data, first, n, opt);
  std::vector<Tensor> c = cpu.forward_layers(data, first, n, RunOptions{});
  REQUIRE(g.size() == net.layers.size());
  REQUIRE(c.size() == net.layers.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const std::string lname = net.layers[i]->name;
    INFO(what << ", layer " << lname << " (" << net.layers[i]->type << "), images " << first << ".."
              << first + n - 1);
    if (g[i].dims.empty()) {
      CHECK(!gpu.fused_into(static_cast<int>(i), opt).empty());
      continue;
    }
    CHECK(gpu.fused_into(static_cast<int>(i), opt).empty());
    REQUIRE(g[i].dims == c[i].dims);
    Compare cmp = compare(g[i].ptr(), c[i].ptr(), g[i].data.size(), atol, rtol);
    INFO("max abs error " << cmp.max_abs << " at " << cmp.worst << ": gpu " << g[i].data[cmp.worst] << " cpu "
                          << c[i].data[cmp.worst]);
    CHECK(cmp.ok);
    err.note(cmp.max_abs, what + " " + lname);
  }
}

ConvAlgo algo_of(const std::string& name) {
  if (name.empty()) return ConvAlgo::kAuto;
  const std::optional<ConvAlgo> a = parse_conv_algo(name);
  REQUIRE_MESSAGE(a, "no convolution algorithm '" << name << "'");
  return *a;
}

}  // namespace cnnrun::test
