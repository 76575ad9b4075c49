// add, concat and mul: the layers that join branches. add sums two or more inputs of one shape;
// concat stacks two or more inputs of one height and width along the channels, in the order
// the inputs are named; mul multiplies two or more inputs elementwise, where an input of
// C x 1 x 1 is broadcast over the others' H x W (squeeze-and-excitation's channel scaling).
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

struct MulParams {
  // Derived at bind time, one per input: true when that input is C x 1 x 1 and is broadcast over
  // the output's H x W (output H x W above 1x1).
  std::vector<bool> broadcast;
};

class MulLayer : public Layer {
 public:
  MulParams p;
  void parse(ParamReader&) override {}
  // Every input has the output's channels, and either its height and width or 1 x 1.
  Shape infer_shape(const std::vector<Shape>& in) const override;
  void bind(const std::vector<Shape>& in) override;
  int min_inputs() const override { return 2; }
  int max_inputs() const override { return 1 << 20; }
};

}  // namespace cnnrun
