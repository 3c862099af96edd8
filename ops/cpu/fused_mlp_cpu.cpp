// CPU inference MLP: each row block flows through every layer before the next block starts,
// so hidden activations only ever exist one block tall (memory O(block x widest layer)).
#include "ops/checks.h"
#include "ops/cpu/row_blocks.h"
#include "ops/fused_ops.h"

#include <ATen/ops/empty.h>

namespace hypatia::ops {

at::Tensor fused_mlp_cpu(
    const at::Tensor& input, at::TensorList weights, const OptionalTensorList& biases, bool relu_last) {
  check_mlp_args("fused_mlp", input, weights, biases);
  const int64_t in_features = input.size(-1);
  const int64_t rows = batch_rows(input);
  int64_t widest = in_features;
  for (const at::Tensor& w : weights) {
    widest = std::max(widest, w.size(0));
  }
  const int64_t out_features = weights.back().size(0);
  const at::Tensor x = input.reshape({rows, in_features});
  at::Tensor out = at::empty({rows, out_features}, input.options());
  const int64_t block = rows_per_block(widest, input.element_size());
  const size_t layers = weights.size();

  for_each_row_block(rows, block, [&](int64_t begin, int64_t end) {
    const int64_t n = end - begin;
    // Two ping-pong buffers, each one block of the widest hidden layer.
    at::Tensor scratch = at::empty({2, block * widest}, input.options());
    at::Tensor h = x.narrow(0, begin, n);
    for (size_t i = 0; i < layers; ++i) {
      const bool last = i + 1 == layers;
      const int64_t width = weights[i].size(0);
      at::Tensor dst = last ? out.narrow(0, begin, n) : scratch[i % 2].narrow(0, 0, n * width).view({n, width});
      linear_act_cpu_out(h, weights[i], biases.get(i), !last || relu_last, dst);
      h = dst;
    }
  });
  return unflatten_rows(out, input);
}

}  // namespace hypatia::ops
