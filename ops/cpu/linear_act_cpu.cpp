// CPU: act(x @ w.T + b) with the GEMM in ATen's BLAS and bias + ReLU applied to each
// row block straight after its GEMM, while the block is still in cache.
#include "ops/cpu/row_blocks.h"
#include "ops/fused_ops.h"

#include <ATen/Parallel.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/relu.h>

namespace hypatia::ops {

void linear_act_cpu_out(
    const at::Tensor& x, const at::Tensor& w, const OptionalTensor& b, bool relu, at::Tensor& out) {
  if (out.numel() == 0) {
    return;
  }
  const at::Tensor wt = w.t();
  auto run_rows = [&](int64_t begin, int64_t end) {
    at::Tensor out_rows = out.narrow(0, begin, end - begin);
    const at::Tensor x_rows = x.narrow(0, begin, end - begin);
    if (b.has_value() && b->defined()) {
      at::addmm_out(out_rows, *b, x_rows, wt);
    } else {
      at::mm_out(out_rows, x_rows, wt);
    }
    if (relu) {
      at::relu_(out_rows);  // NaN stays NaN, as in eager
    }
  };
  for_each_row_block(x.size(0), rows_per_block(w.size(0), out.element_size()), run_rows);
}

at::Tensor fused_linear_relu_cpu(const at::Tensor& input, const at::Tensor& weight, const OptionalTensor& bias) {
  return fused_linear_relu_with(linear_act_cpu_out, input, weight, bias);
}

std::vector<at::Tensor> fused_mlp_forward_cpu(
    const at::Tensor& input, at::TensorList weights, const OptionalTensorList& biases, bool relu_last) {
  return run_mlp_with(linear_act_cpu_out, input, weights, biases, relu_last, /*keep_hidden=*/true);
}

}  // namespace hypatia::ops
