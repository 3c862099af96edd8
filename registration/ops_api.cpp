// <hypatia/ops.h>: the public ops' typed dispatcher calls, found once per process.
#include <hypatia/ops.h>

#include <ATen/core/dispatch/Dispatcher.h>

namespace hypatia {

at::Tensor fused_linear_relu(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("hypatia::fused_linear_relu", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&)>();
  return op.call(input, weight, bias);
}

at::Tensor fused_mlp(
    const at::Tensor& input,
    at::TensorList weights,
    const c10::List<std::optional<at::Tensor>>& biases,
    bool relu_last) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("hypatia::fused_mlp", "")
          .typed<at::Tensor(const at::Tensor&, at::TensorList, const c10::List<std::optional<at::Tensor>>&, bool)>();
  return op.call(input, weights, biases, relu_last);
}

}  // namespace hypatia
