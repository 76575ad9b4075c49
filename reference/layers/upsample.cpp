// Upsampling (engine/layers/upsample.h says where each output comes from): nearest copies the
// input upsample_nearest() names; bilinear blends the four inputs around the source position
// upsample_tap() gives, rows first weighted as PyTorch writes it:
// (1-wy) * ((1-wx) a + wx b) + wy * ((1-wx) c + wx d).
#include "engine/layers/upsample.h"

#include "reference/cpu_layers.h"

namespace cnnrun::ref {

void forward_upsample(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out,
                      Workspace&) {
  const UpsampleParams& p = layer_as<UpsampleLayer>(l).p;
  const Shape& is = l.in_shapes[0];
  const Shape& os = l.out_shape;
  for (int64_t plane = 0; plane < n * is.c; ++plane) {
    const float* src = in[0] + plane * is.h * is.w;
    float* dst = out + plane * os.h * os.w;
    for (int64_t oy = 0; oy < os.h; ++oy)
      for (int64_t ox = 0; ox < os.w; ++ox) {
        float v;
        if (p.mode == UpsampleMode::kNearest) {
          v = src[upsample_nearest(oy, p.y) * is.w + upsample_nearest(ox, p.x)];
        } else {
          const LerpTap ty = upsample_tap(oy, p.y, p.align_corners);
          const LerpTap tx = upsample_tap(ox, p.x, p.align_corners);
          const float* r0 = src + ty.i0 * is.w;
          const float* r1 = src + ty.i1 * is.w;
          v = (1.f - ty.w1) * ((1.f - tx.w1) * r0[tx.i0] + tx.w1 * r0[tx.i1]) +
              ty.w1 * ((1.f - tx.w1) * r1[tx.i0] + tx.w1 * r1[tx.i1]);
        }
        dst[oy * os.w + ox] = v;
      }
  }
}

}  // namespace cnnrun::ref
