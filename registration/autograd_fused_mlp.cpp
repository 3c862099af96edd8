// Autograd for fused_mlp: the forward keeps each layer's output (the next layer's input,
// and the source of its ReLU mask); the backward is one op, _fused_mlp_backward (masks, wgrad,
// bias sums and dgrad of every layer; on CUDA the narrow MLP's in one kernel plus the wgrads).
#include "ops/checks.h"
#include "ops/fused_ops.h"
#include "registration/op_calls.h"

#include <hypatia/ops.h>

#include <ATen/SavedTensorHooks.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/library.h>

#include <algorithm>
#include <string>

namespace hypatia {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using OptionalTensorList = c10::List<std::optional<at::Tensor>>;

bool any_requires_grad(at::TensorList tensors) {
  return std::any_of(tensors.begin(), tensors.end(), [](const at::Tensor& t) { return t.requires_grad(); });
}

class FusedMLP : public torch::autograd::Function<FusedMLP> {
 public:
  // `present_biases` holds the biases that are not None, in layer order (autograd takes a
  // TensorList, and an undefined tensor cannot be one of its inputs); `has_bias` says which.
  static at::Tensor forward(
      AutogradContext* ctx,
      const at::Tensor& input,
      at::TensorList weights,
      at::TensorList present_biases,
      const c10::List<bool>& has_bias,
      bool relu_last) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    OptionalTensorList biases;
    size_t next_bias = 0;
    for (const bool present : has_bias) {
      biases.push_back(present ? std::optional<at::Tensor>(present_biases[next_bias++]) : std::nullopt);
    }
    std::vector<at::Tensor> outputs = op_calls::fused_mlp_forward(input, weights, biases, relu_last);

    // Saved: input (where parameter gradients are wanted: the backward computes all of them or
    // none, and layer 0's weight gradient reads it; eager keeps no input it does not need), weights,
    // outputs of layers 0..L-2, and the last output when ReLU follows it.
    // The hidden outputs (0..L-2), which nothing else holds, go to saved_data unless saved-tensor
    // hooks are set: from there the graph's last backward hands them over to _fused_mlp_backward,
    // which frees each after its layer as eager's backward does (a saved variable would hold them
    // all until the backward ends). Hooks (offloading, checkpointing) get them as saved variables.
    const bool params_grad = any_requires_grad(weights) || any_requires_grad(present_biases);
    const auto hidden_end = outputs.end() - 1;
    variable_list to_save = {params_grad ? input : ops::shape_only(input)};
    to_save.insert(to_save.end(), weights.begin(), weights.end());
    // (One entry each: compiled autograd traces tensors in saved_data, not in lists there.)
    const bool hidden_as_data = !at::SavedTensorDefaultHooks::get_hooks().has_value();
    ctx->saved_data["hidden_as_data"] = hidden_as_data;
    if (hidden_as_data) {
      for (auto h = outputs.begin(); h != hidden_end; ++h) {
        ctx->saved_data[hidden_key(h - outputs.begin())] = *h;
      }
    } else {
      to_save.insert(to_save.end(), outputs.begin(), hidden_end);
    }
    if (relu_last) {
      to_save.push_back(outputs.back());
    }
    ctx->save_for_backward(to_save);
    ctx->saved_data["has_bias"] = has_bias;
    ctx->saved_data["relu_last"] = relu_last;
    return outputs.back();
  }

  static std::string hidden_key(std::ptrdiff_t layer) {
    return "hidden_output_" + std::to_string(layer);
  }

  // The saved outputs of layers 0..L-2 (where forward put them), then the saved last output.
  static std::vector<at::Tensor> saved_outputs(AutogradContext* ctx, const variable_list& saved, size_t layers) {
    auto saved_after_weights = saved.begin() + 1 + static_cast<std::ptrdiff_t>(layers);
    std::vector<at::Tensor> outputs;
    if (!ctx->saved_data["hidden_as_data"].toBool()) {
      outputs.assign(saved_after_weights, saved_after_weights + static_cast<std::ptrdiff_t>(layers - 1));
      saved_after_weights += static_cast<std::ptrdiff_t>(layers - 1);
    } else {
      // In the graph's last backward the node drops what it saved after this call anyway: moved out
      // (the only reference), they are freed by _fused_mlp_backward as it goes. A later backward
      // (retain_graph) needs them again.
      const bool last_backward = !torch::autograd::get_current_graph_task_keep_graph();
      for (size_t i = 0; i + 1 < layers; ++i) {
        const auto entry = ctx->saved_data.find(hidden_key(static_cast<std::ptrdiff_t>(i)));
        outputs.push_back(last_backward ? std::move(entry->second).toTensor() : entry->second.toTensor());
        if (last_backward) {
          ctx->saved_data.erase(entry);
        }
      }
    }
    outputs.insert(outputs.end(), saved_after_weights, saved.end());
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    // The saved activations come from below autograd, so a graph of this backward would be wrong.
    TORCH_CHECK(
        !at::GradMode::is_enabled(),
        "fused_mlp: double backward (create_graph=True) is not supported; "
        "use hypatia::fused_linear_relu per layer, which supports it");
    const variable_list saved = ctx->get_saved_variables();
    const c10::List<bool> has_bias = ctx->saved_data["has_bias"].toBoolList();
    const bool relu_last = ctx->saved_data["relu_last"].toBool();
    const size_t layers = has_bias.size();
    const at::TensorList weights(saved.data() + 1, layers);
    std::vector<at::Tensor> outputs = saved_outputs(ctx, saved, layers);

    // Inputs as autograd numbers them: input, weights[0..L), present biases, has_bias, relu_last.
    size_t slots = 1 + layers;
    for (const bool present : has_bias) {
      slots += present ? 1 : 0;
    }
    bool params_grad = false;
    for (size_t slot = 1; slot < slots; ++slot) {
      params_grad = params_grad || ctx->needs_input_grad(slot);
    }
    const bool input_grad = ctx->needs_input_grad(0);
    // [grad_weights..., grad_biases (present)...] when params_grad, then grad_input: the slot order.
    // Nothing to record: straight to the backend kernel, past the private op's Autograd fallback.
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    std::vector<at::Tensor> grads = op_calls::fused_mlp_backward(
        std::move(grad_outputs[0]), saved[0], weights, std::move(outputs), has_bias, relu_last, input_grad,
        params_grad);
    variable_list result(slots + 2);
    size_t next = 0;
    if (params_grad) {
      for (size_t slot = 1; slot < slots; ++slot) {
        result[slot] = grads[next++];
      }
    }
    if (input_grad) {
      result[0] = grads[next];
    }
    return result;
  }
};

bool any_requires_grad(const at::Tensor& input, at::TensorList weights, const OptionalTensorList& biases) {
  bool any = input.requires_grad() || any_requires_grad(weights);
  for (const std::optional<at::Tensor>& b : biases) {
    any = any || (b.has_value() && b->requires_grad());
  }
  return any;
}

at::Tensor fused_mlp_autograd(
    const at::Tensor& input, at::TensorList weights, const OptionalTensorList& biases, bool relu_last) {
  check_no_forward_grad("fused_mlp", {input});
  check_no_forward_grad("fused_mlp", weights);
  for (const std::optional<at::Tensor>& b : biases) {
    check_no_forward_grad("fused_mlp", {b.value_or(at::Tensor())});
  }
  if (!at::GradMode::is_enabled() || !any_requires_grad(input, weights, biases)) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return hypatia::fused_mlp(input, weights, biases, relu_last);
  }
  std::vector<at::Tensor> present_biases;
  c10::List<bool> has_bias;
  for (const std::optional<at::Tensor>& b : biases) {
    const bool present = b.has_value() && b->defined();
    has_bias.push_back(present);
    if (present) {
      present_biases.push_back(*b);
    }
  }
  return FusedMLP::apply(input, weights, at::TensorList(present_biases), has_bias, relu_last);
}

}  // namespace
}  // namespace hypatia

TORCH_LIBRARY_IMPL(hypatia, Autograd, m) {
  m.impl("fused_mlp", &hypatia::fused_mlp_autograd);
  // The private ops behind it are not differentiable themselves: called directly, they run below
  // autograd (their ATen calls record no graph) and a backward through them raises.
  m.impl("_fused_mlp_forward", torch::autograd::autogradNotImplementedFallback());
  m.impl("_fused_mlp_backward", torch::autograd::autogradNotImplementedFallback());
}
