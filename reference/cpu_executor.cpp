// The CPU reference executor. Images are cut into fixed blocks (image k*block .. k*block+block-1),
// and worker threads take the next unclaimed block and run it through every layer with their
// own buffers. Block boundaries do not depend on the number of threads, so every image's result
// is bit-identical for any thread count. Eigen runs single-threaded inside each worker (the
// build does not enable its OpenMP): parallelism over images needs no synchronisation and keeps
// each thread's working set in its own cache.
#include "reference/cpu_executor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>

#include "engine/core/clock.h"
#include "engine/core/memory.h"
#include "engine/passes.h"
#include "reference/cpu_layers.h"

namespace cnnrun {

namespace ref {

ForwardFn forward_fn(const Layer& l) {
#define CNNRUN_CPU_FORWARD(kind, name, Class, args, cpu, gpu) &cpu,
  static constexpr ForwardFn kTable[kLayerKinds] = {CNNRUN_LAYER_TYPES(CNNRUN_CPU_FORWARD)};
#undef CNNRUN_CPU_FORWARD
  return kTable[index_of(l.kind)];
}

}  // namespace ref

namespace {

// Images per block: large enough that the fc GEMM and the per-block bookkeeping amortise, small
// enough that a thread's activations for one block stay in a few MB.
constexpr int64_t kDefaultBlock = 64;

// Each layer's output buffer: its own (forward_layers reads them all after the block), or, for
// run(), shared with the layers whose outputs are never in use at the same time
// (layer_lifetimes, share_groups): only the network output is read after the block.
struct BufferPlan {
  std::vector<int> group;       // per layer; -1: an identity layer, which owns nothing
  std::vector<int64_t> floats;  // per group, per image: its largest member
  int buffers = 0;              // layers that own an output (not identities)
  BufferPlan(const Network& net, bool share) {
    const size_t L = net.layers.size();
    std::vector<int64_t> sizes(L, 0);
    for (size_t i = 0; i < L; ++i)
      if (!runs_as_identity(*net.layers[i])) sizes[i] = net.layers[i]->out_shape.size();
    if (share) {
      group = share_groups(layer_lifetimes(net), sizes, &floats);
    } else {
      group.assign(L, -1);
      for (size_t i = 0; i < L; ++i)
        if (!runs_as_identity(*net.layers[i])) {
          group[i] = static_cast<int>(floats.size());
          floats.push_back(sizes[i]);
        }
    }
    for (int g : group) buffers += g >= 0;
  }
  int64_t per_image() const {
    int64_t t = 0;
    for (int64_t f : floats) t += f;
    return t;
  }
};

// One worker's state: the layers' output buffers sized for a full block (BufferPlan), the
// preprocessed input, and the time spent in each layer.
struct BlockRunner {
  const Network& net;
  const std::vector<ref::ForwardFn>& fns;
  std::vector<float> input;
  std::vector<std::vector<float>> storage;  // per BufferPlan group
  std::vector<float*> bufs;                 // per layer (null: an identity)
  std::vector<const float*> outs;
  std::vector<double> seconds;
  ref::Workspace ws;

  BlockRunner(const Network& n, const std::vector<ref::ForwardFn>& f, int64_t block, const BufferPlan& plan)
      : net(n), fns(f) {
    input.resize(static_cast<size_t>(block * net.input.size()));
    storage.resize(plan.floats.size());
    for (size_t g = 0; g < storage.size(); ++g)
      storage[g].resize(static_cast<size_t>(block * plan.floats[g]));
    bufs.assign(net.layers.size(), nullptr);
    for (size_t i = 0; i < net.layers.size(); ++i)
      if (plan.group[i] >= 0) bufs[i] = storage[static_cast<size_t>(plan.group[i])].data();
    outs.resize(net.layers.size());
    seconds.assign(net.layers.size(), 0.0);
  }

  // Preprocesses images first..first+n-1 (modulo the data set's count) and runs every layer.
  void run(const Dataset& data, int64_t first, int64_t n) {
    const int64_t in_size = net.input.size();
    for (int64_t i = 0; i < n; ++i)
      network_input(net, data, (first + i) % data.count, input.data() + i * in_size);
    std::vector<const float*> ins;
    for (size_t li = 0; li < net.layers.size(); ++li) {
      const Layer& l = *net.layers[li];
      ins.clear();
      for (int j : l.inputs) ins.push_back(j < 0 ? input.data() : outs[static_cast<size_t>(j)]);
      if (runs_as_identity(l)) {
        outs[li] = ins[0];
        continue;
      }
      auto t0 = Clock::now();
      fns[li](l, ins, n, bufs[li], ws);
      seconds[li] += seconds_since(t0);
      outs[li] = bufs[li];
    }
  }
};

class CpuExecutor : public Executor {
 public:
  explicit CpuExecutor(const Network& net) : net_(net) {
    for (const auto& l : net_.layers) fns_.push_back(ref::forward_fn(*l));
  }

  std::string name() const override { return "cpu"; }

  RunResult run(const Dataset& data, const RunOptions& opt) override {
    check_ready(net_, data);
    const int64_t batch = images_to_run(data, opt);
    if (opt.resident) throw Error("--resident needs --engine gpu: the CPU executor has no device memory");
    check_fp32(opt);

    // A block larger than the run is the run: no image count or block count may overflow.
    int64_t block = std::min(opt.block > 0 ? opt.block : kDefaultBlock, batch);
    int threads = thread_count(opt.threads, batch, block);
    const Layer& out_layer = *net_.layers[static_cast<size_t>(net_.output)];
    const int64_t out_size = out_layer.out_shape.size();

    RunResult r;
    // The results first (they live for the whole run), then what is left for the workers.
    const HostMemory mem = host_memory();
    const int64_t usable = mem.available / 10 * 9;  // Eigen's GEMM blocking and the heap take some
    const int64_t results = check_results_fit(batch, opt.want_probs, out_size, mem);
    CpuRunFacts facts;
    const BufferPlan buffers(net_, true);  // only the output is read after a block
    fit_memory(usable - results, mem, buffers, &block, &threads, &facts);
    r.images = batch;
    r.predictions.assign(static_cast<size_t>(batch), 0);
    if (opt.want_probs) r.probs.assign(static_cast<size_t>(batch * out_size), 0.f);
    std::atomic<int64_t> correct{0}, nonfinite{0};

    auto t0 = Clock::now();
    std::vector<double> seconds =
        for_blocks(data, 0, batch, block, threads, buffers, opt.progress,
                   [&](BlockRunner& br, int64_t first, int64_t n) {
                     const float* y = br.outs[static_cast<size_t>(net_.output)];
                     int64_t good = 0, bad = 0;
                     for (int64_t i = 0; i < n; ++i) {
                       const float* v = y + i * out_size;
                       const int32_t best = predicted_class(v, out_size);
                       bad += !std::all_of(v, v + out_size, [](float x) { return std::isfinite(x); });
                       const int64_t img = first + i;
                       r.predictions[static_cast<size_t>(img)] = best;
                       if (data.labelled() && best == data.labels[static_cast<size_t>(img % data.count)])
                         ++good;
                       if (opt.want_probs) std::copy(v, v + out_size, r.probs.begin() + img * out_size);
                     }
                     correct += good;
                     nonfinite += bad;
                   });
    r.forward_seconds = seconds_since(t0);
    r.correct = correct.load();
    r.nonfinite_images = nonfinite.load();

    r.engine = std::string("cpu (eigen ") + std::to_string(EIGEN_WORLD_VERSION) + "." +
               std::to_string(EIGEN_MAJOR_VERSION) + ", " + std::to_string(started_) +
               (started_ == 1 ? " thread)" : " threads)");
    facts.block = block;
    facts.buffers = {buffers.per_image() * 4, buffers.buffers, static_cast<int>(buffers.floats.size())};
    facts.simd = Eigen::SimdInstructionSetsInUse();
    facts.threads = threads;
    facts.threads_started = started_;
    r.cpu = facts;
    for (size_t i = 0; i < net_.layers.size(); ++i) {
      const Layer& l = *net_.layers[i];
      LayerTime t;
      t.name = l.name;
      t.type = l.type;
      if (runs_as_identity(l))
        t.algo = "identity";
      else if (l.kind == LayerKind::kConv)
        t.algo = ref::conv_algo(l);
      else if (l.kind == LayerKind::kFc)
        t.algo = "gemm";
      t.seconds = seconds[i];
      r.layers.push_back(t);
    }
    return r;
  }

  std::vector<Tensor> forward_layers(const Dataset& data, int64_t first, int64_t n,
                                     const RunOptions& opt) override {
    check_ready(net_, data);
    check_range(data, first, n);
    check_fp32(opt);
    std::vector<Tensor> outs;
    for (const auto& l : net_.layers)
      outs.emplace_back(std::vector<int64_t>{n, l->out_shape.c, l->out_shape.h, l->out_shape.w});
    const int threads = thread_count(0, n, kDefaultBlock);
    const BufferPlan own(net_, false);  // every layer's output is read after each block
    for_blocks(
        data, first, n, kDefaultBlock, threads, own, nullptr, [&](BlockRunner& br, int64_t start, int64_t m) {
          for (size_t i = 0; i < outs.size(); ++i) {
            const int64_t size = net_.layers[i]->out_shape.size();
            std::copy(br.outs[i], br.outs[i] + m * size, outs[i].data.begin() + (start - first) * size);
          }
        });
    return outs;
  }

 private:
  const Network& net_;
  std::vector<ref::ForwardFn> fns_;
  int started_ = 0;  // threads the last for_blocks ran on

  // Host memory of one worker (BlockRunner) for `block` images.
  struct WorkerBytes {
    int64_t per_image = 0, workspace = 0;
    std::string largest;  // the layer (or "input") whose output is largest per image
    int64_t largest_bytes = 0;
    int64_t total(int64_t block) const { return block * per_image + workspace; }
  };
  WorkerBytes worker_bytes(const BufferPlan& buffers) const {
    WorkerBytes w;
    w.per_image = net_.input.size() * 4 + buffers.per_image() * 4;
    w.largest = "input";
    w.largest_bytes = net_.input.size() * 4;
    for (const auto& l : net_.layers) {
      if (runs_as_identity(*l)) continue;
      const int64_t b = l->out_shape.size() * 4;
      if (b > w.largest_bytes) w.largest = "layer '" + l->name + "' (" + l->type + ")", w.largest_bytes = b;
      if (l->kind == LayerKind::kConv)
        w.workspace = std::max(w.workspace, ref::conv_workspace_floats(*l) * 4);
    }
    return w;
  }

  // Cuts the block (then the threads) until every worker's buffers fit in `budget` bytes; fails
  // at once, naming the largest layer, when one image on one thread does not fit. A run too big
  // for memory is an error here, not a kill by the OOM killer 40 s later.
  // (budget: 90 % of what host_memory() found, less the results.)
  void fit_memory(int64_t budget, const HostMemory& mem, const BufferPlan& buffers, int64_t* block,
                  int* threads, CpuRunFacts* facts) const {
    const WorkerBytes w = worker_bytes(buffers);
    const int64_t block0 = *block;
    const int threads0 = *threads;
    auto fits = [&](int64_t b, int t) {
      return w.total(b) <= budget / t;  // w.total cannot overflow: sizes are checked at load
    };
    if (fits(*block, *threads)) return;
    if (!fits(1, 1))
      throw Error("host memory: one image needs " + bytes_str(w.per_image) +
                  " for its layer outputs (the largest, " + w.largest + ", " + bytes_str(w.largest_bytes) +
                  ")" + (w.workspace ? " plus " + bytes_str(w.workspace) + " of convolution workspace" : "") +
                  ", but only " + (budget > 0 ? bytes_str(budget) : std::string("0 bytes")) +
                  " of the host memory (" + mem.str() + ") can be used");
    while (*threads > 1 && !fits(1, *threads)) --*threads;
    const int64_t b = (budget / *threads - w.workspace) / w.per_image;
    *block = std::max<int64_t>(1, std::min(*block, b));
    facts->memory_cut_block_from = block0;
    facts->memory_cut_threads_from = threads0;
    facts->host_memory = mem.str();
    facts->bytes_per_image = w.per_image;
  }

  static void check_fp32(const RunOptions& opt) {
    if (opt.precision != Precision::kFp32)
      throw Error(std::string("--precision ") + precision_name(opt.precision) +
                  " needs --engine gpu: the CPU reference computes in FP32");
    if (opt.layout == Layout::kNhwc)
      throw Error("--layout nhwc needs --engine gpu: the CPU reference is FP32 NCHW");
  }

  static int thread_count(int asked, int64_t images, int64_t block) {
    int t = asked > 0 ? asked : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int64_t blocks = images / block + (images % block != 0);
    return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(t, blocks)));
  }

  // Runs images first..first+count-1 in blocks of `block` (block k starts at first + k*block)
  // on `threads` workers, each with the layers' buffers as `buffers` says; `done(runner, start,
  // n)` sees each block's outputs before the worker moves on. Returns the per-layer seconds
  // summed over all blocks.
  template <class Done>
  std::vector<double> for_blocks(const Dataset& data, int64_t first, int64_t count, int64_t block,
                                 int threads, const BufferPlan& buffers,
                                 const std::function<void(int64_t, int64_t)>& progress, Done done) {
    const int64_t blocks = count / block + (count % block != 0);
    std::atomic<int64_t> next{0};
    std::atomic<bool> failed{false};
    std::exception_ptr error;
    std::mutex mu;  // guards error, progress and the time sums
    int64_t finished = 0;
    std::vector<double> seconds(net_.layers.size(), 0.0);

    auto worker = [&] {
      try {
        BlockRunner br(net_, fns_, std::min(block, count), buffers);
        for (int64_t b; !failed && (b = next++) < blocks;) {
          const int64_t start = first + b * block, n = std::min(block, first + count - start);
          br.run(data, start, n);
          done(br, start, n);
          if (progress) {
            std::lock_guard<std::mutex> lock(mu);
            finished += n;
            progress(finished, count);
          }
        }
        std::lock_guard<std::mutex> lock(mu);
        for (size_t i = 0; i < seconds.size(); ++i) seconds[i] += br.seconds[i];
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
        failed = true;
      }
    };
    std::vector<std::thread> pool;
    // A thread that cannot start (a container's thread or memory limit) leaves its blocks to the
    // others: results do not depend on the thread count, and an exception here would otherwise
    // destroy joinable threads (std::terminate).
    for (int t = 1; t < threads; ++t) {
      try {
        pool.emplace_back(worker);
      } catch (const std::system_error&) {
        break;
      }
    }
    started_ = static_cast<int>(pool.size()) + 1;
    worker();
    for (auto& th : pool) th.join();
    if (error) std::rethrow_exception(error);
    return seconds;
  }
};

}  // namespace

std::unique_ptr<Executor> make_cpu_executor(const Network& net) { return std::make_unique<CpuExecutor>(net); }

}  // namespace cnnrun
