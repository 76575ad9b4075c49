#include "engine/gpu/plan.h"

#include "engine/gpu/conv2d_implicit.h"
#include "engine/gpu/conv2d_stem.h"
#include "engine/layers/merge.h"
#include "engine/layers/pool.h"
#include "engine/passes.h"

namespace cnnrun::gpu {

namespace {

// The pool the implicit kernel computes after its activation: 2x2, stride 2, no padding, flooring
// (a max or an average: with no padding the average's divisor is 4 either way).
bool is_pool_2x2_s2(const Layer& l) {
  const PoolParams& p = layer_as<PoolLayer>(l).p;
  return !p.ceil_mode && p.size_h == 2 && p.size_w == 2 && p.stride_h == 2 && p.stride_w == 2 &&
         p.pad_h == 0 && p.pad_w == 0;
}

}  // namespace

Plan make_plan(const Network& net) {
  const size_t L = net.layers.size();
  const Fusions fusions = find_fusions(net);
#define CNNRUN_GPU_OP(kind, name, Class, args, cpu, gpu) Op::gpu,
  static constexpr Op kOpOf[kLayerKinds] = {CNNRUN_LAYER_TYPES(CNNRUN_GPU_OP)};
#undef CNNRUN_GPU_OP

  Plan plan;
  std::vector<Step>& steps = plan.steps;
  plan.buf_floats.assign(1, net.input.size());
  std::vector<int> out_buf(L, 0);
  auto buf_of = [&](int layer) { return layer < 0 ? 0 : out_buf[static_cast<size_t>(layer)]; };
  auto new_buf = [&](const Shape& s) {
    plan.buf_floats.push_back(s.size());
    return static_cast<int>(plan.buf_floats.size() - 1);
  };

  steps.resize(L);
  for (size_t i = 0; i < L; ++i) {
    const Layer& l = *net.layers[i];
    Step& st = steps[i];
    st.layer = static_cast<int>(i);
    st.in_shape = l.in_shapes[0];
    st.out_shape = l.out_shape;
    for (int j : l.inputs) st.ins.push_back(buf_of(j));

    if (st.op == Op::kFused) {  // set when its producer was planned; holds the producer's buffer
      out_buf[i] = out_buf[static_cast<size_t>(st.fused_producer)];
      st.out = out_buf[i];
      continue;
    }
    st.op = runs_as_identity(l) ? Op::kIdentity : kOpOf[index_of(l.kind)];
    if (st.op == Op::kIdentity) {
      out_buf[i] = st.ins[0];
      st.out = st.ins[0];
      st.fused_consumer = fusions.through[i];  // between a conv/fc and the activation it computes
      continue;
    }
    if (st.op == Op::kConv)
      st.conv = layer_as<ConvLayer>(l).p;
    else if (st.op == Op::kAct)
      st.act = layer_as<ActivationLayer>(l).p;
    // An activation that is the only reader of a conv/fc output runs in that layer's epilogue:
    // every convolution algorithm and the fc GEMM apply any activation (a ReLU inside the library
    // call where it can, others in our epilogues or in one in-place pass right after it), so
    // which layers are materialised never depends on the algorithm chosen.
    if (const int j = fusions.act[i]; j >= 0) {
      st.act = layer_as<ActivationLayer>(*net.layers[static_cast<size_t>(j)]).p;
      st.fused_consumer = j;
      steps[static_cast<size_t>(j)].op = Op::kFused;
      steps[static_cast<size_t>(j)].fused_producer = static_cast<int>(i);
      // ... and the pool that is that activation's only reader can follow it into the implicit
      // kernel (a 2x2 stride-2 max-pool after a ReLU, or on its tensor cores an average pool
      // after any activation; stride-1 convs; the kernel floors odd sizes as the pool does) or a
      // max-pool into the stem kernel (any window of at most its tile).
      if (const int k = fusions.pool[i]; k >= 0) {
        const Layer& pl = *net.layers[static_cast<size_t>(k)];
        ImplicitFusion f;
        f.pool = true;
        const bool avg = pl.kind == LayerKind::kAvgpool;
        f.avg_pool = f.tensor_core = avg;
        st.pool_implicit =
            (avg || fusions.relu[i] >= 0) && is_pool_2x2_s2(pl) && implicit_config(st.conv, 1, f).ok;
        st.pool_stem = !avg && stem_pool_cannot_run(st.conv, stem_pool(net, k)).empty();
        st.pool_avg = avg && st.pool_implicit;
        if (st.pool_implicit || st.pool_stem) {
          st.pool_layer = k;
          steps[static_cast<size_t>(k)].pool_conv = static_cast<int>(i);
        }
      }
    }
    // A residual add (and the activation after it) in the conv's epilogue: its other input was
    // computed before this conv (Fusions::residual), so its buffer is known here.
    if (const int j = fusions.residual[i]; j >= 0) {
      const int k = fusions.residual_act[i];
      for (int in : net.layers[static_cast<size_t>(j)]->inputs)
        if (in < static_cast<int>(i)) st.residual_buf = buf_of(in);
      st.residual_layer = j;
      st.fused_consumer = k >= 0 ? k : j;
      if (k >= 0) st.act = layer_as<ActivationLayer>(*net.layers[static_cast<size_t>(k)]).p;
      Step& add = steps[static_cast<size_t>(j)];
      add.op = Op::kFused;
      add.fused_producer = static_cast<int>(i);
      add.fused_consumer = k;
      if (k >= 0) {
        steps[static_cast<size_t>(k)].op = Op::kFused;
        steps[static_cast<size_t>(k)].fused_producer = static_cast<int>(i);
      }
    }
    // A per-channel mul before a 1x1 conv, folded into per-image filters by the gemm convolution
    // where they are no larger than the conv's input (else its pass moves fewer bytes).
    if (const int m = fusions.scale[i]; m >= 0 && st.conv.filters <= st.conv.in_h * st.conv.in_w) {
      const Layer& mul = *net.layers[static_cast<size_t>(m)];
      const int full = layer_as<MulLayer>(mul).p.broadcast[0] ? 1 : 0;
      st.scale_layer = m;
      st.scale_buf = buf_of(mul.inputs[static_cast<size_t>(1 - full)]);
      st.scaled_buf = buf_of(mul.inputs[static_cast<size_t>(full)]);
      st.scale_w_buf = new_buf(Shape{st.conv.filters * st.conv.in_c, 1, 1});
      steps[static_cast<size_t>(m)].scale_conv = static_cast<int>(i);
    }
    // A max-pool before a 1x1 conv that only it reads, which no kernel of the pool's producer
    // computes: the conv1x1 kernel can take each window's maximum as it stages the conv's input.
    if (const int m = fusions.prepool[i]; m >= 0 && steps[static_cast<size_t>(m)].pool_conv < 0) {
      st.prepool_layer = m;
      st.prepool_buf = steps[static_cast<size_t>(m)].ins[0];
      steps[static_cast<size_t>(m)].prepool_conv = static_cast<int>(i);
    }
    // The first conv can read the uint8 pixels and normalise them while staging, when nothing
    // else reads the network input (so the float input never has to exist).
    if (static_cast<int>(i) == fusions.input_conv) {
      ImplicitFusion f;
      f.u8_input = true;
      st.u8_input = implicit_config(st.conv, 1, f).ok;
      f.pool = true;
      f.avg_pool = f.tensor_core = st.pool_avg;
      st.u8_input_pool = st.pool_implicit && implicit_config(st.conv, 1, f).ok;
      st.u8_input_stem = stem_bytes_cannot_run(st.conv).empty();
    }
    st.out = new_buf(l.out_shape);
    out_buf[i] = st.out;
  }
  // A whole-plane mean that reads a depthwise conv's output: the conv's kernels may compute it
  // (the first such pool of each conv). The conv writing a buffer is the step whose output it is
  // (fused and identity layers alias it).
  std::vector<int> conv_of(plan.buf_floats.size(), -1);
  for (const Step& st : steps)
    if (st.op == Op::kConv) conv_of[static_cast<size_t>(st.out)] = st.layer;
  for (Step& ps : steps) {
    if (ps.op != Op::kPool || !is_whole_plane_mean(*net.layers[static_cast<size_t>(ps.layer)])) continue;
    const int i = conv_of[static_cast<size_t>(ps.ins[0])];
    if (i < 0) continue;
    Step& cs = steps[static_cast<size_t>(i)];
    const ConvParams& p = cs.conv;
    // Not after a residual add in the conv's epilogue: its pass runs after the kernel, so the
    // kernel's sums would miss it.
    if (cs.mean_layer >= 0 || cs.pool_layer >= 0 || cs.residual_layer >= 0 || p.groups != p.in_c ||
        p.filters != p.in_c)
      continue;
    cs.mean_layer = ps.layer;
    cs.mean_buf = new_buf(Shape{0, 1, 1});
    ps.mean_conv = i;
  }
  // A concat's input that a conv writes and nothing else reads: the conv may write it in place.
  // Readers are counted per buffer over the steps that launch (a fused or identity layer's own
  // buffer is its producer's; its readers read that buffer), and the network output is read too.
  std::vector<int> readers(plan.buf_floats.size(), 0);
  for (const Step& st : steps) {
    if (st.op == Op::kFused || st.op == Op::kIdentity) continue;
    for (int b : st.ins) ++readers[static_cast<size_t>(b)];
    for (int b : {st.residual_buf, st.scale_buf, st.scaled_buf})
      if (b >= 0) ++readers[static_cast<size_t>(b)];
  }
  ++readers[static_cast<size_t>(out_buf[static_cast<size_t>(net.output)])];
  for (Step& cat : steps) {
    if (cat.op != Op::kConcat || cat.out_shape.c % 8 != 0) continue;
    int64_t offset = 0;
    for (size_t k = 0; k < cat.ins.size(); ++k) {
      const int b = cat.ins[k];
      const int i = conv_of[static_cast<size_t>(b)];
      const Shape& in = net.layers[static_cast<size_t>(cat.layer)]->in_shapes[k];
      const int64_t c = in.c;
      if (i >= 0 && readers[static_cast<size_t>(b)] == 1 && offset % 8 == 0) {
        Step& cs = steps[static_cast<size_t>(i)];
        if (cs.residual_layer < 0 && cs.pool_layer < 0 && cs.mean_layer < 0 && cs.scale_layer < 0 &&
            cs.out_shape == in) {
          cs.concat_step = cat.layer;
          cs.concat_offset = offset;
          cs.concat_ld = cat.out_shape.c;
        }
      }
      offset += c;
    }
  }
  // The cudnn-3xtf32 convolution's input split into TF32 parts (conv2d_cudnn_3xtf32.h), after
  // the layers' own buffers.
  for (Step& st : steps)
    if (st.op == Op::kConv && st.conv.groups == 1)
      st.split_buf = new_buf(Shape{3 * st.conv.in_c, st.conv.in_h, st.conv.in_w});
  return plan;
}

std::vector<Lifetime> buffer_lifetimes(const Network& net, const Plan& plan, const NhwcLayout* layout) {
  const int end = static_cast<int>(plan.steps.size());
  const size_t B = plan.buf_floats.size() + (layout ? layout->copy_floats.size() : 0);
  std::vector<Lifetime> life(B, Lifetime{end, -1});
  auto use = [&](int b, int step) { life[static_cast<size_t>(b)].cover(step); };
  use(0, -1);
  for (int i = 0; i < end; ++i) {
    const Step& st = plan.steps[static_cast<size_t>(i)];
    for (int b : st.ins) use(b, i);
    if (st.residual_buf >= 0) use(st.residual_buf, i);
    for (int b : {st.scale_buf, st.scaled_buf, st.scale_w_buf, st.split_buf, st.mean_buf, st.prepool_buf})
      if (b >= 0) use(b, i);
    use(st.out, i);
    if (st.pool_layer >= 0) use(plan.steps[static_cast<size_t>(st.pool_layer)].out, i);
    if (st.mean_layer >= 0) use(plan.steps[static_cast<size_t>(st.mean_layer)].out, i);
    if (st.concat_step >= 0) use(plan.steps[static_cast<size_t>(st.concat_step)].out, i);
    if (layout && layout->f32_in[static_cast<size_t>(i)] >= 0) use(layout->f32_in[static_cast<size_t>(i)], i);
  }
  use(plan.steps[static_cast<size_t>(net.output)].out, end);
  if (layout && layout->out_f32 >= 0) {  // made right after the output's step
    use(layout->out_f32, net.output);
    use(layout->out_f32, end);
  }
  for (Lifetime& l : life)
    if (l.last < l.first) l = Lifetime{end, end};  // never used: harmless at the end
  return life;
}

StemPool stem_pool(const Network& net, int pool_layer) {
  StemPool sp;
  if (pool_layer < 0) return sp;
  const Layer& l = *net.layers[static_cast<size_t>(pool_layer)];
  const PoolParams& p = layer_as<PoolLayer>(l).p;
  auto i32 = [](int64_t v) { return static_cast<int>(v); };
  sp.kernel_h = i32(p.size_h), sp.kernel_w = i32(p.size_w), sp.stride_h = i32(p.stride_h),
  sp.stride_w = i32(p.stride_w), sp.pad_h = i32(p.pad_h), sp.pad_w = i32(p.pad_w);
  sp.out_h = i32(l.out_shape.h), sp.out_w = i32(l.out_shape.w);
  return sp;
}

bool is_whole_plane_mean(const Layer& l) {
  if (l.kind != LayerKind::kAvgpool || l.out_shape.h != 1 || l.out_shape.w != 1) return false;
  const PoolParams& p = layer_as<PoolLayer>(l).p;
  const Shape& in = l.in_shapes[0];
  // One window from 0 over the whole plane: its divisor is the plane's size either way (count_pad).
  return p.global || p.adaptive || (p.pad_h == 0 && p.pad_w == 0 && p.size_h >= in.h && p.size_w >= in.w);
}

bool fuses_pool(const Step& st, ConvAlgo algo, const GpuTuning& t) {
  // The average pool is the tensor-core kernel's only (GpuTuning::tensor_cores).
  return st.pool_layer >= 0 && t.fuse_pool &&
         ((algo == ConvAlgo::kImplicit && st.pool_implicit && (!st.pool_avg || t.tensor_cores)) ||
          (algo == ConvAlgo::kStem && st.pool_stem));
}

bool fuses_u8(const Step& st, ConvAlgo algo, const GpuTuning& t) {
  if (algo == ConvAlgo::kStem) return st.u8_input_stem && t.fuse_u8;
  return (fuses_pool(st, algo, t) ? st.u8_input_pool : st.u8_input) && t.fuse_u8 &&
         algo == ConvAlgo::kImplicit;
}

NhwcLayout make_nhwc_layout(const Network& net, const Plan& plan) {
  NhwcLayout lay;
  const size_t B = plan.buf_floats.size();
  lay.nhwc.assign(B, 0);
  lay.shape.assign(B, Shape{});
  lay.f32_in.assign(plan.steps.size(), -1);
  lay.nhwc[0] = 1;
  lay.shape[0] = net.input;
  auto copy = [&](int64_t floats) {
    lay.copy_floats.push_back(floats);
    return static_cast<int>(B + lay.copy_floats.size() - 1);
  };
  for (const Step& st : plan.steps) {
    const std::string& name = net.layers[static_cast<size_t>(st.layer)]->name;
    auto no = [&](const std::string& what) {
      lay.ok = false;
      lay.why = "layer '" + name + "' " + what;
      return lay;
    };
    bool all_nhwc = true, any_nhwc = false;
    for (int b : st.ins) {
      all_nhwc = all_nhwc && lay.nhwc[static_cast<size_t>(b)];
      any_nhwc = any_nhwc || lay.nhwc[static_cast<size_t>(b)];
    }
    // A flatten between a channels-last tensor and a reader that does not copy it to FP32 NCHW
    // would hand that reader the values in NHWC order.
    const Layer& l = *net.layers[static_cast<size_t>(st.layer)];
    if (st.op != Op::kFc && st.op != Op::kSoftmax && st.op != Op::kIdentity && st.op != Op::kFused)
      for (size_t k = 0; k < st.ins.size(); ++k) {
        const size_t b = static_cast<size_t>(st.ins[k]);
        if (lay.nhwc[b] && lay.shape[b] != l.in_shapes[k] && lay.shape[b].h * lay.shape[b].w > 1)
          return no("reads a flattened " + lay.shape[b].str() + " tensor, whose order channels last differs");
      }
    bool out_nhwc = false;
    switch (st.op) {
      case Op::kIdentity:
      case Op::kFused:
        continue;  // aliases its input's buffer
      case Op::kConv:
      case Op::kPool:
      case Op::kConcat:
        if (!all_nhwc)
          return no("reads a tensor stored FP32 NCHW (after a fully-connected layer or a softmax)");
        out_nhwc = true;
        if (st.scale_w_buf >= 0) {  // per-image filters in the storage format
          lay.nhwc[static_cast<size_t>(st.scale_w_buf)] = 1;
          lay.shape[static_cast<size_t>(st.scale_w_buf)] = Shape{st.conv.filters * st.conv.in_c, 1, 1};
        }
        if (st.split_buf >= 0) {  // the split input, FP32 channels last (used at fp32 only)
          lay.nhwc[static_cast<size_t>(st.split_buf)] = 1;
          lay.shape[static_cast<size_t>(st.split_buf)] = Shape{3 * st.conv.in_c, st.conv.in_h, st.conv.in_w};
        }
        break;
      case Op::kAct:
      case Op::kAffine:
      case Op::kAdd:
      case Op::kMul:
        if (any_nhwc != all_nhwc) return no("mixes channels-last and FP32 NCHW inputs");
        out_nhwc = all_nhwc;
        break;
      case Op::kFc:
      case Op::kSoftmax:
        if (any_nhwc) {
          const Shape& in = lay.shape[static_cast<size_t>(st.ins[0])];
          lay.f32_in[static_cast<size_t>(st.layer)] = copy(in.size());
        }
        break;
      case Op::kUpsample:
        return no("(upsample) has no channels-last kernel");
    }
    lay.nhwc[static_cast<size_t>(st.out)] = out_nhwc;
    lay.shape[static_cast<size_t>(st.out)] = st.out_shape;
  }
  const int out = plan.steps[static_cast<size_t>(net.output)].out;
  if (lay.nhwc[static_cast<size_t>(out)]) lay.out_f32 = copy(plan.buf_floats[static_cast<size_t>(out)]);
  lay.ok = true;
  return lay;
}

}  // namespace cnnrun::gpu
