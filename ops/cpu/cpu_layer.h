#pragma once
// One linear layer on the CPU, its operands prepared once per call and then applied to row blocks.
#include "ops/fused_ops.h"

#include <c10/util/FunctionRef.h>

namespace hypatia::ops {

// The weight (transposed view) and bias in the precision the layer's GEMM runs in.
struct CpuLayer {
  at::Tensor weight_t;   // [K, N]
  OptionalTensor bias;   // [N] or empty
  at::Tensor packed;     // the weight packed for narrow_gemm_act (float32) or narrow_gemm_act_bf16, or undefined
  at::Tensor onednn_weight;  // [N, K] for oneDNN's inner product (dense, or in its blocked layout), or undefined
  bool widened = false;  // a half-precision layer computed in float32
  bool relu = false;
};

// Whether layers of this dtype are computed in float32 here: half precision where oneDNN has no
// native GEMM for it and would emulate one ~10x slower than float32.
bool computes_widened(at::ScalarType dtype);

// The bytes of one element of the layer's GEMM operands (float32 for widened layers).
int64_t gemm_element_size(at::ScalarType dtype);

// forward_rows: the rows the forward will run in blocks of block_rows, for which the weight is also
// packed where run_cpu_layer takes a narrow kernel or oneDNN; 0 for the backward, which only
// multiplies by weight_t.
CpuLayer prepare_cpu_layer(
    const at::Tensor& w, const OptionalTensor& b, bool relu, int64_t forward_rows, int64_t block_rows);

// grad2d [M, N] @ w [N, K], a wide layer's input gradient: by oneDNN where its float32 row blocks
// take it, by ATen's mm elsewhere.
at::Tensor cpu_input_grad(const at::Tensor& grad2d, const at::Tensor& w);

// relu_backward_and_bias_grad(cpu_input_grad(grad2d, w), relu_out2d, bias_grad): wide bfloat16
// layers in one pass, the mask and the bias gradient in the library's kernel where it runs.
std::pair<at::Tensor, at::Tensor> cpu_relu_input_grad(
    const at::Tensor& grad2d, const at::Tensor& w, const at::Tensor& relu_out2d, bool bias_grad);

// fused_mlp's backward (as fused_mlp_backward_with) for bfloat16 and float32 MLPs whose layers below
// the top all take the library's kernels (and oneDNN's, for float32 input gradients): row chunks go
// down through those layers, so that the hidden gradients exist one chunk tall, in buffers used
// again (the per-layer backward makes each a fresh [M, H] tensor, 64-128 MiB at 8192x4096, faulted
// in page by page). std::nullopt where it does not apply.
std::optional<std::vector<at::Tensor>> wide_mlp_backward(
    const at::Tensor& grad_out, const at::Tensor& input, at::TensorList weights, at::TensorList saved_outputs,
    const c10::List<bool>& has_bias, bool relu_last, bool input_grad, bool params_grad);

// grad2d.T @ h2d and, when bias_grad, grad2d's sum over rows: a layer's weight and bias gradients.
// Narrow bfloat16 layers take the library's kernel where it runs (one pass for both), the others
// aten_weight_grads.
std::pair<at::Tensor, at::Tensor> cpu_weight_grads(const at::Tensor& grad2d, const at::Tensor& h2d, bool bias_grad);

// out_rows = act(x_rows @ layer.weight_t + bias), out_rows in x_rows' dtype.
void run_cpu_layer(const CpuLayer& layer, const at::Tensor& x_rows, at::Tensor& out_rows);

// Runs on rows [first, first + count) of a layer's finished output while they are in cache.
using RowsEpilogue = c10::function_ref<void(const at::Tensor& out2d, int64_t first, int64_t count)>;

// relu(x2d @ w.T + b) as a new [M, N] tensor: compute-bound float32 layers by one oneDNN inner
// product, the others by row blocks; `epilogue` (if any) runs on every finished stretch of rows.
at::Tensor linear_relu_cpu_2d(
    const at::Tensor& x2d, const at::Tensor& w, const OptionalTensor& b, std::optional<RowsEpilogue> epilogue);

}  // namespace hypatia::ops
