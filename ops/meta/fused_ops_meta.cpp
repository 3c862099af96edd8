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

std::tuple<at::Tensor, at::Tensor> fused_linear_relu_masked_meta(
    const at::Tensor& input, const at::Tensor& weight, const OptionalTensor& bias) {
  at::Tensor out = fused_linear_relu_meta(input, weight, bias);
  at::Tensor bits = at::empty_symint(
      {sym_batch_rows(input), relu_mask_row_bytes(weight.sym_size(0))}, input.options().dtype(at::kByte));
  return {out, bits};
}

at::Tensor relu_mask_backward_meta(const at::Tensor& grad, const at::Tensor& mask) {
  check_relu_mask("_relu_mask_backward", grad, mask);
  return at::empty_symint(grad.sym_sizes(), grad.options());
}

std::vector<at::Tensor> fused_linear_relu_backward_meta(
    const at::Tensor& grad_out,
    const at::Tensor& input,
    const at::Tensor& weight,
    const at::Tensor& relu_mask,
    bool input_grad,
    bool weight_grad,
    bool bias_grad) {
  check_linear_relu_backward_args("_fused_linear_relu_backward", grad_out, input, weight, relu_mask);
  auto empty_if = [&](bool wanted, c10::SymIntArrayRef sizes) {
    return wanted ? at::empty_symint(sizes, input.options()) : at::Tensor();
  };
  return defined_grads({empty_if(input_grad, input.sym_sizes()), empty_if(weight_grad, weight.sym_sizes()),
                        empty_if(bias_grad, {weight.sym_size(0)})});
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

std::vector<at::Tensor> fused_mlp_backward_meta(
    const at::Tensor& grad_out, const at::Tensor& input, at::TensorList weights, at::TensorList saved_outputs,
    const c10::List<bool>& has_bias, bool relu_last, bool input_grad, bool params_grad) {
  check_mlp_backward_args("_fused_mlp_backward", grad_out, input, weights, saved_outputs, has_bias, relu_last);
  std::vector<at::Tensor> grads;
  if (params_grad) {
    for (const at::Tensor& w : weights) {
      grads.push_back(at::empty_symint(w.sym_sizes(), w.options()));
    }
    for (size_t i = 0; i < weights.size(); ++i) {
      if (has_bias.get(i)) {
        grads.push_back(at::empty_symint({weights[i].sym_size(0)}, input.options()));
      }
    }
  }
  if (input_grad) {
    grads.push_back(at::empty_symint(input.sym_sizes(), input.options()));
  }
  return grads;
}

}  // namespace hypatia::ops
