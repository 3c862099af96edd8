// fused_linear_relu and fused_mlp through <hypatia/ops.h> against ATen in float64; exit 0 if both match.
#include <hypatia/ops.h>

#include <ATen/ATen.h>

#include <cstdio>

int main() {
  const at::Tensor x = at::randn({64, 48}, at::kDouble), w1 = at::randn({32, 48}, at::kDouble),
                   b1 = at::randn({32}, at::kDouble), w2 = at::randn({8, 32}, at::kDouble);
  const at::Tensor h = hypatia::fused_linear_relu(x, w1, b1);
  const at::Tensor y = hypatia::fused_mlp(x, {w1, w2}, {b1, std::nullopt}, /*relu_last=*/true);
  const at::Tensor h_ref = at::relu(at::linear(x, w1, b1)), y_ref = at::relu(at::linear(h_ref, w2));
  const double h_error = ((h - h_ref).norm() / h_ref.norm()).item<double>();
  const double y_error = ((y - y_ref).norm() / y_ref.norm()).item<double>();
  std::printf("fused_linear_relu relative error %.1e\nfused_mlp relative error %.1e\n", h_error, y_error);
  return h_error < 1e-12 && y_error < 1e-12 ? 0 : 1;
}
