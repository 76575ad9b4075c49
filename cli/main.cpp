// cnnrun: run a network described by a YAML netdef over a data set and report times and
// accuracy. All errors end here as one line on stderr and a non-zero exit status:
// 1 error, 2 bad command line, 3 validation failed.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <stdexcept>

#include "engine/core/memory.h"
#include "engine/executor.h"
#include "engine/gpu_api.h"
#include "engine/io/assets.h"
#include "engine/io/dataset.h"
#include "engine/io/files.h"
#include "engine/io/npy.h"
#include "engine/io/weights.h"
#include "engine/network.h"
#include "engine/report.h"
#include "engine/validate.h"
#include "reference/cpu_executor.h"

namespace {

using namespace cnnrun;
using Clock = std::chrono::steady_clock;

constexpr const char* kVersion = "0.1.0";

// What the CLI is doing, for an out-of-memory message that names it.
const char* g_stage = "starting";

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Options {
  std::string netdef;
  int64_t batch = 0;
  std::string engine = "auto";
  std::string data, weights, json, dump, conv_algo;
  std::string precision = "fp32";  // --precision
  std::vector<std::string> assets;
  bool quiet = false, cycle = false, validate = false;
  bool resident = false;        // --resident: the GPU times the forward pass from device memory
  int64_t validate_images = 0;  // 0 = all images of the run (up to the data set's size)
  int64_t block = 0;
  int64_t gpu_memory_mib = 0;  // --gpu-memory; 0 = no cap
  int streams = 0, threads = 0;
  int repeat = 1;  // timed runs; the report keeps the median
};

// A progress bar on a terminal, for runs longer than a second.
std::function<void(int64_t, int64_t)> progress_bar(bool quiet) {
  if (quiet || !isatty(STDERR_FILENO)) return {};
  auto start = std::make_shared<Clock::time_point>(Clock::now());
  auto last = std::make_shared<double>(0.0);
  return [start, last](int64_t done, int64_t total) {
    double t = seconds_since(*start);
    if (t < 1.0 || (t - *last < 0.1 && done < total)) return;
    *last = t;
    int width = 40, fill = total ? static_cast<int>(width * done / total) : width;
    std::fprintf(stderr, "\r[%s%s] %lld/%lld images %.1f s",
                 std::string(static_cast<size_t>(fill), '#').c_str(),
                 std::string(static_cast<size_t>(width - fill), ' ').c_str(), static_cast<long long>(done),
                 static_cast<long long>(total), t);
    if (done >= total) std::fprintf(stderr, "\r%*s\r", width + 40, "");
    std::fflush(stderr);
  };
}

std::unique_ptr<Executor> make_executor(const Network& net, const std::string& engine,
                                        std::vector<std::string>& notes) {
  if (engine == "cpu") return make_cpu_executor(net);
  std::string why;
  bool gpu = gpu_available(&why);
  if (engine == "gpu") {
    if (!gpu) throw Error("--engine gpu: no usable GPU: " + why);
    return make_gpu_executor(net);
  }
  if (gpu) return make_gpu_executor(net);
  notes.push_back("no GPU (" + why + "): running the CPU engine");
  return make_cpu_executor(net);
}

// Prints to stdout and makes sure it arrived: a report lost to a full disk is an error (exit 1),
// not a silent success.
void print_stdout(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    throw Error(std::string("standard output: write failed (") + std::strerror(errno) + ")");
}

int run_network(const Options& o) {
  auto t_total = Clock::now();
  // The outputs are checked before anything is loaded: a path that cannot be written is an
  // error now, not after the run.
  OutputFiles outs;
  for (const std::string& p : {o.netdef, o.data, o.weights}) outs.protect(p);
  const size_t kNone = static_cast<size_t>(-1);
  size_t dump_out = kNone, json_out = kNone;
  if (!o.dump.empty()) dump_out = outs.add("--dump", o.dump);
  if (!o.json.empty()) json_out = outs.add("--json", o.json);
  if (o.resident && o.engine == "auto") {  // --engine cpu --resident is refused in main()
    std::string why;
    if (!gpu_available(&why)) throw Error("--resident needs the GPU engine, and no GPU is usable: " + why);
  }
  Report rep;
  rep.version = kVersion;
  rep.netdef = o.netdef;

  auto t = Clock::now();
  g_stage = "reading the netdef";
  Network net = parse_netdef_file(o.netdef);
  rep.build_net_s = seconds_since(t);
  rep.net_name = net.name;
  AssetResolver assets(net.source_dir, AssetResolver::default_roots(o.assets));

  t = Clock::now();
  g_stage = "loading the weights";
  load_weights(net, assets, o.weights);
  rep.load_weights_s = seconds_since(t);
  rep.weights_description =
      o.weights.empty() ? net.weights.format + ": " + net.weights.path : "--weights " + o.weights;

  t = Clock::now();
  g_stage = "loading the data";
  // Only the images the run reads: --batch N needs the first N (fewer when cycling a smaller set).
  Dataset data = load_dataset(net, assets, o.data, o.batch);
  rep.load_data_s = seconds_since(t);
  rep.data_description = data.description;

  outs.check_not_inputs();  // every input is open by now: refused before the run, not after

  RunOptions ro;
  ro.batch = o.batch ? o.batch : data.count;
  if (ro.batch > data.count && !o.cycle)
    throw Error("--batch " + std::to_string(ro.batch) + ": the data set has only " +
                std::to_string(data.count) + " images; add --cycle to run them repeatedly");
  ro.cycle = o.cycle;
  ro.want_probs = !o.dump.empty();
  ro.block = std::min(o.block, ro.batch);  // a block larger than the run is the run (no overflow)
  ro.streams = o.streams;
  ro.threads = o.threads;
  // MiB to bytes; a cap past 2^63 bytes is no cap (more than any GPU holds).
  constexpr int64_t kMaxMib = std::numeric_limits<int64_t>::max() >> 20;
  ro.gpu_memory = o.gpu_memory_mib > kMaxMib ? std::numeric_limits<int64_t>::max() : o.gpu_memory_mib << 20;
  ro.conv_algo = o.conv_algo;
  ro.precision = *parse_precision(o.precision);  // checked by the option's validator
  ro.resident = o.resident;
  ro.progress = progress_bar(o.quiet);
  rep.distinct_images = std::min(ro.batch, data.count);

  g_stage = "running the network";
  check_results_fit(ro.batch, ro.want_probs, net.layers[static_cast<size_t>(net.output)]->out_shape.size(),
                    host_memory());
  std::unique_ptr<Executor> ex = make_executor(net, o.engine, rep.notes);
  rep.run = ex->run(data, ro);
  if (o.repeat > 1) {
    // The first run did the executor's one-time work (weights, algorithm search); each run also
    // warms up on its first block off the clock. The report is the run with the median time.
    std::vector<RunResult> runs;
    runs.push_back(std::move(rep.run));
    ro.progress = {};
    for (int i = 1; i < o.repeat; ++i) runs.push_back(ex->run(data, ro));
    std::vector<double> t;
    std::string all;
    for (const RunResult& r : runs) {
      t.push_back(r.forward_seconds);
      all += (all.empty() ? "" : " ") + std::to_string(r.forward_seconds * 1e3);
    }
    std::vector<double> sorted = t;
    std::sort(sorted.begin(), sorted.end());
    const size_t mid = sorted.size() / 2;
    const double median = sorted.size() % 2 ? sorted[mid] : 0.5 * (sorted[mid - 1] + sorted[mid]);
    size_t pick = 0;
    for (size_t i = 1; i < t.size(); ++i)
      if (std::abs(t[i] - median) < std::abs(t[pick] - median)) pick = i;
    rep.run = std::move(runs[pick]);
    rep.run.notes.push_back("--repeat " + std::to_string(o.repeat) + ": forward times (ms) " + all +
                            "; the report shows the run nearest the median, with forward time = median " +
                            std::to_string(median * 1e3) + " ms");
    rep.run.forward_seconds = median;
  }

  if (rep.run.nonfinite_images > 0) {
    // The argmax of NaNs is class 0: reporting an accuracy here would be a silent wrong answer.
    const std::string layer = first_nonfinite_layer(*ex, net, data, rep.distinct_images);
    const Layer* l = layer.empty() ? nullptr : net.layers[static_cast<size_t>(net.find(layer))].get();
    throw Error("the network's output holds NaN or infinity for " + std::to_string(rep.run.nonfinite_images) +
                " of " + std::to_string(rep.run.images) + " images; " +
                (l ? "the first layer producing a non-finite value is '" + l->name + "' (" + l->type +
                         "), at " + l->loc.str() + " (weights or inputs too large for float32?)"
                   : "no layer gives one when the images are run again (a nondeterministic fault?)"));
  }

  int status = 0;
  g_stage = "validating";
  if (o.validate) {
    auto ref = make_cpu_executor(net);
    if (ex->name() == ref->name())
      rep.notes.push_back("--validate with the CPU engine compares the reference with itself");
    int64_t n = o.validate_images ? std::min(o.validate_images, rep.distinct_images) : rep.distinct_images;
    rep.validation = validate(*ex, *ref, net, data, n, validation_tolerance(ro.precision));
    rep.validated = true;
    if (!rep.validation.pass) status = 3;
  }
  rep.total_s = seconds_since(t_total);

  g_stage = "writing the outputs";
  if (dump_out != kNone) {
    int64_t per = net.layers[static_cast<size_t>(net.output)]->out_shape.size();
    outs.set(dump_out, npy_bytes({rep.run.images, per}, rep.run.probs.data()));
  }
  if (json_out != kNone) outs.set(json_out, report_json(rep));
  std::string text;
  if (o.quiet) {
    char line[128];
    std::snprintf(line, sizeof line, "accuracy %.2f %% (%lld/%lld)\n",
                  rep.run.images
                      ? 100.0 * static_cast<double>(rep.run.correct) / static_cast<double>(rep.run.images)
                      : 0.0,
                  static_cast<long long>(rep.run.correct), static_cast<long long>(rep.run.images));
    text = line;
  } else {
    text = report_text(rep);
  }
  // Every output file is complete before the report is printed, and none is in place before the
  // report has arrived: a failure anywhere leaves all of them untouched.
  outs.commit([&] { print_stdout(text); });
  if (status == 3 && rep.validation.nonfinite)
    std::fprintf(stderr, "cnnrun: validation failed: layer '%s' gives NaN or infinite values\n",
                 Error::one_line(rep.validation.first_failure).c_str());
  else if (status == 3)
    std::fprintf(stderr, "cnnrun: validation failed: layer '%s' differs from the CPU reference beyond %.0e\n",
                 Error::one_line(rep.validation.first_failure).c_str(), rep.validation.tolerance);
  return status;
}

int convert(const std::string& netdef, const std::string& out, const std::string& weights,
            const std::vector<std::string>& asset_dirs) {
  {
    OutputFiles check;  // an unwritable output is refused before anything is read
    check.add("", out);
  }
  Network net = parse_netdef_file(netdef);
  AssetResolver assets(net.source_dir, AssetResolver::default_roots(asset_dirs));
  load_weights(net, assets, weights, /*fold=*/false);
  auto tensors = collect_weights(net);
  OutputFiles outs;
  outs.protect(netdef);
  outs.protect(weights);
  outs.set(outs.add("", out), safetensors_bytes(tensors));
  outs.commit([&] { print_stdout("wrote " + std::to_string(tensors.size()) + " tensors to " + out + "\n"); });
  return 0;
}

// CLI11's PositiveNumber prints the whole double range; this says what is wanted.
const CLI::Validator kPositiveInt(
    [](std::string& v) -> std::string {
      char* end = nullptr;
      errno = 0;
      long long x = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || errno == ERANGE || x < 1)
        return "expected a positive integer, found '" + v + "'";
      return "";
    },
    "POSITIVE");

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "cnnrun: run a convolutional network described in YAML over a data set, on the GPU or the CPU"};
  app.set_version_flag("--version", kVersion);
  Options o;
  app.add_option("netdef", o.netdef, "network definition (YAML), e.g. netdefs/cifar10.yaml");
  app.add_option("--batch", o.batch, "run the first N images of the data set (default: all)")
      ->check(kPositiveInt);
  app.add_flag("--cycle", o.cycle, "allow --batch beyond the data set's size by running its images again");
  app.add_option("--engine", o.engine, "cpu, gpu or auto (GPU when one is usable)")
      ->check(CLI::IsMember({"cpu", "gpu", "auto"}));
  app.add_option("--data", o.data, "data set to use instead of the netdef's (file or directory)");
  app.add_option("--weights", o.weights,
                 "weights to use instead of the netdef's (.safetensors file or ConvNetJS directory)");
  app.add_option("--assets", o.assets,
                 "directory where netdef paths may resolve (repeatable; also $CNNRUN_ASSETS)");
  app.add_option("--json", o.json, "also write the report as JSON to FILE");
  app.add_option("--dump", o.dump, "write the output layer's values for every image to FILE (.npy, float32)");
  app.add_flag("--quiet", o.quiet, "print only the accuracy line");
  app.add_flag("--validate", o.validate,
               "compare every layer with the CPU reference (exit 3 if any differs)");
  app.add_option("--validate-images", o.validate_images,
                 "validate on the first N images only (default: all run)")
      ->check(kPositiveInt);
  app.add_option("--conv-algo", o.conv_algo,
                 "GPU convolution for every conv layer: auto, im2col, implicit, cudnn")
      ->check(CLI::IsMember({"auto", "im2col", "implicit", "cudnn"}));
  app.add_option("--precision", o.precision,
                 "GPU: the format conv and fc operands may be rounded to, with FP32 accumulation: fp32 "
                 "(default, 3xTF32 on tensor cores), tf32, fp16 or bf16; --validate then allows 16 of its "
                 "unit roundoffs")
      ->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16"}));
  app.add_option("--block", o.block, "images per block (default: chosen from memory)")->check(kPositiveInt);
  app.add_option("--streams", o.streams, "GPU streams (default 3)")->check(CLI::Range(1, 64));
  app.add_option("--gpu-memory", o.gpu_memory_mib,
                 "GPU memory in MiB the image buffers and workspaces may use; blocks are cut to fit "
                 "(default: what is free)")
      ->check(kPositiveInt);
  app.add_flag("--resident", o.resident,
               "GPU: put the images in device memory before the clock, so the forward time starts there "
               "(preprocess, every layer, argmax, the predictions copied back: 4 bytes per image); "
               "needs --engine gpu");
  app.add_option("--repeat", o.repeat, "run the batch N times and report the median forward time (default 1)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--threads", o.threads, "CPU threads (default: all cores)")->check(CLI::Range(1, 1024));

  std::string conv_netdef, conv_out;
  CLI::App* conv = app.add_subcommand("convert", "write a netdef's weights (any format) as safetensors");
  conv->add_option("netdef", conv_netdef, "network definition")->required();
  conv->add_option("out", conv_out, "output .safetensors file")->required();
  conv->add_option("--weights", o.weights, "weights to read instead of the netdef's");
  conv->add_option("--assets", o.assets, "asset root (repeatable)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "cnnrun: %s (see cnnrun --help)\n", e.what());
    return 2;
  }
  try {
    for (const char* opt : {"--json", "--dump"})
      if (app.count(opt) && (opt[2] == 'j' ? o.json : o.dump).empty()) {
        std::fprintf(stderr, "cnnrun: %s: empty file name (see cnnrun --help)\n", opt);
        return 2;
      }
    for (const std::string& a : o.assets)
      if (a.empty()) {
        std::fprintf(stderr,
                     "cnnrun: --assets: empty directory name (it would make the current directory an asset "
                     "root; write --assets . for that)\n");
        return 2;
      }
    if (*conv) return convert(conv_netdef, conv_out, o.weights, o.assets);
    if (o.netdef.empty()) {
      std::fprintf(stderr, "cnnrun: no netdef given (see cnnrun --help)\n");
      return 2;
    }
    if (o.conv_algo == "auto") o.conv_algo.clear();
    if (o.resident && o.engine == "cpu") {
      std::fprintf(stderr, "cnnrun: --resident needs --engine gpu\n");
      return 2;
    }
    if (o.precision != "fp32" && o.engine == "cpu") {
      std::fprintf(stderr, "cnnrun: --precision %s needs --engine gpu: the CPU reference computes in FP32\n",
                   o.precision.c_str());
      return 2;
    }
    return run_network(o);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "cnnrun: out of host memory while %s (now %s)\n", g_stage,
                 host_memory().str().c_str());
    return 1;
  } catch (const std::length_error&) {  // a std::vector past max_size(): a size no memory holds
    std::fprintf(stderr,
                 "cnnrun: out of host memory while %s: a buffer larger than any memory was asked for\n",
                 g_stage);
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cnnrun: %s\n", e.what());
    return 1;
  }
}
