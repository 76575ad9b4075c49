// The block loop; engine/stream.h says why it is shaped so.
#include "engine/stream.h"

#include <algorithm>
#include <future>

#include "engine/core/clock.h"
#include "engine/core/error.h"

namespace cnnrun {

namespace {

// Block results folded into one: the first block's result (what ran, and how) with the later
// blocks' counts, predictions (and values) appended and times summed.
void merge(RunResult& into, RunResult&& r, bool first, bool keep_values) {
  if (first) {
    into = std::move(r);
    if (!keep_values) into.probs.clear();
    return;
  }
  into.images += r.images;
  into.correct += r.correct;
  into.nonfinite_images += r.nonfinite_images;
  into.predictions.insert(into.predictions.end(), r.predictions.begin(), r.predictions.end());
  if (keep_values) into.probs.insert(into.probs.end(), r.probs.begin(), r.probs.end());
  for (size_t i = 0; i < into.layers.size() && i < r.layers.size(); ++i)
    into.layers[i].seconds += r.layers[i].seconds;
  into.forward_seconds += r.forward_seconds;
  into.transfer_seconds += r.transfer_seconds;
}

}  // namespace

int64_t stream_block_images(const Shape& shape) {
  const int64_t per = std::max<int64_t>(1, shape.size());
  return std::clamp<int64_t>((int64_t{256} << 20) / per, 64, 4096);
}

RunResult run_source(Executor& ex, DataSource& src, const RunOptions& opt_in, bool block_values,
                     int64_t block_images, const BlockFn& on_block, StreamStats* stats) {
  StreamStats st;
  const auto t0 = Clock::now();
  RunOptions opt = opt_in;
  opt.want_probs = opt_in.want_probs || block_values;
  if (const Dataset* whole = src.whole()) {
    RunResult r = ex.run(*whole, opt);
    st.blocks = 1;
    st.block_images = whole->count;
    if (on_block) {
      // Cycled runs score the images as run: image i is data set image i % count.
      if (r.images <= whole->count) {
        on_block(*whole, 0, r);
      } else {
        Dataset view;
        view.count = r.images;
        view.shape = whole->shape;
        for (int64_t i = 0; i < r.images && whole->labelled(); ++i)
          view.labels.push_back(whole->labels[static_cast<size_t>(i % whole->count)]);
        for (int64_t i = 0; i < r.images && !whole->paths.empty(); ++i)
          view.paths.push_back(whole->paths[static_cast<size_t>(i % whole->count)]);
        on_block(view, 0, r);
      }
    }
    if (!opt_in.want_probs) r.probs.clear();
    st.wall_s = seconds_since(t0);
    if (stats) *stats = st;
    return r;
  }
  const int64_t total = opt.batch > 0 ? opt.batch : src.count();
  if (total > src.count())
    throw Error("batch of " + std::to_string(total) + " images exceeds the " + std::to_string(src.count()) +
                " images of " + src.description() + " (a streamed source is not cycled)");
  if (opt.cycle) throw Error("--cycle needs a data set in memory; " + src.description() + " is streamed");
  if (opt.resident)
    throw Error("--resident needs a data set in memory; " + src.description() + " is streamed");
  const int64_t block = std::max<int64_t>(1, std::min(block_images, total));
  st.block_images = block;
  RunResult out;
  Dataset cur, next;
  src.read(0, std::min(block, total), cur);
  const auto progress = opt.progress;
  // pos: the source's images read so far; first: the images run so far (fewer when a source
  // skips unreadable images).
  int64_t first = 0;
  for (int64_t pos = 0; pos < total;) {
    const int64_t n = cur.count;
    const int64_t after = pos + std::min(block, total - pos);
    std::future<void> ahead;
    if (after < total)  // the next block decodes while this one runs
      ahead = std::async(std::launch::async, [&src, &next, after, block, total] {
        src.read(after, std::min(block, total - after), next);
      });
    RunOptions o = opt;
    o.batch = n;
    o.warm_up = st.blocks == 0;
    if (progress)
      o.progress = [&progress, pos, total](int64_t done, int64_t) { progress(pos + done, total); };
    if (n > 0) {  // a block of nothing but skipped images runs nothing
      RunResult r;
      try {
        r = ex.run(cur, o);
        if (on_block) on_block(cur, first, r);
      } catch (...) {
        if (ahead.valid()) ahead.wait();
        throw;
      }
      merge(out, std::move(r), st.blocks == 0, opt_in.want_probs);
      ++st.blocks;
    }
    if (ahead.valid()) {
      const auto w = Clock::now();
      ahead.get();  // rethrows a decoding error, naming the file
      st.wait_s += seconds_since(w);
      std::swap(cur, next);
    }
    first += n;
    pos = after;
  }
  if (out.images == 0)
    throw Error("no image of " + src.description() + " could be read; the first: " + src.first_skipped());
  st.wall_s = seconds_since(t0);
  st.decode_s = src.decode_seconds();
  st.decode_threads = src.decode_threads();
  st.skipped = src.skipped();
  st.first_skipped = src.first_skipped();
  if (stats) *stats = st;
  return out;
}

}  // namespace cnnrun
