#include "engine/gpu/device_weights.h"

#include "engine/gpu/conv2d_cutlass.h"
#include "engine/gpu/conv2d_implicit.h"
#include "engine/gpu/nhwc.h"
#include "engine/layers/batchnorm.h"
#include "engine/layers/fc.h"

namespace cnnrun::gpu {

void DeviceWeights::upload_tc_fp32(const Layer& l, ConvWeights& c, bool pack_low) {
  const ConvParams& p = layer_as<ConvLayer>(l).p;
  std::vector<float> wtc = implicit_weights_tc(p, l.weight("weight").ptr(), Precision::kFp32, pack_low);
  c.wt_tc[static_cast<int>(Precision::kFp32)] = gpu::upload(wtc.data(), wtc.size());
  c.tc_packed_low = pack_low;
}

void DeviceWeights::upload(const Network& net, const Plan& plan, Precision precision, bool pack_low) {
  if (uploaded_) {  // only the 3xTF32 fragments depend on a run's options
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      ConvWeights* c = steps_[i].conv.get();
      if (c && c->wt_tc[static_cast<int>(Precision::kFp32)].get() && c->tc_packed_low != pack_low)
        upload_tc_fp32(*net.layers[static_cast<size_t>(plan.steps[i].layer)], *c, pack_low);
    }
    return;
  }
  pre_scale_ = gpu::upload(net.pre.scale.data(), net.pre.scale.size());
  pre_shift_ = gpu::upload(net.pre.shift.data(), net.pre.shift.size());
  std::vector<float> offsets;
  const bool exact = exact_input_offsets(net.pre.scale, net.pre.shift, &offsets);
  if (exact) {
    std::vector<float> ones(offsets.size(), 1.f), neg(offsets.size());
    for (size_t i = 0; i < offsets.size(); ++i) neg[i] = -offsets[i];
    exact_scale_ = gpu::upload(ones.data(), ones.size());
    exact_shift_ = gpu::upload(neg.data(), neg.size());
  }
  steps_.clear();
  steps_.resize(plan.steps.size());
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const Step& st = plan.steps[i];
    StepWeights& sw = steps_[i];
    const Layer& l = *net.layers[static_cast<size_t>(st.layer)];
    if (st.op == Op::kConv) {
      sw.conv = std::make_unique<ConvWeights>();
      ConvWeights& c = *sw.conv;
      const ConvParams& p = st.conv;
      const Tensor& w = l.weight("weight");
      c.w = gpu::upload(w.ptr(), w.data.size());
      if (p.groups == 1 && !p.dilated()) {  // the implicit layout is for dense, undilated convs
        std::vector<float> wt = implicit_weights(p, w.ptr());
        c.wt = gpu::upload(wt.data(), wt.size());
      }
      if (st.pool_implicit) {
        ImplicitFusion f;
        f.pool = f.tensor_core = true;
        f.avg_pool = st.pool_avg;
        c.tc_ok = implicit_config(p, 1, f).ok;
        f.u8_input = true;
        c.tc_ok_u8 = st.u8_input_pool && implicit_config(p, 1, f).ok;
        if (c.tc_ok || c.tc_ok_u8) {
          for (Precision pr : {Precision::kTf32, Precision::kFp16, Precision::kBf16}) {
            std::vector<float> wtc = implicit_weights_tc(p, w.ptr(), pr);
            c.wt_tc[static_cast<int>(pr)] = gpu::upload(wtc.data(), wtc.size());
          }
          upload_tc_fp32(l, c, pack_low);
        }
        if (c.tc_ok_u8 && exact) {
          std::vector<float> wx = implicit_weights_x16(p, w.ptr(), net.pre.scale, &c.x16_scale);
          if (!wx.empty()) c.wt_x16 = gpu::upload(wx.data(), wx.size());
        }
      }
      std::vector<float> bias(static_cast<size_t>(p.filters), 0.f);
      if (p.bias) bias = l.weight("bias").data;
      c.bias = gpu::upload(bias.data(), bias.size());
      StemBytesWeights sb;
      if (st.u8_input_stem &&
          stem_bytes_weights(p, w.ptr(), bias.data(), net.pre.scale, net.pre.shift, &sb).empty()) {
        c.sb_hi = gpu::upload(sb.w_hi.data(), sb.w_hi.size());
        c.sb_lo = gpu::upload(sb.w_lo.data(), sb.w_lo.size());
        c.sb_scale = gpu::upload(sb.out_scale.data(), sb.out_scale.size());
        c.sb_table = gpu::upload(sb.table.data(), sb.table.size());
        c.sb_rows = gpu::upload(sb.row_class.data(), sb.row_class.size());
        c.sb_cols = gpu::upload(sb.col_class.data(), sb.col_class.size());
        StemBytesDevice& d = c.stem_bytes;
        d.w_hi = c.sb_hi.as<uint16_t>(), d.w_lo = c.sb_lo.as<uint16_t>(),
        d.out_scale = c.sb_scale.as<float>();
        d.table = c.sb_table.as<float>(), d.row_class = c.sb_rows.as<int>(),
        d.col_class = c.sb_cols.as<int>();
        d.row_classes = sb.row_classes, d.col_classes = sb.col_classes;
        for (size_t i = 0; i < sb.offset.size(); ++i) d.offset[i] = sb.offset[i];
      }
      if (im2col_can_run(p, nullptr)) {
        // With a residual add the activation comes after it (GpuExecutor::run_conv's pass).
        const ActFn act = st.residual_buf >= 0 ? ActFn{} : act_fn(st.act);
        c.im2col = std::make_unique<Im2colConv>(p, act, w.ptr(), bias.data(), c.bias.as<float>());
        c.im2col->set_precision(precision);
      }
      c.cudnn = std::make_unique<CudnnConv>(p, act_fn(st.act), st.residual_buf >= 0);
      c.cudnn->set_format(precision, false);
      if (p.groups == 1)
        c.tf32x3 = std::make_unique<Cudnn3xTf32Conv>(p, act_fn(st.act), st.residual_buf >= 0);
      c.dw = depthwise_plan(p);
      if (c.dw.nhwc_ok) {  // the channels-last kernel's [kh * kw][filters]
        const int64_t taps = p.kernel_h * p.kernel_w;
        std::vector<float> tk(static_cast<size_t>(taps * p.filters));
        for (int64_t f = 0; f < p.filters; ++f)
          for (int64_t k = 0; k < taps; ++k)
            tk[static_cast<size_t>(k * p.filters + f)] = w.ptr()[f * taps + k];
        c.w_taps = gpu::upload(tk.data(), tk.size());
      }
    } else if (st.op == Op::kFc) {
      const auto& fp = layer_as<FcLayer>(l).p;
      const Tensor& w = l.weight("weight");
      sw.w = gpu::upload(w.ptr(), w.data.size());
      std::vector<float> bias(static_cast<size_t>(fp.outputs), 0.f);
      if (fp.bias) bias = l.weight("bias").data;
      sw.b = gpu::upload(bias.data(), bias.size());
    } else if (st.op == Op::kAffine) {
      std::vector<float> scale, shift;
      layer_as<BatchnormLayer>(l).affine(scale, shift);
      sw.scale = gpu::upload(scale.data(), scale.size());
      sw.shift = gpu::upload(shift.data(), shift.size());
    }
  }
  // Every copy above has landed before any stream reads the weights: a pageable cudaMemcpy may
  // return before its DMA completes, and the slots' streams do not wait for the legacy stream.
  CUDA_CHECK(cudaDeviceSynchronize());
  uploaded_ = true;
}

void DeviceWeights::upload_nhwc(const Network& net, const Plan& plan, Precision precision) {
  const Storage t = storage_of(precision);
  cudaStream_t s = nullptr;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    ConvWeights* c = steps_[i].conv.get();
    if (!c || c->w_nhwc[static_cast<int>(precision)].get()) continue;
    const ConvParams& p = plan.steps[i].conv;
    const float* w = net.layers[static_cast<size_t>(plan.steps[i].layer)]->weight("weight").ptr();
    const int64_t K = p.filters, C = p.group_channels(), R = p.kernel_h, S = p.kernel_w;
    std::vector<float> krsc(static_cast<size_t>(K * R * S * C));
    for (int64_t k = 0; k < K; ++k)
      for (int64_t ch = 0; ch < C; ++ch)
        for (int64_t r = 0; r < R; ++r)
          for (int64_t q = 0; q < S; ++q)
            krsc[static_cast<size_t>(((k * R + r) * S + q) * C + ch)] =
                w[static_cast<size_t>(((k * C + ch) * R + r) * S + q)];
    // The copy and the conversion in one stream's order: a pageable cudaMemcpy may return before
    // its DMA lands, and this non-blocking stream would not wait for it (a conversion that read
    // half-copied filters made ResNet-18's FP16 convs wrong every other process).
    if (t == Storage::kF32) {  // cutlass's split of centre-only filters (FP32 channels last only)
      c->centre_split = cutlass_centre_split(p, w);
      if (c->centre_split > 0) {
        std::vector<float> centre(static_cast<size_t>(c->centre_split * C));
        const int64_t mid = (R / 2) * S + S / 2;
        for (int64_t k = 0; k < c->centre_split; ++k)
          for (int64_t ch = 0; ch < C; ++ch)
            centre[static_cast<size_t>(k * C + ch)] = w[static_cast<size_t>((k * C + ch) * R * S + mid)];
        c->w_centre = gpu::upload(centre.data(), centre.size());
      }
    }
    DevBuf f32(krsc.size() * sizeof(float));
    DevBuf& out = c->w_nhwc[static_cast<int>(precision)];
    out.alloc(krsc.size() * static_cast<size_t>(storage_bytes(t)));
    if (!s) CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    try {
      CUDA_CHECK(
          cudaMemcpyAsync(f32.get(), krsc.data(), krsc.size() * sizeof(float), cudaMemcpyHostToDevice, s));
      launch_to_storage(f32.as<float>(), out.get(), t, static_cast<int64_t>(krsc.size()), s);
      DevBuf& b = c->bias_nhwc[static_cast<int>(precision)];
      b.alloc(static_cast<size_t>(p.filters * storage_bytes(t)));
      launch_to_storage(c->bias.as<float>(), b.get(), t, p.filters, s);
      CUDA_CHECK(cudaStreamSynchronize(s));
    } catch (...) {
      cudaStreamDestroy(s);
      throw;
    }
  }
  if (s) CUDA_CHECK(cudaStreamDestroy(s));
}

}  // namespace cnnrun::gpu
