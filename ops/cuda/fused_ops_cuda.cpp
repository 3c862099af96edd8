// CUDA entry points: the same drivers as on CPU, with a device guard so that tensors on a
// non-default GPU run there (and on that GPU's current stream).
#include "ops/fused_ops.h"

#include <c10/cuda/CUDAGuard.h>

namespace hypatia::ops {

at::Tensor fused_linear_relu_cuda(const at::Tensor& input, const at::Tensor& weight, const OptionalTensor& bias) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  return fused_linear_relu_with(linear_act_cuda_out, input, weight, bias);
}

std::vector<at::Tensor> fused_mlp_forward_cuda(
    const at::Tensor& input, at::TensorList weights, const OptionalTensorList& biases, bool relu_last) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  return run_mlp_with(linear_act_cuda_out, input, weights, biases, relu_last, /*keep_hidden=*/true);
}

at::Tensor fused_mlp_cuda(
    const at::Tensor& input, at::TensorList weights, const OptionalTensorList& biases, bool relu_last) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  return run_mlp_with(linear_act_cuda_out, input, weights, biases, relu_last, /*keep_hidden=*/false).back();
}

}  // namespace hypatia::ops
