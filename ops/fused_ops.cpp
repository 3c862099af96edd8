#include "ops/fused_ops.h"

#include "ops/checks.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/threshold_backward.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <array>
#include <tuple>

namespace hypatia::ops {

// A product of sizes rather than numel / K, which is undefined when K == 0.
int64_t batch_rows(const at::Tensor& input) {
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < input.dim(); ++d) {
    rows *= input.size(d);
  }
  return rows;
}

at::Tensor as_rows(const at::Tensor& t) {
  return t.dim() == 2 ? t : t.reshape({batch_rows(t), t.size(-1)});
}

at::Tensor shape_only(const at::Tensor& t) {
  return at::zeros({}, t.options()).expand_symint(t.sym_sizes());  // symbolic under torch.compile(dynamic=True)
}

at::Tensor unflatten_rows(const at::Tensor& out2d, const at::Tensor& input) {
  if (input.dim() == 2) {
    return out2d;
  }
  auto shape = input.sizes().vec();
  shape.back() = out2d.size(1);
  return out2d.view(shape);
}

namespace {

// out = act(x2d @ w.T + b), shaped like `input` with the last dim replaced by w.size(0).
at::Tensor apply_layer(
    LinearActOut layer, const at::Tensor& input, const at::Tensor& x2d, const at::Tensor& w,
    const OptionalTensor& b, bool relu, EmptyTensor empty = nullptr) {
  const std::array<int64_t, 2> sizes{x2d.size(0), w.size(0)};
  at::Tensor out = empty ? empty(sizes, input.options()) : at::empty(sizes, input.options());
  layer(x2d, w, b, relu, out);
  return unflatten_rows(out, input);
}

}  // namespace

at::Tensor fused_linear_relu_with(
    LinearActOut layer, const at::Tensor& input, const at::Tensor& weight, const OptionalTensor& bias) {
  check_linear_args("fused_linear_relu", input, weight, bias);
  return apply_layer(layer, input, as_rows(input), weight, bias, /*relu=*/true);
}

std::vector<at::Tensor> run_mlp_with(
    LinearActOut layer,
    const at::Tensor& input,
    at::TensorList weights,
    const OptionalTensorList& biases,
    bool relu_last,
    bool keep_hidden,
    EmptyTensor hidden_empty) {
  check_mlp_args("fused_mlp", input, weights, biases);
  std::vector<at::Tensor> outputs;
  outputs.reserve(weights.size());
  at::Tensor h = input;
  for (size_t i = 0; i < weights.size(); ++i) {
    const bool hidden = i + 1 < weights.size();
    h = apply_layer(layer, input, as_rows(h), weights[i], biases.get(i), hidden || relu_last,
                    hidden && keep_hidden ? hidden_empty : nullptr);
    if (keep_hidden) {
      outputs.push_back(h);
    }
  }
  if (!keep_hidden) {
    outputs.push_back(h);
  }
  return outputs;
}

bool records_backward(at::TensorList tensors) {
  return at::GradMode::is_enabled() &&
      std::any_of(tensors.begin(), tensors.end(), [](const at::Tensor& t) { return t.requires_grad(); });
}

std::pair<at::Tensor, at::Tensor> aten_weight_grads(const at::Tensor& grad2d, const at::Tensor& h2d, bool bias_grad) {
  return std::pair{grad2d.t().mm(h2d), bias_grad ? grad2d.sum(0) : at::Tensor()};
}

std::pair<at::Tensor, at::Tensor> aten_relu_grad(
    const at::Tensor& grad2d, const at::Tensor& relu_out2d, bool bias_grad) {
  at::Tensor grad = at::threshold_backward(grad2d, relu_out2d, 0);
  at::Tensor grad_bias = bias_grad ? grad.sum(0) : at::Tensor();
  return {std::move(grad), std::move(grad_bias)};
}

std::pair<at::Tensor, at::Tensor> relu_backward_and_bias_grad(
    at::Tensor grad2d, const at::Tensor& relu_out2d, bool bias_grad) {
  // Eager's ReLU backward. Written over grad2d, so that one [M, K] buffer is alive where eager's has
  // two, unless autograd records it (a double backward), which needs grad2d itself.
  if (records_backward({grad2d, relu_out2d})) {
    return aten_relu_grad(grad2d, relu_out2d, bias_grad);
  }
  at::threshold_backward_out(grad2d, grad2d, relu_out2d, 0);
  at::Tensor grad_bias = bias_grad ? grad2d.sum(0) : at::Tensor();
  return {std::move(grad2d), std::move(grad_bias)};
}

const BackwardGemms aten_gemms{
    [](const at::Tensor& grad2d, const at::Tensor& w) { return grad2d.mm(w); },
    aten_weight_grads,
    [](const at::Tensor& grad2d, const at::Tensor& w, const at::Tensor& relu_out2d, bool bias_grad) {
      return relu_backward_and_bias_grad(grad2d.mm(w), relu_out2d, bias_grad);
    },
    aten_relu_grad,
    nullptr,
    nullptr};

std::vector<at::Tensor> fused_linear_relu_backward_with(
    ReluMaskBackward mask_backward,
    const BackwardGemms& gemms,
    const at::Tensor& grad_out,
    const at::Tensor& input,
    const at::Tensor& weight,
    const at::Tensor& relu_mask,
    bool input_grad,
    bool weight_grad,
    bool bias_grad) {
  check_linear_relu_backward_args("_fused_linear_relu_backward", grad_out, input, weight, relu_mask);
  const at::Tensor grad = as_rows(mask_backward(grad_out, relu_mask));
  const at::Tensor grad_input = input_grad ? gemms.input_grad(grad, weight).view(input.sizes()) : at::Tensor();
  at::Tensor grad_weight, grad_bias;
  if (weight_grad) {
    std::tie(grad_weight, grad_bias) = gemms.weight_grads(grad, as_rows(input), bias_grad);
  } else if (bias_grad) {
    grad_bias = grad.sum(0);
  }
  return defined_grads({grad_input, grad_weight, grad_bias});
}

std::vector<at::Tensor> fused_mlp_backward_with(
    const BackwardGemms& gemms,
    at::Tensor grad_out,
    const at::Tensor& input,
    at::TensorList weights,
    std::vector<at::Tensor> saved_outputs,
    const c10::List<bool>& has_bias,
    bool relu_last,
    bool input_grad,
    bool params_grad) {
  const size_t layers = weights.size();
  std::vector<at::Tensor> grad_weights(layers), grad_biases(layers);
  at::Tensor grad = as_rows(grad_out);
  grad_out.reset();
  if (relu_last) {  // eager's ReLU backward, the top layer's bias gradient summed in the same pass
    std::tie(grad, grad_biases[layers - 1]) =
        gemms.relu_grad(grad, as_rows(saved_outputs[layers - 1]), params_grad && has_bias.get(layers - 1));
    saved_outputs[layers - 1].reset();
  }
  for (size_t i = layers; i-- > 0;) {
    // Layer i's bias gradient, unless summed already: by relu_grad at the top where ReLU follows it,
    // below that by the layer above's relu_input_grad.
    const bool bias_grad = params_grad && has_bias.get(i) && !grad_biases[i].defined();
    const at::Tensor h = as_rows(i == 0 ? input : saved_outputs[i - 1]);
    auto weight_grads = [&] {
      if (params_grad) {
        at::Tensor summed;
        std::tie(grad_weights[i], summed) = gemms.weight_grads(grad, h, bias_grad);
        if (bias_grad) {
          grad_biases[i] = summed;
        }
      }
    };
    if (i == 1 && gemms.relu_bottom_grads != nullptr) {
      if (auto bottom = gemms.relu_bottom_grads(
              grad, weights[1], h, as_rows(input), weights[0], params_grad, params_grad && has_bias.get(0),
              input_grad)) {
        weight_grads();
        grad_weights[0] = (*bottom)[0];
        grad_biases[0] = (*bottom)[1];
        grad = (*bottom)[2];
        break;
      }
    }
    if (params_grad && gemms.layer_grads != nullptr) {
      if (auto fused = gemms.layer_grads(grad, weights[i], h, i > 0, bias_grad, i > 0 || input_grad)) {
        grad_weights[i] = (*fused)[0];
        if (bias_grad) {
          grad_biases[i] = (*fused)[1];
        }
        grad = (*fused)[2];  // undefined at the bottom where no input gradient is asked for
        if (i > 0) {
          saved_outputs[i - 1].reset();
        }
        continue;
      }
    }
    weight_grads();
    if (i > 0) {
      std::tie(grad, grad_biases[i - 1]) =
          gemms.relu_input_grad(grad, weights[i], h, params_grad && has_bias.get(i - 1));
      saved_outputs[i - 1].reset();  // read for the last time, by layer i's weight gradient and this
    } else if (input_grad) {
      grad = gemms.input_grad(grad, weights[i]);
    }
  }
  return defined_grads({grad_weights, grad_biases, input_grad ? grad.view(input.sizes()) : at::Tensor()});
}

std::vector<at::Tensor> defined_grads(std::initializer_list<at::TensorList> groups) {
  std::vector<at::Tensor> grads;
  for (const at::TensorList group : groups) {
    for (const at::Tensor& g : group) {
      if (g.defined()) {
        grads.push_back(g);
      }
    }
  }
  return grads;
}

}  // namespace hypatia::ops
