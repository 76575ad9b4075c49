#include "engine/layers/activation.h"

namespace cnnrun {

const char* act_name(ActKind k) {
  switch (k) {
    case ActKind::kRelu:
      return "relu";
    case ActKind::kTanh:
      return "tanh";
    case ActKind::kSigmoid:
      return "sigmoid";
    case ActKind::kRelu6:
      return "relu6";
    case ActKind::kLeakyRelu:
      return "leaky_relu";
    case ActKind::kHardswish:
      return "hardswish";
    case ActKind::kHardsigmoid:
      return "hardsigmoid";
    case ActKind::kSilu:
      return "silu";
    case ActKind::kGelu:
      return "gelu";
    case ActKind::kGeluTanh:
      return "gelu(tanh)";
    case ActKind::kNone:
      break;
  }
  return "none";
}

void ActivationLayer::parse(ParamReader& r) {
  if (p.kind == ActKind::kLeakyRelu) {
    const double s = r.get_double("slope", 0.01);
    p.slope = static_cast<float>(s);
  } else if (p.kind == ActKind::kGelu) {
    const std::string a = r.get_string("approximate", "none");
    if (a == "tanh")
      p.kind = ActKind::kGeluTanh;
    else if (a != "none")
      r.fail("approximate", "expected none or tanh, found '" + a + "'");
  }
}

}  // namespace cnnrun
