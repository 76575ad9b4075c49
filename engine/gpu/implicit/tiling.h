// The implicit convolution's fixed tiling: threads per block, pixels per thread, shared-memory
// budgets, the epilogue and tensor-core arithmetic variants. Plain C++: the host-side planner
// (config.cpp) and weight packing (weights.cu) read it as the kernels do.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cnnrun::gpu::implicit {

constexpr int kThreads = 256;
constexpr int kPix = 4;                       // output pixels per thread
constexpr int kTilePixels = kThreads * kPix;  // output pixels per tile (and each of G, R, OW < 1024)
constexpr int kTileWindows = kThreads;        // pool windows per tile (one per thread)
constexpr size_t kStageBudget = 40 * 1024;    // shared memory per stage buffer (two of them)
constexpr int kU8Words = 4;                   // uint8 input: 4-byte words per thread per tile, at most
constexpr int kTcMaxK = 2048;                 // tensor cores: taps (C*KH*KW) in the offset table, at most
// Tensor cores with more than 16 filters run one block per SM (registers), so a stage may use
// most of the SM's shared memory: fewer chunks, and chunks whose taps start on a k-step of 8.
constexpr size_t kTcStageBudget = 104 * 1024;
constexpr int kTcSmemMax = static_cast<int>(2 * kTcStageBudget) + kU8Words * kThreads * 4 + kTcMaxK * 4 + 64;

enum Epi { kEpiNone = 0, kEpiRelu = 1, kEpiReluPool = 2 };
// The tensor-core kernel's arithmetic (Precision's order): 3xTF32 with FP32 flushes, TF32,
// FP16 or BF16 operands.
// kTcX16: FP32 results for uint8 input staged exactly as byte - offset (ImplicitFusion::u8_exact):
// FP16 products of those exact values and of weights split in two FP16 parts.
enum TcPrec { kTcFp32 = 0, kTcTf32 = 1, kTcFp16 = 2, kTcBf16 = 3, kTcX16 = 4 };

// Whether the 3xTF32 weights of `filters` filters carry the last n-tile's low parts in its spare
// columns (PK above): at most 4 filters in that n-tile, and `pack` (ImplicitFusion::pack_low,
// off to measure it); the weights and the launch both ask here.
inline bool tc_packs_lo(int64_t filters, bool pack) { return pack && filters > 0 && (filters - 1) % 8 < 4; }

}  // namespace cnnrun::gpu::implicit
