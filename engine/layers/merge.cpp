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

}  // namespace cnnrun
