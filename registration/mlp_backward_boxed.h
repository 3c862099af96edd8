#pragma once
// _fused_mlp_backward's CPU and CUDA kernels, registered boxed. A boxed kernel takes its arguments
// off the dispatcher's stack, so the gradient and saved outputs that the caller moved there
// (op_calls::fused_mlp_backward, from autograd once the graph is not kept) become the kernel's own,
// and it frees each after its last use; an unboxed kernel borrows them until it returns.
#include "ops/fused_ops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <utility>
#include <vector>

namespace hypatia {

// The CPU and CUDA kernels' type (ops/fused_ops.h): the gradient and saved outputs by value.
using MlpBackwardKernel = decltype(&ops::fused_mlp_backward_cpu);

// A Tensor[] argument's tensors, moved out of its list where the stack held the only reference to
// that list (a list shared with someone else is copied, not emptied under them).
inline std::vector<at::Tensor> take_tensors(c10::IValue&& value) {
  const c10::List<at::Tensor> list = std::move(value).toTensorList();
  if (list.use_count() != 1) {
    return list.vec();
  }
  std::vector<at::Tensor> tensors;
  tensors.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    tensors.push_back(list.extract(i));
  }
  return tensors;
}

template <MlpBackwardKernel kernel>
void mlp_backward_boxed(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  constexpr size_t kArguments = 8;  // the schema's, in order
  c10::IValue* args = &*(stack->end() - kArguments);
  at::Tensor grad_out = std::move(args[0]).toTensor();
  const at::Tensor input = std::move(args[1]).toTensor();
  const std::vector<at::Tensor> weights = args[2].toTensorVector();
  std::vector<at::Tensor> saved_outputs = take_tensors(std::move(args[3]));
  const c10::List<bool> has_bias = std::move(args[4]).toBoolList();
  const bool relu_last = args[5].toBool(), input_grad = args[6].toBool(), params_grad = args[7].toBool();
  torch::jit::drop(*stack, kArguments);
  torch::jit::push(
      *stack,
      kernel(std::move(grad_out), input, weights, std::move(saved_outputs), has_bias, relu_last, input_grad, params_grad));
}

}  // namespace hypatia
