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
    case ActKind::kNone:
      break;
  }
  return "none";
}

}  // namespace cnnrun
