// Kernel workbench (not a test): the depthwise convolutions of torchvision's MobileNetV2 (or
// EfficientNet-B0's, NET=efficientnet_b0: 3x3 and 5x5) at a given input size, timed on the GPU with our
// depthwise kernel and with cuDNN's grouped convolution (its own algorithm search, FP32 FMA math, as the
// executor runs it), each with the ReLU6 that follows them in MobileNetV2 (the kernel applies it in its
// epilogue; cuDNN's plain convolution needs our bias+activation pass after it, both timed). Prints one line
// per layer and the totals; bench/depthwise_torch.py prints PyTorch's times for the same layers, so the two
// can be read side by side (docs/performance.md). Built with the GPU executor (CMake target depthwise_bench):
//   build-gpu/depthwise_bench [IMAGES=256] [INPUT=224] [REPEATS=20] [TILES=4096[,2048...]] [FORMAT=nchw]
//                             [NET=mobilenet_v2] [ACT=relu6]
// ACT: the activation in the epilogue, relu6 (MobileNetV2's) or silu (EfficientNet-B0's).
// TILES: the NCHW kernel's outputs per thread block (depthwise_config's tile_outputs), one column
// each; the ratio is cuDNN's time over the first. FORMAT fp16, bf16 or fp32-nhwc: channels last in
// that storage format instead (--layout nhwc): the channels-last kernel against cuDNN's grouped
// convolution on the same tensors (bench/depthwise_torch.py --dtype fp16 --channels-last for
// PyTorch's), TILES then the kernels' knobs (DepthwiseNhwcKnobs): auto (the defaults), 1, 2 or 4
// (the vector kernel's row_pixels), s4, s7 or s8 (the strip kernel's strip_pixels where it runs),
// tKpP (the tile kernel wherever it runs, at most K KiB of shared memory, P pixels a lane; tKpPr1
// with one output row a lane), pool
// (auto, then the whole-plane average pool pass over its output: a squeeze-and-excitation block's)
// mean (auto computing that mean itself where depthwise_nhwc_mean_slots allows, else as pool) or
// meanall (mean with DepthwiseNhwcKnobs::mean_everywhere: the strip and vector kernels' too),
// notile (the defaults without the tile kernel, as --gpu-off dwtile), nopack (the defaults
// without the tile kernel's lane groups: one strip a warp), nohalf (the defaults without the
// small tiles' blocks of 128 threads, as --gpu-off dwsmall), norows (the defaults with one output
// row a lane in the tile kernel, as --gpu-off dwrows), any of these followed by
// +pool or +mean (its knobs, then the pool pass or the mean as above), or
// bytes (no kernel: the layer's input + output bytes moved by a device-to-device copy, the bound
// a kernel that reads each input and writes each output once would approach);
// one column each. Channels last, each variant's output is compared with the vector kernel's (1 pixel
// a thread) and a difference printed after the line.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_timing.h"
#include "engine/gpu/activation.h"
#include "engine/gpu/check.h"
#include "engine/gpu/conv2d_cudnn.h"
#include "engine/gpu/conv2d_depthwise.h"
#include "engine/gpu/nhwc.h"

using namespace cnnrun;
using namespace cnnrun::gpu;

namespace {

struct Dw {
  int c, h, stride, k = 3;
};

// MobileNetV2's 17 depthwise 3x3 convolutions: (channels, input side at 224, stride).
std::vector<Dw> mobilenet_v2(int input) {
  const int t[][4] = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                      {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
  std::vector<Dw> v;
  int c = 32, h = (input + 1) / 2;  // after the stride-2 stem
  for (const auto& r : t)
    for (int i = 0; i < r[2]; ++i) {
      const int s = i == 0 ? r[3] : 1, hidden = c * r[0];
      v.push_back({hidden, h, s});
      h = (h + 2 - 3) / s + 1;
      c = r[1];
    }
  return v;
}

// EfficientNet-B0's 16 depthwise convolutions: (expanded channels, input side, stride, kernel).
std::vector<Dw> efficientnet_b0(int input) {
  const int t[][5] = {{1, 16, 1, 1, 3},  {6, 24, 2, 2, 3},  {6, 40, 2, 2, 5}, {6, 80, 3, 2, 3},
                      {6, 112, 3, 1, 5}, {6, 192, 4, 2, 5}, {6, 320, 1, 1, 3}};
  std::vector<Dw> v;
  int c = 32, h = (input + 1) / 2;  // after the stride-2 stem
  for (const auto& r : t)
    for (int i = 0; i < r[2]; ++i) {
      const int s = i == 0 ? r[3] : 1, hidden = c * r[0], k = r[4];
      v.push_back({hidden, h, s, k});
      h = (h + 2 * (k / 2) - k) / s + 1;
      c = r[1];
    }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const int images = argc > 1 ? std::atoi(argv[1]) : 256;
  const int input = argc > 2 ? std::atoi(argv[2]) : 224;
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 20;
  const std::string format = argc > 5 ? argv[5] : "nchw";
  const bool nhwc = format != "nchw";
  const std::string net = argc > 6 ? argv[6] : "mobilenet_v2";
  const std::string act_name = argc > 7 ? argv[7] : "relu6";
  const bool act_ok = act_name == "relu6" || act_name == "silu";
  // Variants, one column each: NCHW, the tile outputs; channels last, "1", "2" or "4" (the vector
  // kernel's row_pixels, no strip or tile kernel), "sN" (the strip kernel at up to N pixels where it
  // runs, else the vector kernel), "tKpP" (the tile kernel wherever it runs, at most K KiB of
  // shared memory and P pixels a lane) or "auto" (the default knobs: each kernel where its rule says).
  struct Variant {
    std::string label;
    int nchw_tile = 0;
    DepthwiseNhwcKnobs kn;
    int se = 0;          // 1: then the pool pass; 2: the mean in the kernel (else the pool pass)
    bool bytes = false;  // no kernel: a device-to-device copy of the layer's input + output bytes
  };
  std::vector<Variant> tiles;
  bool tiles_ok = true;
  {
    std::istringstream in(argc > 4 ? argv[4] : nhwc ? "auto" : std::to_string(kDepthwiseTileOutputs));
    for (std::string t; std::getline(in, t, ',');) {
      Variant v;
      v.label = t;
      // "VARIANT+pool" / "VARIANT+mean": that variant's knobs, then the pool pass / the mean.
      for (const char* se : {"+pool", "+mean"}) {
        const std::string suffix(se);
        if (t.size() > suffix.size() && t.compare(t.size() - suffix.size(), suffix.size(), suffix) == 0) {
          v.se = suffix == "+pool" ? 1 : 2;
          t.resize(t.size() - suffix.size());
        }
      }
      if (t == "bytes") {
        v.bytes = true;
      } else if (!nhwc) {
        v.nchw_tile = std::atoi(t.c_str());
        tiles_ok &= v.nchw_tile >= 32;
      } else if (t == "pool" || t == "mean" || t == "meanall") {
        v.se = t == "pool" ? 1 : 2;
        v.kn.mean_everywhere = t == "meanall";
      } else if (t == "notile") {  // the defaults without the tile kernel (--gpu-off dwtile)
        v.kn.set_tile_smem(0);
      } else if (t == "nopack") {  // the defaults without the tile kernel's lane groups
        v.kn.tile_pack = false;
      } else if (t == "nohalf") {  // the defaults without the small tiles' half blocks (--gpu-off dwsmall)
        v.kn.small_tile_strips = 0;
      } else if (t == "norows") {  // the defaults with one output row a lane (--gpu-off dwrows)
        v.kn.tile_rows = 1;
      } else if (t != "auto") {
        v.kn.strip_pixels = 0, v.kn.set_tile_smem(0);
        int k = 0, px = 0;
        if (t == "1" || t == "2" || t == "4") {
          v.kn.row_pixels = std::atoi(t.c_str());
        } else if (t.size() > 1 && t[0] == 's') {
          v.kn.strip_pixels = std::atoi(t.c_str() + 1);
          tiles_ok &= v.kn.strip_pixels == 4 || v.kn.strip_pixels == 7 || v.kn.strip_pixels == 8;
        } else if (std::sscanf(t.c_str(), "t%dp%d", &k, &px) == 2 && k >= 1 && k <= 227) {
          v.kn.set_tile_smem(size_t(k) << 10), v.kn.tile_pixels = px, v.kn.tile_everywhere = true;
          const size_t r = t.find('r');  // tKpPr1: one output row a lane
          if (r != std::string::npos) v.kn.tile_rows = std::atoi(t.c_str() + r + 1);
          tiles_ok &= px == 4 || px == 8;
        } else {
          tiles_ok = false;
        }
      }
      tiles.push_back(v);
    }
  }
  const Precision prec = format == "fp16"   ? Precision::kFp16
                         : format == "bf16" ? Precision::kBf16
                                            : Precision::kFp32;
  const bool format_ok = format == "nchw" || format == "fp16" || format == "bf16" || format == "fp32-nhwc";
  const bool net_ok = net == "mobilenet_v2" || net == "efficientnet_b0";
  if (images < 1 || input < 8 || repeats < 1 || tiles.empty() || !tiles_ok || !format_ok || !net_ok ||
      !act_ok) {
    std::fprintf(stderr,
                 "usage: %s [IMAGES>=1] [INPUT>=8] [REPEATS>=1] [TILES=N>=32[,N...] | nhwc: "
                 "auto|1|2|4|s4|s7|s8|tKpP|pool|mean|meanall|notile|nopack|nohalf|norows|bytes[,...]] "
                 "[FORMAT=nchw|fp16|bf16|fp32-nhwc] [NET=mobilenet_v2|efficientnet_b0] [ACT=relu6|silu]\n",
                 argv[0]);
    return 2;
  }
  const Storage st = storage_of(prec);
  try {
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CudnnHandle h;
    const size_t ws_bytes = 256u << 20;
    DevBuf ws(ws_bytes);
    std::printf("%s depthwise + %s, %d images at %dx%d, %s, median of %d (ms)\n",
                net == "mobilenet_v2" ? "MobileNetV2" : "EfficientNet-B0",
                act_name == "silu" ? "SiLU" : "ReLU6", images, input, input,
                nhwc ? (std::string(storage_name(st)) + " NHWC").c_str() : "fp32 NCHW", repeats);
    std::printf("%-4s %5s %4s %2s %2s |", "#", "ch", "in", "s", "k");
    for (const Variant& v : tiles) std::printf(" %9s", ((nhwc ? "" : "dw@") + v.label).c_str());
    std::printf(" %9s %7s | %s\n", "cudnn", "ratio", "cudnn algorithm");
    std::vector<double> tot_dw(tiles.size(), 0.0);
    double tot_cudnn = 0;
    std::mt19937 g(1);
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    int i = 0;
    for (const Dw& l : net == "mobilenet_v2" ? mobilenet_v2(input) : efficientnet_b0(input)) {
      const int taps = l.k * l.k;
      ConvParams p;
      p.filters = p.in_c = p.groups = l.c;
      p.kernel_h = p.kernel_w = l.k;
      p.stride_h = p.stride_w = l.stride;
      p.pad_h = p.pad_w = l.k / 2;
      p.in_h = p.in_w = l.h;
      p.out_h = p.out_w = (l.h + 2 * (l.k / 2) - l.k) / l.stride + 1;
      std::vector<float> hx(size_t(images) * l.c * l.h * l.h), hw(size_t(l.c) * taps), hb(size_t(l.c));
      for (auto& v : hx) v = d(g);
      for (auto& v : hw) v = d(g);
      for (auto& v : hb) v = d(g);
      DevBuf x = upload(hx.data(), hx.size()), w = upload(hw.data(), hw.size()),
             b = upload(hb.data(), hb.size());
      DevBuf y(size_t(images) * l.c * p.out_h * p.out_w * sizeof(float));
      // Channels last: x, the filters (K x k x k x 1, the same order as K x 1 x k x k) and the bias
      // in the storage format for cuDNN; the kernel's FP32 [k * k][channels] weights.
      const int64_t sb = nhwc ? storage_bytes(st) : 0;  // no channels-last buffers for nchw
      DevBuf xs(hx.size() * size_t(sb)), ys(size_t(images) * l.c * p.out_h * p.out_w * size_t(sb)),
          ws_t(hw.size() * size_t(sb)), bs(hb.size() * size_t(sb)), w_taps;
      if (nhwc) {
        launch_nchw_to_nhwc(x.as<float>(), xs.get(), st, images, l.c, int64_t(l.h) * l.h, s);
        launch_to_storage(w.as<float>(), ws_t.get(), st, int64_t(hw.size()), s);
        launch_to_storage(b.as<float>(), bs.get(), st, int64_t(hb.size()), s);
        std::vector<float> tap(hw.size());
        for (int c = 0; c < l.c; ++c)
          for (int k = 0; k < taps; ++k) tap[size_t(k) * l.c + c] = hw[size_t(c) * taps + k];
        w_taps = upload(tap.data(), tap.size());
        CUDA_CHECK(cudaStreamSynchronize(s));
      }
      DepthwiseArgs a;
      a.channels = a.filters = l.c;
      a.in_h = a.in_w = l.h;
      a.out_h = a.out_w = static_cast<int>(p.out_h);
      a.kernel_h = a.kernel_w = l.k, a.stride_h = a.stride_w = l.stride, a.pad_h = a.pad_w = l.k / 2;
      const ActFn epi_act{act_name == "silu" ? Act::kSilu : Act::kRelu6};  // the epilogue's activation (ACT)
      const size_t outs = size_t(images) * l.c * p.out_h * p.out_w;
      // Channels last, the vector kernel's output (1 pixel a thread) as FP32, for the comparisons.
      auto nhwc_out = [&] {
        launch_nhwc_to_nchw(ys.get(), st, y.as<float>(), images, l.c, p.out_h * p.out_w, s);
        std::vector<float> o(outs);
        CUDA_CHECK(cudaMemcpyAsync(o.data(), y.get(), outs * sizeof(float), cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        return o;
      };
      std::vector<float> vector_out;
      if (nhwc) {
        DepthwiseNhwcKnobs vector_only;
        vector_only.strip_pixels = 0, vector_only.set_tile_smem(0);
        launch_conv_depthwise_nhwc(a, xs.get(), st, w_taps.as<float>(), b.as<float>(), ys.get(), images,
                                   epi_act, s, vector_only);
        vector_out = nhwc_out();
      }
      std::vector<float> t_dw;
      std::string differs;
      // The squeeze-and-excitation pool: its output, the kernel's partial sums (the most any
      // variant's kernel uses: a tile kernel pinned everywhere may have more slots than the defaults).
      int most_slots = 0;
      for (const Variant& v : tiles)
        if (nhwc && !v.bytes) most_slots = std::max(most_slots, depthwise_nhwc_mean_slots(a, st, v.kn));
      DevBuf pooled(size_t(images) * l.c * sizeof(float)),
          partial(std::max<size_t>(size_t(images) * most_slots * l.c, 1) * sizeof(float));
      Pool2dArgs pa;
      pa.channels = l.c, pa.in_h = a.out_h, pa.in_w = a.out_w, pa.out_h = pa.out_w = 1, pa.is_max = false;
      pa.adaptive = true;
      // "bytes": half the layer's input + output bytes copied device to device (the copy reads and
      // writes them), from x into a scratch buffer: the time those bytes take at copy speed.
      const size_t moved = (hx.size() + outs) * size_t(nhwc ? sb : int64_t(sizeof(float))) / 2;
      DevBuf scratch;
      for (size_t k = 0; k < tiles.size(); ++k) {
        if (tiles[k].bytes) {
          if (!scratch.get()) scratch.alloc(moved);
          const void* from = nhwc ? xs.get() : x.get();
          t_dw.push_back(bench::median_ms(s, repeats, [&] {
            CUDA_CHECK(cudaMemcpyAsync(scratch.get(), from, moved, cudaMemcpyDeviceToDevice, s));
          }));
          tot_dw[k] += t_dw[k];
          continue;
        }
        const DepthwiseConfig cfg = depthwise_config(a, nhwc ? kDepthwiseTileOutputs : tiles[k].nchw_tile);
        const int slots = nhwc ? depthwise_nhwc_mean_slots(a, st, tiles[k].kn) : 0;
        const int se = tiles[k].se == 2 && slots == 0 ? 1 : tiles[k].se;
        DepthwiseMean mean;
        if (se == 2) mean.partial = partial.as<float>(), mean.out = pooled.get();
        t_dw.push_back(bench::median_ms(s, repeats, [&] {
          if (nhwc) {
            launch_conv_depthwise_nhwc(a, xs.get(), st, w_taps.as<float>(), b.as<float>(), ys.get(), images,
                                       epi_act, s, tiles[k].kn, mean);
            if (se == 1) launch_pool2d_nhwc(ys.get(), pooled.get(), st, images, pa, s);
          } else
            launch_conv_depthwise(cfg, a, x.as<float>(), w.as<float>(), b.as<float>(), y.as<float>(), images,
                                  epi_act, s);
        }));
        tot_dw[k] += t_dw[k];
        if (nhwc) {
          const std::vector<float> o = nhwc_out();
          size_t bad = 0;
          for (size_t e = 0; e < outs; ++e) bad += o[e] != vector_out[e];
          if (bad > 0)
            differs += " variant " + std::to_string(k) + ": " + std::to_string(bad) + " outputs differ";
        }
      }
      CudnnConv conv(p, epi_act);
      conv.set_format(prec, nhwc);
      const void* cx = nhwc ? xs.get() : x.get();
      const void* cw = nhwc ? ws_t.get() : w.get();
      const void* cb = nhwc ? bs.get() : b.get();
      void* cy = nhwc ? ys.get() : y.get();
      conv.find(h, s, images, cx, cw, b.as<float>(), cb, nullptr, cy, ws.get(), ws_bytes);
      const float t_cudnn = bench::median_ms(s, repeats, [&] {
        conv.forward(h, s, images, cx, cw, b.as<float>(), cb, nullptr, cy, ws.get(), ws_bytes);
      });
      tot_cudnn += t_cudnn;
      std::printf("%-4d %5d %4d %2d %2d |", i++, l.c, l.h, l.stride, l.k);
      for (float t : t_dw) std::printf(" %9.4f", t);
      std::printf(" %9.4f %6.2fx | %s%s\n", t_cudnn, t_cudnn / t_dw[0], conv.algo_name().c_str(),
                  differs.c_str());
    }
    std::printf("total                   |");
    for (double t : tot_dw) std::printf(" %9.4f", t);
    std::printf(" %9.4f %6.2fx\n", tot_cudnn, tot_cudnn / tot_dw[0]);
    CUDA_CHECK(cudaStreamDestroy(s));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "depthwise_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
