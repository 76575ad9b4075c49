// The planner: whether the implicit kernels can run a convolution (and why not), and how it is
// cut into thread blocks, stage buffers and a patch pitch chosen against shared-memory bank
// conflicts. Host code only; the configs are cached by their inputs.
#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "engine/gpu/conv2d_implicit.h"
#include "engine/gpu/implicit/tiling.h"

namespace cnnrun::gpu {

using namespace implicit;  // the tiling constants

namespace {

// Shared-memory wavefronts of the first warp's pixel loads for a patch pitch: without the pool
// one 4-byte load per lane; with it one 8-byte load per lane, served as two half-warps.
int pixel_wavefronts(bool pool, const ConvParams& p, int g, int r, int ow, int pitch, int patch_img, int xs) {
  std::vector<int64_t> words;  // (phase, word) pairs flattened
  int total = 0;
  auto count = [&](const std::vector<int64_t>& ws) {
    std::map<int, std::vector<int64_t>> bank;
    for (int64_t w : ws) {
      auto& v = bank[static_cast<int>(w % 32)];
      if (std::find(v.begin(), v.end(), w) == v.end()) v.push_back(w);
    }
    size_t worst = 0;
    for (auto& kv : bank) worst = std::max(worst, kv.second.size());
    return static_cast<int>(worst);
  };
  if (pool) {
    const int pw = ow / 2, wins_img = (r / 2) * pw;
    for (int phase = 0; phase < 2; ++phase) {
      words.clear();
      for (int lane = phase * 16; lane < phase * 16 + 16; ++lane) {
        if (lane >= g * wins_img) break;
        const int64_t o = static_cast<int64_t>(lane / wins_img) * patch_img +
                          2 * ((lane % wins_img) / pw) * pitch + 2 * (lane % pw) + xs;
        words.push_back(o);
        words.push_back(o + 1);
      }
      total += count(words);
    }
  } else {
    words.clear();
    for (int q = 0; q < 32 && q < g * r * ow; ++q)
      words.push_back(static_cast<int64_t>(q / (r * ow)) * patch_img + ((q / ow) % r) * p.stride_h * pitch +
                      (q % ow) * p.stride_w + xs);
    total = count(words);
  }
  return total;
}

}  // namespace

int implicit_bm(int64_t filters) {
  if (filters > 24) return 32;  // more filters: several thread blocks along M
  int bm = static_cast<int>((filters + 3) / 4 * 4);
  return bm < 8 ? 8 : bm;
}

ImplicitConfig implicit_config_uncached(const ConvParams& p, int64_t n, ImplicitFusion fuse);

// The executor asks for a config at every launch (and auto times launches, host work included);
// the pitch search simulates bank conflicts with small maps, so configs are kept by their inputs.
ImplicitConfig implicit_config(const ConvParams& p, int64_t n, ImplicitFusion fuse) {
  // Checked before the cache, whose key is the dense shape: the kernel's patch and tap offsets
  // are for dense, undilated convolutions.
  if (p.groups != 1 || p.dilated()) {
    ImplicitConfig c;
    c.fuse = fuse;
    c.why = p.groups != 1 ? "grouped convolution (" + std::to_string(p.groups) +
                                " groups): the implicit kernel computes dense convolutions only"
                          : "dilated convolution (dilation " + std::to_string(p.dilation_h) + "x" +
                                std::to_string(p.dilation_w) + "): the implicit kernel's taps are adjacent";
    return c;
  }
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, int64_t, int>;
  const Key key{p.filters, p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w,
                p.in_c,    p.in_h,     p.in_w,     p.out_h,    p.out_w,    n};
  const int flags = (fuse.pool ? 1 : 0) | (fuse.u8_input ? 2 : 0) | (fuse.tensor_core ? 4 : 0) |
                    (fuse.row_copies ? 0 : 8) | (fuse.avg_pool ? 16 : 0);
  static std::mutex mu;
  static std::map<std::pair<Key, int>, ImplicitConfig> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find({key, flags});
    if (it != cache.end()) {
      ImplicitConfig c = it->second;
      c.fuse = fuse;  // the precision is not part of the shape
      return c;
    }
  }
  ImplicitConfig c = implicit_config_uncached(p, n, fuse);
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() > 4096) cache.clear();  // block sizes vary little; never grow without bound
  cache.emplace(std::make_pair(key, flags), c);
  return c;
}

ImplicitConfig implicit_config_uncached(const ConvParams& p, int64_t n, ImplicitFusion fuse) {
  ImplicitConfig c;
  c.fuse = fuse;
  c.bm = implicit_bm(p.filters);
  c.m_tiles = static_cast<int>((p.filters + c.bm - 1) / c.bm);
  const bool pool = fuse.pool;
  if (fuse.avg_pool && !(pool && fuse.tensor_core)) {
    c.why = "the fused average pool is the tensor-core kernel's (pool and tensor_core)";
    return c;
  }
  const int64_t khkw = p.kernel_h * p.kernel_w, kk = p.in_c * khkw;
  if (fuse.tensor_core) {
    if (!pool || p.filters > 32 || kk > kTcMaxK) {
      c.why = "the tensor-core kernel is for the fused pool, at most 32 filters and " +
              std::to_string(kTcMaxK) + " taps";
      return c;
    }
    c.tc_nt = static_cast<int>((p.filters + 7) / 8);
    c.k_pad = static_cast<int>((kk + 7) / 8 * 8);
    c.bm = c.tc_nt * 8;
    c.m_tiles = 1;
  }
  int64_t oh = p.out_h, ow = p.out_w;
  int64_t g = 1, r = oh;
  if (pool) {
    if (p.stride_h != 1 || p.stride_w != 1) {
      c.why = "the fused pool needs a stride-1 convolution";
      return c;
    }
    oh = oh / 2 * 2, ow = ow / 2 * 2;  // the pool floors: an odd last row/column is never read
    if (oh < 2 || ow < 2) {
      c.why = "output too small for a 2x2 pool";
      return c;
    }
    if (ow / 2 > kTileWindows) {
      c.why = "pooled rows of " + std::to_string(ow / 2) + " exceed the kernel's tile of " +
              std::to_string(kTileWindows) + " windows";
      return c;
    }
    const int64_t wins = (oh / 2) * (ow / 2);
    if (wins >= kTileWindows)
      r = 2 * std::min<int64_t>(oh / 2, kTileWindows / (ow / 2));
    else
      g = std::max<int64_t>(1, std::min<int64_t>(kTileWindows / wins, n));
  } else {
    if (ow > kTilePixels) {
      c.why = "output rows of " + std::to_string(ow) + " pixels exceed the kernel's tile of " +
              std::to_string(kTilePixels);
      return c;
    }
    const int64_t pix = oh * ow;
    if (pix >= kTilePixels)
      r = std::min<int64_t>(oh, kTilePixels / ow);
    else
      g = std::max<int64_t>(1, std::min<int64_t>(kTilePixels / pix, n));
  }
  // Weights per channel in a stage; tensor cores: hi and lo per tap and filter, plus the k-steps
  // of 8 that straddle a chunk's ends (one at each end).
  const size_t taps_bytes = static_cast<size_t>(khkw * c.bm) * sizeof(float) * (c.tc_nt ? 2 : 1);
  const size_t budget = (c.tc_nt >= 3 ? kTcStageBudget : kStageBudget) -
                        (c.tc_nt ? static_cast<size_t>(2 * c.tc_nt * 128) * sizeof(float) : 0);
  // Tensor cores: a k-step of 8 taps that straddles two chunks runs in both (conv2 of the CIFAR
  // net in 3-channel chunks ran 62 k-steps where 50 do), so the chunk size with the fewest
  // k-steps in all wins.
  auto ksteps = [&](int64_t cb) {
    int64_t t = 0;
    for (int64_t c0 = 0; c0 < p.in_c; c0 += cb)
      t += (std::min<int64_t>(p.in_c, c0 + cb) * khkw + 7) / 8 - c0 * khkw / 8;
    return t;
  };
  for (;;) {
    const int64_t ph = (r - 1) * p.stride_h + p.kernel_h, pw = (ow - 1) * p.stride_w + p.kernel_w;
    // The pitch: at least the patch width (even with the pool: its float2 loads), the candidate
    // with the fewest bank conflicts for the first warp, the narrowest of those.
    int64_t best_pitch = 0, best_cb = 0;
    int best_wf = 1 << 30;
    // Whole images per tile and rows of a multiple of 4 floats: the stages copy input rows 16
    // bytes at a time to a column xs + PW that is a multiple of 4 (the padding is zeroed once).
    const int64_t xs = (4 - p.pad_w % 4) % 4;
    const bool row_copy =
        !fuse.u8_input && r >= oh && p.in_w % 4 == 0 && (!pool || xs % 2 == 0) && fuse.row_copies;
    const int64_t need_w = std::max<int64_t>(pool ? (pw + 1) / 2 * 2 : pw, row_copy ? p.pad_w + p.in_w : 0);
    const int64_t pitch0 = row_copy ? (xs + need_w + 3) / 4 * 4 : need_w;
    // (A search for the tensor-core kernel's own load pattern, over any pitch, found pitches with
    // fewer simulated conflicts that ran 30 % slower: reverted, see docs/performance.md.)
    for (int k = 0; k < 16; ++k) {
      const int64_t pitch = pitch0 + (row_copy ? 4 * k : pool ? 2 * k : k);
      const size_t per_c = static_cast<size_t>(g * ph * pitch) * sizeof(float) + taps_bytes;
      int64_t cb = std::min<int64_t>(p.in_c, static_cast<int64_t>((budget - 16) / per_c));
      if (cb < 1) break;
      if (c.tc_nt && cb < p.in_c) {
        int64_t best = cb;
        for (int64_t x = cb - 1; x >= 1; --x)
          if (ksteps(x) < ksteps(best)) best = x;
        cb = best;  // the last chunk may be the short one
      } else {
        const int64_t chunks = (p.in_c + cb - 1) / cb;
        cb = (p.in_c + chunks - 1) / chunks;  // even chunks
      }
      const int wf = pixel_wavefronts(pool, p, static_cast<int>(g), static_cast<int>(r), static_cast<int>(ow),
                                      static_cast<int>(pitch), static_cast<int>(cb * ph * pitch),
                                      row_copy ? static_cast<int>(xs) : 0);
      if (wf < best_wf) best_wf = wf, best_pitch = pitch, best_cb = cb;
    }
    // uint8 input: all channels in one stage and at most 4 KiB of pixels per tile; fewer images
    // per tile until that holds, so whether it fuses does not depend on n.
    const bool u8_short =
        fuse.u8_input && (best_cb < p.in_c || g * p.in_c * p.in_h * p.in_w > 4 * kU8Words * kThreads);
    if (best_cb >= 1 && !(u8_short && g > 1)) {
      const int64_t cb = best_cb, pitch = best_pitch;
      c.images = static_cast<int>(g);
      c.rows = static_cast<int>(r);
      c.row_tiles = static_cast<int>((oh + r - 1) / r);
      c.out_h = static_cast<int>(oh);
      c.out_w = static_cast<int>(ow);
      c.chunk_c = static_cast<int>(cb);
      c.patch_h = static_cast<int>(ph);
      c.patch_w = static_cast<int>(pw);
      c.pitch = static_cast<int>(pitch);
      c.row_copy = row_copy;
      c.xs = row_copy ? static_cast<int>(xs) : 0;
      c.patch_floats = static_cast<int>((g * cb * ph * pitch + 3) / 4 * 4);
      c.stage_floats = c.patch_floats + static_cast<int>(c.tc_nt ? ((cb * khkw + 7) / 8 + 1) * c.tc_nt * 128
                                                                 : cb * khkw * c.bm);
      c.smem = 2 * static_cast<size_t>(c.stage_floats) * sizeof(float) +
               (fuse.u8_input ? static_cast<size_t>(kU8Words * kThreads) * 4 : 0) +
               static_cast<size_t>(c.k_pad) * sizeof(int);
      c.chunks = static_cast<int>((p.in_c + cb - 1) / cb);
      c.grid_x = (n + g - 1) / g * c.row_tiles;  // tiles
      c.ok = true;
      if (c.grid_x > 0x7fffffff) {
        c.ok = false;
        c.why = "grid too large";
      }
      if (c.ok && fuse.u8_input) {
        if (c.row_tiles != 1 || c.chunks != 1)
          c.ok = false, c.why = "uint8 input needs whole images and all channels in one tile";
        else if (p.in_w % 4 != 0)
          c.ok = false, c.why = "uint8 input needs an input width that is a multiple of 4";
        else if (g * p.in_c * p.in_h * p.in_w > 4 * kU8Words * kThreads)
          c.ok = false,
          c.why = "uint8 input: more than " + std::to_string(4 * kU8Words * kThreads) + " bytes per tile";
      }
      return c;
    }
    if (g > 1) {
      g = (g + 1) / 2;
    } else if (pool ? r > 2 : r > 1) {
      r = pool ? 2 * ((r / 2 + 1) / 2) : (r + 1) / 2;
    } else {
      c.why = "one input channel's patch for a single output row does not fit in " +
              std::to_string(kStageBudget / 1024) + " KiB of shared memory";
      return c;
    }
  }
}

}  // namespace cnnrun::gpu
