// --precision: the names and tolerances, the CPU engine's refusal, and on a GPU the CIFAR-10
// network at every precision with every convolution algorithm: validation passes at the
// precision's tolerance, accuracy stays within a point of FP32's, and the tensor-core kernel
// really rounds (its error is far above FP32's, so a precision that silently ran in FP32, or a
// wrong operand packing, would fail one way or the other).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "engine/core/precision.h"
#include "engine/gpu_api.h"
#include "engine/io/dataset.h"
#include "engine/network.h"
#include "engine/validate.h"
#include "reference/cpu_executor.h"
#include "tests/test_util.h"

using namespace cnnrun;

namespace {

std::string run_cli(const std::string& args, int* rc) {
  std::string out;
  *rc = test::run_command(std::string(CNNRUN_BINARY) + " " + args, &out);
  return out;
}

}  // namespace

TEST_CASE("precision: names round-trip, anything else is refused, tolerances follow the format") {
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16}) {
    REQUIRE(parse_precision(precision_name(p)).has_value());
    CHECK(*parse_precision(precision_name(p)) == p);
  }
  CHECK_FALSE(parse_precision("fp8").has_value());
  CHECK_FALSE(parse_precision("FP32").has_value());
  CHECK_FALSE(parse_precision("").has_value());
  CHECK(validation_tolerance(Precision::kFp32) == kFp32Tolerance);
  CHECK(validation_tolerance(Precision::kTf32) == doctest::Approx(16.0 / 2048));
  CHECK(validation_tolerance(Precision::kFp16) == doctest::Approx(16.0 / 2048));
  CHECK(validation_tolerance(Precision::kBf16) == doctest::Approx(16.0 / 256));
}

TEST_CASE("precision: the CPU engine refuses anything but fp32, on the command line and in RunOptions") {
  const std::string net = std::string(CNNRUN_SOURCE_DIR) + "/netdefs/cifar10.yaml";
  int rc = 0;
  std::string out = run_cli(net + " --engine cpu --precision tf32 --batch 1", &rc);
  CHECK(rc == 2);
  CHECK(out == "cnnrun: --precision tf32 needs --engine gpu: the CPU reference computes in FP32\n");
  out = run_cli(net + " --precision fp8", &rc);
  CHECK(rc == 2);
  CHECK(out.find("--precision") != std::string::npos);
  CHECK(std::count(out.begin(), out.end(), '\n') == 1);

  Network n;
  Dataset data;
  if (!test::load_cifar_sample(n, data, "the RunOptions part")) return;
  auto cpu = make_cpu_executor(n);
  RunOptions o;
  o.batch = 4;
  o.precision = Precision::kBf16;
  CHECK_THROWS_WITH_AS(cpu->run(data, o), doctest::Contains("--precision bf16 needs --engine gpu"), Error);
}

TEST_CASE("gpu: the CIFAR-10 network at every precision and algorithm validates at its tolerance" *
          doctest::skip(!test::gpu_present())) {
  Network net;
  Dataset data;
  if (!test::load_cifar_sample(net, data, "this case")) return;
  auto cpu = make_cpu_executor(net);
  auto gpu = make_gpu_executor(net);
  // Under compute-sanitizer (CNNRUN_TEST_SANITIZER), 64 images validated on 32.
  const bool shrink = test::sanitizer_mode();
  const int64_t batch = shrink ? 64 : 2000, n = shrink ? 32 : 500;
  if (shrink) MESSAGE("shrunk for CNNRUN_TEST_SANITIZER: 64 images, 32 validated, instead of 2000 and 500");

  RunOptions o;
  o.batch = batch;
  o.conv_algo = ConvAlgo::kImplicit;
  const RunResult base = gpu->run(data, o);
  // Every conv of this network runs the fused tensor-core kernel with its pool (a change that
  // silently lost the fusion once passed every accuracy check at a quarter of the speed): conv1
  // on the exact pixels (byte - 127.5) with FP16 products, conv2 and conv3 in 3xTF32.
  for (const LayerTime& t : base.layers)
    if (t.type == "conv") {
      INFO(t.name << ": " << t.algo);
      CHECK(t.algo.find(t.name == "conv1" ? "FP16 tensor cores on exact pixels" : "3xTF32 tensor cores") !=
            std::string::npos);
      CHECK(t.algo.find("maxpool") != std::string::npos);
    }
  const Validation v32 = validate(*gpu, *cpu, net, data, n, o);
  CHECK(v32.pass);
  double fp32_err = 0;
  for (const LayerCheck& c : v32.layers) fp32_err = std::max(fp32_err, c.max_rel);
  CHECK(fp32_err < 1e-5);

  for (Precision p : {Precision::kTf32, Precision::kFp16, Precision::kBf16}) {
    for (const char* algo : {"implicit", "im2col", "cudnn"}) {
      const std::string pname = precision_name(p);
      INFO("precision " << pname << ", conv " << algo);
      o.precision = p;
      o.conv_algo = *parse_conv_algo(algo);
      const RunResult r = gpu->run(data, o);
      CHECK(r.precision == p);
      const Validation v = validate(*gpu, *cpu, net, data, n, o);  // at validation_tolerance(p)
      double err = 0;
      std::string where;
      for (const LayerCheck& c : v.layers)
        if (c.max_rel > err) err = c.max_rel, where = c.name;
      std::string algos;
      for (const LayerTime& t : r.layers)
        if (t.type == "conv" || t.type == "fc") algos += " " + t.name + "=" + t.algo;
      MESSAGE(pname << " " << algo << ": max rel error " << err << " (" << where << "), accuracy "
                    << 100.0 * static_cast<double>(r.correct) / static_cast<double>(batch) << " % (fp32 "
                    << 100.0 * static_cast<double>(base.correct) / static_cast<double>(batch) << " %);"
                    << algos);
      CHECK(v.pass);
      // Within a point of FP32's accuracy (two images on the sanitizer's 64).
      CHECK(std::abs(r.correct - base.correct) <= std::max<int64_t>(2, batch / 100));
      if (std::string(algo) == "implicit") {
        // The tensor-core kernel rounds as asked: well above FP32's error, below the format's.
        CHECK(err > 30 * fp32_err);
        CHECK(err > unit_roundoff(p));
        CHECK(r.layers[0].algo.find(std::string(p == Precision::kTf32   ? "TF32"
                                                : p == Precision::kFp16 ? "FP16"
                                                                        : "BF16") +
                                    " tensor cores") != std::string::npos);
      }
    }
  }
  // Back to FP32 on the same executor: the plans made for the other precisions are gone.
  o.precision = Precision::kFp32;
  o.conv_algo = ConvAlgo::kAuto;
  const RunResult again = gpu->run(data, o);
  CHECK(again.predictions == base.predictions);
  const Validation back = validate(*gpu, *cpu, net, data, n, o);
  double err = 0;
  for (const LayerCheck& c : back.layers) err = std::max(err, c.max_rel);
  CHECK(err < 1e-5);
}
