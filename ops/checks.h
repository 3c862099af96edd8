#pragma once
// Argument validation shared by every kernel (CPU, CUDA, Meta, Autograd), so that each
// device rejects the same calls with the same message. Works on symbolic shapes too.
#include <ATen/core/Tensor.h>
#include <ATen/core/List.h>
#include <c10/core/SymIntArrayRef.h>

#include <optional>

namespace hypatia {

// relu?(input @ weight.T + bias): input [*, K], weight [N, K], bias [N] or None.
void check_linear_args(
    const char* op,
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::optional<at::Tensor>& bias);

// A chain of linear layers: weights[i] is [N_i, N_{i-1}], biases[i] is [N_i] or None.
void check_mlp_args(
    const char* op,
    const at::Tensor& input,
    at::TensorList weights,
    const c10::List<std::optional<at::Tensor>>& biases);

// input.shape[:-1] + [out_features]
c10::SymDimVector linear_output_shape(const at::Tensor& input, const c10::SymInt& out_features);

}  // namespace hypatia
