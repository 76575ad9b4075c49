// Pointwise activations on the GPU, in PyTorch's definitions: one plain description (ActFn)
// that the elementwise pass, the bias+activation epilogue of cuDNN's and cuBLASLt's plain
// convolutions and our own convolution kernels all evaluate with the same device function
// (activation.cuh), so an activation computes the same values whether it runs fused or alone.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "engine/layers/activation.h"

namespace cnnrun::gpu {

enum class Act : int {
  kIdentity,
  kRelu,         // max(x, 0)
  kRelu6,        // min(max(x, 0), 6)
  kLeakyRelu,    // x > 0 ? x : x * slope
  kHardswish,    // x * min(max(x + 3, 0), 6) / 6
  kHardsigmoid,  // min(max(x + 3, 0), 6) / 6
  kSilu,         // x / (1 + exp(-x))
  kGelu,         // x / 2 * (1 + erf(x / sqrt(2)))
  kGeluTanh,     // x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3)))
  kTanh,
  kSigmoid,  // 1 / (1 + exp(-x))
};

struct ActFn {
  Act kind = Act::kIdentity;
  float slope = 0.01f;  // kLeakyRelu's negative slope
  // SiLU and sigmoid through the hardware's approximate exponential and reciprocal in FP32 storage
  // too (a few FP32 ulp: --precision tf32, whose products round to 2^-11); 16-bit storage always
  // takes them (act_eval_stored, activation.cuh). Not part of the function's identity (==).
  bool fast = false;
  bool operator==(const ActFn& o) const {
    return kind == o.kind && (kind != Act::kLeakyRelu || slope == o.slope);
  }
  bool operator!=(const ActFn& o) const { return !(*this == o); }
};

// The GPU form of an activation layer's parameters (kNone: identity).
ActFn act_fn(const ActivationParams& p);

// "relu", "leaky_relu(0.01)", "gelu(tanh)": for the report's algorithm names.
std::string act_fn_name(const ActFn& a);

// y = act(x) over count values (in == out allowed).
void launch_act(const float* in, float* out, int64_t count, ActFn act, cudaStream_t s);

// y[n][c][p] = act(y[n][c][p] + bias[c]) in place (bias may be null: act alone): the epilogue
// of a convolution whose library call applied neither.
void launch_bias_act(float* y, const float* bias, int64_t n, int channels, int64_t plane, ActFn act,
                     cudaStream_t s);

}  // namespace cnnrun::gpu
