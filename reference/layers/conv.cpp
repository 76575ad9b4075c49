// Convolution as im2col + one GEMM per image and group: the columns matrix [Cg*KH*KW, OH*OW]
// holds, for every output position, the input window it sees in the group's Cg = C/groups
// channels (taps `dilation` apart; zeros where the window hangs over the padding; the image is
// first copied inside its zero border so that gathering the windows needs no bounds tests), so
// the group's Fg = F/groups filters are weight rows [Fg, Cg*KH*KW] x columns, plus the bias.
// This is the definition every GPU algorithm is judged by, so it is written to be read; one
// image at a time keeps the columns in the L2 cache, and the GEMM's output [Fg, OH*OW] is
// already that group's CHW output. A depthwise convolution (Cg = 1: one channel per group, Fg
// filters reading it) is computed directly instead, tap by tap along each output row of the
// padded plane: its GEMMs would be 1 x KH*KW by KH*KW x OH*OW per filter, all overhead
// (MobileNetV2 at 224x224 spent a third of its CPU time there).
#include "engine/layers/conv.h"

#include <algorithm>

#include "reference/cpu_layers.h"

namespace cnnrun::ref {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The image inside a zero border of pad_h rows and pad_w columns, so that every window the
// convolution looks at lies inside it.
void pad_image(const ConvParams& p, const float* img, float* padded) {
  const int64_t hp = p.in_h + 2 * p.pad_h, wp = p.in_w + 2 * p.pad_w;
  std::fill(padded, padded + p.in_c * hp * wp, 0.f);
  for (int64_t c = 0; c < p.in_c; ++c)
    for (int64_t y = 0; y < p.in_h; ++y) {
      const float* src = img + (c * p.in_h + y) * p.in_w;
      std::copy(src, src + p.in_w, padded + (c * hp + y + p.pad_h) * wp + p.pad_w);
    }
}

// One group's columns from the image's padded planes: row (c, ky, kx) for the group's channels
// c0 .. c0+Cg-1, column (oy, ox), holding padded[c][oy*stride_h + ky*dilation_h][ox*stride_w +
// kx*dilation_w]. With the border in place no window needs a bounds test, so the copy is one
// branch-free loop per output row.
void im2col(const ConvParams& p, const float* padded, int64_t c0, float* cols) {
  const int64_t hp = p.in_h + 2 * p.pad_h, wp = p.in_w + 2 * p.pad_w;
  float* dst = cols;
  for (int64_t c = c0; c < c0 + p.group_channels(); ++c)
    for (int64_t ky = 0; ky < p.kernel_h; ++ky)
      for (int64_t kx = 0; kx < p.kernel_w; ++kx)
        for (int64_t oy = 0; oy < p.out_h; ++oy) {
          const float* src = padded + (c * hp + oy * p.stride_h + ky * p.dilation_h) * wp + kx * p.dilation_w;
          if (p.stride_w == 1)  // a separate loop, so the common case vectorises
            for (int64_t ox = 0; ox < p.out_w; ++ox) dst[ox] = src[ox];
          else
            for (int64_t ox = 0; ox < p.out_w; ++ox) dst[ox] = src[ox * p.stride_w];
          dst += p.out_w;
        }
}

// Stride 1 on a plane of at most this many floats of padded rows: taps summed over the whole plane
// at once (one long loop per tap, in L1) rather than row by row (short loops on small planes).
constexpr int64_t kFlatPlaneFloats = 4096;

bool flat_plane(const ConvParams& p) {
  return p.stride_h == 1 && p.stride_w == 1 && p.out_h * (p.in_w + 2 * p.pad_w) <= kFlatPlaneFloats;
}

// A depthwise convolution (one input channel per group) of one image from its padded planes
// (`padded`: hp x wp each): y[f][oy][ox] = bias[f] + sum over (ky, kx) of w[f][ky][kx] *
// padded[f / Fg][oy*stride_h + ky*dilation_h][ox*stride_w + kx*dilation_w], the taps in (ky, kx)
// order. Large planes go an output row at a time (it stays in L1), stride 1 across in its own
// loop so that it vectorises. Small stride-1 planes (flat_plane) go a whole plane at a time in
// `scratch` (out_h x wp: position oy*wp + ox reads padded position oy*wp + ox + the tap's offset,
// so a tap is one contiguous loop; the columns past out_w are never copied out).
void depthwise(const ConvParams& p, const float* padded, const float* w, const float* bias, float* y,
               float* scratch) {
  const int64_t hp = p.in_h + 2 * p.pad_h, wp = p.in_w + 2 * p.pad_w;
  const int64_t fg = p.group_filters(), taps = p.kernel_h * p.kernel_w;
  const bool flat = flat_plane(p);
  for (int64_t f = 0; f < p.filters; ++f) {
    const float* plane = padded + (f / fg) * hp * wp;
    const float* wf = w + f * taps;
    const float b = bias ? bias[f] : 0.f;
    if (flat) {
      const int64_t len = (p.out_h - 1) * wp + p.out_w;
      std::fill(scratch, scratch + len, 0.f);
      for (int64_t ky = 0; ky < p.kernel_h; ++ky)
        for (int64_t kx = 0; kx < p.kernel_w; ++kx) {
          const float wv = wf[ky * p.kernel_w + kx];
          const float* src = plane + ky * p.dilation_h * wp + kx * p.dilation_w;
          for (int64_t j = 0; j < len; ++j) scratch[j] += wv * src[j];
        }
      for (int64_t oy = 0; oy < p.out_h; ++oy) {
        float* dst = y + (f * p.out_h + oy) * p.out_w;
        const float* row = scratch + oy * wp;
        for (int64_t ox = 0; ox < p.out_w; ++ox) dst[ox] = bias ? row[ox] + b : row[ox];
      }
      continue;
    }
    for (int64_t oy = 0; oy < p.out_h; ++oy) {
      float* dst = y + (f * p.out_h + oy) * p.out_w;
      std::fill(dst, dst + p.out_w, 0.f);
      for (int64_t ky = 0; ky < p.kernel_h; ++ky)
        for (int64_t kx = 0; kx < p.kernel_w; ++kx) {
          const float wv = wf[ky * p.kernel_w + kx];
          const float* src = plane + (oy * p.stride_h + ky * p.dilation_h) * wp + kx * p.dilation_w;
          if (p.stride_w == 1)
            for (int64_t ox = 0; ox < p.out_w; ++ox) dst[ox] += wv * src[ox];
          else
            for (int64_t ox = 0; ox < p.out_w; ++ox) dst[ox] += wv * src[ox * p.stride_w];
        }
      if (bias)
        for (int64_t ox = 0; ox < p.out_w; ++ox) dst[ox] += b;
    }
  }
}

bool is_depthwise(const ConvParams& p) { return p.group_channels() == 1 && p.groups > 1; }

}  // namespace

const char* conv_algo(const Layer& l) {
  return is_depthwise(layer_as<ConvLayer>(l).p) ? "depthwise" : "im2col+gemm";
}

int64_t conv_workspace_floats(const Layer& l) {
  const ConvParams& p = layer_as<ConvLayer>(l).p;
  const bool pointwise = p.kernel_h == 1 && p.kernel_w == 1 && p.stride_h == 1 && p.stride_w == 1 &&
                         p.pad_h == 0 && p.pad_w == 0;
  if (pointwise && !is_depthwise(p)) return 0;
  const int64_t padded =
      p.pad_h > 0 || p.pad_w > 0 ? p.in_c * (p.in_h + 2 * p.pad_h) * (p.in_w + 2 * p.pad_w) : 0;
  if (is_depthwise(p)) return padded + (flat_plane(p) ? kFlatPlaneFloats : 0);  // no columns
  return p.in_c * p.kernel_h * p.kernel_w * p.out_h * p.out_w + padded;
}

void forward_conv(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out, Workspace& ws) {
  const ConvParams& p = layer_as<ConvLayer>(l).p;
  const int64_t cg = p.group_channels(), fg = p.group_filters();
  const int64_t k = cg * p.kernel_h * p.kernel_w;
  const int64_t positions = p.out_h * p.out_w;
  const int64_t in_size = p.in_c * p.in_h * p.in_w;
  Eigen::Map<const RowMatrix> weight(l.weight("weight").ptr(), p.filters, k);
  const float* bias = p.bias ? l.weight("bias").ptr() : nullptr;
  // A 1x1 kernel with stride 1 and no padding sees the input itself: a group's columns are its
  // channels' planes.
  const bool pointwise = p.kernel_h == 1 && p.kernel_w == 1 && p.stride_h == 1 && p.stride_w == 1 &&
                         p.pad_h == 0 && p.pad_w == 0;
  const bool padded = p.pad_h > 0 || p.pad_w > 0;
  const int64_t padded_size = p.in_c * (p.in_h + 2 * p.pad_h) * (p.in_w + 2 * p.pad_w);
  if (is_depthwise(p)) {
    float* pad_buf = ws.columns(static_cast<size_t>(conv_workspace_floats(l)));
    float* scratch = pad_buf + (padded ? padded_size : 0);
    for (int64_t i = 0; i < n; ++i) {
      const float* img = in[0] + i * in_size;
      if (padded) pad_image(p, img, pad_buf);
      depthwise(p, padded ? pad_buf : img, l.weight("weight").ptr(), bias, out + i * p.filters * positions,
                scratch);
    }
    return;
  }
  float* cols =
      pointwise ? nullptr : ws.columns(static_cast<size_t>(k * positions + (padded ? padded_size : 0)));
  float* pad_buf = pointwise ? nullptr : cols + k * positions;

  for (int64_t i = 0; i < n; ++i) {
    const float* img = in[0] + i * in_size;
    if (!pointwise && padded) pad_image(p, img, pad_buf);
    for (int64_t g = 0; g < p.groups; ++g) {
      if (!pointwise) im2col(p, padded ? pad_buf : img, g * cg, cols);
      Eigen::Map<const RowMatrix> columns(pointwise ? img + g * cg * p.in_h * p.in_w : cols, k, positions);
      Eigen::Map<RowMatrix> y(out + (i * p.filters + g * fg) * positions, fg, positions);
      y.noalias() = weight.middleRows(g * fg, fg) * columns;
      if (bias) y.colwise() += Eigen::Map<const Eigen::VectorXf>(bias + g * fg, fg);
    }
  }
}

}  // namespace cnnrun::ref
