#include "ops/checks.h"

#include <c10/util/Exception.h>

#include <string>

namespace hypatia {
namespace {

bool is_supported_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf;
}

// One layer: weight [N, K] applied to something of dtype/device `like` whose last dim is K.
// `produced_by` says where K comes from, for the message.
void check_layer(
    const char* op,
    const std::string& weight_name,
    const at::Tensor& weight,
    const std::string& bias_name,
    const std::optional<at::Tensor>& bias,
    const at::Tensor& like,
    const c10::SymInt& in_features,
    const std::string& produced_by) {
  TORCH_CHECK(weight.defined(), op, ": ", weight_name, " must be a tensor, but got an undefined tensor");
  TORCH_CHECK(
      weight.dim() == 2, op, ": ", weight_name, " must be 2-D [out_features, in_features], but got a ",
      weight.dim(), "-D tensor of shape ", weight.sym_sizes());
  TORCH_CHECK(
      weight.scalar_type() == like.scalar_type(), op, ": ", weight_name, " must have the input's dtype ",
      like.scalar_type(), ", but got ", weight.scalar_type());
  TORCH_CHECK(
      weight.device() == like.device(), op, ": ", weight_name, " must be on the input's device ",
      like.device(), ", but is on ", weight.device());
  TORCH_CHECK(
      weight.sym_size(1) == in_features, op, ": ", weight_name, " expects in_features ",
      weight.sym_size(1), " but ", produced_by, " ", in_features);
  if (!bias.has_value() || !bias->defined()) {
    return;
  }
  const at::Tensor& b = *bias;
  TORCH_CHECK(
      b.dim() == 1 && b.sym_size(0) == weight.sym_size(0), op, ": ", bias_name,
      " must be 1-D of length out_features = ", weight.sym_size(0), ", but got shape ", b.sym_sizes());
  TORCH_CHECK(
      b.scalar_type() == like.scalar_type(), op, ": ", bias_name, " must have the input's dtype ",
      like.scalar_type(), ", but got ", b.scalar_type());
  TORCH_CHECK(
      b.device() == like.device(), op, ": ", bias_name, " must be on the input's device ", like.device(),
      ", but is on ", b.device());
}

void check_input(const char* op, const at::Tensor& input) {
  TORCH_CHECK(input.defined(), op, ": input must be a tensor, but got an undefined tensor");
  TORCH_CHECK(
      input.dim() >= 1, op, ": input must have at least 1 dimension [*, in_features], but got a 0-D tensor");
  TORCH_CHECK(
      is_supported_dtype(input.scalar_type()), op,
      ": input must be float32, float64, bfloat16 or float16, but got ", input.scalar_type());
}

}  // namespace

void check_linear_args(
    const char* op,
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::optional<at::Tensor>& bias) {
  check_input(op, input);
  check_layer(op, "weight", weight, "bias", bias, input, input.sym_size(-1), "input has last dimension");
}

void check_mlp_args(
    const char* op,
    const at::Tensor& input,
    at::TensorList weights,
    const c10::List<std::optional<at::Tensor>>& biases) {
  check_input(op, input);
  TORCH_CHECK(!weights.empty(), op, ": weights must hold at least one layer, but got an empty list");
  TORCH_CHECK(
      biases.size() == weights.size(), op, ": biases must have one entry (a tensor or None) per layer, ",
      "i.e. ", weights.size(), ", but got ", biases.size());
  c10::SymInt features = input.sym_size(-1);
  for (size_t i = 0; i < weights.size(); ++i) {
    const std::string idx = "[" + std::to_string(i) + "]";
    const std::string produced_by =
        i == 0 ? std::string("input has last dimension") : "layer " + std::to_string(i - 1) + " produces";
    check_layer(op, "weights" + idx, weights[i], "biases" + idx, biases.get(i), input, features, produced_by);
    features = weights[i].sym_size(0);
  }
}

c10::SymDimVector linear_output_shape(const at::Tensor& input, const c10::SymInt& out_features) {
  c10::SymDimVector shape(input.sym_sizes().begin(), input.sym_sizes().end());
  shape.back() = out_features;
  return shape;
}

}  // namespace hypatia
