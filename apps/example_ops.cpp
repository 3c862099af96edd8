// The README's C++ example: call a hypatia op through the dispatcher and check it against ATen (float64).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdio>

int main() {
  auto op = c10::Dispatcher::singleton()
                .findSchemaOrThrow("hypatia::fused_linear_relu", "")
                .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&)>();
  at::Tensor x = at::randn({32, 784}), w = at::randn({256, 784}), b = at::randn({256});
  at::Tensor y = op.call(x, w, b);  // relu(x @ w.T + b)
  // Against ATen in float64, as ||y - ref|| / ||ref||: float32 GEMMs that sum in another order
  // (oneDNN's on CPU, cuBLASLt's on CUDA) differ from ATen's float32 result in the last bits.
  const at::Tensor ref = at::relu(at::linear(x.to(at::kDouble), w.to(at::kDouble), b.to(at::kDouble)));
  const double error = ((y.to(at::kDouble) - ref).norm() / ref.norm()).item<double>();
  const bool same = error < 1e-5;
  std::printf("fused_linear_relu [32x784] -> [32x256]: %s (relative error %.1e)\n",
              same ? "matches ATen" : "DIFFERS from ATen", error);
  return same ? 0 : 1;
}
