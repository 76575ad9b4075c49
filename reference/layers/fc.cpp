// Fully connected as GEMMs over the block: out [n, O] = in [n, I] x weight^T + bias, the input
// rows being each image's CHW values (PyTorch's nn.Linear after flatten).
//
// An image's result may not depend on which images share its block: a run cut into other
// blocks (another --block, the shards of MPI ranks, a --validate chunk) must give the same bits.
// Eigen's product does not promise that (a 1-row product is a GEMV, and the rows left over from
// its register panels take other code), so the rows go through GEMMs of exactly kRows rows, the
// last one padded with zero rows: every row then takes the same path through the same blocking.
#include "engine/layers/fc.h"

#include <algorithm>
#include <cstring>

#include "reference/cpu_layers.h"

namespace cnnrun::ref {

namespace {
constexpr int64_t kRows = 64;  // a multiple of every register panel Eigen uses for float
}  // namespace

void forward_fc(const Layer& l, const std::vector<const float*>& in, int64_t n, float* out, Workspace&) {
  using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const FcParams& p = layer_as<FcLayer>(l).p;
  Eigen::Map<const RowMatrix> weight(l.weight("weight").ptr(), p.outputs, p.inputs);
  RowMatrix last_in, last_out;  // the padded last chunk, when n is not a multiple of kRows
  for (int64_t r = 0; r < n; r += kRows) {
    const int64_t rows = std::min(kRows, n - r);
    const float* x_rows = in[0] + r * p.inputs;
    float* y_rows = out + r * p.outputs;
    if (rows == kRows) {
      Eigen::Map<const RowMatrix> x(x_rows, kRows, p.inputs);
      Eigen::Map<RowMatrix> y(y_rows, kRows, p.outputs);
      y.noalias() = x * weight.transpose();
    } else {
      last_in = RowMatrix::Zero(kRows, p.inputs);
      std::memcpy(last_in.data(), x_rows, static_cast<size_t>(rows * p.inputs) * sizeof(float));
      last_out.resize(kRows, p.outputs);
      last_out.noalias() = last_in * weight.transpose();
      std::memcpy(y_rows, last_out.data(), static_cast<size_t>(rows * p.outputs) * sizeof(float));
    }
  }
  Eigen::Map<RowMatrix> y(out, n, p.outputs);
  if (p.bias) y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(l.weight("bias").ptr(), p.outputs);
}

}  // namespace cnnrun::ref
