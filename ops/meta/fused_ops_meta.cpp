// Meta kernels: shapes and dtypes only, on symbolic sizes, so that FakeTensor,
// torch.compile and torch.export trace the ops without running them.
#include "ops/checks.h"
#include "ops/fused_ops.h"

#include <ATen/ops/empty.h>

namespace hypatia::ops {

at::Tensor fused_linear_relu_meta(const at::Tensor& input, const at::Tensor& weight, const OptionalTensor& bias) {
  check_linear_args("fused_linear_relu", input, weight, bias);
  return at::empty_symint(linear_output_shape(input, weight.sym_size(0)), input.options());
}

std::vector<at::Tensor> fused_mlp_forward_meta(
    const at::Tensor& input, at::TensorList weights, const OptionalTensorList& biases, bool relu_last) {
  check_mlp_args("fused_mlp", input, weights, biases);
  std::vector<at::Tensor> outputs;
  outputs.reserve(weights.size());
  for (const at::Tensor& w : weights) {
    outputs.push_back(at::empty_symint(linear_output_shape(input, w.sym_size(0)), input.options()));
  }
  return outputs;
}

at::Tensor fused_mlp_meta(
    const at::Tensor& input, at::TensorList weights, const OptionalTensorList& biases, bool relu_last) {
  check_mlp_args("fused_mlp", input, weights, biases);
  return at::empty_symint(linear_output_shape(input, weights.back().sym_size(0)), input.options());
}

}  // namespace hypatia::ops
