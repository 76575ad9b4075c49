#include "engine/passes.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "engine/layer_types.h"
#include "engine/layers/activation.h"
#include "engine/layers/batchnorm.h"
#include "engine/layers/conv.h"
#include "engine/layers/fc.h"
#include "engine/layers/merge.h"
#include "engine/layers/pool.h"
#include "engine/layers/simple.h"
#include "engine/layers/upsample.h"

namespace cnnrun {

Readers readers(const Network& net) {
  Readers r;
  r.of.resize(net.layers.size());
  for (size_t i = 0; i < net.layers.size(); ++i)
    for (int j : net.layers[i]->inputs) {
      if (j < 0)
        ++r.input;
      else
        r.of[static_cast<size_t>(j)].push_back(static_cast<int>(i));
    }
  return r;
}

bool pool_is_identity(const Layer& l) {
  if ((l.kind != LayerKind::kMaxpool && l.kind != LayerKind::kAvgpool) || l.in_shapes.size() != 1)
    return false;
  const Shape& in = l.in_shapes[0];
  if (l.out_shape != in) return false;
  const PoolParams& p = layer_as<PoolLayer>(l).p;
  if (p.adaptive) return true;  // output i pools input i alone when the sizes agree
  if (!p.global && p.size_h == 1 && p.size_w == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 &&
      p.pad_w == 0)
    return true;
  if (in.h != 1 || in.w != 1) return false;
  // One element in one window (every window holds one, PyTorch's rule): the max is it; the average
  // divides by 1 unless padding is counted in the divisor.
  return l.kind == LayerKind::kMaxpool || p.global || !p.count_pad || (p.pad_h == 0 && p.pad_w == 0);
}

bool runs_as_identity(const Layer& l) {
  return l.has(kCapIdentity) || (l.has(kCapFoldable) && l.folded) || pool_is_identity(l);
}

namespace {

// The bias a folded layer gains when it had none: its parameter struct must say so too.
void set_bias(Layer& p) {
  if (p.kind == LayerKind::kConv) layer_as<ConvLayer>(p).p.bias = true;
  if (p.kind == LayerKind::kFc) layer_as<FcLayer>(p).p.bias = true;
}

}  // namespace

void fold_batchnorms(Network& net, const std::string& source) {
  const Readers rd = readers(net);
  for (auto& lp : net.layers) {
    if (!lp->has(kCapFoldable) || lp->inputs.size() != 1 || lp->inputs[0] < 0) continue;
    const BatchnormLayer& bn = layer_as<BatchnormLayer>(*lp);
    const int j = bn.inputs[0];
    Layer& p = *net.layers[static_cast<size_t>(j)];
    if (!p.has(kCapFoldTarget) || rd.count(j) != 1 || j == net.output) continue;
    std::vector<float> scale, shift;
    bn.affine(scale, shift);
    Tensor& w = p.weights.at("weight");
    const int64_t outc = w.dims[0];
    if (outc != static_cast<int64_t>(scale.size())) continue;
    if (!p.weights.count("bias")) {
      p.weights["bias"] = Tensor({outc});
      set_bias(p);
    }
    Tensor& b = p.weights.at("bias");
    const int64_t per = w.numel() / outc;
    for (int64_t f = 0; f < outc; ++f) {
      float s = scale[static_cast<size_t>(f)];
      bool finite = true;
      for (int64_t k = 0; k < per; ++k) {
        float& x = w.data[static_cast<size_t>(f * per + k)];
        x *= s;
        finite = finite && std::isfinite(x);
      }
      float& bf = b.data[static_cast<size_t>(f)];
      bf = bf * s + shift[static_cast<size_t>(f)];
      if (!finite || !std::isfinite(bf))
        throw Error(source + ": folding batchnorm '" + bn.name + "' into '" + p.name +
                    "' overflows float32 for output channel " + std::to_string(f) + " (scale " +
                    std::to_string(s) + "); the weights are too large");
    }
    lp->folded = true;
  }
}

namespace {

// The fc that reads avgpool k's output through identity layers only (each the only reader of the
// one before, none the output), or -1; `chain` gets the identity layers between them.
int fc_after_pool(const Network& net, const Readers& rd, int k, std::vector<int>& chain) {
  chain.clear();
  int j = k;
  for (;;) {
    if (j == net.output || rd.count(j) != 1) return -1;
    const int r = rd.of[static_cast<size_t>(j)][0];
    const Layer& l = *net.layers[static_cast<size_t>(r)];
    if (l.inputs.size() != 1) return -1;
    if (l.kind == LayerKind::kFc) return r;
    if (!l.has(kCapIdentity)) return -1;
    chain.push_back(r);
    j = r;
  }
}

// Removes layer k, which nothing reads any more; indices after it move down one.
void erase_layer(Network& net, int k) {
  net.layers.erase(net.layers.begin() + k);
  for (auto& l : net.layers)
    for (int& i : l->inputs) i -= i > k ? 1 : 0;
  if (net.output > k) --net.output;
}

}  // namespace

std::vector<std::string> fold_pools_into_fcs(Network& net, const std::string& source) {
  std::vector<std::string> notes;
  for (int k = 0; k < static_cast<int>(net.layers.size()); ++k) {
    Layer& pl = *net.layers[static_cast<size_t>(k)];
    if (pl.kind != LayerKind::kAvgpool || pl.inputs.size() != 1) continue;
    const PoolParams& p = layer_as<PoolLayer>(pl).p;
    const Shape in = net.shape_of(pl.inputs[0]), out = pl.out_shape;
    if (in.h * in.w > out.h * out.w || in.c != out.c) continue;
    std::vector<int> chain;
    const int f = fc_after_pool(net, readers(net), k, chain);
    if (f < 0) continue;
    Layer& fc = *net.layers[static_cast<size_t>(f)];
    auto wit = fc.weights.find("weight");
    if (wit == fc.weights.end()) continue;
    const Tensor& w = wit->second;
    const int64_t outs = w.dims[0], hw = out.h * out.w, hw_in = in.h * in.w;
    if (w.dims.size() != 2 || w.dims[1] != out.c * hw) continue;
    Tensor folded({outs, in.c * hw_in});
    std::vector<double> acc(static_cast<size_t>(hw_in));
    for (int64_t o = 0; o < outs; ++o)
      for (int64_t c = 0; c < in.c; ++c) {
        std::fill(acc.begin(), acc.end(), 0.0);
        const float* wr = w.data.data() + (o * out.c + c) * hw;
        // Non-finite weights stay what they were (the unfolded network computes with them too);
        // finite ones that sum past float32 are refused.
        const bool finite = std::all_of(wr, wr + hw, [](float v) { return std::isfinite(v); });
        for (int64_t oy = 0; oy < out.h; ++oy) {
          const PoolWindow wy = pool_window_h(p, oy);
          for (int64_t ox = 0; ox < out.w; ++ox) {
            const PoolWindow wx = pool_window_w(p, ox);
            const int64_t count = p.count_pad ? wy.span * wx.span : (wy.end - wy.begin) * (wx.end - wx.begin);
            const double v = static_cast<double>(wr[oy * out.w + ox]) / static_cast<double>(count);
            for (int64_t y = wy.begin; y < wy.end; ++y)
              for (int64_t x = wx.begin; x < wx.end; ++x) acc[static_cast<size_t>(y * in.w + x)] += v;
          }
        }
        float* dst = folded.data.data() + (o * in.c + c) * hw_in;
        for (int64_t i = 0; i < hw_in; ++i) {
          dst[i] = static_cast<float>(acc[static_cast<size_t>(i)]);
          if (finite && !std::isfinite(dst[i]))
            throw Error(source + ": folding avgpool '" + pl.name + "' into fc '" + fc.name +
                        "' overflows float32 for output " + std::to_string(o) +
                        "; the weights are too large");
        }
      }
    notes.push_back("avgpool '" + pl.name + "' (" + in.str() +
                    (hw == hw_in ? ", a copy" : " -> " + out.str()) + ") folded into fc '" + fc.name +
                    (hw == hw_in ? "'"
                                 : "': " + std::to_string(out.c * hw) + " -> " +
                                       std::to_string(in.c * hw_in) + " inputs"));
    wit->second = std::move(folded);
    // The first layer after the pool reads the pool's input; the chain's and the fc's shapes follow.
    net.layers[static_cast<size_t>(chain.empty() ? f : chain[0])]->inputs[0] = pl.inputs[0];
    chain.push_back(f);
    for (int i : chain) {
      Layer& l = *net.layers[static_cast<size_t>(i)];
      l.in_shapes = {net.shape_of(l.inputs[0])};
      l.out_shape = l.infer_shape(l.in_shapes);
      l.bind(l.in_shapes);
    }
    erase_layer(net, k);
    --k;
  }
  return notes;
}

std::vector<std::string> drop_padding_taps(Network& net) {
  std::vector<std::string> notes;
  for (auto& lp : net.layers) {
    if (lp->kind != LayerKind::kConv || !lp->weights.count("weight")) continue;
    ConvParams& p = layer_as<ConvLayer>(*lp).p;
    // The tap of an axis that reads the input, or -1 when the axis keeps its kernel.
    auto tap = [](int64_t in, int64_t out, int64_t k, int64_t pad, int64_t dil) -> int64_t {
      if (in != 1 || out != 1 || k == 1 || pad % dil != 0 || pad / dil >= k) return -1;
      return pad / dil;
    };
    const int64_t th = tap(p.in_h, p.out_h, p.kernel_h, p.pad_h, p.dilation_h);
    const int64_t tw = tap(p.in_w, p.out_w, p.kernel_w, p.pad_w, p.dilation_w);
    if (th < 0 && tw < 0) continue;
    Tensor& w = lp->weights.at("weight");
    const int64_t kh = p.kernel_h, kw = p.kernel_w, planes = p.filters * p.group_channels();
    const int64_t nkh = th < 0 ? kh : 1, nkw = tw < 0 ? kw : 1;
    bool finite = true;
    for (int64_t i = 0; i < planes; ++i)
      for (int64_t y = 0; y < kh; ++y)
        for (int64_t x = 0; x < kw; ++x)
          if ((th >= 0 && y != th) || (tw >= 0 && x != tw))
            finite = finite && std::isfinite(w.data[static_cast<size_t>((i * kh + y) * kw + x)]);
    if (!finite) continue;
    Tensor kept({p.filters, p.group_channels(), nkh, nkw});
    for (int64_t i = 0; i < planes; ++i)
      for (int64_t y = 0; y < nkh; ++y)
        for (int64_t x = 0; x < nkw; ++x)
          kept.data[static_cast<size_t>((i * nkh + y) * nkw + x)] =
              w.data[static_cast<size_t>((i * kh + (th < 0 ? y : th)) * kw + (tw < 0 ? x : tw))];
    w = std::move(kept);
    if (th >= 0) p.kernel_h = 1, p.pad_h = 0, p.stride_h = 1, p.dilation_h = 1;
    if (tw >= 0) p.kernel_w = 1, p.pad_w = 0, p.stride_w = 1, p.dilation_w = 1;
    lp->bind(lp->in_shapes);  // the output stays p.out_h x p.out_w
    notes.push_back("conv '" + lp->name + "' on " + lp->in_shapes[0].str() + ": its " + std::to_string(kh) +
                    "x" + std::to_string(kw) + " taps that read only padding dropped (now " +
                    std::to_string(nkh) + "x" + std::to_string(nkw) + ")");
  }
  return notes;
}

namespace {

// The pointwise activations: the types whose class is ActivationLayer, read off the type list.
bool is_activation(const Layer& l) {
#define CNNRUN_IS_ACT(kind, name, Class, args, cpu, gpu) std::is_same_v<Class, ActivationLayer>,
  static constexpr bool kIsAct[kLayerKinds] = {CNNRUN_LAYER_TYPES(CNNRUN_IS_ACT)};
#undef CNNRUN_IS_ACT
  return kIsAct[index_of(l.kind)];
}

// One input of a concat that merge_concat_convs can take: a conv, and the activation after it
// (or -1), each the only reader of the one before, the last read by the concat alone.
struct Branch {
  int conv = -1, act = -1;
};

bool branch_of(const Network& net, const Readers& rd, int j, Branch& b) {
  if (j < 0 || j == net.output || rd.count(j) != 1) return false;
  b = Branch{};
  const Layer* l = net.layers[static_cast<size_t>(j)].get();
  if (is_activation(*l) && l->inputs.size() == 1 && l->inputs[0] >= 0) {
    b.act = j;
    j = l->inputs[0];
    if (j == net.output || rd.count(j) != 1) return false;
    l = net.layers[static_cast<size_t>(j)].get();
  }
  if (l->kind != LayerKind::kConv || l->inputs.size() != 1 || !l->weights.count("weight")) return false;
  b.conv = j;
  return true;
}

bool same_activation(const Layer* a, const Layer* b) {
  if (!a || !b) return a == b;
  const ActivationParams &x = layer_as<ActivationLayer>(*a).p, &y = layer_as<ActivationLayer>(*b).p;
  return a->kind == b->kind && x.kind == y.kind && x.slope == y.slope;
}

}  // namespace

std::vector<std::string> merge_concat_convs(Network& net) {
  std::vector<std::string> notes;
  for (int k = 0; k < static_cast<int>(net.layers.size()); ++k) {
    const Layer& cat = *net.layers[static_cast<size_t>(k)];
    if (cat.kind != LayerKind::kConcat || cat.inputs.size() < 2 || k == net.output) continue;
    const Readers rd = readers(net);
    std::vector<Branch> br(cat.inputs.size());
    bool ok = true;
    for (size_t i = 0; i < br.size() && ok; ++i) ok = branch_of(net, rd, cat.inputs[i], br[i]);
    if (!ok) continue;
    auto conv = [&](const Branch& b) -> ConvLayer& {
      return layer_as<ConvLayer>(*net.layers[static_cast<size_t>(b.conv)]);
    };
    auto act = [&](const Branch& b) {
      return b.act < 0 ? nullptr : net.layers[static_cast<size_t>(b.act)].get();
    };
    const ConvLayer& first = conv(br[0]);
    const ConvParams& p0 = first.p;
    int64_t kh = 0, kw = 0, ph = 0, pw = 0, filters = 0;
    bool bias = false;
    for (const Branch& b : br) {
      const ConvLayer& c = conv(b);
      const ConvParams& p = c.p;
      ok = ok && c.inputs[0] == first.inputs[0] && p.groups == 1 && p.stride_h == p0.stride_h &&
           p.stride_w == p0.stride_w && p.dilation_h == p0.dilation_h && p.dilation_w == p0.dilation_w &&
           c.algo == first.algo && same_activation(act(b), act(br[0]));
      kh = std::max(kh, p.kernel_h), kw = std::max(kw, p.kernel_w);
      ph = std::max(ph, p.pad_h), pw = std::max(pw, p.pad_w);
      filters += p.filters;
      bias = bias || c.weights.count("bias");
    }
    // Each kernel sits in the merged one at the offset that keeps its taps on the same input
    // rows and columns: (merged pad - its pad) / dilation, within the merged kernel.
    auto offset = [](int64_t big_pad, int64_t pad, int64_t dil, int64_t k, int64_t big_k) -> int64_t {
      if ((big_pad - pad) % dil != 0) return -1;
      const int64_t o = (big_pad - pad) / dil;
      return o + k <= big_k ? o : -1;
    };
    for (const Branch& b : br) {
      const ConvParams& p = conv(b).p;
      ok = ok && offset(ph, p.pad_h, p.dilation_h, p.kernel_h, kh) >= 0 &&
           offset(pw, p.pad_w, p.dilation_w, p.kernel_w, kw) >= 0;
    }
    // The merged window's output size (the branches' is the concat's).
    auto out_size = [](int64_t in, int64_t pad, int64_t dil, int64_t k, int64_t stride) {
      return (in + 2 * pad - dil * (k - 1) - 1) / stride + 1;
    };
    ok = ok && out_size(p0.in_h, ph, p0.dilation_h, kh, p0.stride_h) == cat.out_shape.h &&
         out_size(p0.in_w, pw, p0.dilation_w, kw, p0.stride_w) == cat.out_shape.w;
    if (!ok) continue;
    ConvParams mp = p0;
    mp.filters = filters, mp.kernel_h = kh, mp.kernel_w = kw, mp.pad_h = ph, mp.pad_w = pw, mp.bias = bias;
    const int64_t in_c = p0.in_c;
    Tensor w({filters, in_c, kh, kw}), bv({filters});
    int64_t f0 = 0;
    std::string names;
    for (const Branch& b : br) {
      const ConvLayer& c = conv(b);
      const ConvParams& p = c.p;
      const int64_t oy = offset(ph, p.pad_h, p.dilation_h, p.kernel_h, kh);
      const int64_t ox = offset(pw, p.pad_w, p.dilation_w, p.kernel_w, kw);
      const Tensor& src = c.weights.at("weight");
      for (int64_t f = 0; f < p.filters; ++f)
        for (int64_t ch = 0; ch < in_c; ++ch)
          for (int64_t y = 0; y < p.kernel_h; ++y)
            for (int64_t x = 0; x < p.kernel_w; ++x)
              w.data[static_cast<size_t>((((f0 + f) * in_c + ch) * kh + oy + y) * kw + ox + x)] =
                  src.data[static_cast<size_t>(((f * in_c + ch) * p.kernel_h + y) * p.kernel_w + x)];
      if (auto it = c.weights.find("bias"); it != c.weights.end())
        std::copy(it->second.data.begin(), it->second.data.end(), bv.data.begin() + f0);
      f0 += p.filters;
      names += (names.empty() ? "'" : ", '") + c.name + "' (" + std::to_string(p.kernel_h) + "x" +
               std::to_string(p.kernel_w) + ")";
    }
    // The first branch's conv becomes the merged one, its activation (if any) the block's
    // output; the concat's readers read that, and the other branches and the concat go.
    ConvLayer& m = conv(br[0]);
    m.p = mp;
    m.weights["weight"] = std::move(w);
    if (bias)
      m.weights["bias"] = std::move(bv);
    else
      m.weights.erase("bias");
    m.out_shape = m.infer_shape(m.in_shapes);
    m.bind(m.in_shapes);
    const int last = br[0].act >= 0 ? br[0].act : br[0].conv;
    Layer& tail = *net.layers[static_cast<size_t>(last)];
    if (br[0].act >= 0) {
      tail.in_shapes = {m.out_shape};
      tail.out_shape = tail.infer_shape(tail.in_shapes);
      tail.bind(tail.in_shapes);
    }
    notes.push_back("convs " + names + " read by concat '" + cat.name + "' merged into one " +
                    std::to_string(kh) + "x" + std::to_string(kw) + " conv '" + m.name + "' of " +
                    std::to_string(filters) + " filters" +
                    (br[0].act >= 0 ? " (then '" + tail.name + "')" : ""));
    for (int r : rd.of[static_cast<size_t>(k)]) {
      Layer& l = *net.layers[static_cast<size_t>(r)];
      for (size_t i = 0; i < l.inputs.size(); ++i)
        if (l.inputs[i] == k) {
          l.inputs[i] = last;
          if (i < l.input_names.size()) l.input_names[i] = tail.name;
        }
    }
    std::vector<int> gone{k};
    for (size_t i = 1; i < br.size(); ++i) {
      gone.push_back(br[i].conv);
      if (br[i].act >= 0) gone.push_back(br[i].act);
    }
    std::sort(gone.rbegin(), gone.rend());
    for (int g : gone) erase_layer(net, g);
    k = -1;  // indices moved: scan again from the start
  }
  return notes;
}

namespace {

// A max or average pool of fixed windows (not global, not adaptive) that computes something
// (not an identity pool, which aliases its input).
bool is_fixed_pool(const Layer& l) {
  if (l.kind != LayerKind::kMaxpool && l.kind != LayerKind::kAvgpool) return false;
  const PoolParams& p = layer_as<PoolLayer>(l).p;
  return !p.global && !p.adaptive && !pool_is_identity(l);
}

// Fusions::residual for conv i whose value, through `chain`, reaches layer j.
void fuse_residual(const Network& net, const Readers& rd, int i, int j, const std::vector<int>& chain,
                   Fusions& f) {
  const Layer& add = *net.layers[static_cast<size_t>(j)];
  if (add.kind != LayerKind::kAdd || add.inputs.size() != 2 ||
      add.out_shape != net.layers[static_cast<size_t>(i)]->out_shape)
    return;
  const int from = chain.empty() ? i : chain.back();
  if (add.inputs[0] == add.inputs[1]) return;
  const int other = add.inputs[0] == from ? add.inputs[1] : add.inputs[0];
  if (other >= i) return;  // not computed yet when i runs
  int last = j;
  if (j != net.output && rd.count(j) == 1) {
    const int k = rd.of[static_cast<size_t>(j)][0];
    if (is_activation(*net.layers[static_cast<size_t>(k)])) last = k;
  }
  f.residual[static_cast<size_t>(i)] = j;
  f.residual_act[static_cast<size_t>(i)] = last != j ? last : -1;
  for (int k : chain) f.through[static_cast<size_t>(k)] = last;
}

}  // namespace

Fusions find_fusions(const Network& net) {
  const size_t L = net.layers.size();
  const Readers rd = readers(net);
  Fusions f;
  f.act.assign(L, -1);
  f.through.assign(L, -1);
  f.relu.assign(L, -1);
  f.pool.assign(L, -1);
  f.residual.assign(L, -1);
  f.residual_act.assign(L, -1);
  f.scale.assign(L, -1);
  f.prepool.assign(L, -1);
  for (size_t i = 0; i < L; ++i) {
    const Layer& l = *net.layers[i];
    const int me = static_cast<int>(i);
    if (runs_as_identity(l)) continue;
    if (l.kind == LayerKind::kConv && l.inputs.size() == 1 && l.inputs[0] >= 0) {
      const int m = l.inputs[0];
      const Layer& src = *net.layers[static_cast<size_t>(m)];
      const ConvParams& p = layer_as<ConvLayer>(l).p;
      const bool pointwise = p.kernel_h == 1 && p.kernel_w == 1 && p.stride_h == 1 && p.stride_w == 1 &&
                             p.pad_h == 0 && p.pad_w == 0 && !p.dilated() && p.groups == 1;
      if (pointwise && src.kind == LayerKind::kMul && src.inputs.size() == 2 && rd.count(m) == 1 &&
          m != net.output) {
        const std::vector<bool>& b = layer_as<MulLayer>(src).p.broadcast;
        const int full = b[0] != b[1] ? (b[0] ? 1 : 0) : -1;
        if (full >= 0 && src.in_shapes[static_cast<size_t>(full)] == l.in_shapes[0]) f.scale[i] = m;
      }
      if (pointwise && src.kind == LayerKind::kMaxpool && is_fixed_pool(src) && rd.count(m) == 1 &&
          m != net.output && src.inputs.size() == 1 && src.inputs[0] >= 0)
        f.prepool[i] = m;
    }
    if (l.kind == LayerKind::kConv && l.inputs.size() == 1 && l.inputs[0] < 0 && rd.input == 1)
      f.input_conv = me;
    if ((l.kind != LayerKind::kConv && l.kind != LayerKind::kFc) || rd.count(me) != 1 || me == net.output)
      continue;
    int j = rd.of[i][0];
    std::vector<int> chain;  // identity layers (folded batchnorms) between i and its activation
    while (runs_as_identity(*net.layers[static_cast<size_t>(j)]) && j != net.output && rd.count(j) == 1) {
      chain.push_back(j);
      j = rd.of[static_cast<size_t>(j)][0];
    }
    if (!is_activation(*net.layers[static_cast<size_t>(j)])) {
      if (l.kind == LayerKind::kConv) fuse_residual(net, rd, me, j, chain, f);
      continue;
    }
    f.act[i] = j;
    for (int k : chain) f.through[static_cast<size_t>(k)] = j;
    if (net.layers[static_cast<size_t>(j)]->kind == LayerKind::kRelu) f.relu[i] = j;
    if (l.kind != LayerKind::kConv || rd.count(j) != 1 || j == net.output) continue;
    const int k = rd.of[static_cast<size_t>(j)][0];
    if (is_fixed_pool(*net.layers[static_cast<size_t>(k)])) f.pool[i] = k;
  }
  return f;
}

std::vector<Lifetime> layer_lifetimes(const Network& net) {
  const int L = static_cast<int>(net.layers.size());
  std::vector<Lifetime> life(static_cast<size_t>(L), Lifetime{L, -1});
  // The layer whose buffer holds layer j's output (identities alias their input), or -1: the input.
  auto owner = [&](int j) {
    while (j >= 0 && runs_as_identity(*net.layers[static_cast<size_t>(j)]))
      j = net.layers[static_cast<size_t>(j)]->inputs[0];
    return j;
  };
  auto use = [&](int j, int step) {
    if ((j = owner(j)) >= 0) life[static_cast<size_t>(j)].cover(step);
  };
  for (int i = 0; i < L; ++i) {
    const Layer& l = *net.layers[static_cast<size_t>(i)];
    if (!runs_as_identity(l)) use(i, i);
    for (int j : l.inputs) use(j, i);
  }
  use(net.output, L);
  for (Lifetime& l : life)
    if (l.first > l.last) l = Lifetime{L, L - 1};  // an identity: never in use
  return life;
}

std::vector<int> share_groups(const std::vector<Lifetime>& life, const std::vector<int64_t>& sizes,
                              std::vector<int64_t>* group_sizes) {
  const size_t B = life.size();
  std::vector<size_t> order(B);
  for (size_t b = 0; b < B; ++b) order[b] = b;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return life[a].first < life[b].first; });
  std::vector<int> group(B, -1);
  std::vector<int> busy_until;  // per group: the last step of its members
  std::vector<int64_t> size;    // per group: its largest member
  for (size_t b : order) {
    if (life[b].first > life[b].last) continue;  // never in use
    int pick = -1;
    for (size_t g = 0; g < size.size(); ++g) {
      if (busy_until[g] >= life[b].first) continue;
      const bool holds = size[g] >= sizes[b];
      if (pick < 0) {
        pick = static_cast<int>(g);
        continue;
      }
      const int64_t p = size[static_cast<size_t>(pick)];
      const bool pick_holds = p >= sizes[b];
      if (holds ? (!pick_holds || size[g] < p) : (!pick_holds && size[g] > p)) pick = static_cast<int>(g);
    }
    if (pick < 0) {
      pick = static_cast<int>(size.size());
      size.push_back(0);
      busy_until.push_back(-2);
    }
    const auto g = static_cast<size_t>(pick);
    group[b] = pick;
    size[g] = std::max(size[g], sizes[b]);
    busy_until[g] = std::max(busy_until[g], life[b].last);
  }
  if (group_sizes) *group_sizes = size;
  return group;
}

}  // namespace cnnrun
