#pragma once
// The hypatia ops as typed C++ functions: each calls its operator through the dispatcher, so that
// autograd and the CPU, CUDA or Meta kernel apply as they do for torch.ops.hypatia.* in Python.
// Schemas (registration/schemas.cpp):
//   fused_linear_relu(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor
//   fused_mlp(Tensor input, Tensor[] weights, Tensor?[] biases, bool relu_last=False) -> Tensor
// Link HypatiaOps::hypatia_ops (find_package(HypatiaOps)), which keeps libhypatia_ops.so loaded so
// that its TORCH_LIBRARY registrations run.
#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>

#include <optional>

namespace hypatia {

// relu(input @ weight.T + bias); input [*, in_features], weight [out_features, in_features].
at::Tensor fused_linear_relu(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias = std::nullopt);

// Layer i: h = h @ weights[i].T + biases[i] (a bias may be std::nullopt); ReLU after every layer but
// the last, and after the last too when relu_last. E.g. fused_mlp(x, {w1, w2}, {b1, std::nullopt}).
at::Tensor fused_mlp(
    const at::Tensor& input,
    at::TensorList weights,
    const c10::List<std::optional<at::Tensor>>& biases,
    bool relu_last = false);

}  // namespace hypatia
