// doctest main. With --gpu-suite (how ctest runs the GPU cases) the run exits 77 when no GPU is
// usable, after doctest has counted the GPU cases as skipped, so that ctest lists the suite
// as "Skipped" instead of quietly passing.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "engine/gpu_api.h"

int main(int argc, char** argv) {
  std::vector<char*> args;
  bool gpu_suite = false;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--gpu-suite") == 0)
      gpu_suite = true;
    else
      args.push_back(argv[i]);
  }
  doctest::Context ctx(static_cast<int>(args.size()), args.data());
  int rc = ctx.run();
  if (ctx.shouldExit()) return rc;
  std::string why;
  if (gpu_suite && rc == 0 && !cnnrun::gpu_available(&why)) {
    std::fprintf(stderr, "GPU test cases skipped: %s\n", why.c_str());
    return 77;
  }
  return rc;
}
