// Layers without parameters of their own or with one or two: flatten, softmax, dropout.
// Each is a few lines; keeping them in one file pair keeps the tree readable.
#pragma once

#include "engine/layer.h"

namespace cnnrun {

// flatten: C x H x W -> (C*H*W) x 1 x 1, data unchanged (CHW order).
class FlattenLayer : public Layer {
 public:
  void parse(ParamReader&) override {}
  Shape infer_shape(const std::vector<Shape>& in) const override { return {in[0].size(), 1, 1}; }
  unsigned caps() const override { return kCapIdentity; }
};

// softmax over the channels at each spatial position (over the classes for C x 1 x 1).
class SoftmaxLayer : public Layer {
 public:
  void parse(ParamReader&) override {}
  Shape infer_shape(const std::vector<Shape>& in) const override { return in[0]; }
};

// dropout: identity at inference; `rate` in [0, 1) is accepted and checked for the record.
struct DropoutParams {
  double rate = 0.5;
};
class DropoutLayer : public Layer {
 public:
  DropoutParams p;
  void parse(ParamReader& r) override;
  Shape infer_shape(const std::vector<Shape>& in) const override { return in[0]; }
  unsigned caps() const override { return kCapIdentity; }
};

}  // namespace cnnrun
