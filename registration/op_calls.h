#pragma once
// Typed calls into the dispatcher of the private ops, for kernels (autograd) that call the ops below
// them; the public ops' are in <hypatia/ops.h>.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <utility>
#include <vector>

namespace hypatia::op_calls {

inline std::tuple<at::Tensor, at::Tensor> fused_linear_relu_masked(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("hypatia::_fused_linear_relu_masked", "")
          .typed<std::tuple<at::Tensor, at::Tensor>(
              const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&)>();
  return op.call(input, weight, bias);
}

inline at::Tensor relu_mask_backward(const at::Tensor& grad, const at::Tensor& mask) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("hypatia::_relu_mask_backward", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  return op.call(grad, mask);
}

inline std::vector<at::Tensor> fused_linear_relu_backward(
    const at::Tensor& grad_out,
    const at::Tensor& input,
    const at::Tensor& weight,
    const at::Tensor& relu_mask,
    bool input_grad,
    bool weight_grad,
    bool bias_grad) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("hypatia::_fused_linear_relu_backward", "")
                             .typed<std::vector<at::Tensor>(
                                 const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, bool, bool,
                                 bool)>();
  return op.call(grad_out, input, weight, relu_mask, input_grad, weight_grad, bias_grad);
}

inline std::vector<at::Tensor> fused_mlp_forward(
    const at::Tensor& input,
    at::TensorList weights,
    const c10::List<std::optional<at::Tensor>>& biases,
    bool relu_last) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("hypatia::_fused_mlp_forward", "")
                             .typed<std::vector<at::Tensor>(
                                 const at::Tensor&, at::TensorList, const c10::List<std::optional<at::Tensor>>&, bool)>();
  return op.call(input, weights, biases, relu_last);
}

// Boxed, so that the gradient and saved outputs moved in here reach the kernel as its own
// (registration/mlp_backward_boxed.h): it frees each after its last use.
inline std::vector<at::Tensor> fused_mlp_backward(
    at::Tensor grad_out,
    const at::Tensor& input,
    at::TensorList weights,
    std::vector<at::Tensor> saved_outputs,
    const c10::List<bool>& has_bias,
    bool relu_last,
    bool input_grad,
    bool params_grad) {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("hypatia::_fused_mlp_backward", "");
  torch::jit::Stack stack;
  stack.reserve(8);
  stack.emplace_back(std::move(grad_out));
  stack.emplace_back(input);
  stack.emplace_back(weights);
  stack.emplace_back(std::move(saved_outputs));
  stack.emplace_back(has_bias);
  stack.emplace_back(relu_last);
  stack.emplace_back(input_grad);
  stack.emplace_back(params_grad);
  op.callBoxed(&stack);
  return std::move(stack.back()).toTensorVector();
}

}  // namespace hypatia::op_calls
