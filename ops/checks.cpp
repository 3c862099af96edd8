#include "ops/checks.h"

#include <c10/util/Exception.h>

#include <string>

namespace hypatia {
namespace {

// Messages are built by string concatenation, not streamed: streaming c10::SymInt through
// libc10's operator<< crashed in Python processes built with gcc 13 against the torch wheel.
std::string to_str(const c10::SymInt& s) {
  const std::optional<int64_t> value = s.maybe_as_int();
  return value ? std::to_string(*value) : s.toSymNodeImplUnowned()->str();
}

std::string to_str(c10::SymIntArrayRef shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    out += (i ? ", " : "") + to_str(shape[i]);
  }
  return out + "]";
}

bool is_supported_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf;
}

void check_same_dtype_and_device(
    const std::string& prefix, const std::string& name, const at::Tensor& t, const at::Tensor& like) {
  TORCH_CHECK(
      t.scalar_type() == like.scalar_type(), prefix + name + " must have the input's dtype " +
          c10::toString(like.scalar_type()) + ", but got " + c10::toString(t.scalar_type()));
  TORCH_CHECK(
      t.device() == like.device(),
      prefix + name + " must be on the input's device " + like.device().str() + ", but is on " + t.device().str());
}

// One layer: weight [N, K] applied to something of dtype/device `like` whose last dim is K.
// `produced_by` says where K comes from, for the message.
void check_layer(
    const std::string& prefix,
    const std::string& weight_name,
    const at::Tensor& weight,
    const std::string& bias_name,
    const std::optional<at::Tensor>& bias,
    const at::Tensor& like,
    const c10::SymInt& in_features,
    const std::string& produced_by) {
  TORCH_CHECK(weight.defined(), prefix + weight_name + " must be a tensor, but got an undefined tensor");
  TORCH_CHECK(
      weight.dim() == 2, prefix + weight_name + " must be 2-D [out_features, in_features], but got a " +
          std::to_string(weight.dim()) + "-D tensor of shape " + to_str(weight.sym_sizes()));
  check_same_dtype_and_device(prefix, weight_name, weight, like);
  TORCH_CHECK(
      weight.sym_size(1) == in_features, prefix + weight_name + " expects in_features " +
          to_str(weight.sym_size(1)) + " but " + produced_by + " " + to_str(in_features));
  if (!bias.has_value() || !bias->defined()) {
    return;
  }
  const at::Tensor& b = *bias;
  TORCH_CHECK(
      b.dim() == 1 && b.sym_size(0) == weight.sym_size(0), prefix + bias_name +
          " must be 1-D of length out_features = " + to_str(weight.sym_size(0)) + ", but got shape " +
          to_str(b.sym_sizes()));
  check_same_dtype_and_device(prefix, bias_name, b, like);
}

void check_input(const std::string& prefix, const at::Tensor& input) {
  TORCH_CHECK(input.defined(), prefix + "input must be a tensor, but got an undefined tensor");
  TORCH_CHECK(
      input.dim() >= 1, prefix + "input must have at least 1 dimension [*, in_features], but got a 0-D tensor");
  TORCH_CHECK(
      is_supported_dtype(input.scalar_type()),
      prefix + "input must be float32, float64, bfloat16 or float16, but got " + c10::toString(input.scalar_type()));
}

// t must be [*, features] with the input's batch dims, dtype and device (a layer output or its gradient).
void check_like_output(
    const std::string& prefix, const std::string& name, const at::Tensor& t, const at::Tensor& input,
    const c10::SymInt& features) {
  TORCH_CHECK(t.defined(), prefix + name + " must be a tensor, but got an undefined tensor");
  check_same_dtype_and_device(prefix, name, t, input);
  const c10::SymDimVector expected = linear_output_shape(input, features);
  TORCH_CHECK(
      t.sym_sizes() == c10::SymIntArrayRef(expected),
      prefix + name + " must have shape " + to_str(expected) + ", but got " + to_str(t.sym_sizes()));
}

}  // namespace

void check_linear_args(
    const char* op,
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::optional<at::Tensor>& bias) {
  const std::string prefix = std::string(op) + ": ";
  check_input(prefix, input);
  check_layer(prefix, "weight", weight, "bias", bias, input, input.sym_size(-1), "input has last dimension");
}

void check_mlp_args(
    const char* op,
    const at::Tensor& input,
    at::TensorList weights,
    const c10::List<std::optional<at::Tensor>>& biases) {
  const std::string prefix = std::string(op) + ": ";
  check_input(prefix, input);
  TORCH_CHECK(!weights.empty(), prefix + "weights must hold at least one layer, but got an empty list");
  TORCH_CHECK(
      biases.size() == weights.size(), prefix + "biases must have one entry (a tensor or None) per layer, i.e. " +
          std::to_string(weights.size()) + ", but got " + std::to_string(biases.size()));
  c10::SymInt features = input.sym_size(-1);
  for (size_t i = 0; i < weights.size(); ++i) {
    const std::string idx = "[" + std::to_string(i) + "]";
    const std::string produced_by =
        i == 0 ? std::string("input has last dimension") : "layer " + std::to_string(i - 1) + " produces";
    check_layer(prefix, "weights" + idx, weights[i], "biases" + idx, biases.get(i), input, features, produced_by);
    features = weights[i].sym_size(0);
  }
}

void check_mlp_backward_args(
    const char* op,
    const at::Tensor& grad_out,
    const at::Tensor& input,
    at::TensorList weights,
    at::TensorList saved_outputs,
    const c10::List<bool>& has_bias,
    bool relu_last) {
  const std::string prefix = std::string(op) + ": ";
  check_input(prefix, input);
  TORCH_CHECK(!weights.empty(), prefix + "weights must hold at least one layer, but got an empty list");
  const size_t layers = weights.size();
  TORCH_CHECK(
      has_bias.size() == layers, prefix + "has_bias must have one flag per layer, i.e. " + std::to_string(layers) +
          ", but got " + std::to_string(has_bias.size()));
  const size_t saved = layers - 1 + (relu_last ? 1 : 0);
  TORCH_CHECK(
      saved_outputs.size() == saved, prefix + "saved_outputs must hold the outputs of the " + std::to_string(saved) +
          " layers that a ReLU follows, but got " + std::to_string(saved_outputs.size()));
  c10::SymInt features = input.sym_size(-1);
  for (size_t i = 0; i < layers; ++i) {
    const std::string name = "weights[" + std::to_string(i) + "]";
    check_layer(prefix, name, weights[i], "", std::nullopt, input, features,
                i == 0 ? std::string("input has last dimension") : "layer " + std::to_string(i - 1) + " produces");
    features = weights[i].sym_size(0);
    if (i < saved) {
      check_like_output(prefix, "saved_outputs[" + std::to_string(i) + "]", saved_outputs[i], input, features);
    }
  }
  check_like_output(prefix, "grad_out", grad_out, input, features);
}

void check_linear_relu_backward_args(
    const char* op, const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& weight,
    const at::Tensor& relu_mask) {
  check_linear_args(op, input, weight, std::nullopt);
  check_like_output(std::string(op) + ": ", "grad_out", grad_out, input, weight.sym_size(0));
  check_relu_mask(op, grad_out, relu_mask);
}

c10::SymInt sym_batch_rows(const at::Tensor& t) {
  c10::SymInt rows = 1;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) {
    rows = rows * t.sym_size(d);
  }
  return rows;
}

c10::SymInt relu_mask_row_bytes(const c10::SymInt& out_features) {
  return (out_features + 127) / 128 * 16;
}

void check_relu_mask(const char* op, const at::Tensor& grad, const at::Tensor& mask) {
  const std::string prefix = std::string(op) + ": ";
  TORCH_CHECK(grad.defined() && grad.dim() >= 1, prefix + "grad must be a tensor of at least 1 dimension");
  TORCH_CHECK(
      is_supported_dtype(grad.scalar_type()),
      prefix + "grad must be float32, float64, bfloat16 or float16, but got " + c10::toString(grad.scalar_type()));
  const c10::SymInt rows = sym_batch_rows(grad);
  const c10::SymInt row_bytes = relu_mask_row_bytes(grad.sym_size(-1));
  TORCH_CHECK(
      mask.defined() && mask.scalar_type() == at::kByte && mask.dim() == 2 && mask.sym_size(0) == rows &&
          mask.sym_size(1) == row_bytes,
      prefix + "mask must be uint8 [" + to_str(rows) + ", " + to_str(row_bytes) + "] for grad of shape " +
          to_str(grad.sym_sizes()) + ", but got " + (mask.defined() ? c10::toString(mask.scalar_type()) : "None") +
          " of shape " + (mask.defined() ? to_str(mask.sym_sizes()) : "[]"));
  TORCH_CHECK(
      mask.device() == grad.device(),
      prefix + "mask must be on grad's device " + grad.device().str() + ", but is on " + mask.device().str());
}

c10::SymDimVector linear_output_shape(const at::Tensor& input, const c10::SymInt& out_features) {
  c10::SymDimVector shape(input.sym_sizes().begin(), input.sym_sizes().end());
  shape.back() = out_features;
  return shape;
}

void check_no_forward_grad(const char* op, at::TensorList inputs) {
  for (const at::Tensor& t : inputs) {
    TORCH_CHECK(
        !t.defined() || !t._fw_grad(/*level=*/0).defined(), op,
        ": forward-mode AD (forward_ad, torch.func.jvp) is not supported; run F.linear and F.relu for it");
  }
}

}  // namespace hypatia
