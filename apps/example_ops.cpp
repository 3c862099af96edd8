// The README's C++ example: the hypatia ops through <hypatia/ops.h>, checked against ATen in float64.
#include <hypatia/ops.h>

#include <ATen/ATen.h>

#include <cstdio>

// ||out - ref|| / ||ref||, ref computed in float64: float32 GEMMs that sum in another order
// (oneDNN's on CPU, cuBLASLt's on CUDA) differ from ATen's float32 result in the last bits.
double relative_error(const at::Tensor& out, const at::Tensor& ref) {
  return ((out.to(at::kDouble) - ref).norm() / ref.norm()).item<double>();
}

int main() {
  at::Tensor x = at::randn({32, 784}), w1 = at::randn({256, 784}) / 28, b1 = at::randn({256});
  at::Tensor w2 = at::randn({10, 256}) / 16, b2 = at::randn({10});

  at::Tensor h = hypatia::fused_linear_relu(x, w1, b1);                 // relu(x @ w1.T + b1)
  at::Tensor logits = hypatia::fused_mlp(x, {w1, w2}, {b1, b2});        // Linear, ReLU, Linear

  const at::Tensor h_ref = at::relu(at::linear(x.to(at::kDouble), w1.to(at::kDouble), b1.to(at::kDouble)));
  const at::Tensor logits_ref = at::linear(h_ref, w2.to(at::kDouble), b2.to(at::kDouble));
  const double h_error = relative_error(h, h_ref), logits_error = relative_error(logits, logits_ref);
  const bool same = h_error < 1e-5 && logits_error < 1e-5;
  std::printf("fused_linear_relu [32x784] -> [32x256]: relative error %.1e\n", h_error);
  std::printf("fused_mlp [32x784] -> [32x256] -> [32x10]: relative error %.1e\n", logits_error);
  std::printf("%s\n", same ? "both match ATen" : "DIFFERS from ATen");
  return same ? 0 : 1;
}
