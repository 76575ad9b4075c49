// The executor interface: the CPU reference (reference/) and the GPU executor (engine/gpu/)
// both implement it, and the CLI, validation and tests only see this.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/precision.h"
#include "engine/core/tensor.h"
#include "engine/io/dataset.h"
#include "engine/network.h"

namespace cnnrun {

struct RunOptions {
  int64_t batch = 0;  // images to run: dataset images 0..batch-1, modulo count when cycling
  bool cycle = false;
  bool want_probs = false;  // keep the output layer's values for every image
  int64_t block = 0;        // images per block (0 = executor's choice)
  int streams = 0;          // GPU streams (0 = executor's choice)
  std::string conv_algo;    // GPU: "" (auto / netdef), "im2col", "implicit", "cudnn"
  int threads = 0;          // CPU threads (0 = hardware concurrency)
  // GPU: the operands' format the convolutions and fully-connected layers may round to
  // (engine/core/precision.h); the CPU executor computes in FP32 and rejects anything else.
  Precision precision = Precision::kFp32;
  // GPU: upload the images the run reads (0..min(batch, count)-1) to device memory before the
  // clock, so that the forward time has no host-to-device copy in it; the predictions (and the
  // output values, with want_probs) still come back to host memory. The CPU executor rejects it.
  bool resident = false;
  // GPU: at most this many bytes for the per-stream image buffers and workspaces (0 = no cap:
  // what is free); blocks are cut to fit it.
  int64_t gpu_memory = 0;
  // Called now and then with images done so far (for a progress bar); may be empty.
  std::function<void(int64_t done, int64_t total)> progress;
};

struct LayerTime {
  std::string name, type, algo;  // algo: what ran ("im2col+gemm", "cudnn:IMPLICIT_PRECOMP_GEMM", "")
  double seconds = 0;            // summed over all blocks
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
  std::vector<std::string> notes;          // free-form lines for the report
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string name() const = 0;
  // Runs opt.batch images of `data`, counting correct predictions against its labels.
  virtual RunResult run(const Dataset& data, const RunOptions& opt) = 0;
  // Every layer's output (index = layer index, [n, C, H, W]) for images first..first+n-1;
  // the network input after preprocessing is not included.
  virtual std::vector<Tensor> forward_layers(const Dataset& data, int64_t first, int64_t n) = 0;
  // Non-empty when layer `index`'s output is never materialised because its consumer's kernel
  // computes it (conv fused with the following relu): forward_layers then returns an empty
  // tensor for it, and validation checks it through the named consumer.
  virtual std::string fused_into(int /*index*/) const { return ""; }
};

// Preprocesses n images into NCHW floats (the definition every executor must match).
void preprocess_images(const Network& net, const uint8_t* pixels, int64_t n, float* out);

// The predicted class of one image's output values: the index of the first maximum (ties go
// to the lower class), the rule every executor's predictions follow.
int32_t predicted_class(const float* v, int64_t n);

// The checks every executor makes before it runs: the data set fits the network (image shape,
// pixel and label counts) and every weight is loaded with its expected shape.
void check_ready(const Network& net, const Dataset& data);
// The number of images a run covers (opt.batch, 0 = the whole data set), checked against the
// data set's size and opt.cycle.
int64_t images_to_run(const Dataset& data, const RunOptions& opt);
// The host memory a run's results take (4 bytes of prediction per image, and the output values
// with want_probs), checked against `mem` (host_memory()) before anything is allocated: a
// --batch of 2^62 cycled images is an error that says so, not a failed allocation. Returns the
// bytes.
struct HostMemory;
int64_t check_results_fit(int64_t batch, bool want_probs, int64_t out_size, const HostMemory& mem);
// Throws unless images first..first+n-1 lie inside the data set (forward_layers does not cycle).
void check_range(const Dataset& data, int64_t first, int64_t n);

}  // namespace cnnrun
