#include "ops/fused_ops.h"
#include "registration/mlp_backward_boxed.h"

#include <torch/library.h>

TORCH_LIBRARY_IMPL(hypatia, CPU, m) {
  m.impl("fused_linear_relu", &hypatia::ops::fused_linear_relu_cpu);
  m.impl("_fused_linear_relu_masked", &hypatia::ops::fused_linear_relu_masked_cpu);
  m.impl("_relu_mask_backward", &hypatia::ops::relu_mask_backward_cpu);
  m.impl("_fused_linear_relu_backward", &hypatia::ops::fused_linear_relu_backward_cpu);
  m.impl("fused_mlp", &hypatia::ops::fused_mlp_cpu);
  m.impl("_fused_mlp_forward", &hypatia::ops::fused_mlp_forward_cpu);
  m.impl(
      "_fused_mlp_backward",
      torch::CppFunction::makeFromBoxedFunction<&hypatia::mlp_backward_boxed<&hypatia::ops::fused_mlp_backward_cpu>>());
}
