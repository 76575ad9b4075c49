#include "engine/core/memory.h"

#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace cnnrun {

namespace {

// "Key:   123 kB" from a /proc file, in bytes; -1 when absent.
int64_t proc_kb(const char* file, const std::string& key) {
  std::ifstream f(file);
  std::string line;
  while (std::getline(f, line))
    if (line.compare(0, key.size() + 1, key + ":") == 0) {
      long long kb = -1;
      if (std::sscanf(line.c_str() + key.size() + 1, "%lld", &kb) == 1 && kb >= 0) return kb * 1024;
    }
  return -1;
}

// A number from a one-line file; -1 when absent or "max".
int64_t file_number(const std::string& file) {
  std::ifstream f(file);
  long long v = -1;
  std::string s;
  if (!(f >> s)) return -1;
  std::istringstream in(s);
  if (!(in >> v) || v < 0) return -1;
  return v;
}

// This process's cgroup directory under /sys/fs/cgroup (v2: "0::/path"), "" for the root.
std::string cgroup_v2_dir() {
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line))
    if (line.compare(0, 3, "0::") == 0) return line.substr(3);
  return "";
}

}  // namespace

std::string bytes_str(int64_t b) {
  char buf[64];
  const double d = static_cast<double>(b);
  if (b >= 1000000000)
    std::snprintf(buf, sizeof buf, "%.1f GB", d / 1e9);
  else if (b >= 1000000)
    std::snprintf(buf, sizeof buf, "%.1f MB", d / 1e6);
  else if (b >= 1000)
    std::snprintf(buf, sizeof buf, "%.1f KB", d / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%lld bytes", static_cast<long long>(b));
  return buf;
}

std::string HostMemory::str() const {
  if (available == INT64_MAX) return "an unknown amount";
  return bytes_str(available) + " available by " + limited_by;
}

HostMemory host_memory() {
  HostMemory m;
  auto take = [&](int64_t v, const char* why) {
    if (v >= 0 && v < m.available) {
      m.available = v;
      m.limited_by = why;
    }
  };
  take(proc_kb("/proc/meminfo", "MemAvailable"), "MemAvailable");
  // cgroup v2: the process's own group, and the namespace root a container sees.
  for (const std::string& dir : {"/sys/fs/cgroup" + cgroup_v2_dir(), std::string("/sys/fs/cgroup")}) {
    int64_t limit = file_number(dir + "/memory.max"), used = file_number(dir + "/memory.current");
    if (limit >= 0 && used >= 0) take(limit > used ? limit - used : 0, "the cgroup memory limit");
  }
  // cgroup v1 (no limit reads as a huge number, which take() ignores as larger than the rest).
  int64_t limit1 = file_number("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
          used1 = file_number("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  if (limit1 >= 0 && used1 >= 0) take(limit1 > used1 ? limit1 - used1 : 0, "the cgroup memory limit");
  struct rlimit rl;
  if (::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    int64_t used = proc_kb("/proc/self/status", "VmSize");
    int64_t cap = static_cast<int64_t>(rl.rlim_cur);
    if (used >= 0) take(cap > used ? cap - used : 0, "the address-space limit");
  }
  return m;
}

int64_t images_fitting(int64_t per_image, int streams, int64_t budget) {
  if (per_image < 1 || streams < 1 || budget < 1) return 0;
  return budget / per_image / streams;
}

}  // namespace cnnrun
