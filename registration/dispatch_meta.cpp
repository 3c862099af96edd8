#include "ops/fused_ops.h"

#include <torch/library.h>

TORCH_LIBRARY_IMPL(hypatia, Meta, m) {
  m.impl("fused_linear_relu", &hypatia::ops::fused_linear_relu_meta);
  m.impl("fused_mlp", &hypatia::ops::fused_mlp_meta);
  m.impl("_fused_mlp_forward", &hypatia::ops::fused_mlp_forward_meta);
}
