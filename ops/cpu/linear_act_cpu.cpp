// CPU: act(x @ w.T + b) with the GEMM in ATen's BLAS and bias + ReLU applied to each row block
// straight after its GEMM, while the block is still in cache.
#include "ops/cpu/cpu_layer.h"
#include "ops/cpu/row_blocks.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/relu.h>

namespace hypatia::ops {
namespace {

// Whether oneDNN has native half-precision dot products (AVX512-BF16/FP16, AMX) on this CPU.
bool native_half_gemm(at::ScalarType dtype) {
  auto ask = [](const char* op) {
    return c10::Dispatcher::singleton().findSchemaOrThrow(op, "").typed<bool()>().call();
  };
  static const bool bf16 = ask("mkldnn::_is_mkldnn_bf16_supported");
  static const bool fp16 = ask("mkldnn::_is_mkldnn_fp16_supported");
  return dtype == at::kBFloat16 ? bf16 : fp16;
}

}  // namespace

CpuLayer prepare_cpu_layer(const at::Tensor& w, const OptionalTensor& b, bool relu) {
  CpuLayer layer;
  layer.relu = relu;
  // Without native support oneDNN emulates bf16/fp16 GEMMs ~10x slower than fp32 ones, so such
  // layers run in fp32: the same fp32 accumulation, one rounding when the block is stored.
  layer.widened = at::isReducedFloatingType(w.scalar_type()) && !native_half_gemm(w.scalar_type());
  const bool has_bias = b.has_value() && b->defined();
  if (layer.widened) {
    layer.weight_t = w.to(at::kFloat).t();
    layer.bias = has_bias ? OptionalTensor(b->to(at::kFloat)) : std::nullopt;
  } else {
    layer.weight_t = w.t();
    layer.bias = has_bias ? b : std::nullopt;
  }
  return layer;
}

void run_cpu_layer(const CpuLayer& layer, const at::Tensor& x_rows, at::Tensor& out_rows) {
  const at::Tensor lhs = layer.widened ? x_rows.to(at::kFloat) : x_rows;
  at::Tensor acc = layer.widened ? at::empty(out_rows.sizes(), lhs.options()) : out_rows;
  if (layer.bias) {
    at::addmm_out(acc, *layer.bias, lhs, layer.weight_t);
  } else {
    at::mm_out(acc, lhs, layer.weight_t);
  }
  if (layer.relu) {
    at::relu_(acc);  // NaN stays NaN, as in eager; and relu commutes with the rounding below
  }
  if (layer.widened) {
    out_rows.copy_(acc);
  }
}

void linear_act_cpu_out(
    const at::Tensor& x, const at::Tensor& w, const OptionalTensor& b, bool relu, at::Tensor& out) {
  if (out.numel() == 0) {
    return;
  }
  const CpuLayer layer = prepare_cpu_layer(w, b, relu);
  const int64_t block = rows_per_block(w.size(0), layer.weight_t.element_size());
  for_each_row_chunk(x.size(0), block, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; r += block) {
      const int64_t n = std::min(block, end - r);
      at::Tensor out_rows = out.narrow(0, r, n);
      run_cpu_layer(layer, x.narrow(0, r, n), out_rows);
    }
  });
}

at::Tensor fused_linear_relu_cpu(const at::Tensor& input, const at::Tensor& weight, const OptionalTensor& bias) {
  return fused_linear_relu_with(linear_act_cpu_out, input, weight, bias);
}

std::vector<at::Tensor> fused_mlp_forward_cpu(
    const at::Tensor& input, at::TensorList weights, const OptionalTensorList& biases, bool relu_last) {
  return run_mlp_with(linear_act_cpu_out, input, weights, biases, relu_last, /*keep_hidden=*/true);
}

}  // namespace hypatia::ops
