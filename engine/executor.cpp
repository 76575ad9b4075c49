#include "engine/executor.h"

#include <algorithm>
#include <cmath>

#include "engine/core/error.h"
#include "engine/core/memory.h"

namespace cnnrun {

const char* const kGpuOffNames =
    "pool,mean,u8,rows,graph,tc,exact,pack,graphapi,share,concat,stemrows,dwtile,poolcols,prepool,fastact,"
    "dwsmall,dwrows";

bool GpuTuning::operator==(const GpuTuning& o) const {
  return fuse_pool == o.fuse_pool && fuse_mean == o.fuse_mean && fuse_u8 == o.fuse_u8 &&
         row_copies == o.row_copies && graphs == o.graphs && tensor_cores == o.tensor_cores &&
         exact_pixels == o.exact_pixels && pack_low == o.pack_low && cudnn_graph == o.cudnn_graph &&
         graph_first == o.graph_first && stem_bytes_first == o.stem_bytes_first &&
         share_buffers == o.share_buffers && concat_in_place == o.concat_in_place &&
         stem_rows == o.stem_rows && dw_tile == o.dw_tile && pool_cols == o.pool_cols &&
         fuse_prepool == o.fuse_prepool && fast_act == o.fast_act && dw_small == o.dw_small &&
         dw_rows == o.dw_rows && graph_plans == o.graph_plans;
}

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::kNchw:
      return "nchw";
    case Layout::kNhwc:
      return "nhwc";
    case Layout::kAuto:
      break;
  }
  return "auto";
}

std::optional<Layout> parse_layout(const std::string& s) {
  for (Layout l : {Layout::kAuto, Layout::kNchw, Layout::kNhwc})
    if (s == layout_name(l)) return l;
  return std::nullopt;
}

RunResult median_run(std::vector<RunResult> runs, size_t warmup) {
  if (runs.size() <= warmup)
    throw Error("median_run: no runs after the " + std::to_string(warmup) + " warm-up runs");
  std::vector<double> t;
  for (size_t i = warmup; i < runs.size(); ++i) t.push_back(runs[i].forward_seconds);
  std::vector<double> sorted = t;
  std::sort(sorted.begin(), sorted.end());
  const size_t mid = sorted.size() / 2;
  const double median = sorted.size() % 2 ? sorted[mid] : 0.5 * (sorted[mid - 1] + sorted[mid]);
  size_t pick = 0;
  for (size_t i = 1; i < t.size(); ++i)
    if (std::abs(t[i] - median) < std::abs(t[pick] - median)) pick = i;
  const std::optional<double> first_setup =
      runs[0].gpu ? std::optional<double>(runs[0].gpu->setup_seconds) : std::nullopt;
  RunResult r = std::move(runs[warmup + pick]);
  r.forward_seconds = median;
  if (r.gpu && first_setup) r.gpu->setup_seconds = *first_setup;
  return r;
}

GpuTuning parse_gpu_off(const std::string& list) {
  GpuTuning t;
  const std::pair<const char*, bool GpuTuning::*> names[] = {{"pool", &GpuTuning::fuse_pool},
                                                             {"mean", &GpuTuning::fuse_mean},
                                                             {"u8", &GpuTuning::fuse_u8},
                                                             {"rows", &GpuTuning::row_copies},
                                                             {"graph", &GpuTuning::graphs},
                                                             {"tc", &GpuTuning::tensor_cores},
                                                             {"exact", &GpuTuning::exact_pixels},
                                                             {"pack", &GpuTuning::pack_low},
                                                             {"graphapi", &GpuTuning::cudnn_graph},
                                                             {"share", &GpuTuning::share_buffers},
                                                             {"concat", &GpuTuning::concat_in_place},
                                                             {"stemrows", &GpuTuning::stem_rows},
                                                             {"dwtile", &GpuTuning::dw_tile},
                                                             {"poolcols", &GpuTuning::pool_cols},
                                                             {"prepool", &GpuTuning::fuse_prepool},
                                                             {"fastact", &GpuTuning::fast_act},
                                                             {"dwsmall", &GpuTuning::dw_small},
                                                             {"dwrows", &GpuTuning::dw_rows}};
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    const std::string name = list.substr(start, end - start);
    start = end + 1;
    if (name.empty()) continue;
    bool found = false;
    for (const auto& [n, field] : names)
      if (name == n) t.*field = false, found = true;
    if (!found)
      throw Error("unknown GPU optimisation '" + name + "' to turn off; expected names from " + kGpuOffNames);
  }
  return t;
}

void preprocess_images(const Network& net, const uint8_t* pixels, int64_t n, float* out) {
  const int64_t plane = net.input.h * net.input.w;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < net.input.c; ++c) {
      const float s = net.pre.scale[static_cast<size_t>(c)], t = net.pre.shift[static_cast<size_t>(c)];
      const uint8_t* src = pixels + (i * net.input.c + c) * plane;
      float* dst = out + (i * net.input.c + c) * plane;
      for (int64_t k = 0; k < plane; ++k) dst[k] = static_cast<float>(src[k]) * s + t;
    }
}

void network_input(const Network& net, const Dataset& data, int64_t i, float* out) {
  if (data.preprocessed()) {
    const float* v = data.image_values(i);
    std::copy(v, v + data.shape.size(), out);
  } else {
    preprocess_images(net, data.image(i), 1, out);
  }
}

int32_t predicted_class(const float* v, int64_t n) {
  int32_t best = 0;
  for (int32_t k = 1; k < n; ++k)
    if (v[k] > v[best]) best = k;
  return best;
}

void check_ready(const Network& net, const Dataset& data) {
  if (data.shape != net.input)
    throw Error("data set images are " + data.shape.str() + " but network '" + net.name + "' takes " +
                net.input.str());
  if (data.count < 1) throw Error("data set has no images");
  const int64_t values = data.count * data.shape.size();
  if (data.preprocessed() ? static_cast<int64_t>(data.values.size()) < values
                          : static_cast<int64_t>(data.pixels.size()) < values)
    throw Error("data set has " +
                (data.preprocessed() ? std::to_string(data.values.size()) + " values"
                                     : std::to_string(data.pixels.size()) + " pixel bytes") +
                " for " + std::to_string(data.count) + " images of " + data.shape.str());
  if (data.labelled() && static_cast<int64_t>(data.labels.size()) < data.count)
    throw Error("data set has " + std::to_string(data.labels.size()) + " labels for " +
                std::to_string(data.count) + " images");
  for (const auto& l : net.layers) {
    if (!l->has(kCapWeights) || l->folded) continue;
    for (const WeightSpec& ws : l->weight_specs(l->in_shapes)) {
      auto it = l->weights.find(ws.name);
      if (it == l->weights.end())
        throw Error("layer '" + l->name + "': weight '" + ws.name + "' was not loaded");
      if (it->second.dims != ws.dims)
        throw Error("layer '" + l->name + "': weight '" + ws.name + "' is " + it->second.dims_str() +
                    ", expected " + dims_str(ws.dims));
    }
  }
}

int64_t images_to_run(const Dataset& data, const RunOptions& opt) {
  const int64_t batch = opt.batch == 0 ? data.count : opt.batch;
  if (batch < 0) throw Error("batch must be positive, found " + std::to_string(opt.batch));
  if (batch > data.count && !opt.cycle)
    throw Error("batch of " + std::to_string(batch) + " images exceeds the data set's " +
                std::to_string(data.count) + " images (" + data.description +
                "); cycle through the data to run more");
  return batch;
}

BlockShape block_shape(int64_t batch, const RunOptions& opt, int64_t near_block, int streams) {
  BlockShape s;
  s.whole_batch = opt.resident && opt.block <= 0 && opt.streams <= 0;
  s.streams = opt.streams > 0 ? opt.streams : s.whole_batch ? 1 : streams;
  if (batch <= 0) return s;
  if (opt.block > 0) {
    s.block = std::min(opt.block, batch);
  } else if (s.whole_batch) {
    s.block = batch;
  } else {
    const int64_t blocks = (batch + near_block - 1) / near_block;
    s.block = (batch + blocks - 1) / blocks;
  }
  return s;
}

int64_t check_results_fit(int64_t batch, bool want_probs, int64_t out_size, const HostMemory& mem) {
  int64_t bytes = INT64_MAX;
  try {
    bytes = checked_mul(batch, checked_add(4, want_probs ? checked_mul(out_size, 4, "") : 0, ""), "");
  } catch (const Error&) {
  }
  if (bytes > mem.available / 10 * 9)
    throw Error("--batch " + std::to_string(batch) + ": the predictions" +
                (want_probs ? " and output values (" + std::to_string(out_size * 4) + " bytes per image)"
                            : std::string()) +
                " of " + std::to_string(batch) + " images need " +
                (bytes == INT64_MAX ? std::string("more than 2^63 bytes") : bytes_str(bytes)) +
                " of host memory, but there is " + mem.str() + "; run fewer images");
  return bytes;
}

void check_range(const Dataset& data, int64_t first, int64_t n) {
  if (first < 0 || n < 0 || first > data.count || n > data.count - first)
    throw Error("images " + std::to_string(first) + ".." + std::to_string(first + n - 1) +
                " are outside the data set's " + std::to_string(data.count) + " images");
}

}  // namespace cnnrun
