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
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "build_commit.h"  // generated at build time: CNNRUN_BUILD_COMMIT
#include "engine/core/clock.h"
#include "engine/core/memory.h"
#include "engine/dist/ranks.h"
#include "engine/executor.h"
#include "engine/gpu_api.h"
#include "engine/io/assets.h"
#include "engine/io/dataset.h"
#include "engine/io/files.h"
#include "engine/io/npy.h"
#include "engine/io/source.h"
#include "engine/io/weights.h"
#include "engine/network.h"
#include "engine/onnx/onnx_import.h"
#include "engine/report.h"
#include "engine/scoring.h"
#include "engine/stream.h"
#include "engine/validate.h"
#include "reference/cpu_executor.h"

namespace {

using namespace cnnrun;
constexpr const char* kVersion = CNNRUN_VERSION;  // CMake's project version
constexpr const char* kVersionLine = CNNRUN_VERSION " (commit " CNNRUN_BUILD_COMMIT ")";

// What the CLI is doing, for an out-of-memory message that names it.
const char* g_stage = "starting";

struct Options {
  std::string netdef;
  int64_t batch = 0;
  std::string engine = "auto";
  std::string data, data_format, weights, json, dump, conv_algo = "auto";
  std::string gpu_off;                        // --gpu-off LIST (else $CNNRUN_GPU_OFF)
  int cudnn_plans = GpuTuning{}.graph_plans;  // --cudnn-plans N
  std::string precision = "fp32";             // --precision
  std::string layout = "auto";                // --layout
  std::string predictions;                    // --predictions FILE.csv
  int top_k = 0;                              // --top-k; 0 = 5 with more than 10 classes, else 1
  int decode_threads = 0;                     // --decode-threads; 0 = all cores
  bool skip_bad = false;                      // --skip-bad: leave out unreadable images, counted
  std::vector<std::string> assets;
  std::string progress = "auto";  // --progress auto|always|never
  bool quiet = false, cycle = false, validate = false;
  bool resident = false;        // --resident: the GPU times the forward pass from device memory
  int64_t validate_images = 0;  // 0 = all images of the run (up to the data set's size)
  int64_t block = 0;
  int64_t gpu_memory_mib = 0;     // --gpu-memory; 0 = no cap
  int64_t pinned_memory_mib = 0;  // --pinned-memory; 0 = half of the host memory available
  int streams = 0, threads = 0;
  int repeat = 1;  // timed runs; the report keeps the median
  int warmup = 0;  // runs before those, not in the median
  // What an ONNX model does not carry (cnnrun import, or running an .onnx directly).
  std::string mean, std, scale, shift, classes, name;
};

bool is_onnx(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".onnx") == 0;
}

// "0.485,0.456,0.406" -> "[0.485, 0.456, 0.406]", "0.5" -> "0.5" (each a number; the netdef checks
// the count).
std::string number_list(const std::string& opt, const std::string& v) {
  std::string out;
  size_t start = 0;
  while (start <= v.size()) {
    size_t end = v.find(',', start);
    if (end == std::string::npos) end = v.size();
    std::string item = v.substr(start, end - start);
    char* stop = nullptr;
    errno = 0;
    double d = std::strtod(item.c_str(), &stop);
    if (item.empty() || *stop != '\0' || errno == ERANGE || !std::isfinite(d))
      throw Error(opt + " " + v + ": expected numbers separated by commas, found '" + item + "'");
    out += (out.empty() ? "" : ", ") + item;
    start = end + 1;
  }
  return out.find(',') == std::string::npos ? out : "[" + out + "]";  // one value: every channel
}

// A YAML double-quoted string.
std::string yaml_quote(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      o += b;
      continue;
    }
    o += static_cast<char>(c);
  }
  return o + "\"";
}

// The netdef sections an import writes from the options. `base` is the directory the netdef's
// relative paths resolve against (the data path is written relative to it).
ImportOptions import_options(const Options& o, const std::string& base) {
  ImportOptions io;
  io.name = o.name;
  if ((!o.mean.empty() || !o.std.empty()) && (!o.scale.empty() || !o.shift.empty()))
    throw Error("give either --mean/--std or --scale/--shift, not both");
  std::vector<std::string> pre;
  if (!o.mean.empty()) pre.push_back("mean: " + number_list("--mean", o.mean));
  if (!o.std.empty()) pre.push_back("std: " + number_list("--std", o.std));
  if (!o.scale.empty()) pre.push_back("scale: " + number_list("--scale", o.scale));
  if (!o.shift.empty()) pre.push_back("shift: " + number_list("--shift", o.shift));
  for (const auto& p : pre) io.preprocess += (io.preprocess.empty() ? "{" : ", ") + p;
  if (!io.preprocess.empty()) io.preprocess += "}";
  if (!o.classes.empty()) {
    // A count, or a file with one class name per line.
    if (o.classes.find_first_not_of("0123456789") == std::string::npos) {
      long long n = std::strtoll(o.classes.c_str(), nullptr, 10);
      if (n < 1 || o.classes.size() > 9)
        throw Error("--classes " + o.classes + ": expected a positive count or a file");
      io.classes = std::to_string(n);
    } else {
      std::ifstream f(o.classes);
      if (!f) throw Error("--classes " + o.classes + ": not a count and no such file");
      std::string line;
      io.classes = "[";
      int n = 0;
      while (std::getline(f, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty()) continue;
        io.classes += (n++ ? ", " : "") + yaml_quote(line);
      }
      io.classes += "]";
      if (!n) throw Error("--classes " + o.classes + ": the file names no class");
    }
  }
  if (!o.data.empty()) {
    namespace fs = std::filesystem;
    auto rel = [&](const std::string& p) {
      std::error_code ec;
      fs::path r = fs::proximate(fs::absolute(p, ec), fs::absolute(base.empty() ? "." : base, ec), ec);
      return yaml_quote(ec ? p : r.string());
    };
    std::string fmt = o.data_format;
    const std::string first = o.data.substr(0, o.data.find(','));
    auto ends = [&](const char* e) {
      size_t n = std::strlen(e);
      return first.size() > n && first.compare(first.size() - n, n, e) == 0;
    };
    if (fmt.empty()) {
      if (ends(".npy"))
        fmt = "npy";
      else if (o.data.find(',') != std::string::npos)
        fmt = "idx";
      else if (fs::is_directory(o.data) || ends(".bin"))
        fmt = "cifar10";
      else
        throw Error("--data " + o.data +
                    ": give --data-format (cifar10, idx or npy) to write it into the netdef");
    }
    size_t comma = o.data.find(',');
    if (fmt == "cifar10") {
      io.data = "{format: cifar10, path: " + rel(o.data) + "}";
    } else if (fmt == "idx" || fmt == "npy") {
      if (comma == std::string::npos && fmt == "idx")
        throw Error("--data " + o.data + ": idx needs IMAGES,LABELS");
      io.data = "{format: " + fmt + ", images: " + rel(o.data.substr(0, comma));
      if (comma != std::string::npos) io.data += ", labels: " + rel(o.data.substr(comma + 1));
      io.data += "}";
    } else {
      throw Error("--data-format " + fmt + ": cnnrun import writes cifar10, idx or npy data sections");
    }
  }
  return io;
}

// Reads an .onnx file in memory, or a netdef.
Network load_network(const Options& o) {
  if (is_onnx(o.netdef)) {
    Options without_data = o;
    without_data.data.clear();  // --data is the run's data, not a netdef section
    return load_onnx_network(o.netdef, import_options(without_data, "."));
  }
  for (const std::string* opt : {&o.mean, &o.std, &o.scale, &o.shift, &o.classes, &o.name})
    if (!opt->empty())
      throw Error("--mean, --std, --scale, --shift, --classes and --name apply to an .onnx model; " +
                  o.netdef + " says these itself");
  return parse_netdef_file(o.netdef);
}

// The progress bar on stderr. `auto`: on a terminal, for runs longer than a second (a short
// run finishes before a bar would help); `always`: from the first block, terminal or not;
// `never`: none. --quiet means none unless `always` is asked for.
std::function<void(int64_t, int64_t)> progress_bar(const std::string& mode, bool quiet) {
  if (mode == "never" || (mode == "auto" && (quiet || !isatty(STDERR_FILENO)))) return {};
  const double delay = mode == "always" ? 0.0 : 1.0;
  auto start = std::make_shared<Clock::time_point>(Clock::now());
  auto last = std::make_shared<double>(-1.0);
  return [start, last, delay](int64_t done, int64_t total) {
    double t = seconds_since(*start);
    // Nothing before the delay; then at most every 0.1 s, and always the last state.
    if (t < delay || (done < total && *last >= 0 && t - *last < 0.1)) return;
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
// `local_rank`: an MPI rank's index on its machine, which picks its GPU (modulo the GPUs there);
// *device: that GPU, or -1 for the CPU engine.
std::unique_ptr<Executor> make_executor(const Network& net, const std::string& engine, std::string& fallback,
                                        int local_rank, int* device) {
  *device = -1;
  if (engine == "cpu") return make_cpu_executor(net);
  std::string why;
  bool gpu = gpu_available(&why);
  if (engine == "gpu" && !gpu) throw Error("--engine gpu: no usable GPU: " + why);
  if (!gpu) {
    fallback = why;
    return make_cpu_executor(net);
  }
  *device = local_rank % std::max(1, gpu_device_count());
  return make_gpu_executor(net, *device);
}

// Prints to stdout and makes sure it arrived: a report lost to a full disk is an error (exit 1),
// not a silent success.
void print_stdout(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    throw Error(std::string("standard output: write failed (") + std::strerror(errno) + ")");
}

// MPI: every rank has got this far without an error, or every rank stops with the first failing
// rank's error. A rank that failed joins this same step from main()'s handler, so the steps
// line up; between two of them a rank makes no other collective call.
void all_reached(Ranks& ranks) {
  if (ranks.size() == 1) return;
  const std::string e = ranks.first_error("");
  if (!e.empty()) throw RanksFailed(e);
}

// This rank's part of an MPI run.
struct RankPart {
  int64_t run_images = 0;  // the run's images over all ranks (--batch N, else the data set's)
  int64_t in_files = 0;    // the data set's images
  Shard shard;             // this rank's images of the run
};

std::string batch_error(int64_t batch, int64_t count) {
  return "--batch " + std::to_string(batch) + ": the data set has only " + std::to_string(count) +
         " images; add --cycle to run them repeatedly";
}

// An MPI rank's data: the data set's size from its header (one image read) or its listing, the
// run's images, this rank's contiguous shard of them, and a source of exactly the images the
// shard runs (its bytes of record files, its part of an image folder). Cycled, image j of the
// shard is the data set's (first + j) % count, as in a one-process run.
std::unique_ptr<DataSource> open_rank_part(const Options& o, const Network& net, const AssetResolver& assets,
                                           const Ranks& ranks, RankPart& part) {
  open_data(net, assets, o.data, o.data_format, 1, o.skip_bad, 1, 0, &part.in_files);
  const int64_t total = part.in_files;
  part.run_images = o.batch ? o.batch : total;
  if (part.run_images > total && !o.cycle) throw Error(batch_error(part.run_images, total));
  if (part.run_images < ranks.size())
    throw Error("the run has " + std::to_string(part.run_images) + " images for " +
                std::to_string(ranks.size()) + " MPI ranks; every rank needs at least one");
  part.shard = shard_of(part.run_images, ranks.rank(), ranks.size());
  const int64_t a = part.shard.first % total, m = std::min(part.shard.count, total);
  auto open = [&](int64_t n, int64_t first) {
    return open_data(net, assets, o.data, o.data_format, o.decode_threads, o.skip_bad, n, first);
  };
  if (a + m <= total) return open(m, a);
  // A cycled shard that runs past the data set's end: images a..count-1, then 0...
  auto tail = open(total - a, a), head = open(a + m - total, 0);
  if (!tail->whole() || !head->whole())
    throw Error("--cycle needs a data set in memory; " + tail->description() + " is streamed from its files");
  Dataset d = *tail->whole();
  const Dataset& h = *head->whole();
  d.count += h.count;
  d.pixels.insert(d.pixels.end(), h.pixels.begin(), h.pixels.end());
  d.values.insert(d.values.end(), h.values.begin(), h.values.end());
  d.labels.insert(d.labels.end(), h.labels.begin(), h.labels.end());
  d.paths.insert(d.paths.end(), h.paths.begin(), h.paths.end());
  d.description += " and " + range_str(0, h.count, total);
  return memory_source(std::move(d));
}

template <class T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

template <class T>
void append_bytes(std::vector<T>& v, const std::string& b) {
  const size_t n = b.size() / sizeof(T), at = v.size();
  v.resize(at + n);
  std::memcpy(v.data() + at, b.data(), n * sizeof(T));
}

// MPI: the ranks' results combined as if one process had run (on rank 0: counts, scores,
// predictions, output values, the predictions file's rows in data-set order, every rank's
// times; on every rank: the validation, merged and judged again). `csv_rows`: this rank's rows.
void combine_ranks(Ranks& ranks, Report& rep, const RankPart& part, double wall_s, int device,
                   const std::string& csv_rows, std::string* all_csv_rows) {
  RunResult& run = rep.run;
  nlohmann::json me = {{"host", ranks.host()},
                       {"engine", run.engine},
                       {"device", device},
                       {"first", part.shard.first},
                       {"images", run.images},
                       {"forward_s", run.forward_seconds},
                       {"transfer_s", run.transfer_seconds},
                       {"wall_s", wall_s}};
  for (const auto& l : run.layers) me["layers"].push_back(l.seconds);
  const std::string meta = me.dump(), preds = bytes_of(run.predictions), probs = bytes_of(run.probs);
  std::vector<int64_t> counts = {run.images, run.correct, run.nonfinite_images, rep.stream.skipped};
  Scores& sc = rep.scores;
  counts.insert(counts.end(), {sc.images, sc.top1, sc.topk});
  counts.insert(counts.end(), sc.per_class_images.begin(), sc.per_class_images.end());
  counts.insert(counts.end(), sc.per_class_correct.begin(), sc.per_class_correct.end());
  counts.insert(counts.end(), sc.confusion.begin(), sc.confusion.end());
  Validation& v = rep.validation;
  std::vector<double> worst;
  if (rep.validated) {
    counts.insert(counts.end(), {v.images, v.prediction_mismatches});
    for (const auto& c : v.layers) {
      counts.push_back(c.nonfinite);
      worst.insert(worst.end(), {c.max_abs, c.max_ref});
    }
  }

  all_reached(ranks);  // from here on only collective calls, until rank 0 writes the outputs
  ranks.sum(counts);
  ranks.max(worst);
  const std::vector<std::string> metas = ranks.gather(meta), all_preds = ranks.gather(preds),
                                 all_probs = ranks.gather(probs), rows = ranks.gather(csv_rows);

  size_t i = 0;
  auto next = [&] { return counts[i++]; };
  run.images = next(), run.correct = next(), run.nonfinite_images = next(), rep.stream.skipped = next();
  sc.images = next(), sc.top1 = next(), sc.topk = next();
  for (auto* vec : {&sc.per_class_images, &sc.per_class_correct, &sc.confusion})
    for (auto& x : *vec) x = next();
  if (rep.validated) {
    v.images = next(), v.prediction_mismatches = next();
    for (size_t l = 0; l < v.layers.size(); ++l) {
      v.layers[l].nonfinite = next();
      v.layers[l].max_abs = worst[2 * l], v.layers[l].max_ref = worst[2 * l + 1];
    }
    judge(v, v.tolerance);
  }
  if (ranks.rank() != 0) return;
  run.predictions.clear();
  run.probs.clear();
  for (size_t r = 0; r < metas.size(); ++r) {
    append_bytes(run.predictions, all_preds[r]);
    append_bytes(run.probs, all_probs[r]);
    *all_csv_rows += rows[r];
    const nlohmann::json m = nlohmann::json::parse(metas[r]);
    RankFacts k;
    k.rank = static_cast<int>(r);
    k.host = m["host"];
    k.engine = m["engine"];
    k.device = m["device"];
    k.first = m["first"];
    k.images = m["images"];
    k.forward_s = m["forward_s"];
    k.wall_s = m["wall_s"];
    // The run's time is the slowest rank's, and so are the layer times shown.
    if (k.forward_s > run.forward_seconds || r == 0) {
      run.forward_seconds = k.forward_s;
      run.transfer_seconds = m["transfer_s"];
      const auto& secs = m["layers"];
      for (size_t l = 0; l < run.layers.size() && l < secs.size(); ++l) run.layers[l].seconds = secs[l];
    }
    rep.stream.wall_s = std::max(rep.stream.wall_s, k.wall_s);
    rep.ranks.push_back(k);
  }
}

int run_network(const Options& o, Ranks& ranks) {
  auto t_total = Clock::now();
  // The outputs are checked before anything is loaded: a path that cannot be written is an
  // error now, not after the run.
  // With MPI ranks, rank 0 writes every output (its checks, and its report, stand for all).
  const bool many = ranks.size() > 1, writer = ranks.rank() == 0;
  OutputFiles outs;
  for (const std::string& p : {o.netdef, o.data, o.weights}) outs.protect(p);
  const size_t kNone = static_cast<size_t>(-1);
  size_t dump_out = kNone, json_out = kNone;
  if (!o.dump.empty() && writer) dump_out = outs.add("--dump", o.dump);
  if (!o.json.empty() && writer) json_out = outs.add("--json", o.json);
  size_t predictions_out = kNone;
  if (!o.predictions.empty() && writer) predictions_out = outs.add("--predictions", o.predictions);
  if (o.resident && o.engine == "auto") {  // --engine cpu --resident is refused in main()
    std::string why;
    if (!gpu_available(&why)) throw Error("--resident needs the GPU engine, and no GPU is usable: " + why);
  }
  Report rep;
  rep.version = kVersion;
  rep.commit = CNNRUN_BUILD_COMMIT;
  rep.netdef = o.netdef;

  auto t = Clock::now();
  g_stage = "reading the netdef";
  Network net = load_network(o);
  rep.build_net_s = seconds_since(t);
  rep.net_name = net.name;
  rep.multiply_adds = multiply_adds(net);  // as written: load_weights may merge or fold layers
  AssetResolver assets(net.source_dir, AssetResolver::default_roots(o.assets));

  t = Clock::now();
  g_stage = "loading the weights";
  if (!is_onnx(o.netdef) || !o.weights.empty()) load_weights(net, assets, o.weights);
  rep.load_weights_s = seconds_since(t);
  rep.rewrites = net.rewrites;
  rep.weights_description = !o.weights.empty()  ? "--weights " + o.weights
                            : is_onnx(o.netdef) ? "onnx: " + o.netdef
                                                : net.weights.format + ": " + net.weights.path;

  t = Clock::now();
  g_stage = "loading the data";
  // Only the images the run reads: --batch N needs the first N (fewer when cycling a smaller set).
  RankPart part;
  std::unique_ptr<DataSource> src =
      many ? open_rank_part(o, net, assets, ranks, part)
           : open_data(net, assets, o.data, o.data_format, o.decode_threads, o.skip_bad, o.batch);
  rep.load_data_s = seconds_since(t);
  rep.data_description = src->description();
  rep.labelled = src->labelled();
  const int64_t count = src->count();
  const Dataset* whole = src->whole();
  if (!whole && (o.repeat > 1 || o.warmup > 0 || o.resident || o.cycle))
    throw Error(std::string(o.repeat > 1   ? "--repeat"
                            : o.warmup > 0 ? "--warmup"
                            : o.resident   ? "--resident"
                                           : "--cycle") +
                " needs a data set in memory; " + src->description() + " is streamed from its files");

  outs.check_not_inputs();  // every input is open by now: refused before the run, not after

  RunOptions ro;
  ro.batch = many ? part.shard.count : o.batch ? o.batch : count;
  if (ro.batch > count && !o.cycle) throw Error(batch_error(ro.batch, count));
  ro.cycle = o.cycle;
  ro.want_probs = !o.dump.empty();
  ro.block = std::min(o.block, ro.batch);  // a block larger than the run is the run (no overflow)
  ro.streams = o.streams;
  ro.threads = o.threads;
  // MiB to bytes; a cap past 2^63 bytes is no cap (more than any GPU holds).
  constexpr int64_t kMaxMib = std::numeric_limits<int64_t>::max() >> 20;
  ro.gpu_memory = o.gpu_memory_mib > kMaxMib ? std::numeric_limits<int64_t>::max() : o.gpu_memory_mib << 20;
  ro.pinned_memory =
      o.pinned_memory_mib > kMaxMib ? std::numeric_limits<int64_t>::max() : o.pinned_memory_mib << 20;
  ro.conv_algo = *parse_conv_algo(o.conv_algo);  // checked by the option's validator
  ro.tuning = parse_gpu_off(o.gpu_off);
  ro.tuning.graph_plans = o.cudnn_plans;
  ro.precision = *parse_precision(o.precision);  // checked by the option's validator
  ro.layout = *parse_layout(o.layout);
  ro.resident = o.resident;
  if (writer) ro.progress = progress_bar(o.progress, o.quiet);  // MPI: rank 0's shard
  rep.distinct_images = std::min(ro.batch, count);

  // Top-k by default with more than 10 classes; the output values are needed for it and for
  // the predictions file.
  const int classes = net.num_classes();
  const int k = std::min(o.top_k > 0 ? o.top_k : classes > 10 ? 5 : 1, classes);
  const bool need_values = (k > 1 && rep.labelled) || !o.predictions.empty();
  std::unique_ptr<PredictionsWriter> csv;
  if (!o.predictions.empty()) csv = std::make_unique<PredictionsWriter>(net.classes, std::max(k, 1));
  Scorer scorer(classes, k);
  const int64_t per = net.layers[static_cast<size_t>(net.output)]->out_shape.size();
  auto on_block = [&](const Dataset& block, int64_t first, const RunResult& r) {
    const float* values = r.probs.empty() ? nullptr : r.probs.data();
    if (block.labelled()) scorer.add(block.labels.data(), r.predictions.data(), values, r.images);
    if (csv) {
      std::vector<int32_t> labels = block.labels;
      if (static_cast<int64_t>(labels.size()) > r.images) labels.resize(static_cast<size_t>(r.images));
      csv->add(part.shard.first + first, block.paths, labels, values, r.images, per);
    }
  };

  const std::string engine = o.engine;
  g_stage = "running the network";
  // Rank 0 of an MPI run holds every rank's results.
  check_results_fit(many && writer ? part.run_images : ro.batch, ro.want_probs, per, host_memory());
  all_reached(ranks);  // every rank has its network, weights and data
  int device = -1;
  std::unique_ptr<Executor> ex = make_executor(net, engine, rep.cpu_fallback, ranks.local_rank(), &device);
  const auto t_run = Clock::now();
  rep.run = run_source(*ex, *src, ro, need_values, stream_block_images(net.input), on_block, &rep.stream);
  rep.scores = scorer.scores();
  rep.class_names = net.classes;
  if (o.repeat > 1 || o.warmup > 0) {
    const Dataset& data = *whole;
    // The first run did the executor's one-time work (weights, algorithm search); each run also
    // warms up on its first block off the clock. --warmup's runs come first and stay out of the
    // median (as a benchmark's warm-up calls: bench/zoo_bench.py gives PyTorch two). The report
    // is the timed run with the median time and the first run's setup.
    std::vector<RunResult> runs;
    runs.push_back(std::move(rep.run));
    ro.progress = {};
    for (int i = 1; i < o.warmup + o.repeat; ++i) runs.push_back(ex->run(data, ro));
    std::vector<double> t, busy;
    for (const RunResult& r : runs) {
      t.push_back(r.forward_seconds);
      if (r.gpu) busy.push_back(r.gpu->busy_seconds);
    }
    rep.run = median_run(std::move(runs), static_cast<size_t>(o.warmup));
    rep.warmup_seconds.assign(t.begin(), t.begin() + o.warmup);
    rep.repeat_seconds.assign(t.begin() + o.warmup, t.end());
    if (busy.size() == t.size()) {
      rep.warmup_busy_seconds.assign(busy.begin(), busy.begin() + o.warmup);
      rep.repeat_busy_seconds.assign(busy.begin() + o.warmup, busy.end());
    }
  }

  if (rep.run.nonfinite_images > 0) {
    // The argmax of NaNs is class 0: reporting an accuracy here would be a silent wrong answer.
    // A streamed source: its first block, read again (the layer is named when it is there).
    Dataset first_block;
    int64_t n = rep.distinct_images;
    if (!whole) {
      n = std::min(n, stream_block_images(net.input));
      src->read(0, n, first_block);
    }
    const std::string layer = first_nonfinite_layer(*ex, net, whole ? *whole : first_block, n, ro);
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
    if (ex->name() == ref->name()) rep.validated_by_itself = true;
    int64_t n = o.validate_images ? std::min(o.validate_images, rep.distinct_images) : rep.distinct_images;
    Dataset first_block;
    if (!whole) {  // a streamed source: its first block, read again
      n = std::min(n, stream_block_images(net.input));
      src->read(0, n, first_block);
      rep.validated_stream_images = n;
    }
    rep.validation = validate(*ex, *ref, net, whole ? *whole : first_block, n, ro);
    rep.validated = true;
    if (!rep.validation.pass) status = 3;
  }
  const double run_wall_s = seconds_since(t_run);

  std::string csv_bytes = csv ? csv->take() : std::string();
  if (many) {
    g_stage = "combining the ranks' results";
    // Rank 0 keeps the file's header; every rank sends its rows, written in data-set order.
    const size_t header = csv_bytes.find('\n') + 1;
    std::string rows = csv ? csv_bytes.substr(header) : std::string();
    csv_bytes.resize(csv ? header : 0);
    combine_ranks(ranks, rep, part, run_wall_s, device, rows, &csv_bytes);
    rep.distinct_images = std::min(part.run_images, part.in_files);
    status = rep.validated && !rep.validation.pass ? 3 : 0;
    if (!writer) {
      all_reached(ranks);  // rank 0 has written the outputs
      return status;
    }
  }
  rep.total_s = seconds_since(t_total);

  g_stage = "writing the outputs";
  if (csv) outs.set(predictions_out, std::move(csv_bytes));
  if (dump_out != kNone) outs.set(dump_out, npy_bytes({rep.run.images, per}, rep.run.probs.data()));
  if (json_out != kNone) outs.set(json_out, report_json(rep));
  std::string text;
  if (o.quiet && !rep.labelled) {
    text = "images " + std::to_string(rep.run.images) + " (no labels: no accuracy)\n";
  } else if (o.quiet) {
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
  all_reached(ranks);  // MPI: the others wait for rank 0's outputs
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

// cnnrun import MODEL.onnx OUT.yaml: the netdef and OUT.safetensors beside it.
int import_model(const Options& o, const std::string& model, const std::string& out) {
  namespace fs = std::filesystem;
  if (!is_onnx(model)) throw Error(model + ": expected an .onnx file");
  std::string ext = fs::path(out).extension().string();
  if (ext != ".yaml" && ext != ".yml") throw Error(out + ": the netdef's name must end in .yaml");
  fs::path st = fs::path(out).replace_extension(".safetensors");
  std::string base = fs::path(out).has_parent_path() ? fs::path(out).parent_path().string() : ".";
  ImportOptions io = import_options(o, base);
  io.weights_path = st.filename().string();
  ImportResult r = import_onnx_file(model, io);
  // Parsed as the written netdef will be, where it will be, before anything is written (the
  // importer has checked that its tensors load).
  Network net = parse_netdef_string(r.netdef, out, base);
  if (!r.tensors.empty()) write_output_file(st.string(), safetensors_bytes(r.tensors), {model});
  write_output_file(out, r.netdef, {model});
  std::printf("wrote %s (%zu layers)%s\n", out.c_str(), net.layers.size(),
              r.tensors.empty()
                  ? ""
                  : (" and " + st.string() + " (" + std::to_string(r.tensors.size()) + " tensors)").c_str());
  for (const auto& n : r.notes) std::printf("note: %s\n", n.c_str());
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
  // MPI first (when mpirun started this process): it may take its own arguments out of argv.
  std::unique_ptr<Ranks> ranks;
  try {
    ranks = make_ranks(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cnnrun: %s\n", e.what());
    return 1;
  }
  // With several ranks, rank 0 speaks for all: the others fail the same way, silently.
  const bool speaker = ranks->rank() == 0;
  if (!speaker && !std::freopen("/dev/null", "w", stdout)) return 1;
  CLI::App app{
      "cnnrun: run a convolutional network described in YAML over a data set, on the GPU or the CPU"};
  app.set_version_flag("--version", kVersionLine);
  Options o;
  app.add_option(
      "netdef", o.netdef,
      "network definition (YAML), e.g. netdefs/cifar10.yaml, or an ONNX model (.onnx, imported in memory)");
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
  app.add_flag("--skip-bad", o.skip_bad,
               "image folders: leave out images that cannot be read (corrupt, not an image, wrong size), "
               "counted in the report, instead of stopping at the first");
  app.add_flag("--quiet", o.quiet, "print only the accuracy line (the image count without labels)");
  app.add_option("--progress", o.progress,
                 "progress bar on stderr: auto (default: on a terminal, for runs over a second), always, "
                 "never")
      ->check(CLI::IsMember({"auto", "always", "never"}));
  app.add_flag("--validate", o.validate,
               "compare every layer with the CPU reference (exit 3 if any differs)");
  app.add_option("--validate-images", o.validate_images,
                 "validate on the first N images only (default: all run)")
      ->check(kPositiveInt);
  app.add_option("--conv-algo", o.conv_algo,
                 std::string("GPU convolution for every conv layer: ") + kConvAlgoExpected)
      ->check(CLI::Validator(
          [](std::string& v) {
            return parse_conv_algo(v) ? std::string()
                                      : "expected " + std::string(kConvAlgoExpected) + ", found '" + v + "'";
          },
          "ALGO"));
  app.add_option("--precision", o.precision,
                 "GPU: the format conv and fc operands may be rounded to, with FP32 accumulation: fp32 "
                 "(default, 3xTF32 on tensor cores), tf32, fp16 or bf16; --validate then allows 16 of its "
                 "unit roundoffs")
      ->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16"}));
  app.add_option(
         "--layout", o.layout,
         "GPU: how activations are stored: nchw (FP32 NCHW, every conv algorithm), nhwc (channels "
         "last in the precision's format, FP16/BF16/FP32, convs through cuDNN, the depthwise kernel or, "
         "at fp32, cutlass's 3xTF32) or auto (default: nhwc for networks of wide convs, "
         "docs/performance.md)")
      ->check(CLI::IsMember({"auto", "nchw", "nhwc"}));
  app.add_option("--block", o.block,
                 "images per block (default: about 4096, equal blocks; with --resident the whole batch; cut "
                 "to fit memory)")
      ->check(kPositiveInt);
  app.add_option("--streams", o.streams, "GPU streams (default 3; with --resident 1)")
      ->check(CLI::Range(1, 64));
  app.add_option("--gpu-memory", o.gpu_memory_mib,
                 "GPU memory in MiB the image buffers and workspaces may use; blocks are cut to fit "
                 "(default: what is free)")
      ->check(kPositiveInt);
  app.add_option("--pinned-memory", o.pinned_memory_mib,
                 "GPU: host memory in MiB the streams may page-lock for predictions, output values and "
                 "image staging; blocks are cut to fit (default: half of the host memory available)")
      ->check(kPositiveInt);
  app.add_flag("--resident", o.resident,
               "GPU: put the images in device memory before the clock, so the forward time starts there "
               "(preprocess, every layer, argmax, the predictions copied back: 4 bytes per image); "
               "needs --engine gpu");
  app.add_option("--repeat", o.repeat, "run the batch N times and report the median forward time (default 1)")
      ->check(CLI::Range(1, 1000));
  app.add_option(
         "--warmup", o.warmup,
         "run the batch N more times before those of --repeat, left out of the median (default 0; the "
         "report lists their times)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--threads", o.threads, "CPU threads (default: all cores)")->check(CLI::Range(1, 1024));
  app.add_option(
         "--cudnn-plans", o.cudnn_plans,
         "GPU, channels last: how many of cuDNN's candidate engines its graph API's search builds and "
         "times a conv (default 2; each build compiles a kernel, which lengthens the setup)")
      ->check(CLI::Range(1, 64));
  app.add_option(
         "--gpu-off", o.gpu_off,
         std::string("GPU: turn these optimisations off, to measure what they gain (comma-separated: ") +
             kGpuOffNames + "; default: $CNNRUN_GPU_OFF, else none)")
      ->check(CLI::Validator(
          [](std::string& v) {
            try {
              parse_gpu_off(v);
              return std::string();
            } catch (const Error& e) {
              return std::string(e.what());
            }
          },
          "LIST"));

  std::string conv_netdef, conv_out;
  CLI::App* conv = app.add_subcommand("convert", "write a netdef's weights (any format) as safetensors");
  conv->add_option("netdef", conv_netdef, "network definition")->required();
  conv->add_option("out", conv_out, "output .safetensors file")->required();
  conv->add_option("--weights", o.weights, "weights to read instead of the netdef's");
  conv->add_option("--assets", o.assets, "asset root (repeatable)");

  auto add_import_options = [&o](CLI::App* a) {
    a->add_option("--mean", o.mean,
                  ".onnx: preprocessing y = (x/255 - mean) / std, per channel (comma list)");
    a->add_option("--std", o.std, ".onnx: see --mean");
    a->add_option("--scale", o.scale,
                  ".onnx: preprocessing y = x * scale + shift (one value or one per channel)");
    a->add_option("--shift", o.shift, ".onnx: see --scale");
    a->add_option(
        "--classes", o.classes,
        ".onnx: the class count, or a file with one class name per line (default: one per output value)");
    a->add_option("--name", o.name, ".onnx: the network's name (default: the graph's)");
  };
  add_import_options(&app);
  std::string imp_model, imp_out;
  CLI::App* imp = app.add_subcommand(
      "import",
      "read an ONNX model and write a netdef (OUT.yaml) and its weights (OUT.safetensors beside it)");
  imp->add_option("model", imp_model, "the ONNX model (.onnx)")->required();
  imp->add_option("out", imp_out, "the netdef to write (.yaml)")->required();
  add_import_options(imp);
  imp->add_option("--data", o.data,
                  "the data set the netdef names (a CIFAR-10 file or directory, IDX IMAGES,LABELS, or .npy "
                  "IMAGES[,LABELS])");
  imp->add_option("--data-format", o.data_format,
                  "the --data format: cifar10 or idx (default: from the path)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    if (speaker) std::fprintf(stderr, "cnnrun: %s (see cnnrun --help)\n", e.what());
    return 2;
  }
  // An error on this rank: with MPI ranks, it joins the step the others wait at, and rank 0
  // prints the first failing rank's error (every rank exits 1).
  auto fail = [&](const std::string& msg) {
    const std::string first = ranks->size() > 1 ? ranks->first_error(msg) : msg;
    if (speaker) std::fprintf(stderr, "cnnrun: %s\n", first.c_str());
    return 1;
  };
  try {
    for (const char* opt : {"--json", "--dump"})
      if (app.count(opt) && (opt[2] == 'j' ? o.json : o.dump).empty()) {
        if (speaker) std::fprintf(stderr, "cnnrun: %s: empty file name (see cnnrun --help)\n", opt);
        return 2;
      }
    for (const std::string& a : o.assets)
      if (a.empty()) {
        if (speaker)
          std::fprintf(stderr,
                       "cnnrun: --assets: empty directory name (it would make the current directory an asset "
                       "root; write --assets . for that)\n");
        return 2;
      }
    if ((*conv || *imp) && ranks->size() > 1) {
      if (speaker)
        std::fprintf(stderr, "cnnrun: %s runs as one process, not under mpirun\n",
                     *conv ? "convert" : "import");
      return 2;
    }
    if (*conv) return convert(conv_netdef, conv_out, o.weights, o.assets);
    if (*imp) return import_model(o, imp_model, imp_out);
    if (o.netdef.empty()) {
      if (speaker) std::fprintf(stderr, "cnnrun: no netdef given (see cnnrun --help)\n");
      return 2;
    }
    // The environment is read here, once: A/B benches set CNNRUN_GPU_OFF for a whole script.
    if (app.count("--gpu-off") == 0)
      if (const char* env = std::getenv("CNNRUN_GPU_OFF")) {
        o.gpu_off = env;
        try {
          parse_gpu_off(o.gpu_off);
        } catch (const Error& e) {
          if (speaker) std::fprintf(stderr, "cnnrun: CNNRUN_GPU_OFF=%s: %s\n", env, e.what());
          return 2;
        }
      }
    if (o.resident && o.engine == "cpu") {
      if (speaker) std::fprintf(stderr, "cnnrun: --resident needs --engine gpu\n");
      return 2;
    }
    if (o.layout == "nhwc" && o.engine == "cpu") {
      if (speaker)
        std::fprintf(stderr, "cnnrun: --layout %s needs --engine gpu: the CPU reference is FP32 NCHW\n",
                     o.layout.c_str());
      return 2;
    }
    if (o.precision != "fp32" && o.engine == "cpu") {
      if (speaker)
        std::fprintf(stderr,
                     "cnnrun: --precision %s needs --engine gpu: the CPU reference computes in FP32\n",
                     o.precision.c_str());
      return 2;
    }
    return run_network(o, *ranks);
  } catch (const RanksFailed& e) {  // every rank has it: printed once
    if (speaker) std::fprintf(stderr, "cnnrun: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    return fail(std::string("out of host memory while ") + g_stage + " (now " + host_memory().str() + ")");
  } catch (const std::length_error&) {  // a std::vector past max_size(): a size no memory holds
    return fail(std::string("out of host memory while ") + g_stage +
                ": a buffer larger than any memory was asked for");
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
