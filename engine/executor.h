// The executor interface: the CPU reference (reference/) and the GPU executor (engine/gpu/)
// both implement it, and the CLI, validation and tests only see this.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/conv_algo.h"
#include "engine/core/precision.h"
#include "engine/core/tensor.h"
#include "engine/io/dataset.h"
#include "engine/network.h"

namespace cnnrun {

// GPU: optimisations that can be turned off one by one, to measure what each gains (A/B
// benches); all on by default, and every combination computes the same network. The CLI fills
// it once, from --gpu-off LIST (or CNNRUN_GPU_OFF); the library reads no environment for it.
struct GpuTuning {
  bool fuse_pool = true;     // pool: the implicit or stem kernel computes the pool after it
  bool fuse_mean = true;     // mean: the depthwise kernel computes the whole-plane average pool of its output
  bool fuse_u8 = true;       // u8: the first conv reads the uint8 pixels (no preprocess pass)
  bool row_copies = true;    // rows: the implicit kernel stages whole input rows, 16 bytes at a time
  bool graphs = true;        // graph: each full block after its copy is one CUDA graph launch
  bool tensor_cores = true;  // tc: the tensor-core kernel where it can run (else FFMAs)
  bool exact_pixels = true;  // exact: FP32 conv1 on exact pixels with FP16 products of 2-part weights (the
                             // implicit kernel's u8_exact, the stem reading the bytes in FP32 storage)
  bool pack_low = true;      // pack: 3xTF32's last n-tile carries its low parts in spare columns
  bool cudnn_graph = true;   // graphapi: channels last, cuDNN's graph API is timed against its legacy API
  // Not a --gpu-off name (tests): the graph API's engine wherever it runs, untimed.
  bool graph_first = false;
  // Not a --gpu-off name (tests): the stem reads the uint8 pixels wherever it can, untimed (else
  // the setup times the bytes against the floats plus the preprocess pass and keeps the faster).
  bool stem_bytes_first = false;
  bool share_buffers = true;    // share: run() lets buffers never in use at the same step share memory
                                // (engine/gpu/plan.h, share_groups)
  bool concat_in_place = true;  // concat: channels last, a conv read only by a concat writes its output
                                // at its channel offset in the concat's buffer (Step::concat_step)
  bool stem_rows = true;        // stemrows: a stem of 3 channels, 3x3 or 7x7 at stride 2 (floats or bytes) or
                                // 3x3 at stride 1 (16-bit), reads A's fragments from rows of its patch
                                // (ldmatrix; engine/gpu/conv2d_stem.h: stem_runs_rows), not through tables
  bool dw_tile = true;          // dwtile: channels last, the depthwise conv stages tiles of its input in
                                // shared memory where depthwise_nhwc_tile says so (else its strip and
                                // vector kernels, and the whole-plane mean only where they have it)
  bool pool_cols = true;        // poolcols: channels last at FP32 storage, the 3x3 stride-1 max-pool computes
                                // two output columns a thread (engine/gpu/nhwc.h: pool_row_cols), else one
  bool fuse_prepool = true;     // prepool: channels last, the conv1x1 kernel takes the max-pool before it
                                // (the pool's only reader) as it stages its input (Step::prepool_layer)
  bool dw_small = true;         // dwsmall: the depthwise tile kernel runs a tile of few strips (7x7
                                // maps) in blocks of 128 threads where more of them fit an SM
  bool dw_rows = true;          // dwrows: the depthwise tile kernel computes two output rows a lane where
                                // depthwise_nhwc_tile allows it (16-bit storage, 3x3 windows of stride 1)
  bool fast_act = true;         // fastact: at tf32 our kernels' SiLU and sigmoid take the approximate
                                // exponential and reciprocal in FP32 storage too (ActFn::fast)
  // --cudnn-plans: how many of cuDNN's heuristic candidates the graph API's search builds and
  // times a conv. Each build compiles a kernel (NVRTC, 0.2-0.9 s), which dominates the setup; on
  // ResNet-18 and GoogLeNet the first two gave the forward times of the first four within noise,
  // at about 60 % of the setup (docs/performance.md, Session 10).
  int graph_plans = 2;
  bool operator==(const GpuTuning& o) const;
  bool operator!=(const GpuTuning& o) const { return !(*this == o); }
};
// The names --gpu-off takes, comma-separated:
// "pool,mean,u8,rows,graph,tc,exact,pack,graphapi,share,concat,stemrows,dwtile,poolcols,prepool,fastact,dwsmall,
// dwrows".
extern const char* const kGpuOffNames;
// All on but the comma-separated names in `list` ("" = all on). Throws Error naming an unknown
// name and the known ones.
GpuTuning parse_gpu_off(const std::string& list);

// GPU: how the activations between layers are stored (--layout).
// - kNchw: FP32 N x C x H x W; every convolution algorithm (implicit, im2col, cudnn, depthwise).
// - kNhwc: channels last (N x H x W x C) in the precision's storage format (FP16 for fp16, BF16
//   for bf16, else FP32), every convolution through cuDNN, where tensor cores read it directly,
//   at fp32 through CUTLASS's 3xTF32 kernels (cutlass) where auto times them faster or they are
//   pinned, and a depthwise one through the channels-last depthwise kernel where auto times it
//   faster or it is pinned; fully-connected layers and softmax read FP32 NCHW copies
//   (engine/gpu/plan.h, NhwcLayout).
// - kAuto (measured on the model zoo, H100, docs/performance.md): kNhwc at every precision when
//   the network can run it and some conv the implicit kernel does not fuse with a 2x2 max-pool
//   reads 32 channels or more; but kNchw at fp32 in a build without CUTLASS, whenever
//   --conv-algo names implicit, im2col or depthwise (cutlass: kNhwc always), or a netdef pins
//   implicit or im2col.
enum class Layout { kAuto, kNchw, kNhwc };
const char* layout_name(Layout l);  // "auto", "nchw", "nhwc"
std::optional<Layout> parse_layout(const std::string& s);

struct RunOptions {
  int64_t batch = 0;  // images to run: dataset images 0..batch-1, modulo count when cycling
  bool cycle = false;
  bool want_probs = false;               // keep the output layer's values for every image
  int64_t block = 0;                     // images per block (0 = executor's choice)
  int streams = 0;                       // GPU streams (0 = executor's choice)
  ConvAlgo conv_algo = ConvAlgo::kAuto;  // GPU: every conv's algorithm (kAuto: the netdef's, else auto)
  int threads = 0;                       // CPU threads (0 = hardware concurrency)
  // GPU: the operands' format the convolutions and fully-connected layers may round to
  // (engine/core/precision.h); the CPU executor computes in FP32 and rejects anything else.
  Precision precision = Precision::kFp32;
  Layout layout = Layout::kAuto;  // GPU: see Layout
  // GPU: upload the images the run reads (0..min(batch, count)-1) to device memory before the
  // clock, so that the forward time has no host-to-device copy in it; the predictions (and the
  // output values, with want_probs) still come back to host memory. The CPU executor rejects it.
  bool resident = false;
  // GPU: at most this many bytes for the per-stream image buffers and workspaces (0 = no cap:
  // what is free); blocks are cut to fit it.
  int64_t gpu_memory = 0;
  // GPU: at most this many bytes of page-locked host memory for the streams' buffers (the
  // predictions, the output values, a block's images where they cannot be page-locked in place;
  // 0 = half of what host_memory() says is available); blocks are cut to fit it.
  int64_t pinned_memory = 0;
  GpuTuning tuning;  // GPU: optimisations on (all) or off, to measure them
  // GPU: run the first block once before the clock (kernel loading, library plans, the conv
  // search). run_source turns it off for a streamed data set's later blocks; the executor still
  // warms up when its slots or block size changed or a search is pending.
  bool warm_up = true;
  // Called now and then with images done so far (for a progress bar); may be empty.
  std::function<void(int64_t done, int64_t total)> progress;
};

struct LayerTime {
  std::string name, type, algo;  // algo: what ran ("im2col+gemm", "cudnn:IMPLICIT_PRECOMP_GEMM", "")
  double seconds = 0;            // summed over all blocks
};

// Facts the executors hand the report about how a run went. Executors fill fields; only
// engine/report.cpp turns them into sentences ("Note: ..." lines and the JSON's notes).

// An executor's activation buffers: bytes per image of one worker's (CPU thread's, GPU stream's)
// allocations, and how many buffers those allocations hold (fewer allocations: buffers never in
// use at once share one).
struct BufferFacts {
  int64_t bytes_per_image = 0;
  int count = 0, allocations = 0;
};

struct CpuRunFacts {
  int64_t block = 0;        // images per block
  std::string simd;         // Eigen's SIMD instruction sets in use
  int threads = 0;          // worker threads the run asked for
  int threads_started = 0;  // the ones that could start (fewer: a thread or memory limit)
  // Cut to fit host memory: the block and thread count before the cut (0: no cut), what
  // host_memory() found (HostMemory::str()) and the bytes one image needs.
  int64_t memory_cut_block_from = 0;
  int memory_cut_threads_from = 0;
  std::string host_memory;
  int64_t bytes_per_image = 0;
  BufferFacts buffers;  // a worker's layer outputs
};

// auto's search for one conv: each algorithm's best time or why it could not run.
struct ConvTuning {
  std::string layer;
  int64_t images = 0;  // the block size it was timed on
  struct Candidate {
    std::string algo;
    enum class Outcome { kTimed, kNotApplicable, kFailed } outcome = Outcome::kTimed;
    double ms = 0;      // kTimed: the fastest of the repeats
    std::string note;   // kTimed: how the algorithm chose within itself (may be empty)
    std::string error;  // kFailed: what the library said
  };
  std::vector<Candidate> candidates;  // in the order tried
  std::string chosen;
  bool earlier = false;  // searched by an earlier run (same block size), reused by this one
};

struct GpuRunFacts {
  bool float_input = false;        // the images were float32 values (a float .npy), not uint8 pixels
  bool resident = false;           // the pixels were on the GPU before the clock
  int64_t resident_images = 0;     // ... the images uploaded (the batch, or the data set's distinct ones)
  int64_t resident_distinct = 0;   // ... the data set's distinct images among them
  int64_t resident_bytes = 0;      // ... and their bytes
  bool pixels_in_place = false;    // ... read where they lie by the one block (no device-to-device copy)
  int64_t probs_bytes = 0;         // per image, when the output values came back (want_probs)
  int64_t block_cut_from = 0;      // > 0: the block asked for, cut to `block` to fit memory
  bool whole_batch = false;        // --resident, no --block or --streams: one block, one stream
  int64_t host_cut_from = 0;       // > 0: the block asked for, cut to fit the host memory the
                                   // slots pin (predictions, output values, pixel staging)
  int64_t host_pinned_bytes = 0;   // ... what the cut block's slots may pin at most
  std::string host_limited_by;     // ... host_memory()'s limit ("MemAvailable", ...)
  int64_t cudnn_cut_from = 0;      // > 0: the block asked for, cut so that every tensor a cuDNN
  std::string cudnn_cut_layer;     // convolution reads or writes holds < 2^31 values (this layer's)
  int64_t cap_bytes = 0;           // > 0 with a cut: what --gpu-memory left for the slots
  int64_t cap_total_bytes = 0;     // ... of this whole cap (more when resident images took some)
  std::vector<ConvTuning> tuning;  // auto's searches, in layer order
  enum class Graphs { kOff, kCaptured, kCaptureFailed } graphs = Graphs::kOff;
  std::string graph_error;        // kCaptureFailed: why
  int64_t short_graph = 0;        // > 0: the short last block's images, run as its own graph
  std::string short_graph_error;  // kCaptured, a short last block launched directly: why
  int64_t block = 0;              // images per full block
  int64_t blocks = 0;
  BufferFacts buffers;                 // a slot's activation buffers (GpuTuning::share_buffers: shared)
  int64_t cudnn_workspace_bytes = -1;  // each stream's cuDNN workspace as run (-1: no cuDNN)
  int64_t cudnn_search_workspace_bytes = -1;  // ... and the one slot's while auto searched
  int streams = 0;
  std::string cudnn_version;
  enum class Pixels { kResident, kRegistered, kStaged, kPinned } pixels = Pixels::kPinned;
  double setup_seconds = 0;  // weights, workspaces, search, page-locking: not in the forward time
  double preprocess_seconds = 0, argmax_seconds = 0, h2d_seconds = 0, d2h_seconds = 0;
  // The first conv read the uint8 pixels itself (its layer's name): no preprocess pass ran
  // (preprocess_seconds is then the interval between two events with nothing between).
  std::string input_fused_into;
  // Where the setup timed the stem reading the uint8 pixels against reading the floats after the
  // preprocess pass (auto's search, or a pinned stem): the stem's layer (empty: not timed), which
  // input it reads, both times.
  struct StemInput {
    std::string layer;
    bool bytes = false;
    double bytes_seconds = 0, floats_seconds = 0;
  } stem_input;
  double layer_sum_seconds = 0;  // the per-layer times summed
  double busy_seconds = 0;       // the GPU busy with compute (union of the blocks' intervals)
  double wall_seconds = 0;       // this run's forward time (the report's may be a median of runs)
};

struct RunResult {
  std::string engine;  // "cpu (eigen, 2 threads)", "gpu (NVIDIA H100 ...)"
  int64_t images = 0;
  int64_t correct = 0;
  int64_t nonfinite_images = 0;            // images whose output holds a NaN or an infinity
  std::vector<int32_t> predictions;        // one per image
  std::vector<float> probs;                // images x output size, when asked
  std::vector<LayerTime> layers;           // in execution order
  double forward_seconds = 0;              // wall time of the forward pass over all images
  double transfer_seconds = 0;             // GPU: host<->device copies not hidden behind compute
  Precision precision = Precision::kFp32;  // what the run allowed (each layer's algo says what ran)
  // Which executor ran and how (at most one is set).
  std::optional<CpuRunFacts> cpu;
  std::optional<GpuRunFacts> gpu;
};

// The runs of --warmup and --repeat (the first did the executor's one-time work: weights,
// algorithm search) as one: of the runs after the first `warmup` (at least one), the run whose
// forward time is nearest their median, with that median as its forward_seconds and, on the GPU,
// the first run's setup_seconds (the later runs' setups only check what the first made).
RunResult median_run(std::vector<RunResult> runs, size_t warmup = 0);

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string name() const = 0;
  // Runs opt.batch images of `data`, counting correct predictions against its labels (none
  // without labels).
  virtual RunResult run(const Dataset& data, const RunOptions& opt) = 0;
  // Every layer's output (index = layer index, [n, C, H, W]) for images first..first+n-1, run
  // as `opt` says (its conv_algo, precision, gpu_memory and tuning; batch, block, streams and
  // the like are ignored); the network input after preprocessing is not included.
  virtual std::vector<Tensor> forward_layers(const Dataset& data, int64_t first, int64_t n,
                                             const RunOptions& opt) = 0;
  // Non-empty when layer `index`'s output is never materialised by forward_layers(opt) because
  // its consumer's kernel computes it (conv fused with the following relu): forward_layers then
  // returns an empty tensor for it, and validation checks it through the named consumer. Where
  // that depends on auto's pick, the answer holds once forward_layers(opt) or run(opt) made it.
  virtual std::string fused_into(int /*index*/, const RunOptions& /*opt*/) const { return ""; }
};

// Preprocesses n images into NCHW floats (the definition every executor must match).
void preprocess_images(const Network& net, const uint8_t* pixels, int64_t n, float* out);
// Image i of the data set as the network's input: its bytes preprocessed, or its float values
// as given when the data set holds preprocessed values (a float32 .npy).
void network_input(const Network& net, const Dataset& data, int64_t i, float* out);

// The predicted class of one image's output values: the index of the first maximum (ties go
// to the lower class), the rule every executor's predictions follow.
int32_t predicted_class(const float* v, int64_t n);

// The checks every executor makes before it runs: the data set fits the network (image shape,
// pixel and label counts; labels may be absent) and every weight is loaded with its expected shape.
void check_ready(const Network& net, const Dataset& data);
// The number of images a run covers (opt.batch, 0 = the whole data set), checked against the
// data set's size and opt.cycle.
int64_t images_to_run(const Dataset& data, const RunOptions& opt);

// The GPU pipeline's block and streams: RunOptions::block and ::streams where given (> 0). Left
// to the executor (0): with the pixels resident on the GPU no copy needs a second stream to hide
// it, so the whole batch is one block on one stream (cut later where the GPU memory or cuDNN's
// 2^31-value tensors require); otherwise blocks near `near_block` images, equal but the last, on
// `streams` streams, so that each block's copies overlap the others' compute. The block is at
// most the batch.
struct BlockShape {
  int64_t block = 0;
  int streams = 0;
  bool whole_batch = false;  // the resident rule chose it: one block of the batch, one stream
};
BlockShape block_shape(int64_t batch, const RunOptions& opt, int64_t near_block, int streams);
// The host memory a run's results take (4 bytes of prediction per image, and the output values
// with want_probs), checked against `mem` (host_memory()) before anything is allocated: a
// --batch of 2^62 cycled images is an error that says so, not a failed allocation. Returns the
// bytes.
struct HostMemory;
int64_t check_results_fit(int64_t batch, bool want_probs, int64_t out_size, const HostMemory& mem);
// Throws unless images first..first+n-1 lie inside the data set (forward_layers does not cycle).
void check_range(const Dataset& data, int64_t first, int64_t n);

}  // namespace cnnrun
