#include "engine/layers/merge.h"

namespace cnnrun {

Shape AddLayer::infer_shape(const std::vector<Shape>& in) const {
  for (size_t i = 1; i < in.size(); ++i)
    if (in[i] != in[0])
      throw Error("inputs must have one shape: '" + input_names[0] + "' gives " + in[0].str() + ", '" +
                  input_names[i] + "' gives " + in[i].str());
  return in[0];
}

Shape ConcatLayer::infer_shape(const std::vector<Shape>& in) const {
  Shape o = in[0];
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i].h != in[0].h || in[i].w != in[0].w)
      throw Error("inputs must have one height and width: '" + input_names[0] + "' gives " + in[0].str() +
                  ", '" + input_names[i] + "' gives " + in[i].str());
    o.c = checked_add(o.c, in[i].c, "concat channels");
  }
  return o;
}

Shape MulLayer::infer_shape(const std::vector<Shape>& in) const {
  // The output is the first input that is not 1x1 (or the first input when all are).
  size_t big = 0;
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i].h != 1 || in[i].w != 1) {
      big = i;
      break;
    }
  for (size_t i = 0; i < in.size(); ++i) {
    const bool ok = in[i].c == in[big].c &&
                    ((in[i].h == in[big].h && in[i].w == in[big].w) || (in[i].h == 1 && in[i].w == 1));
    if (!ok)
      throw Error(
          "inputs must have one shape, or be C x 1 x 1 with the same channels (broadcast over height "
          "and width): '" +
          input_names[big] + "' gives " + in[big].str() + ", '" + input_names[i] + "' gives " + in[i].str());
  }
  return in[big];
}

void MulLayer::bind(const std::vector<Shape>& in) {
  const Shape o = infer_shape(in);
  p.broadcast.clear();
  for (const Shape& s : in) p.broadcast.push_back(s != o);
}

}  // namespace cnnrun
