#pragma once
// One linear layer on the CPU, its operands prepared once per call and then applied to row blocks.
#include "ops/fused_ops.h"

namespace hypatia::ops {

// The weight (transposed view) and bias in the precision the layer's GEMM runs in.
struct CpuLayer {
  at::Tensor weight_t;   // [K, N]
  OptionalTensor bias;   // [N] or empty
  bool widened = false;  // a half-precision layer computed in float32
  bool relu = false;
};

CpuLayer prepare_cpu_layer(const at::Tensor& w, const OptionalTensor& b, bool relu);

// out_rows = act(x_rows @ layer.weight_t + bias), out_rows in x_rows' dtype.
void run_cpu_layer(const CpuLayer& layer, const at::Tensor& x_rows, at::Tensor& out_rows);

}  // namespace hypatia::ops
