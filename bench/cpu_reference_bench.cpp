// Times the CPU reference on a netdef with random weights and random images, before (or
// without) the real loaders: the speed of a forward pass does not depend on the values.
// Built by hand (not part of CMake):
//   g++ -std=c++17 -O3 -march=native -I. -I/usr/include/eigen3 bench/cpu_reference_bench.cpp \
//       -Lbuild-ref -lcnnrun_reference -lcnnrun_engine -lyaml-cpp -lz -pthread -o /tmp/cpu_bench
//   /tmp/cpu_bench netdefs/cifar10.yaml 50000 [threads] [block]
#include <cstdio>
#include <cstdlib>
#include <random>

#include "engine/network.h"
#include "engine/report.h"
#include "reference/cpu_executor.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s NETDEF IMAGES [THREADS] [BLOCK]\n", argv[0]);
    return 2;
  }
  try {
    cnnrun::Network net = cnnrun::parse_netdef_file(argv[1]);
    std::mt19937 g(1);
    std::normal_distribution<float> d(0.f, 0.1f);
    for (auto& l : net.layers)
      for (const auto& ws : l->weight_specs(l->in_shapes)) {
        cnnrun::Tensor t(ws.dims);
        for (auto& x : t.data) x = d(g);
        l->weights[ws.name] = t;
      }
    cnnrun::Dataset data;
    data.count = 2000;
    data.shape = net.input;
    data.pixels.resize(static_cast<size_t>(data.count * data.shape.size()));
    for (auto& p : data.pixels) p = static_cast<uint8_t>(g());
    data.labels.resize(static_cast<size_t>(data.count));
    for (auto& l : data.labels) l = static_cast<uint8_t>(g() % net.classes.size());
    data.description = "random";

    cnnrun::RunOptions opt;
    opt.batch = std::atoll(argv[2]);
    opt.cycle = true;
    if (argc > 3) opt.threads = std::atoi(argv[3]);
    if (argc > 4) opt.block = std::atoll(argv[4]);
    auto ex = cnnrun::make_cpu_executor(net);
    cnnrun::RunResult r = ex->run(data, opt);
    std::printf("%s: %lld images in %.3f s (%.0f images/s)\n", r.engine.c_str(),
                static_cast<long long>(r.images), r.forward_seconds,
                static_cast<double>(r.images) / r.forward_seconds);
    cnnrun::Report rep;  // the report words the run's facts
    rep.run = r;
    for (const auto& n : cnnrun::report_notes(rep)) std::printf("  %s\n", n.c_str());
    for (const auto& t : r.layers)
      std::printf("  %-10s %-10s %-12s %8.3f s\n", t.name.c_str(), t.type.c_str(), t.algo.c_str(), t.seconds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
