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
#include <iostream>
#include <limits>

#include "engine/core/clock.h"
#include "engine/executor.h"
#include "engine/gpu_api.h"
#include "engine/io/assets.h"
#include "engine/io/dataset.h"
#include "engine/io/npy.h"
#include "engine/io/source.h"
#include "engine/io/weights.h"
#include "engine/network.h"
#include "engine/report.h"
#include "engine/scoring.h"
#include "engine/stream.h"
#include "engine/validate.h"
#include "reference/cpu_executor.h"

namespace {

using namespace cnnrun;
constexpr const char* kVersion = "0.1.0";

struct Options {
  std::string netdef;
  int64_t batch = 0;
  std::string engine = "auto";
  std::string data, data_format, weights, json, dump, conv_algo;
  std::string precision = "fp32";  // --precision
  std::string predictions;         // --predictions FILE.csv
  int top_k = 0;                   // --top-k; 0 = 5 with more than 10 classes, else 1
  int decode_threads = 0;          // --decode-threads; 0 = all cores
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

// --engine auto without a usable GPU runs the CPU engine and says why in `fallback`.
std::unique_ptr<Executor> make_executor(const Network& net, const std::string& engine,
                                        std::string& fallback) {
  if (engine == "cpu") return make_cpu_executor(net);
  std::string why;
  bool gpu = gpu_available(&why);
  if (engine == "gpu") {
    if (!gpu) throw Error("--engine gpu: no usable GPU: " + why);
    return make_gpu_executor(net);
  }
  if (gpu) return make_gpu_executor(net);
  fallback = why;
  return make_cpu_executor(net);
}

int run_network(const Options& o) {
  auto t_total = Clock::now();
  if (o.resident && o.engine == "auto") {  // --engine cpu --resident is refused in main()
    std::string why;
    if (!gpu_available(&why)) throw Error("--resident needs the GPU engine, and no GPU is usable: " + why);
  }
  Report rep;
  rep.version = kVersion;
  rep.netdef = o.netdef;

  auto t = Clock::now();
  Network net = parse_netdef_file(o.netdef);
  rep.build_net_s = seconds_since(t);
  rep.net_name = net.name;
  AssetResolver assets(net.source_dir, AssetResolver::default_roots(o.assets));

  t = Clock::now();
  load_weights(net, assets, o.weights);
  rep.load_weights_s = seconds_since(t);
  rep.weights_description =
      o.weights.empty() ? net.weights.format + ": " + net.weights.path : "--weights " + o.weights;

  t = Clock::now();
  std::unique_ptr<DataSource> src = open_data(net, assets, o.data, o.data_format, o.decode_threads);
  rep.load_data_s = seconds_since(t);
  rep.data_description = src->description();
  rep.labelled = src->labelled();
  const int64_t count = src->count();
  const Dataset* whole = src->whole();
  if (!whole && (o.repeat > 1 || o.resident || o.cycle))
    throw Error(std::string(o.repeat > 1 ? "--repeat"
                            : o.resident ? "--resident"
                                         : "--cycle") +
                " needs a data set in memory; " + src->description() + " is streamed from its files");

  RunOptions ro;
  ro.batch = o.batch ? o.batch : count;
  if (ro.batch > count && !o.cycle)
    throw Error("--batch " + std::to_string(ro.batch) + ": the data set has only " + std::to_string(count) +
                " images; add --cycle to run them repeatedly");
  ro.cycle = o.cycle;
  ro.want_probs = !o.dump.empty();
  ro.block = o.block;
  ro.streams = o.streams;
  ro.threads = o.threads;
  // MiB to bytes; a cap past 2^63 bytes is no cap (more than any GPU holds).
  constexpr int64_t kMaxMib = std::numeric_limits<int64_t>::max() >> 20;
  ro.gpu_memory = o.gpu_memory_mib > kMaxMib ? std::numeric_limits<int64_t>::max() : o.gpu_memory_mib << 20;
  ro.conv_algo = o.conv_algo;
  ro.precision = *parse_precision(o.precision);  // checked by the option's validator
  ro.resident = o.resident;
  ro.progress = progress_bar(o.quiet);
  rep.distinct_images = std::min(ro.batch, count);

  // Top-k by default with more than 10 classes; the output values are needed for it and for
  // the predictions file.
  const int classes = net.num_classes();
  const int k = std::min(o.top_k > 0 ? o.top_k : classes > 10 ? 5 : 1, classes);
  const bool need_values = (k > 1 && rep.labelled) || !o.predictions.empty();
  std::vector<std::string> inputs{o.netdef, o.data, o.weights};
  std::unique_ptr<PredictionsWriter> csv;
  if (!o.predictions.empty())
    csv = std::make_unique<PredictionsWriter>(o.predictions, net.classes, std::max(k, 1), inputs);
  Scorer scorer(classes, k);
  const int64_t per = net.layers[static_cast<size_t>(net.output)]->out_shape.size();
  auto on_block = [&](const Dataset& block, int64_t first, const RunResult& r) {
    const float* values = r.probs.empty() ? nullptr : r.probs.data();
    if (block.labelled()) scorer.add(block.labels.data(), r.predictions.data(), values, r.images);
    if (csv) {
      std::vector<int32_t> labels = block.labels;
      if (static_cast<int64_t>(labels.size()) > r.images) labels.resize(static_cast<size_t>(r.images));
      csv->add(first, block.paths, labels, values, r.images, per);
    }
  };

  std::unique_ptr<Executor> ex = make_executor(net, o.engine, rep.cpu_fallback);
  rep.run = run_source(*ex, *src, ro, need_values, stream_block_images(net.input), on_block, &rep.stream);
  rep.scores = scorer.scores();
  rep.class_names = net.classes;
  if (o.repeat > 1) {
    const Dataset& data = *whole;
    // The first run did the executor's one-time work (weights, algorithm search); each run also
    // warms up on its first block off the clock. The report is the run with the median time.
    std::vector<RunResult> runs;
    runs.push_back(std::move(rep.run));
    ro.progress = {};
    for (int i = 1; i < o.repeat; ++i) runs.push_back(ex->run(data, ro));
    std::vector<double> t;
    for (const RunResult& r : runs) t.push_back(r.forward_seconds);
    std::vector<double> sorted = t;
    std::sort(sorted.begin(), sorted.end());
    const size_t mid = sorted.size() / 2;
    const double median = sorted.size() % 2 ? sorted[mid] : 0.5 * (sorted[mid - 1] + sorted[mid]);
    size_t pick = 0;
    for (size_t i = 1; i < t.size(); ++i)
      if (std::abs(t[i] - median) < std::abs(t[pick] - median)) pick = i;
    rep.run = std::move(runs[pick]);
    rep.repeat_seconds = t;
    rep.run.forward_seconds = median;
  }

  int status = 0;
  if (o.validate) {
    auto ref = make_cpu_executor(net);
    if (ex->name() == ref->name()) rep.validated_by_itself = true;
    int64_t n = o.validate_images ? std::min(o.validate_images, rep.distinct_images) : rep.distinct_images;
    Dataset first_block;
    if (!whole) {  // a streamed source: its first block, read again
      n = std::min(n, stream_block_images(net.input));
      src->read(0, n, first_block);
      rep.validated_streamed_images = n;
    }
    rep.validation =
        validate(*ex, *ref, net, whole ? *whole : first_block, n, validation_tolerance(ro.precision));
    rep.validated = true;
    if (!rep.validation.pass) status = 3;
  }
  rep.total_s = seconds_since(t_total);

  if (csv) csv->finish();
  if (!o.dump.empty())
    write_output_file(o.dump, npy_bytes({rep.run.images, per}, rep.run.probs.data()), inputs);
  if (!o.json.empty()) write_output_file(o.json, report_json(rep), inputs);
  if (o.quiet && !rep.labelled) {
    std::printf("images %lld (no labels: no accuracy)\n", static_cast<long long>(rep.run.images));
  } else if (o.quiet) {
    std::printf("accuracy %.2f %% (%lld/%lld)\n",
                rep.run.images
                    ? 100.0 * static_cast<double>(rep.run.correct) / static_cast<double>(rep.run.images)
                    : 0.0,
                static_cast<long long>(rep.run.correct), static_cast<long long>(rep.run.images));
  } else {
    std::fputs(report_text(rep).c_str(), stdout);
  }
  if (status == 3)
    std::fprintf(stderr, "cnnrun: validation failed: layer '%s' differs from the CPU reference beyond %.0e\n",
                 rep.validation.first_failure.c_str(), rep.validation.tolerance);
  return status;
}

int convert(const std::string& netdef, const std::string& out, const std::string& weights,
            const std::vector<std::string>& asset_dirs) {
  Network net = parse_netdef_file(netdef);
  AssetResolver assets(net.source_dir, AssetResolver::default_roots(asset_dirs));
  load_weights(net, assets, weights, /*fold=*/false);
  auto tensors = collect_weights(net);
  write_output_file(out, safetensors_bytes(tensors), {netdef, weights});
  std::printf("wrote %zu tensors to %s\n", tensors.size(), out.c_str());
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
  app.add_option(
      "--data", o.data,
      "data set to use instead of the netdef's (file or directory; IMAGES,LABELS for idx and npy)");
  app.add_option("--data-format", o.data_format,
                 "what --data is: cifar10, cifar100, idx, npy or images (a folder or a list file; default: "
                 "detected from the file, and the report says so)")
      ->check(CLI::IsMember(data_formats()));
  app.add_option("--weights", o.weights,
                 "weights to use instead of the netdef's (.safetensors file or ConvNetJS directory)");
  app.add_option("--assets", o.assets,
                 "directory where netdef paths may resolve (repeatable; also $CNNRUN_ASSETS)");
  app.add_option("--json", o.json, "also write the report as JSON to FILE");
  app.add_option("--dump", o.dump, "write the output layer's values for every image to FILE (.npy, float32)");
  app.add_option(
      "--predictions", o.predictions,
      "write one CSV row per image to FILE: index, path, label, the top-k classes with names and values");
  app.add_option("--top-k", o.top_k, "also count top-K accuracy (default 5 with more than 10 classes)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--decode-threads", o.decode_threads, "image folders: decoding threads (default: all cores)")
      ->check(CLI::Range(1, 1024));
  app.add_flag("--quiet", o.quiet, "print only the accuracy line (the image count without labels)");
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
    std::fprintf(stderr, "cnnrun: out of host memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cnnrun: %s\n", e.what());
    return 1;
  }
}
