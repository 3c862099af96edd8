// The one place the hypatia ops' schemas are written.
#include <torch/library.h>

TORCH_LIBRARY(hypatia, m) {
  const std::vector<at::Tag> tags = {at::Tag::pt2_compliant_tag};
  // relu(input @ weight.T + bias); input [*, in_features].
  m.def("fused_linear_relu(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor", tags);
  // Linear layers with ReLU between them, and after the last one too when relu_last.
  m.def("fused_mlp(Tensor input, Tensor[] weights, Tensor?[] biases, bool relu_last=False) -> Tensor", tags);
  // fused_linear_relu's CUDA training forward: the output and its ReLU mask as bits (ops/checks.h).
  m.def("_fused_linear_relu_masked(Tensor input, Tensor weight, Tensor? bias=None) -> (Tensor, Tensor)", tags);
  // The gradient through that ReLU: grad where the mask bit is set, 0 elsewhere.
  m.def("_relu_mask_backward(Tensor grad, Tensor mask) -> Tensor", tags);
  // fused_linear_relu's backward from its input, weight and that mask: [grad_input if input_grad,
  // grad_weight if weight_grad, grad_bias if bias_grad].
  m.def(
      "_fused_linear_relu_backward(Tensor grad_out, Tensor input, Tensor weight, Tensor relu_mask, bool input_grad, "
      "bool weight_grad, bool bias_grad) -> Tensor[]",
      tags);
  // fused_mlp's training forward: every layer's output (post-activation), which its backward reads.
  m.def("_fused_mlp_forward(Tensor input, Tensor[] weights, Tensor?[] biases, bool relu_last) -> Tensor[]", tags);
  // fused_mlp's backward from those outputs (of the layers a ReLU follows): [grad_weights...,
  // grad_biases of the layers with has_bias...] when params_grad, then grad_input when input_grad.
  m.def(
      "_fused_mlp_backward(Tensor grad_out, Tensor input, Tensor[] weights, Tensor[] saved_outputs, bool[] has_bias, "
      "bool relu_last, bool input_grad, bool params_grad) -> Tensor[]",
      tags);
}
