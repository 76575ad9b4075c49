#include "engine/gpu/pipeline.h"

#include <algorithm>
#include <cstring>

namespace cnnrun::gpu {

void Slot::drop_graph() {
  if (exec) cudaGraphExecDestroy(exec);
  exec = nullptr;
  exec_n = 0;
  drop_short_graph();
}

void Slot::drop_short_graph() {
  if (exec_short) cudaGraphExecDestroy(exec_short);
  exec_short = nullptr;
  exec_short_n = 0;
}

Slot::~Slot() {
  drop_graph();
  for (cudaEvent_t e : ev) cudaEventDestroy(e);
  if (stream) cudaStreamDestroy(stream);
}

// Outside a capture the external flag is an error (cudaErrorIllegalState).
void record(cudaEvent_t e, cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(s, &st));
  if (st == cudaStreamCaptureStatusActive)
    CUDA_CHECK(cudaEventRecordWithFlags(e, s, cudaEventRecordExternal));
  else
    CUDA_CHECK(cudaEventRecord(e, s));
}

void BlockPipeline::drop_graphs() {
  for (auto& sp : slots_) sp->drop_graph();
}

void BlockPipeline::ensure_slots(const SlotNeeds& needs, int streams, int64_t block, int64_t images,
                                 int64_t total_cap, int64_t reserved, GpuRunFacts* facts) {
  const int64_t cap = total_cap > 0 ? total_cap - reserved : 0;
  const int64_t want_blocks = (images + block - 1) / block;
  streams = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(streams, want_blocks)));
  const bool use_im2col = needs.im2col, use_cudnn = needs.cudnn;
  if (!slots_.empty() && streams_ == streams && block_ == block && cap_ == cap &&
      input_bytes_ == needs.input_bytes && buf_floats_ == needs.buf_floats &&
      share_group_ == needs.share_group && (col_ || !use_im2col) && (cudnn_ || !use_cudnn))
    return;
  slots_.clear();  // give the memory back before measuring what is free

  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  // Room for the libraries' own allocations (cuDNN/cuBLAS handles, kernels' modules).
  const size_t reserve = std::min<size_t>(free_b, (512u << 20) + free_b / 20);
  size_t usable = free_b - reserve;
  const bool capped = cap > 0 && static_cast<uint64_t>(cap) < usable;
  if (capped) usable = static_cast<size_t>(cap);
  size_t col = use_im2col ? std::max(needs.max_col, std::min(kColBudget, usable / 16)) : 0;
  size_t cudnn_ws = use_cudnn ? std::min(kCudnnWorkspace, usable / 16) : 0;
  const size_t fixed = kLtWorkspace + col + cudnn_ws;

  // Floats per image of each allocation: a buffer's own, or its group's.
  if (!needs.share_group.empty() && needs.share_group.size() != needs.buf_floats.size())
    throw Error("GPU buffers: " + std::to_string(needs.share_group.size()) + " groups for " +
                std::to_string(needs.buf_floats.size()) + " buffers");
  const std::vector<int64_t>& alloc_floats =
      needs.share_group.empty() ? needs.buf_floats : needs.group_floats;
  size_t buffer_bytes = 0;
  int allocations = 0;
  for (int64_t f : alloc_floats) {
    buffer_bytes += static_cast<size_t>(f) * sizeof(float);
    allocations += f > 0;
  }
  size_t per_image = static_cast<size_t>(needs.input_bytes) + sizeof(int32_t) + buffer_bytes;

  int64_t fit = 0;
  for (;;) {
    size_t all_fixed = fixed * static_cast<size_t>(streams);
    fit = usable > all_fixed
              ? static_cast<int64_t>((usable - all_fixed) / (per_image * static_cast<size_t>(streams)))
              : 0;
    if (fit >= 1 || streams == 1) break;
    streams = 1;
  }
  if (fit < 1)
    throw Error("GPU memory: one image needs " + std::to_string(per_image) + " bytes of buffers plus " +
                std::to_string(fixed) + " bytes of workspace, but " +
                (capped ? "--gpu-memory allows only " + std::to_string(cap) + " bytes"
                        : "only " + std::to_string(free_b) + " bytes of the " + device_ + "'s " +
                              std::to_string(total_b) + " are free"));
  if (block > fit) {
    if (facts) {
      facts->block_cut_from = block;
      facts->cap_bytes = capped ? cap : 0;
      facts->cap_total_bytes = capped ? total_cap : 0;
    }
    block = fit;
  }

  for (int i = 0; i < streams; ++i) {
    auto s = std::make_unique<Slot>();
    s->block = block;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    s->in_u8.alloc(static_cast<size_t>(block * needs.input_bytes));
    s->pred.alloc(static_cast<size_t>(block) * sizeof(int32_t));
    s->bufs.resize(needs.buf_floats.size());
    if (needs.share_group.empty()) {
      for (size_t b = 0; b < needs.buf_floats.size(); ++b)
        s->bufs[b].alloc(static_cast<size_t>(block * needs.buf_floats[b]) * sizeof(float));
    } else {
      s->arena.resize(alloc_floats.size());
      for (size_t g = 0; g < alloc_floats.size(); ++g)
        s->arena[g].alloc(static_cast<size_t>(block * alloc_floats[g]) * sizeof(float));
      for (size_t b = 0; b < needs.buf_floats.size(); ++b)
        s->bufs[b] = DevBuf::view(s->arena[static_cast<size_t>(needs.share_group[b])].get(),
                                  static_cast<size_t>(block * needs.buf_floats[b]) * sizeof(float));
    }
    s->lt_ws.alloc(kLtWorkspace);
    s->col.alloc(col);
    if (i == 0) s->cudnn_ws.alloc(cudnn_ws);  // the others' after the search (set_cudnn_ws)
    s->pred_host.alloc(static_cast<size_t>(block) * sizeof(int32_t));
    s->labels.alloc(static_cast<size_t>(block) * sizeof(int32_t));
    slots_.push_back(std::move(s));
  }
  streams_ = streams;
  block_ = block;
  cap_ = cap;
  input_bytes_ = needs.input_bytes;
  buf_floats_ = needs.buf_floats;
  share_group_ = needs.share_group;
  buffer_bytes_ = static_cast<int64_t>(buffer_bytes);
  allocations_ = allocations;
  col_ = use_im2col;
  cudnn_ = use_cudnn;
  cudnn_ws_max_ = cudnn_ws;
  ++generation_;
}

void BlockPipeline::cudnn_ws_for_search() {
  for (size_t i = 0; i < slots_.size(); ++i) {
    const size_t want = i == 0 ? cudnn_ws_max_ : 0;
    if (slots_[i]->cudnn_ws.bytes() != want) slots_[i]->cudnn_ws.alloc(want);
  }
}

void BlockPipeline::set_cudnn_ws(size_t bytes) {
  if (bytes > cudnn_ws_max_)
    throw Error("cuDNN workspace: " + std::to_string(bytes) + " bytes asked for, the slots were sized for " +
                std::to_string(cudnn_ws_max_));
  for (auto& sp : slots_)
    if (sp->cudnn_ws.bytes() != bytes) sp->cudnn_ws.alloc(bytes);
}

// Images that do not fit in the free memory are an error, not a silent fallback to host copies,
// since the run would then time something else than it says.
DevBuf BlockPipeline::upload_resident(const Dataset& data, int64_t count) {
  const size_t bytes = static_cast<size_t>(count * data.bytes_per_image());
  constexpr size_t kHeadroom = 512u << 20;  // as ensure_slots keeps back for the libraries
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (!slots_.empty() && free_b < bytes + kHeadroom + free_b / 20) {
    slots_.clear();
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  }
  if (bytes > free_b)
    throw Error("--resident: the " + std::to_string(count) + " images need " + std::to_string(bytes) +
                " bytes of GPU memory, but only " + std::to_string(free_b) + " of the " + device_ + "'s " +
                std::to_string(total_b) + " are free; run without --resident");
  DevBuf b(bytes);
  const size_t img = static_cast<size_t>(data.bytes_per_image());
  for_each_cycled_run(0, count, data.count, [&](int64_t done, int64_t idx, int64_t run) {
    CUDA_CHECK(cudaMemcpy(b.as<uint8_t>() + static_cast<size_t>(done) * img, data.image_bytes(idx),
                          static_cast<size_t>(run) * img, cudaMemcpyHostToDevice));
  });
  return b;
}

void BlockPipeline::copy_in(Slot& s, const Dataset& data, int64_t first, int64_t n, bool staged,
                            const uint8_t* resident) {
  const size_t img = static_cast<size_t>(data.bytes_per_image());
  for_each_cycled_run(first, n, data.count, [&](int64_t done, int64_t idx, int64_t run) {
    uint8_t* dst = s.in_u8.as<uint8_t>() + static_cast<size_t>(done) * img;
    if (resident) {
      CUDA_CHECK(cudaMemcpyAsync(dst, resident + static_cast<size_t>(idx) * img,
                                 static_cast<size_t>(run) * img, cudaMemcpyDeviceToDevice, s.stream));
      return;
    }
    const uint8_t* src = data.image_bytes(idx);
    if (staged) {
      uint8_t* st = s.staging.as<uint8_t>() + static_cast<size_t>(done) * img;
      std::memcpy(st, src, static_cast<size_t>(run) * img);
      src = st;
    }
    CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(run) * img, cudaMemcpyHostToDevice, s.stream));
  });
}

// The slot's buffers and events are its own, so one graph serves every full block on it: one
// launch per block instead of ~3 per layer. Weights, algorithms and kernel configurations are
// fixed by then (warm-up done). The short last block gets a second graph on its slot: launched
// from the host, its layers would wait for the host wherever their kernels are shorter than the
// launches (small maps, docs/performance.md, Session 24).
void BlockPipeline::capture(Slot& s, int64_t n, const std::function<void(Slot&)>& enqueue, bool short_block) {
  if (short_block)
    s.drop_short_graph();
  else
    s.drop_graph();
  cudaGraph_t g = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue(s);
  } catch (...) {
    cudaStreamEndCapture(s.stream, &g);
    if (g) cudaGraphDestroy(g);
    (void)cudaGetLastError();
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(s.stream, &g));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  CUDA_CHECK(e);
  (short_block ? s.exec_short : s.exec) = exec;
  (short_block ? s.exec_short_n : s.exec_n) = n;
}

}  // namespace cnnrun::gpu
