// The run report: the thesis program's report grown up (load times, per-layer forward times
// and totals per layer type, the conv algorithm per layer, throughput, accuracy, validation),
// as text for people and as one JSON document for scripts.
#pragma once

#include <string>
#include <vector>

#include "engine/executor.h"
#include "engine/scoring.h"
#include "engine/stream.h"
#include "engine/validate.h"

namespace cnnrun {

// One rank of an MPI run (mpirun -np N cnnrun ...): its part and its times.
struct RankFacts {
  int rank = 0;
  std::string host, engine;  // engine: RunResult::engine ("gpu (NVIDIA H100 ...)"), device included
  int device = -1;           // the CUDA device it ran on, -1 for the CPU
  int64_t first = 0, images = 0;
  double forward_s = 0, wall_s = 0;  // its forward time, and its whole run (data to predictions)
};

struct Report {
  std::string version;
  std::string commit;  // the source commit the binary was built from ("...-dirty", "unknown")
  std::string netdef, net_name;
  std::string data_description, weights_description;
  std::string cpu_fallback;             // why --engine auto ran the CPU ("" = it did not fall back)
  std::vector<std::string> rewrites;    // what loading changed in the graph (Network::rewrites)
  bool validated_by_itself = false;     // --validate with the CPU engine
  int64_t validated_stream_images = 0;  // --validate on a streamed data set: its first N images only
  std::vector<double> repeat_seconds;  // --repeat: every run's forward time (run.forward_seconds: the median)
  std::vector<double> warmup_seconds;  // --warmup: the runs before those, not in the median
  // GPU runs: each of those runs' GPU busy time (GpuRunFacts::busy_seconds), in the same order;
  // beside the forward time it tells GPU time from host time (a slow first run: which one).
  std::vector<double> repeat_busy_seconds, warmup_busy_seconds;
  double load_data_s = 0, build_net_s = 0, load_weights_s = 0, total_s = 0;
  int64_t distinct_images = 0;  // < images when cycling
  // The multiply-adds an image of the netdef as written (multiply_adds before load_weights'
  // rewrites): the report's arithmetic rate, 2 x this x images / forward time (0: not printed).
  int64_t multiply_adds = 0;
  bool labelled = true;  // false: the data set has no labels, so no accuracy
  Scores scores;         // top-k, per class, confusion (labelled runs)
  std::vector<std::string> class_names;
  StreamStats stream;  // the loop from the data source to the executor
  RunResult run;
  bool validated = false;
  Validation validation;
  // An MPI run: every rank in rank order (empty for one process). run.forward_seconds is then
  // the slowest rank's, run.layers that rank's, and the throughput the aggregate.
  std::vector<RankFacts> ranks;
};

std::string report_text(const Report& r);
// The report's notes, one sentence each, in the order the text prints them ("Note: ...") and the
// JSON lists them: the CLI's, then the executor's facts (RunResult::cpu / gpu) worded.
std::vector<std::string> report_notes(const Report& r);
// One conv's search as the report words it ("gpu: auto conv1 (4096 images): implicit 1.234 ms;
// ... -> implicit"); without a choice it ends after the candidates.
std::string tuning_note(const ConvTuning& t);
std::string report_json(const Report& r);  // pretty-printed JSON document

// Environment facts for the JSON report: host name, CPU model, cores.
std::string cpu_model();

}  // namespace cnnrun
