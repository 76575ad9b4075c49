// The network's weights on the device, uploaded once (on first use: tests and the CLI load the
// weights after making the executor) in every layout the step's algorithms read.
#pragma once

#include <memory>
#include <vector>

#include "engine/gpu/check.h"
#include "engine/gpu/conv2d_cudnn.h"
#include "engine/gpu/conv2d_cudnn_3xtf32.h"
#include "engine/gpu/conv2d_depthwise.h"
#include "engine/gpu/conv2d_gemm.h"
#include "engine/gpu/conv2d_im2col.h"
#include "engine/gpu/conv2d_stem.h"
#include "engine/gpu/plan.h"

namespace cnnrun::gpu {

// A conv keeps three copies: PyTorch layout for im2col, cuDNN and the depthwise kernel,
// [m_tile][C*KH*KW][BM] for the implicit kernel (dense undilated convs only), and (inside im2col) [F][K+1]; a
// conv that can run the tensor-core kernel also gets that kernel's B fragments once per precision, so
// switching --precision uploads nothing.
struct ConvWeights {
  DevBuf w, wt, bias;
  DevBuf wt_tc[4];            // for the tensor-core kernel per Precision, when the conv can fuse its pool
  bool tc_packed_low = true;  // how wt_tc[kFp32] was packed (GpuTuning::pack_low)
  bool tc_ok = false, tc_ok_u8 = false;  // the tensor-core kernel can run it (reading floats / bytes)
  DevBuf wt_x16;                         // FP32 reading bytes: exact pixels, FP16 products (u8_exact)
  float x16_scale = 1.f;                 // ... and its accumulators' scale
  // Step::u8_input_stem: the stem's weights for reading the bytes (launch_conv_stem_bytes), its
  // buffers and their view (stem_bytes.w_hi null: the weights do not allow it).
  DevBuf sb_hi, sb_lo, sb_scale, sb_table, sb_rows, sb_cols;
  StemBytesDevice stem_bytes;
  // Per Precision, which input the stem reads where it can read both: auto's search times the
  // bytes against the floats plus the preprocess pass (1 bytes, 0 floats; -1 not timed: bytes).
  int stem_input[4] = {-1, -1, -1, -1};
  float stem_input_ms[4][2] = {};      // ... and the times the search gave them: [floats, bytes]
  std::unique_ptr<Im2colConv> im2col;  // null when im2col cannot run the conv (grouped)
  std::unique_ptr<CudnnConv> cudnn;
  std::unique_ptr<Cudnn3xTf32Conv> tf32x3;  // groups 1: cudnn-3xtf32 (its split filters on first use)
  DepthwisePlan dw;                         // dw.cfg.ok when the depthwise kernel can run it
  DevBuf w_taps;          // dw.nhwc_ok: the channels-last depthwise kernel's FP32 [kh * kw][filters]
  int cutlass_tile = -1;  // the cutlass convolution's tile, timed on its first run (-1: not yet)
  // cutlass_centre_split's filters (0: none) run as a 1x1 conv with these FP32 [centre][in_c]
  // weights, on their own tile, into a channel slice (made with the FP32 channels-last filters).
  int64_t centre_split = 0;
  DevBuf w_centre;
  int cutlass_tile_centre = -1;
  // Channels-last cuDNN's filters, K x KH x KW x C/groups in each Precision's storage format
  // (nhwc.h), made on a run's first use of --layout nhwc at that precision.
  DevBuf w_nhwc[4];
  DevBuf bias_nhwc[4];  // ... and the bias in that format (for cuDNN's fused bias+activation)
  GemmConv gemm;        // the gemm convolution's matmul plans (made on first use)
};

// One step's weights: conv's above, fc's matrix and bias, an unfolded batchnorm's affine.
struct StepWeights {
  DevBuf w, b, scale, shift;
  std::unique_ptr<ConvWeights> conv;
};

class DeviceWeights {
 public:
  // Uploads every step's weights (once); precision: what the library plans start with;
  // pack_low: how the 3xTF32 fragments are packed (uploaded again when a later call differs).
  void upload(const Network& net, const Plan& plan, Precision precision, bool pack_low);
  bool uploaded() const { return uploaded_; }
  // Every conv's channels-last filters for `precision` (after upload; once per precision).
  void upload_nhwc(const Network& net, const Plan& plan, Precision precision);

  StepWeights& step(int i) { return steps_[static_cast<size_t>(i)]; }
  const StepWeights& step(int i) const { return steps_[static_cast<size_t>(i)]; }
  // Preprocessing per input channel: y = byte * scale + shift; and for the exact-pixel input the
  // kernel's 1 and -offset (empty when the preprocessing has no exact offsets).
  const DevBuf& pre_scale() const { return pre_scale_; }
  const DevBuf& pre_shift() const { return pre_shift_; }
  const DevBuf& exact_scale() const { return exact_scale_; }
  const DevBuf& exact_shift() const { return exact_shift_; }

 private:
  void upload_tc_fp32(const Layer& l, ConvWeights& c, bool pack_low);
  bool uploaded_ = false;
  std::vector<StepWeights> steps_;
  DevBuf pre_scale_, pre_shift_, exact_scale_, exact_shift_;
};

}  // namespace cnnrun::gpu
