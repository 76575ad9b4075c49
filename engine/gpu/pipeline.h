// The block pipeline: the batch is cut into blocks sized from cudaMemGetInfo (and the
// --gpu-memory cap); block b runs on stream b % S with that stream's own buffers (a "slot"):
// raw uint8 pixels copied in (from pinned host memory, or device to device with --resident),
// every layer, and only the predictions (and the output values when asked) copied back. Before a
// slot takes its next block the host waits for the slot's previous one, so at most S blocks are
// in flight: copies of one block overlap the compute of the others. Full blocks run as one
// captured CUDA graph per slot.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/executor.h"
#include "engine/gpu/check.h"
#include "engine/gpu/conv2d_cudnn.h"

namespace cnnrun::gpu {

// Images first..first+n-1 of a data set of `count` images, cycled (image i is image i % count), as
// runs of images consecutive in the data set: fn(done, idx, run) for each run, `done` images after
// first, starting at data set image idx.
template <typename Fn>
void for_each_cycled_run(int64_t first, int64_t n, int64_t count, Fn fn) {
  for (int64_t done = 0; done < n;) {
    const int64_t idx = (first + done) % count, run = std::min(n - done, count - idx);
    fn(done, idx, run);
    done += run;
  }
}

constexpr int kDefaultStreams = 3;
constexpr int64_t kDefaultBlock = 4096;     // images; large enough to fill the GPU per layer
constexpr size_t kLtWorkspace = 32u << 20;  // cuBLASLt's recommended workspace on Hopper
constexpr size_t kColBudget = 256u << 20;   // im2col column buffer per stream (at most)
// cuDNN workspace per stream for the algorithm search (at most; and at most 1/16 of the usable
// memory). Large because cuDNN's fast engines for a few input channels (an RGB stem) need it
// (docs/performance.md). Only the searching slot holds it: once the algorithms are chosen every
// slot holds what they need (BlockPipeline::set_cudnn_ws).
constexpr size_t kCudnnWorkspace = size_t{4} << 30;

// One stream and everything a block needs on it.
struct Slot {
  cudaStream_t stream = nullptr;
  int64_t block = 0;
  DevBuf in_u8, pred;
  // --resident, the batch as one block: the block's pixels where they lie in the resident copy,
  // read in place (no copy into in_u8); null: in_u8 holds them.
  const void* in_view = nullptr;
  const void* input() const { return in_view ? in_view : in_u8.get(); }
  std::vector<DevBuf> bufs;   // one per plan buffer, for a full block (views into `arena` when shared)
  std::vector<DevBuf> arena;  // SlotNeeds::share_group: one allocation per group of buffers
  DevBuf col, lt_ws, cudnn_ws;
  PinnedBuf pred_host, probs_host, staging;
  std::unique_ptr<CudnnHandle> cudnn;
  std::vector<cudaEvent_t> ev;
  DevBuf labels;                   // the block's labels (so a captured graph needs no per-block argument)
  cudaGraphExec_t exec = nullptr;  // the block's launches after its H2D copy, for blocks of exec_n
  int64_t exec_n = 0;
  cudaGraphExec_t exec_short = nullptr;  // the same for the short last block of exec_short_n
  int64_t exec_short_n = 0;
  int64_t first = -1, n = 0;  // block in flight (first < 0: none)

  Slot() = default;
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;
  void drop_graph();        // both
  void drop_short_graph();  // the short last block's only
  // The graph for a block of n images (null: none, launch directly).
  cudaGraphExec_t graph_for(int64_t n) const {
    return exec && exec_n == n ? exec : exec_short && exec_short_n == n ? exec_short : nullptr;
  }
  ~Slot();
};

// What the slots must hold, per image and per stream.
struct SlotNeeds {
  int64_t input_bytes = 0;          // one image as the data set holds it (uint8 or float32)
  std::vector<int64_t> buf_floats;  // the plan's buffers, floats per image
  // Empty: every buffer its own allocation. Else each buffer's group and each group's floats per
  // image (share_groups, engine/passes.h): the buffers of a group are never in use at once and
  // share one allocation, as large as the largest of them.
  std::vector<int> share_group;
  std::vector<int64_t> group_floats;
  size_t max_col = 0;                  // the largest im2col column matrix of one image
  bool im2col = false, cudnn = false;  // some conv may run it: its workspace is needed
};

// Records a timing event; inside a stream capture it becomes an event-record node of the graph
// (a plain cudaEventRecord there would only be a capture-internal marker).
void record(cudaEvent_t e, cudaStream_t s);

class BlockPipeline {
 public:
  explicit BlockPipeline(std::string device_name) : device_(std::move(device_name)) {}

  // Slots for `streams` streams and blocks of `block` images (fewer streams when there are fewer
  // blocks, a smaller block when memory is short), within the cap (bytes, 0 = none) less the
  // `reserved` bytes of it already taken (the --resident images). Kept when nothing changed.
  // A cut block is recorded in *facts (may be null).
  void ensure_slots(const SlotNeeds& needs, int streams, int64_t block, int64_t images, int64_t cap,
                    int64_t reserved, GpuRunFacts* facts);
  std::vector<std::unique_ptr<Slot>>& slots() { return slots_; }
  int streams() const { return streams_; }
  int64_t block() const { return block_; }
  // The slots' activation buffers: bytes per image of one slot, and how many allocations hold them.
  int64_t buffer_bytes_per_image() const { return buffer_bytes_; }
  int buffer_allocations() const { return allocations_; }
  void drop_graphs();
  // cuDNN's workspace. ensure_slots sizes the blocks as if every slot held cudnn_ws_max() bytes
  // but gives them only to slot 0, the one auto's search and the warm-up run on.
  // cudnn_ws_for_search: slot 0 at cudnn_ws_max(), the others none (before a search or a
  // warm-up); set_cudnn_ws: every slot `bytes`, at most cudnn_ws_max() (the chosen algorithms'
  // need, after them). Not while blocks are in flight.
  size_t cudnn_ws_max() const { return cudnn_ws_max_; }
  // Counts the times ensure_slots made new slots (from 1): what was set up for slots, by
  // generation rather than by address (new slots may take an old one's address).
  uint64_t generation() const { return generation_; }
  void cudnn_ws_for_search();
  void set_cudnn_ws(size_t bytes);

  // --resident: images 0..count-1 of the data set in device memory, as stored, the data set
  // cycled where count is larger (slots of an earlier run that leave too little room are given
  // back first).
  DevBuf upload_resident(const Dataset& data, int64_t count);
  // Images first..first+n-1 (modulo the count), as stored (uint8 pixels or float32 values), into
  // the slot's input buffer: from
  // host memory (through the slot's pinned staging buffer when `staged`), or device to device
  // from `resident`, which holds images 0..min(batch, count)-1.
  static void copy_in(Slot& s, const Dataset& data, int64_t first, int64_t n, bool staged,
                      const uint8_t* resident = nullptr);
  // enqueue(s) captured once as the slot's CUDA graph for blocks of n images: the full blocks'
  // (replacing both of the slot's graphs) or, with `short_block`, the short last block's.
  static void capture(Slot& s, int64_t n, const std::function<void(Slot&)>& enqueue,
                      bool short_block = false);

 private:
  std::string device_;
  std::vector<std::unique_ptr<Slot>> slots_;
  int streams_ = 0;
  int64_t block_ = 0;
  int64_t cap_ = 0;  // the room under the cap (less the resident images) the slots were sized for
  bool col_ = false, cudnn_ = false;  // the slots have im2col / cuDNN workspaces
  size_t cudnn_ws_max_ = 0;           // the search's cuDNN workspace (the slots' sizing assumed it)
  uint64_t generation_ = 0;
  int64_t input_bytes_ = 0;          // per image of the slots' input buffers
  std::vector<int64_t> buf_floats_;  // the buffers' sizes the slots were made for (the layout's)
  std::vector<int> share_group_;     // and how they shared memory
  int64_t buffer_bytes_ = 0;         // per image, all the buffers' allocations of one slot
  int allocations_ = 0;
};

}  // namespace cnnrun::gpu
