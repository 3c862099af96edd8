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

// fused_mlp's backward: grad_out [*, N_last] like the output, has_bias one flag per layer, and
// saved_outputs [*, N_i] for layers 0..L-2 (and L-1 when relu_last), all of the input's dtype and device.
void check_mlp_backward_args(
    const char* op,
    const at::Tensor& grad_out,
    const at::Tensor& input,
    at::TensorList weights,
    at::TensorList saved_outputs,
    const c10::List<bool>& has_bias,
    bool relu_last);

// Forward-mode AD (torch.autograd.forward_ad, torch.func.jvp) has no formula for the hypatia ops:
// a dual input is refused, where running the op would drop its tangent, a silently wrong answer.
void check_no_forward_grad(const char* op, at::TensorList inputs);

// fused_linear_relu's backward: grad_out [*, N] like the output, relu_mask its bits (below).
void check_linear_relu_backward_args(
    const char* op, const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& weight,
    const at::Tensor& relu_mask);

// The ReLU mask of an output [*, N] as bits (cuBLASLt's RELU_AUX layout): row r of the
// flattened output is bits [r * 8 * row_bytes, r * 8 * row_bytes + N), lowest bit of each byte
// first, set where the ReLU passed; row_bytes = relu_mask_row_bytes(N) (a whole number of
// 128-bit words, as cuBLASLt requires). Stored as uint8 [rows, row_bytes].
c10::SymInt relu_mask_row_bytes(const c10::SymInt& out_features);

// grad [*, N] and the mask of an output of that shape.
void check_relu_mask(const char* op, const at::Tensor& grad, const at::Tensor& mask);

// Rows of the [M, K] view of t [*, K] (the product of its batch dims), on symbolic sizes.
c10::SymInt sym_batch_rows(const at::Tensor& t);

// input.shape[:-1] + [out_features]
c10::SymDimVector linear_output_shape(const at::Tensor& input, const c10::SymInt& out_features);

}  // namespace hypatia
