#include "tests/test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "engine/gpu_api.h"
#include "engine/io/assets.h"
#include "engine/io/weights.h"

namespace cnnrun::test {

const char* const kSmallHead = R"(input: {channels: 3, height: 8, width: 8}
classes: [a, b, c, d]
layers:
)";

Network parse_layers(const std::string& layers) { return parse_netdef_string(kSmallHead + layers, "t.yaml"); }

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

std::string temp_dir(const std::string& tag) {
  static int counter = 0;
  auto p = std::filesystem::temp_directory_path() /
           ("cnnrun-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" + tag);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
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

}  // namespace cnnrun::test
