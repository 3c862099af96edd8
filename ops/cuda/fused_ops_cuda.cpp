// CUDA entry points: the same drivers as on CPU, with a device guard so that tensors on a
// non-default GPU run there (and on that GPU's current stream). Inference fused_mlp first tries
// the one-kernel narrow MLP (ops/cuda/narrow_mlp_kernel.cu).
#include "ops/fused_ops.h"

#include "ops/checks.h"

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdlib>
#include <string>

namespace hypatia::ops {
namespace {

// HYPATIA_DISABLE_NARROW_MLP=1 (any value but "" and "0") sends fused_mlp down the per-layer
// cuBLASLt path even where the one-kernel narrow MLP applies, e.g. to compare the two. Read once.
bool narrow_mlp_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("HYPATIA_DISABLE_NARROW_MLP");
    return value == nullptr || std::string(value).empty() || std::string(value) == "0";
  }();
  return enabled;
}

}  // namespace

at::Tensor fused_linear_relu_cuda(const at::Tensor& input, const at::Tensor& weight, const OptionalTensor& bias) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  return fused_linear_relu_with(linear_act_cuda_out, input, weight, bias);
}

std::tuple<at::Tensor, at::Tensor> fused_linear_relu_masked_cuda(
    const at::Tensor& input, const at::Tensor& weight, const OptionalTensor& bias) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  at::Tensor out = fused_linear_relu_with(linear_act_cuda_out, input, weight, bias);
  const int64_t rows = batch_rows(input), out_features = weight.size(0);
  at::Tensor bits = at::empty({rows, relu_mask_row_bytes(out_features).expect_int()}, input.options().dtype(at::kByte));
  pack_relu_mask_cuda(out.view({rows, out_features}), bits);
  return {out, bits};
}

std::vector<at::Tensor> fused_mlp_forward_cuda(
    const at::Tensor& input, at::TensorList weights, const OptionalTensorList& biases, bool relu_last) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  return run_mlp_with(linear_act_cuda_out, input, weights, biases, relu_last, /*keep_hidden=*/true);
}

at::Tensor fused_mlp_cuda(
    const at::Tensor& input, at::TensorList weights, const OptionalTensorList& biases, bool relu_last) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  if (narrow_mlp_enabled()) {
    check_mlp_args("fused_mlp", input, weights, biases);
    at::Tensor out2d = at::empty({batch_rows(input), weights.back().size(0)}, input.options());
    if (narrow_mlp_forward_cuda(input.reshape({out2d.size(0), input.size(-1)}), weights, biases, relu_last, out2d)) {
      return unflatten_rows(out2d, input);
    }
  }
  return run_mlp_with(linear_act_cuda_out, input, weights, biases, relu_last, /*keep_hidden=*/false).back();
}

}  // namespace hypatia::ops
