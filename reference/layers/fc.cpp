// Fully connected as one GEMM over the block: out [n, O] = in [n, I] x weight^T + bias, the
// input rows being each image's CHW values (PyTorch's nn.Linear after flatten).
#include "engine/layers/fc.h"

#include "reference/cpu_layers.h"

namespace cnnrun::ref {

void forward_fc(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out, Workspace&) {
  using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const FcParams& p = layer_as<FcLayer>(l).p;
  Eigen::Map<const RowMatrix> x(in[0], n, p.inputs);
  Eigen::Map<const RowMatrix> weight(l.weight("weight").ptr(), p.outputs, p.inputs);
  Eigen::Map<RowMatrix> y(out, n, p.outputs);
  y.noalias() = x * weight.transpose();
  if (p.bias) y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(l.weight("bias").ptr(), p.outputs);
}

}  // namespace cnnrun::ref
