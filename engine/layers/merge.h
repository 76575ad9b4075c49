// add and concat: the layers that join branches. add sums two or more inputs of one shape;
// concat stacks two or more inputs of one height and width along the channels, in the order
// the inputs are named.
#pragma once

#include "engine/layer.h"

namespace cnnrun {

class AddLayer : public Layer {
 public:
  void parse(ParamReader&) override {}
  Shape infer_shape(const std::vector<Shape>& in) const override;
  int min_inputs() const override { return 2; }
  int max_inputs() const override { return 1 << 20; }
};

class ConcatLayer : public Layer {
 public:
  void parse(ParamReader&) override {}
  Shape infer_shape(const std::vector<Shape>& in) const override;
  int min_inputs() const override { return 2; }
  int max_inputs() const override { return 1 << 20; }
};

}  // namespace cnnrun
