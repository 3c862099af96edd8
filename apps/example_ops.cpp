// The README's C++ example: call a hypatia op through the dispatcher and check it against ATen.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdio>

int main() {
  auto op = c10::Dispatcher::singleton()
                .findSchemaOrThrow("hypatia::fused_linear_relu", "")
                .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&)>();
  at::Tensor x = at::randn({32, 784}), w = at::randn({256, 784}), b = at::randn({256});
  at::Tensor y = op.call(x, w, b);  // relu(x @ w.T + b)
  const bool same = at::allclose(y, at::relu(at::linear(x, w, b)), 1e-5, 1e-5);
  std::printf("fused_linear_relu [32x784] -> [32x256]: %s\n", same ? "matches ATen" : "DIFFERS from ATen");
  return same ? 0 : 1;
}
