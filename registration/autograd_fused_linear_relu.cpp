// Autograd for fused_linear_relu: the forward saves input (where the weight gradient is wanted),
// weight and the ReLU mask (not the output) at 1 bit per element (_fused_linear_relu_masked). The
// backward is dgrad / wgrad / bias-sum on the masked gradient, one op (_fused_linear_relu_backward);
// under create_graph the same composition from differentiable ATen ops only, so double backward works too.
#include "ops/checks.h"
#include "ops/fused_ops.h"
#include "registration/op_calls.h"

#include <hypatia/ops.h>

#include <ATen/ops/ones_like.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

namespace hypatia {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Under create_graph: eager's ReLU backward from the mask, built from an op that autograd can
// differentiate (masked_fill), so that the whole backward, and with it double backward, is.
at::Tensor differentiable_mask_backward(const at::Tensor& grad, const at::Tensor& relu_mask) {
  const at::Tensor blocked = op_calls::relu_mask_backward(at::ones_like(grad), relu_mask).eq(0);
  return grad.masked_fill(blocked, 0);
}

class FusedLinearReLU : public torch::autograd::Function<FusedLinearReLU> {
 public:
  static at::Tensor forward(
      AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [out, relu_mask] = op_calls::fused_linear_relu_masked(input, weight, bias);
    // The input only where the weight gradient needs it (as eager's linear).
    ctx->save_for_backward({weight.requires_grad() ? input : ops::shape_only(input), weight, relu_mask});
    ctx->saved_data["has_bias"] = bias.has_value() && bias->defined();
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& input = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& relu_mask = saved[2];
    const bool input_grad = ctx->needs_input_grad(0), weight_grad = ctx->needs_input_grad(1);
    const bool bias_grad = ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2);
    std::vector<at::Tensor> grads;
    if (at::GradMode::is_enabled()) {
      grads = ops::fused_linear_relu_backward_with(
          differentiable_mask_backward, ops::aten_gemms, grad_outputs[0], input, weight, relu_mask, input_grad,
          weight_grad, bias_grad);
    } else {
      // Nothing to record: straight to the backend kernel, past the private op's Autograd fallback.
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      grads = op_calls::fused_linear_relu_backward(
          grad_outputs[0], input, weight, relu_mask, input_grad, weight_grad, bias_grad);
    }
    auto next = grads.begin();
    variable_list result(3);
    for (const auto& [slot, wanted] : {std::pair{0, input_grad}, std::pair{1, weight_grad}, std::pair{2, bias_grad}}) {
      if (wanted) {
        result[slot] = *next++;
      }
    }
    return result;
  }
};

bool any_requires_grad(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  return input.requires_grad() || weight.requires_grad() || (bias.has_value() && bias->requires_grad());
}

at::Tensor fused_linear_relu_autograd(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  check_no_forward_grad("fused_linear_relu", {input, weight, bias.value_or(at::Tensor())});
  if (!at::GradMode::is_enabled() || !any_requires_grad(input, weight, bias)) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return hypatia::fused_linear_relu(input, weight, bias);
  }
  return FusedLinearReLU::apply(input, weight, bias);
}

}  // namespace
}  // namespace hypatia

TORCH_LIBRARY_IMPL(hypatia, Autograd, m) {
  m.impl("fused_linear_relu", &hypatia::fused_linear_relu_autograd);
  // The private ops behind it are not differentiable themselves: called directly, they run below
  // autograd (their ATen calls record no graph) and a backward through them raises.
  m.impl("_fused_linear_relu_masked", torch::autograd::autogradNotImplementedFallback());
  m.impl("_relu_mask_backward", torch::autograd::autogradNotImplementedFallback());
  m.impl("_fused_linear_relu_backward", torch::autograd::autogradNotImplementedFallback());
}
