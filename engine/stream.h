// The one loop between a data source and Executor::run. An in-memory source runs as one call
// (so --cycle, --resident and --repeat keep their meaning); a streamed source (an image folder)
// is read block by block, the next block decoded by the source's worker threads while the
// executor runs the current one, so the executor waits only when decoding cannot keep up.
// Each block's results go to `on_block` (scoring, the predictions file) and are then dropped,
// except the predictions (4 bytes an image) and, when opt.want_probs, the output values.
#pragma once

#include <functional>

#include "engine/executor.h"
#include "engine/io/source.h"

namespace cnnrun {

struct StreamStats {
  int64_t blocks = 0, block_images = 0;  // blocks run, images per block
  double wall_s = 0;                     // the whole loop: reading, decoding and running
  double wait_s = 0;                     // executor idle, waiting for a block to be decoded
  double decode_s = 0;                   // decoding, summed over the worker threads
  int decode_threads = 0;
};

// Images per block for a streamed source: about 256 MB of pixels, 64..4096 images.
int64_t stream_block_images(const Shape& shape);

// `block_values`: whether on_block needs the output values (top-k, the predictions file); they
// are computed for every block then, and kept in the result only when opt.want_probs.
using BlockFn = std::function<void(const Dataset& block, int64_t first, const RunResult& r)>;
RunResult run_source(Executor& ex, DataSource& src, const RunOptions& opt, bool block_values,
                     int64_t block_images, const BlockFn& on_block, StreamStats* stats);

}  // namespace cnnrun
