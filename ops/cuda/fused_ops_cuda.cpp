// CUDA entry points: the same drivers as on CPU, with a device guard so that tensors on a
// non-default GPU run there (and on that GPU's current stream), and a CublasLtScope so that the
// call's cuBLASLt GEMMs look up PyTorch's handle and workspace once. fused_mlp, its training forward
// and its backward first try the one-kernel narrow MLP (ops/cuda/narrow_mlp_kernel.cu); the
// forwards then the medium one (ops/cuda/medium_mlp_kernel.cu, H100, widths up to 512).
#include "ops/fused_ops.h"

#include "ops/checks.h"
#include "ops/cuda/cublaslt_scope.h"
#include "ops/cuda/kernel_launch.h"

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>

#include <optional>

namespace hypatia::ops {
namespace {

// HYPATIA_DISABLE_NARROW_MLP=1 (any value but "" and "0") sends fused_mlp (forward and backward)
// down the per-layer path even where the one-kernel narrow MLP applies, e.g. to compare the two.
// Read once.
bool narrow_mlp_enabled() {
  static const bool enabled = env_switch("HYPATIA_DISABLE_NARROW_MLP") != EnvSwitch::kOn;
  return enabled;
}

// Layer outputs [rows, N_i] from a one-kernel MLP forward (the narrow one, else the medium one),
// each kept where keep[i]; nullopt where neither covers the shapes.
std::optional<std::vector<at::Tensor>> one_kernel_mlp_outputs(
    const at::Tensor& input, at::TensorList weights, const OptionalTensorList& biases, bool relu_last,
    const std::vector<bool>& keep) {
  // Both kernels' preconditions (fused_ops.h), checked once here, their one caller.
  TORCH_CHECK(input.is_cuda() && input.dim() >= 1, "hypatia: one_kernel_mlp_outputs: input must be a CUDA tensor");
  TORCH_CHECK(
      !weights.empty() && biases.size() == weights.size() && keep.size() == weights.size() && keep.back(),
      "hypatia: one_kernel_mlp_outputs: needs one bias and one keep flag per layer (the last set), but got ",
      weights.size(), " weights, ", biases.size(), " biases and ", keep.size(), " flags");
  const at::Tensor x2d = as_rows(input);
  std::optional<std::vector<at::Tensor>> outputs;
  if (narrow_mlp_enabled()) {
    outputs = narrow_mlp_forward_cuda(x2d, weights, biases, relu_last, keep);
  }
  if (!outputs) {
    outputs = medium_mlp_forward_cuda(x2d, weights, biases, relu_last, keep);
  }
  if (outputs) {
    for (at::Tensor& out : *outputs) {
      if (out.defined()) {
        out = unflatten_rows(out, input);
      }
    }
  }
  return outputs;
}

}  // namespace

at::Tensor fused_linear_relu_cuda(const at::Tensor& input, const at::Tensor& weight, const OptionalTensor& bias) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  const CublasLtScope cublaslt_scope;
  return fused_linear_relu_with(linear_act_cuda_out, input, weight, bias);
}

std::tuple<at::Tensor, at::Tensor> fused_linear_relu_masked_cuda(
    const at::Tensor& input, const at::Tensor& weight, const OptionalTensor& bias) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  const CublasLtScope cublaslt_scope;
  at::Tensor out = fused_linear_relu_with(linear_act_cuda_out, input, weight, bias);
  const int64_t rows = batch_rows(input), out_features = weight.size(0);
  at::Tensor bits = at::empty({rows, relu_mask_row_bytes(out_features).expect_int()}, input.options().dtype(at::kByte));
  pack_relu_mask_cuda(out.view({rows, out_features}), bits);
  return {out, bits};
}

std::vector<at::Tensor> fused_mlp_forward_cuda(
    const at::Tensor& input, at::TensorList weights, const OptionalTensorList& biases, bool relu_last) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  const CublasLtScope cublaslt_scope;
  check_mlp_args("fused_mlp", input, weights, biases);
  if (auto outputs = one_kernel_mlp_outputs(input, weights, biases, relu_last, std::vector<bool>(weights.size(), true))) {
    return *outputs;
  }
  return run_mlp_with(linear_act_cuda_out, input, weights, biases, relu_last, /*keep_hidden=*/true);
}

at::Tensor fused_mlp_cuda(
    const at::Tensor& input, at::TensorList weights, const OptionalTensorList& biases, bool relu_last) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  const CublasLtScope cublaslt_scope;
  check_mlp_args("fused_mlp", input, weights, biases);
  std::vector<bool> keep_last(weights.size(), false);
  keep_last.back() = true;
  if (auto outputs = one_kernel_mlp_outputs(input, weights, biases, relu_last, keep_last)) {
    return outputs->back();
  }
  return run_mlp_with(linear_act_cuda_out, input, weights, biases, relu_last, /*keep_hidden=*/false).back();
}

std::vector<at::Tensor> fused_linear_relu_backward_cuda(
    const at::Tensor& grad_out,
    const at::Tensor& input,
    const at::Tensor& weight,
    const at::Tensor& relu_mask,
    bool input_grad,
    bool weight_grad,
    bool bias_grad) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  const CublasLtScope cublaslt_scope;
  return fused_linear_relu_backward_with(
      relu_mask_backward_cuda, cuda_gemms, grad_out, input, weight, relu_mask, input_grad, weight_grad,
      bias_grad);
}

std::vector<at::Tensor> fused_mlp_backward_cuda(
    at::Tensor grad_out, const at::Tensor& input, at::TensorList weights, std::vector<at::Tensor> saved_outputs,
    const c10::List<bool>& has_bias, bool relu_last, bool input_grad, bool params_grad) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  const CublasLtScope cublaslt_scope;
  check_mlp_backward_args("_fused_mlp_backward", grad_out, input, weights, saved_outputs, has_bias, relu_last);
  if (narrow_mlp_enabled()) {
    const at::Tensor grad_out2d = as_rows(grad_out).contiguous();
    if (auto grads = narrow_mlp_backward_cuda(
            grad_out2d, as_rows(input), weights, saved_outputs, has_bias, relu_last, input_grad,
            params_grad)) {
      if (input_grad) {
        grads->back() = grads->back().view(input.sizes());
      }
      return *grads;
    }
  }
  return fused_mlp_backward_with(
      cuda_gemms, std::move(grad_out), input, weights, std::move(saved_outputs), has_bias, relu_last, input_grad,
      params_grad);
}

}  // namespace hypatia::ops
