#include "engine/report.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "engine/core/memory.h"

namespace cnnrun {

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Per-type totals in order of first appearance.
std::vector<std::pair<std::string, double>> by_type(const RunResult& r) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& l : r.layers) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == l.type; });
    if (it == out.end())
      out.emplace_back(l.type, l.seconds);
    else
      it->second += l.seconds;
  }
  return out;
}

double accuracy(const RunResult& r) {
  return r.images ? 100.0 * static_cast<double>(r.correct) / static_cast<double>(r.images) : 0.0;
}

std::string fmt_ms(double s) {
  std::ostringstream o;
  o.precision(3);
  o << std::fixed << s * 1e3 << " ms";
  return o.str();
}

// Per-class accuracy and the confusion matrix, for up to 10 classes (JSON has them for more).
std::string confusion_text(const Report& r) {
  const Scores& sc = r.scores;
  const int C = sc.classes;
  if (C > 10 || sc.images == 0 || sc.confusion.empty()) return "";
  size_t w = 5;
  for (int c = 0; c < C; ++c)
    w = std::max(w, std::min<size_t>(r.class_names[static_cast<size_t>(c)].size(), 12));
  std::string s = "Per class (rows: label, columns: predicted class):\n";
  s += std::string(w + 4, ' ');
  for (int c = 0; c < C; ++c) s += fmt("%6.0f", static_cast<double>(c));
  s += "   accuracy\n";
  for (int l = 0; l < C; ++l) {
    std::string name = r.class_names[static_cast<size_t>(l)].substr(0, 12);
    s += "  " + fmt("%2.0f", static_cast<double>(l)) + " " + name + std::string(w + 1 - name.size(), ' ');
    for (int p = 0; p < C; ++p)
      s += fmt("%6.0f", static_cast<double>(sc.confusion[static_cast<size_t>(l * C + p)]));
    const int64_t n = sc.per_class_images[static_cast<size_t>(l)];
    s += n ? "   " +
                 fmt("%6.2f %%", 100.0 * static_cast<double>(sc.per_class_correct[static_cast<size_t>(l)]) /
                                     static_cast<double>(n))
           : std::string("   -");
    s += "\n";
  }
  return s;
}

// The forward's images a second (0 where no forward time was measured): the text's and JSON's
// throughput and, times twice the multiply-adds an image, the arithmetic rate.
double images_per_second(const Report& r) {
  return r.run.forward_seconds > 0 ? static_cast<double>(r.run.images) / r.run.forward_seconds : 0.0;
}

}  // namespace

std::string tuning_note(const ConvTuning& t) {
  std::string line = "gpu: auto " + t.layer + " (" + std::to_string(t.images) + " images):";
  for (const auto& c : t.candidates) {
    switch (c.outcome) {
      case ConvTuning::Candidate::Outcome::kNotApplicable:
        line += " " + c.algo + " n/a;";
        break;
      case ConvTuning::Candidate::Outcome::kFailed:
        line += " " + c.algo + " failed (" + c.error + ");";
        break;
      case ConvTuning::Candidate::Outcome::kTimed: {
        std::ostringstream o;
        o.precision(3);
        o << std::fixed << " " << c.algo << " " << c.ms << " ms"
          << (c.note.empty() ? "" : " (" + c.note + ")") << ";";
        line += o.str();
        break;
      }
    }
  }
  if (t.chosen.empty()) return line;
  return line + " -> " + t.chosen + (t.earlier ? " (tuned earlier)" : "");
}

namespace {

// "<head> N bytes per image per <worker>, B buffers in A allocations (shared ...)".
std::string buffers_note(const std::string& head, const BufferFacts& b, const char* worker) {
  return head + " " + std::to_string(b.bytes_per_image) + " bytes per image per " + worker + ", " +
         std::to_string(b.count) + " buffers in " + std::to_string(b.allocations) + " allocations" +
         (b.allocations < b.count ? " (shared by buffers never in use at once)" : "");
}

void gpu_notes(const GpuRunFacts& g, std::vector<std::string>& out) {
  // What the forward time covers, first.
  const std::string what = g.float_input ? "float32 values" : "uint8 pixels";
  const std::string back =
      "the predictions (4 bytes per image)" +
      (g.probs_bytes > 0 ? " and the output values (" + std::to_string(g.probs_bytes) + " bytes per image)"
                         : std::string()) +
      " copied to host memory";
  out.push_back(
      g.resident
          ? "gpu: timed: forward, input resident on GPU: the " + std::to_string(g.resident_images) +
                (g.resident_images > g.resident_distinct
                     ? " images' " + what + " (" + std::to_string(g.resident_distinct) +
                           " distinct, repeated; "
                     : " distinct images' " + what + " (") +
                std::to_string(g.resident_bytes) + " bytes) were uploaded before the clock; " +
                (g.pixels_in_place ? "read where they lie (no copy), "
                                   : "each block's device-to-device copy of its " + what + ", ") +
                (g.float_input || !g.input_fused_into.empty() ? "" : "preprocess, ") + "every layer" +
                (g.input_fused_into.empty()
                     ? std::string()
                     : " (" + g.input_fused_into + " reads the uint8 pixels itself: no preprocess pass)") +
                ", argmax and " + back + " are timed"
          : "gpu: timed: end to end, from the " + what + " in host memory to " + back);
  if (g.block_cut_from > 0)
    out.push_back(
        "gpu: block of " + std::to_string(g.block_cut_from) + " images cut to " + std::to_string(g.block) +
        (g.cap_bytes > 0
             ? " to fit --gpu-memory (" + std::to_string(g.cap_bytes) + " bytes" +
                   (g.cap_total_bytes != g.cap_bytes
                        ? " left of its " + std::to_string(g.cap_total_bytes) + " beside the resident images)"
                        : std::string(")"))
             : std::string(" to fit free GPU memory")));
  if (g.cudnn_cut_from > 0)
    out.push_back("gpu: block of " + std::to_string(g.cudnn_cut_from) + " images cut to " +
                  std::to_string(g.block) + ": cuDNN's tensors hold fewer than 2^31 values, and layer '" +
                  g.cudnn_cut_layer + "' has " + std::to_string(g.cudnn_cut_from) +
                  " images' worth beyond that");
  if (g.host_cut_from > 0)
    out.push_back("gpu: block of " + std::to_string(g.host_cut_from) + " images cut to " +
                  std::to_string(g.block) + " so that the streams' page-locked host buffers (" +
                  bytes_str(g.host_pinned_bytes) + ") fit " +
                  (g.host_limited_by == "--pinned-memory"
                       ? std::string("in what --pinned-memory allows")
                       : "in half the host memory " + g.host_limited_by + " leaves"));
  for (bool earlier : {false, true})
    for (const ConvTuning& t : g.tuning)
      if (t.earlier == earlier) out.push_back(tuning_note(t));
  switch (g.graphs) {
    case GpuRunFacts::Graphs::kOff:
      out.push_back("gpu: CUDA graphs off (CNNRUN_GPU_OFF=graph)");
      break;
    case GpuRunFacts::Graphs::kCaptured:
      out.push_back(
          "gpu: each full block (" + std::to_string(g.block) +
          " images) after its H2D copy is one CUDA graph launch (captured per stream)" +
          (g.short_graph > 0 ? ", the short last block (" + std::to_string(g.short_graph) +
                                   " images) one more (captured on its stream)"
           : g.short_graph_error.empty()
               ? std::string()
               : "; the short last block launches directly, its capture failed: " + g.short_graph_error));
      break;
    case GpuRunFacts::Graphs::kCaptureFailed:
      out.push_back("gpu: CUDA graph capture failed, launching directly: " + g.graph_error);
      break;
  }
  const char* pixels = "already page-locked memory";
  switch (g.pixels) {
    case GpuRunFacts::Pixels::kResident:
      pixels = "device memory (--resident)";
      break;
    case GpuRunFacts::Pixels::kRegistered:
      pixels = "the data set's buffer, page-locked in place (cudaHostRegister)";
      break;
    case GpuRunFacts::Pixels::kStaged:
      pixels = "a pinned staging buffer (cudaHostRegister failed)";
      break;
    case GpuRunFacts::Pixels::kPinned:
      break;
  }
  out.push_back("gpu: " + std::to_string(g.blocks) + " blocks on " + std::to_string(g.streams) +
                " streams; " + g.cudnn_version + "; pixels from " + pixels);
  if (g.whole_batch)
    out.push_back(
        "gpu: --resident without --block or --streams: the batch as one block on one stream (no "
        "copies to overlap), cut into blocks only where GPU memory or cuDNN's tensor size requires");
  out.push_back(std::string("gpu: setup (weights, workspaces, algorithm search, ") +
                (g.resident ? "upload of the resident pixels" : "page-locking") + ") " +
                fmt_ms(g.setup_seconds) + ", not in the forward time");
  out.push_back(buffers_note("gpu: activation buffers", g.buffers, "stream"));
  if (g.cudnn_workspace_bytes >= 0)
    out.push_back("gpu: cuDNN workspace " + bytes_str(g.cudnn_workspace_bytes) +
                  " per stream (what the chosen algorithms need; the search had " +
                  bytes_str(g.cudnn_search_workspace_bytes) + " on one stream)");
  if (!g.stem_input.layer.empty()) {
    const GpuRunFacts::StemInput& si = g.stem_input;
    out.push_back("gpu: " + si.layer + "'s stem reads " +
                  (si.bytes ? "the uint8 pixels: " + fmt_ms(si.bytes_seconds) + " against " +
                                  fmt_ms(si.floats_seconds) + " for the floats and the preprocess pass"
                            : "the floats after the preprocess pass: " + fmt_ms(si.floats_seconds) +
                                  " against " + fmt_ms(si.bytes_seconds) + " reading the uint8 pixels") +
                  ", timed at setup");
  }
  out.push_back(
      "gpu: preprocess " +
      (g.input_fused_into.empty() ? fmt_ms(g.preprocess_seconds)
                                  : "fused into " + g.input_fused_into + " (it reads the uint8 pixels)") +
      ", argmax+accuracy " + fmt_ms(g.argmax_seconds) +
      (g.pixels_in_place ? ", labels "
       : g.resident      ? ", D2D pixels "
                         : ", H2D ") +
      fmt_ms(g.h2d_seconds) + ", D2H " + fmt_ms(g.d2h_seconds) + " (event intervals summed over blocks)");
  out.push_back("gpu: per-layer times sum to " + fmt_ms(g.layer_sum_seconds) + "; GPU busy with compute " +
                fmt_ms(g.busy_seconds) + " of the " + fmt_ms(g.wall_seconds) +
                " wall (with several streams, layers of different blocks overlap, so the sum can exceed "
                "the busy time)");
}

}  // namespace

std::vector<std::string> report_notes(const Report& r) {
  std::vector<std::string> out;
  if (!r.cpu_fallback.empty()) out.push_back("no GPU (" + r.cpu_fallback + "): running the CPU engine");
  out.insert(out.end(), r.rewrites.begin(), r.rewrites.end());
  if (r.validated_by_itself)
    out.push_back("--validate with the CPU engine compares the reference with itself");
  if (r.validated_stream_images)
    out.push_back("--validate on a streamed data set checks its first " +
                  std::to_string(r.validated_stream_images) + " images");
  if (r.run.cpu) {
    const CpuRunFacts& c = *r.run.cpu;
    if (c.memory_cut_block_from > 0)
      out.push_back("cpu: to fit host memory (" + c.host_memory + "), blocks cut from " +
                    std::to_string(c.memory_cut_block_from) + " to " + std::to_string(c.block) + " images" +
                    (c.threads != c.memory_cut_threads_from
                         ? " and threads from " + std::to_string(c.memory_cut_threads_from) + " to " +
                               std::to_string(c.threads)
                         : std::string()) +
                    " (" + bytes_str(c.bytes_per_image) + " per image)");
    if (c.threads_started < c.threads)
      out.push_back("cpu: only " + std::to_string(c.threads_started) + " of " + std::to_string(c.threads) +
                    " threads could be started (a thread or memory limit?); the others' blocks ran on them");
    out.push_back("cpu: " + std::to_string(c.block) + " images per block, Eigen SIMD: " + c.simd);
    out.push_back(buffers_note("cpu: layer outputs", c.buffers, "thread"));
  }
  if (r.run.gpu) gpu_notes(*r.run.gpu, out);
  if (r.stream.block_images > 0)
    out.push_back("streamed in " + std::to_string(r.stream.blocks) + " blocks of up to " +
                  std::to_string(r.stream.block_images) + " images, each decoded while the one before ran");
  // "T1 T2 ..." in ms; with the GPU's busy times, "; GPU busy with compute (ms) B1 B2 ..." after.
  auto times = [](const std::vector<double>& t, const std::vector<double>& busy) {
    std::string s;
    for (double v : t) s += (s.empty() ? "" : " ") + std::to_string(v * 1e3);
    if (busy.size() == t.size()) {
      s += "; GPU busy with compute (ms)";
      for (double v : busy) s += " " + std::to_string(v * 1e3);
    }
    return s;
  };
  if (!r.warmup_seconds.empty())
    out.push_back("--warmup " + std::to_string(r.warmup_seconds.size()) + ": forward times (ms) " +
                  times(r.warmup_seconds, r.warmup_busy_seconds) +
                  "; run before the timed runs, not in the median");
  if (!r.repeat_seconds.empty())
    out.push_back("--repeat " + std::to_string(r.repeat_seconds.size()) + ": forward times (ms) " +
                  times(r.repeat_seconds, r.repeat_busy_seconds) +
                  "; the report shows the run nearest the median, with forward time = median " +
                  std::to_string(r.run.forward_seconds * 1e3) + " ms");
  return out;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      size_t p = line.find(':');
      return p == std::string::npos ? line : line.substr(p + 2);
    }
  return "unknown";
}

std::string report_text(const Report& r) {
  std::string s;
  s += "cnnrun " + r.version + (r.commit.empty() ? "" : " (commit " + r.commit + ")") + ": " + r.net_name +
       " (" + r.netdef + ")\n";
  s += "Engine: " + r.run.engine + "\n";
  if (r.run.precision != Precision::kFp32)
    s += std::string("Precision: ") + precision_name(r.run.precision) +
         " (conv and fc operands may be rounded to it, FP32 accumulation; each layer's algorithm says what "
         "ran)\n";
  for (const auto& n : report_notes(r)) s += "Note: " + n + "\n";
  s += "Data: " + r.data_description + "\n";
  s += "Weights: " + r.weights_description + "\n";
  s += "Images: " + std::to_string(r.run.images);
  if (r.distinct_images < r.run.images) s += " (" + std::to_string(r.distinct_images) + " distinct, cycled)";
  s += "\n\n";
  s += "Load data time:            " + fmt("%.6f", r.load_data_s) + " s\n";
  s += "Create network time:       " + fmt("%.6f", r.build_net_s) + " s\n";
  s += "Load network weights time: " + fmt("%.6f", r.load_weights_s) + " s\n\n";
  const double thr = images_per_second(r);
  s += "Net forward total time: " + fmt("%.6f", r.run.forward_seconds) + " s (" + fmt("%.0f", thr) +
       " images/s)" + (r.ranks.empty() ? "" : ", the slowest rank's; images/s over all ranks") + "\n";
  if (r.multiply_adds > 0) {
    const double macs = static_cast<double>(r.multiply_adds), rate = 2 * macs * thr;
    s += "Arithmetic: " +
         (macs >= 1e9   ? fmt("%.3f", macs / 1e9) + " G "
          : macs >= 1e6 ? fmt("%.3f", macs / 1e6) + " M "
                        : fmt("%.0f", macs) + " ") +
         "multiply-adds an image (the netdef's conv and fc layers)" +
         (thr > 0 ? ", " +
                        (rate >= 1e12 ? fmt("%.1f", rate / 1e12) + " TFLOP/s"
                                      : fmt("%.1f", rate / 1e9) + " GFLOP/s") +
                        " over the forward"
                  : std::string()) +
         "\n";
  }
  if (!r.ranks.empty()) {
    std::vector<std::string> hosts;
    for (const auto& k : r.ranks)
      if (std::find(hosts.begin(), hosts.end(), k.host) == hosts.end()) hosts.push_back(k.host);
    s += "MPI: " + std::to_string(r.ranks.size()) + " ranks on " + std::to_string(hosts.size()) +
         (hosts.size() == 1 ? " host" : " hosts") + ", each running a contiguous shard of the images:\n";
    for (const auto& k : r.ranks)
      s += "    rank " + std::to_string(k.rank) + " (" + k.host +
           (k.device >= 0 ? ", GPU " + std::to_string(k.device) : std::string(", CPU")) + "): images " +
           std::to_string(k.first) + ".." + std::to_string(k.first + k.images - 1) + ", forward " +
           fmt("%.6f", k.forward_s) + " s (" +
           fmt("%.0f", k.forward_s > 0 ? static_cast<double>(k.images) / k.forward_s : 0.0) +
           " images/s), run " + fmt("%.3f", k.wall_s) + " s\n";
  }
  double sum = 0;
  size_t wname = 4, walgo = 0;
  for (const auto& l : r.run.layers) {
    sum += l.seconds;
    wname = std::max(wname, l.name.size());
    walgo = std::max(walgo, l.algo.size());
  }
  for (const auto& l : r.run.layers) {
    std::string line = "    " + l.name + std::string(wname - l.name.size() + 2, ' ') + l.type +
                       std::string(l.type.size() < 10 ? 10 - l.type.size() : 1, ' ');
    if (walgo) line += l.algo + std::string(walgo - l.algo.size() + 2, ' ');
    line += fmt("%.6f s", l.seconds) + fmt("  %5.1f %%", sum > 0 ? 100.0 * l.seconds / sum : 0.0);
    s += line + "\n";
  }
  s += "\n";
  for (const auto& [type, secs] : by_type(r.run))
    s += "  " + type + ":" + std::string(type.size() < 10 ? 10 - type.size() : 1, ' ') + fmt("%.6f s", secs) +
         "\n";
  if (r.stream.decode_threads > 0) {
    const double imgs = static_cast<double>(r.run.images);
    s += "Decoding: " + fmt("%.3f", r.stream.decode_s) + " s on " + std::to_string(r.stream.decode_threads) +
         " threads (" + fmt("%.0f", r.stream.decode_s > 0 ? imgs / r.stream.decode_s : 0.0) +
         " images/s per thread); the executor waited " + fmt("%.3f", r.stream.wait_s) + " s for blocks\n";
  }
  if (r.stream.skipped > 0)
    s += "Skipped: " + std::to_string(r.stream.skipped) +
         " unreadable images (--skip-bad); the first: " + r.stream.first_skipped + "\n";
  if (r.stream.decode_threads > 0 && r.stream.wall_s > 0)  // streamed sources: files to predictions
    s += "Pipeline: " + std::to_string(r.run.images) + " images in " + fmt("%.3f", r.stream.wall_s) + " s (" +
         fmt("%.0f", static_cast<double>(r.run.images) / r.stream.wall_s) +
         " images/s: reading, decoding, preprocessing and the network" +
         (r.stream.blocks > 1
              ? "; " + std::to_string(r.stream.blocks) + " blocks of up to " +
                    std::to_string(r.stream.block_images) + " images, each decoded while the one before ran"
              : std::string()) +
         ")\n";
  if (r.run.transfer_seconds > 0)
    s += "  (copies not hidden by compute: " + fmt("%.6f s", r.run.transfer_seconds) + ")\n";
  if (sum > r.run.forward_seconds * 1.05 && r.run.forward_seconds > 0)
    s += "  (layer times add up to more than the wall time: blocks ran concurrently on several "
         "streams/threads)\n";
  s += "\n";
  if (r.validated) {
    const Validation& v = r.validation;
    s += "Validation against the CPU reference (" + std::to_string(v.images) + " images, tolerance " +
         fmt("%.0e", v.tolerance) + " relative to each layer's largest value):\n";
    for (const auto& c : v.layers) {
      std::string line = "    " + c.name + std::string(wname - c.name.size() + 2, ' ');
      if (!c.fused_into.empty())
        line += "fused into " + c.fused_into + ", checked there";
      else
        line += "max abs " + fmt("%.3e", c.max_abs) + "  max rel " + fmt("%.3e", c.max_rel) +
                (c.pass ? "  pass" : "  FAIL");
      s += line + "\n";
    }
    s += "  predictions differing: " + std::to_string(v.prediction_mismatches) + "\n";
    s += v.pass ? "  Validation: PASS\n\n"
                : "  Validation: FAIL (first failing layer: " + v.first_failure + ")\n\n";
  }
  if (r.labelled) {
    s += "Net accuracy: " + fmt("%.2f", accuracy(r.run)) + " % (" + std::to_string(r.run.correct) + "/" +
         std::to_string(r.run.images) + ")\n";
    const Scores& sc = r.scores;
    if (sc.k > 1 && sc.images > 0)
      s += "Top-" + std::to_string(sc.k) + " accuracy: " +
           fmt("%.2f", 100.0 * static_cast<double>(sc.topk) / static_cast<double>(sc.images)) + " % (" +
           std::to_string(sc.topk) + "/" + std::to_string(sc.images) + ")\n";
    s += confusion_text(r);
  } else {
    s += "Net accuracy: none (the data set has no labels)\n";
  }
  s += "Total time: " + fmt("%.6f", r.total_s) + " s\n";
  return printable(s);  // names and paths come from files: no terminal escapes, only valid UTF-8
}

std::string report_json(const Report& r) {
  using nlohmann::json;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  json j;
  j["cnnrun_version"] = r.version;
  j["cnnrun_commit"] = r.commit;
  j["netdef"] = r.netdef;
  j["network"] = r.net_name;
  j["environment"] = {{"host", host},
                      {"cpu", cpu_model()},
                      {"hardware_threads", std::thread::hardware_concurrency()},
                      {"engine", r.run.engine}};
  j["precision"] = precision_name(r.run.precision);
  j["notes"] = report_notes(r);
  j["data"] = r.data_description;
  j["weights"] = r.weights_description;
  j["images"] = r.run.images;
  j["distinct_images"] = r.distinct_images;
  j["times"] = {{"load_data_s", r.load_data_s},
                {"create_network_s", r.build_net_s},
                {"load_weights_s", r.load_weights_s},
                {"forward_s", r.run.forward_seconds},
                {"unhidden_transfer_s", r.run.transfer_seconds},
                {"total_s", r.total_s}};
  const double thr = images_per_second(r);
  j["throughput_images_per_s"] = thr;
  j["multiply_adds_per_image"] = r.multiply_adds;
  j["flops_per_s"] = 2.0 * static_cast<double>(r.multiply_adds) * thr;
  if (!r.ranks.empty()) {
    json ranks = json::array();
    for (const auto& k : r.ranks)
      ranks.push_back({{"rank", k.rank},
                       {"host", k.host},
                       {"engine", k.engine},
                       {"device", k.device},
                       {"first_image", k.first},
                       {"images", k.images},
                       {"forward_s", k.forward_s},
                       {"images_per_s", k.forward_s > 0 ? static_cast<double>(k.images) / k.forward_s : 0.0},
                       {"run_s", k.wall_s}});
    j["mpi_ranks"] = ranks;
  }
  json layers = json::array();
  for (const auto& l : r.run.layers)
    layers.push_back({{"name", l.name}, {"type", l.type}, {"algo", l.algo}, {"seconds", l.seconds}});
  j["layers"] = layers;
  json types = json::object();
  for (const auto& [type, secs] : by_type(r.run)) types[type] = secs;
  j["seconds_by_type"] = types;
  j["labelled"] = r.labelled;
  if (r.labelled) {
    j["correct"] = r.run.correct;
    j["accuracy_percent"] = accuracy(r.run);
    const Scores& sc = r.scores;
    if (sc.k > 1 && sc.images > 0)
      j["top_k"] = {
          {"k", sc.k},
          {"correct", sc.topk},
          {"accuracy_percent", 100.0 * static_cast<double>(sc.topk) / static_cast<double>(sc.images)}};
    json per = json::array();
    for (int c = 0; c < sc.classes && sc.images > 0; ++c) {
      const int64_t n = sc.per_class_images[static_cast<size_t>(c)],
                    k = sc.per_class_correct[static_cast<size_t>(c)];
      json e = {{"class", c}, {"name", r.class_names[static_cast<size_t>(c)]}, {"images", n}, {"correct", k}};
      if (n) e["accuracy_percent"] = 100.0 * static_cast<double>(k) / static_cast<double>(n);
      per.push_back(e);
    }
    if (sc.images > 0) j["per_class"] = per;
    if (!sc.confusion.empty() && sc.images > 0) {
      json m = json::array();
      for (int l = 0; l < sc.classes; ++l)
        m.push_back(
            std::vector<int64_t>(sc.confusion.begin() + static_cast<std::ptrdiff_t>(l) * sc.classes,
                                 sc.confusion.begin() + static_cast<std::ptrdiff_t>(l + 1) * sc.classes));
      j["confusion_matrix"] = m;  // rows: label, columns: predicted class
    }
  }
  j["pipeline"] = {
      {"wall_s", r.stream.wall_s},
      {"images_per_s", r.stream.wall_s > 0 ? static_cast<double>(r.run.images) / r.stream.wall_s : 0.0},
      {"blocks", r.stream.blocks},
      {"block_images", r.stream.block_images},
      {"decode_s", r.stream.decode_s},
      {"decode_threads", r.stream.decode_threads},
      {"wait_for_decode_s", r.stream.wait_s},
      {"skipped_images", r.stream.skipped}};
  if (r.stream.skipped > 0) j["pipeline"]["first_skipped"] = r.stream.first_skipped;
  if (r.validated) {
    const Validation& v = r.validation;
    json checks = json::array();
    for (const auto& c : v.layers) {
      json e = {{"name", c.name}, {"type", c.type}};
      if (!c.fused_into.empty())
        e["fused_into"] = c.fused_into;
      else
        e.update({{"max_abs", c.max_abs}, {"max_rel", c.max_rel}, {"max_ref", c.max_ref}, {"pass", c.pass}});
      checks.push_back(e);
    }
    j["validation"] = {{"images", v.images},
                       {"tolerance", v.tolerance},
                       {"pass", v.pass},
                       {"first_failure", v.first_failure},
                       {"prediction_mismatches", v.prediction_mismatches},
                       {"layers", checks}};
  }
  // Strings from files that are not valid UTF-8 (a Latin-1 layer name) become U+FFFD instead of
  // failing the report after the whole run.
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace cnnrun
