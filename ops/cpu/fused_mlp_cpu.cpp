// CPU inference MLP: each row block flows through every layer before the next block starts,
// so hidden activations only ever exist one block tall (memory O(block x widest layer)).
#include "ops/checks.h"
#include "ops/cpu/cpu_layer.h"
#include "ops/cpu/row_blocks.h"

#include <ATen/ops/empty.h>

namespace hypatia::ops {

at::Tensor fused_mlp_cpu(
    const at::Tensor& input, at::TensorList weights, const OptionalTensorList& biases, bool relu_last) {
  check_mlp_args("fused_mlp", input, weights, biases);
  const int64_t in_features = input.size(-1);
  const int64_t rows = batch_rows(input);
  const size_t depth = weights.size();
  int64_t widest = in_features;
  for (const at::Tensor& w : weights) {
    widest = std::max(widest, w.size(0));
  }
  const int64_t block = rows_per_block(widest, gemm_element_size(input.scalar_type()), rows);
  std::vector<CpuLayer> layers;
  layers.reserve(depth);
  for (size_t i = 0; i < depth; ++i) {
    layers.push_back(prepare_cpu_layer(weights[i], biases.get(i), i + 1 < depth || relu_last, rows, block));
  }
  const at::Tensor x = as_rows(input);
  at::Tensor out = at::empty({rows, weights.back().size(0)}, input.options());
  if (rows == 0) {
    return unflatten_rows(out, input);
  }

  for_each_row_chunk(rows, block, [&](int64_t begin, int64_t end) {
    // Two ping-pong buffers, each one block of the widest hidden layer.
    at::Tensor scratch = at::empty({2, std::min(block, end - begin) * widest}, input.options());
    for (int64_t r = begin; r < end; r += block) {
      const int64_t n = std::min(block, end - r);
      at::Tensor h = x.narrow(0, r, n);
      for (size_t i = 0; i < depth; ++i) {
        const int64_t width = weights[i].size(0);
        at::Tensor dst = i + 1 == depth ? out.narrow(0, r, n) : scratch[i % 2].narrow(0, 0, n * width).view({n, width});
        run_cpu_layer(layers[i], h, dst);
        h = dst;
      }
    }
  });
  return unflatten_rows(out, input);
}

}  // namespace hypatia::ops
