#include "engine/layers/simple.h"

namespace cnnrun {

void DropoutLayer::parse(ParamReader& r) {
  p.rate = r.get_double("rate", 0.5);
  if (!(p.rate >= 0.0 && p.rate < 1.0)) r.fail("rate", "expected a number in [0, 1)");
}

}  // namespace cnnrun
