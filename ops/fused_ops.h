#pragma once
// Kernels behind the hypatia ops, one set per dispatch key. Shapes: input [*, K],
// weight [N, K], bias [N]; "act" is ReLU when `relu` is set, identity otherwise.
#include <ATen/core/Tensor.h>
#include <ATen/core/List.h>

#include <array>
#include <initializer_list>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

namespace hypatia::ops {

using OptionalTensor = std::optional<at::Tensor>;
using OptionalTensorList = c10::List<std::optional<at::Tensor>>;

// out[M, N] = act(x[M, K] @ w.T + b); `out` is contiguous and already allocated.
using LinearActOut = void (*)(
    const at::Tensor& x, const at::Tensor& w, const OptionalTensor& b, bool relu, at::Tensor& out);

void linear_act_cpu_out(
    const at::Tensor& x, const at::Tensor& w, const OptionalTensor& b, bool relu, at::Tensor& out);
#ifdef HYPATIA_WITH_CUDA
void linear_act_cuda_out(
    const at::Tensor& x, const at::Tensor& w, const OptionalTensor& b, bool relu, at::Tensor& out);
#endif

// Rows of the [M, K] view of an input [*, K]: the product of its batch dims.
int64_t batch_rows(const at::Tensor& input);
// t [*, K] as [M, K]; a 2-D t itself (no view op: host time shows on small calls).
at::Tensor as_rows(const at::Tensor& t);
// out2d [M, N] viewed with `input`'s batch dims: [*, N]; out2d itself for a 2-D input.
at::Tensor unflatten_rows(const at::Tensor& out2d, const at::Tensor& input);
// A stand-in with t's sizes, dtype and device and one element of storage (a zero, expanded): what
// autograd saves for an operand whose values the backward will not read. Eager saves only the
// operands a gradient needs, so an in-place change of another after the call must not fail it.
at::Tensor shape_only(const at::Tensor& t);

// Device-generic drivers: flatten the batch dims, run `layer` once per linear layer.
at::Tensor fused_linear_relu_with(
    LinearActOut layer, const at::Tensor& input, const at::Tensor& weight, const OptionalTensor& bias);
// Allocates an uninitialised contiguous tensor, as at::empty (which null stands for).
using EmptyTensor = at::Tensor (*)(at::IntArrayRef sizes, const at::TensorOptions& options);

// Every layer's output (after its activation) when keep_hidden, the hidden ones (all but the last)
// allocated by hidden_empty; else only the last one.
std::vector<at::Tensor> run_mlp_with(
    LinearActOut layer,
    const at::Tensor& input,
    at::TensorList weights,
    const OptionalTensorList& biases,
    bool relu_last,
    bool keep_hidden,
    EmptyTensor hidden_empty = nullptr);

// A device's GEMMs for a layer's backward, from the gradient w.r.t. its output grad2d [M, N]: the
// input gradient grad2d @ w [M, K]; the weight gradient grad2d.t() @ h2d [N, K] (h2d: the layer's
// input) and, when bias_grad, the bias gradient grad2d.sum(0) (else undefined). Where the layer's
// input is the ReLU output relu_out2d [M, K] of the layer below, relu_input_grad goes on through
// that ReLU: threshold_backward(grad2d @ w, relu_out2d, 0) and, when bias_grad, its sum over rows
// (the layer below's bias gradient). relu_grad is that ReLU backward alone, on a gradient the
// caller does not own (an MLP's upstream gradient when ReLU follows its last layer): grad2d is
// left as it is. relu_bottom_grads, where a device has it (else null), is a bottom layer's
// backward in one: from grad2d [M, N] w.r.t. layer 1's output (after its ReLU backward), with w
// [N, N0] layer 1's weight, relu_out2d [M, N0] layer 0's ReLU output, input2d [M, K] and w0 [N0, K],
// layer 0's {weight, bias, input} gradients, each where asked for; nullopt, doing nothing, on
// operands it does not take. layer_grads, where a device has it (else null), is a layer's backward
// in one pass: from grad2d [M, N], w [N, K] and h2d [M, K] (its input), {grad_weight, grad_bias (where
// bias_grad), grad_input (where input_grad): through the ReLU below when relu_below, h2d being that
// ReLU's output, as relu_input_grad}; nullopt, doing nothing, on operands it does not take.
struct BackwardGemms {
  at::Tensor (*input_grad)(const at::Tensor& grad2d, const at::Tensor& w);
  std::pair<at::Tensor, at::Tensor> (*weight_grads)(const at::Tensor& grad2d, const at::Tensor& h2d, bool bias_grad);
  std::pair<at::Tensor, at::Tensor> (*relu_input_grad)(
      const at::Tensor& grad2d, const at::Tensor& w, const at::Tensor& relu_out2d, bool bias_grad);
  std::pair<at::Tensor, at::Tensor> (*relu_grad)(
      const at::Tensor& grad2d, const at::Tensor& relu_out2d, bool bias_grad);
  std::optional<std::array<at::Tensor, 3>> (*relu_bottom_grads)(
      const at::Tensor& grad2d, const at::Tensor& w, const at::Tensor& relu_out2d, const at::Tensor& input2d,
      const at::Tensor& w0, bool weight_grad, bool bias_grad, bool input_grad);
  std::optional<std::array<at::Tensor, 3>> (*layer_grads)(
      const at::Tensor& grad2d, const at::Tensor& w, const at::Tensor& h2d, bool relu_below, bool bias_grad,
      bool input_grad);
};
// Whether autograd records ops on these tensors now (a double backward): where it does, the
// backward keeps to differentiable ATen ops.
bool records_backward(at::TensorList tensors);
// Eager's ReLU backward of grad2d [M, K] on the saved ReLU output (threshold_backward at 0) and,
// when bias_grad, its sum over rows: relu_input_grad's second half, in ATen ops. grad2d is the
// caller's temporary (a GEMM's output) and is overwritten unless autograd records the call.
std::pair<at::Tensor, at::Tensor> relu_backward_and_bias_grad(
    at::Tensor grad2d, const at::Tensor& relu_out2d, bool bias_grad);
// The weight gradient grad2d.T @ h2d and, when bias_grad, the bias gradient, by ATen ops.
std::pair<at::Tensor, at::Tensor> aten_weight_grads(const at::Tensor& grad2d, const at::Tensor& h2d, bool bias_grad);
// BackwardGemms::relu_grad by ATen ops: threshold_backward(grad2d, relu_out2d, 0) and, when
// bias_grad, its sum over rows.
std::pair<at::Tensor, at::Tensor> aten_relu_grad(
    const at::Tensor& grad2d, const at::Tensor& relu_out2d, bool bias_grad);
// ATen ops, so differentiable.
extern const BackwardGemms aten_gemms;
#ifdef HYPATIA_WITH_CUDA
// cuBLASLt GEMMs where they time faster than the unfused way (ATen's GEMMs, then the library's
// one-pass ReLU backward and bias sum), per shape: the weight gradient's BGRADB epilogue sums the
// bias gradient, relu_input_grad's DRELU_BGRAD epilogue applies the ReLU mask and sums the layer
// below's bias gradient; ops/cuda/linear_act_cuda.cpp.
extern const BackwardGemms cuda_gemms;
#endif

// fused_mlp's backward from what its training forward saved: the input, the weights and the
// outputs of every layer that a ReLU follows (layers 0..L-2, and L-1 too when relu_last). Returns
// [grad_weights..., grad_biases (of layers with has_bias)...] when params_grad, then grad_input
// when input_grad. Device-generic: per layer `gemms` (the input gradient through the ReLU below it
// by relu_input_grad), and when relu_last eager's ReLU backward on grad_out with the top layer's
// bias gradient (relu_grad). The caller (each device's entry point, which first tries its one-kernel
// backwards) has checked the arguments.
// grad_out and each saved output are dropped after their last use: where the caller handed over the
// only references (_fused_mlp_backward's boxed kernels), their memory is freed layer by layer, as
// eager's backward frees a layer's output once that layer is done.
std::vector<at::Tensor> fused_mlp_backward_with(
    const BackwardGemms& gemms,
    at::Tensor grad_out,
    const at::Tensor& input,
    at::TensorList weights,
    std::vector<at::Tensor> saved_outputs,
    const c10::List<bool>& has_bias,
    bool relu_last,
    bool input_grad,
    bool params_grad);

// A backward op's result: the defined gradients among `groups`, in order (undefined where not
// asked for, or where a layer has no bias).
std::vector<at::Tensor> defined_grads(std::initializer_list<at::TensorList> groups);

// The gradient through a ReLU from its mask bits: a device's _relu_mask_backward kernel.
using ReluMaskBackward = at::Tensor (*)(const at::Tensor& grad, const at::Tensor& mask);

// fused_linear_relu's backward from its saved input, weight and ReLU mask bits: grad_input when
// input_grad, then grad_weight when weight_grad, then grad_bias when bias_grad. Device-generic:
// `mask_backward` and `gemms` (the bias sum alone where no weight gradient is asked for).
std::vector<at::Tensor> fused_linear_relu_backward_with(
    ReluMaskBackward mask_backward,
    const BackwardGemms& gemms,
    const at::Tensor& grad_out,
    const at::Tensor& input,
    const at::Tensor& weight,
    const at::Tensor& relu_mask,
    bool input_grad,
    bool weight_grad,
    bool bias_grad);

// CPU
at::Tensor fused_linear_relu_cpu(const at::Tensor& input, const at::Tensor& weight, const OptionalTensor& bias);
at::Tensor fused_mlp_cpu(
    const at::Tensor& input, at::TensorList weights, const OptionalTensorList& biases, bool relu_last);
std::vector<at::Tensor> fused_mlp_forward_cpu(
    const at::Tensor& input, at::TensorList weights, const OptionalTensorList& biases, bool relu_last);
// _fused_mlp_backward on the CPU: narrow MLPs block by block through every layer (in cache),
// wider ones and native half-precision GEMMs by fused_mlp_backward_with (grad_out and
// saved_outputs by value for it).
std::vector<at::Tensor> fused_mlp_backward_cpu(
    at::Tensor grad_out,
    const at::Tensor& input,
    at::TensorList weights,
    std::vector<at::Tensor> saved_outputs,
    const c10::List<bool>& has_bias,
    bool relu_last,
    bool input_grad,
    bool params_grad);
// fused_linear_relu's training forward and the gradient through its ReLU, as on CUDA (below).
std::tuple<at::Tensor, at::Tensor> fused_linear_relu_masked_cpu(
    const at::Tensor& input, const at::Tensor& weight, const OptionalTensor& bias);
at::Tensor relu_mask_backward_cpu(const at::Tensor& grad, const at::Tensor& mask);
// _fused_linear_relu_backward on the CPU: narrow layers by blocks of rows in cache (as
// fused_mlp_backward_cpu), wider ones by fused_linear_relu_backward_with.
std::vector<at::Tensor> fused_linear_relu_backward_cpu(
    const at::Tensor& grad_out,
    const at::Tensor& input,
    const at::Tensor& weight,
    const at::Tensor& relu_mask,
    bool input_grad,
    bool weight_grad,
    bool bias_grad);

// CUDA
#ifdef HYPATIA_WITH_CUDA
at::Tensor fused_linear_relu_cuda(const at::Tensor& input, const at::Tensor& weight, const OptionalTensor& bias);
at::Tensor fused_mlp_cuda(
    const at::Tensor& input, at::TensorList weights, const OptionalTensorList& biases, bool relu_last);
std::vector<at::Tensor> fused_mlp_forward_cuda(
    const at::Tensor& input, at::TensorList weights, const OptionalTensorList& biases, bool relu_last);
// fused_linear_relu's training forward: the output and its ReLU mask as bits (layout in
// ops/checks.h), packed from the output.
std::tuple<at::Tensor, at::Tensor> fused_linear_relu_masked_cuda(
    const at::Tensor& input, const at::Tensor& weight, const OptionalTensor& bias);
// bits [M, relu_mask_row_bytes(N)] of out2d [M, N] (ops/cuda/relu_mask_kernel.cu).
void pack_relu_mask_cuda(const at::Tensor& out2d, at::Tensor& bits);
// The gradient through the ReLU: grad [*, N] where the mask bit is set, 0 elsewhere.
at::Tensor relu_mask_backward_cuda(const at::Tensor& grad, const at::Tensor& mask);
// In place over grad2d [M, K] (dense): eager's ReLU backward on the saved ReLU output relu_out2d
// [M, K] (threshold_backward at 0) and, where `sums` [K] is defined, grad2d's sums over rows after
// it (the bias gradient; accumulated in float, double for double, and rounded once), in one pass
// (ops/cuda/relu_backward_sums_kernel.cu).
void relu_backward_cuda_(at::Tensor& grad2d, const at::Tensor& relu_out2d, at::Tensor& sums);
// BackwardGemms::relu_grad on CUDA: as relu_backward_cuda_, into a new tensor (ATen's ops where
// autograd records the call).
std::pair<at::Tensor, at::Tensor> relu_grad_cuda(
    const at::Tensor& grad2d, const at::Tensor& relu_out2d, bool bias_grad);
// sums [K] = m2d [M, K] summed over its rows, as relu_backward_cuda_ sums.
void column_sums_cuda(const at::Tensor& m2d, at::Tensor& sums);
// grad_input [M, K] = threshold_backward(g [M, N] @ w [N, K], relu_out [M, K], 0) in one CUTLASS GEMM
// on sm_90, then, where grad_bias [K] is defined, its sums over rows as column_sums_cuda
// (ops/cuda/relu_input_grad_kernel.cu): half or bfloat16, all four dense and 16-byte aligned, N and K
// multiples of 8, M > 0. Returns false, doing nothing, on problems it does not cover, on other GPUs
// and in builds without CUTLASS.
bool relu_input_grad_fused_cuda(
    const at::Tensor& g, const at::Tensor& w, const at::Tensor& relu_out, at::Tensor& grad_input,
    at::Tensor& grad_bias);
// The backward of a ReLU layer with a narrow input (ops/cuda/narrow_input_backward_kernel.cu), in one
// kernel over its gradient: whether it takes relu_out2d [M, N] (the layer's saved output),
// input2d [M, K] and w [N, K] (half or bfloat16, K <= 16, N <= 512 and a multiple of 8, M > 0, the
// output dense, sm_80 or newer; HYPATIA_NARROW_INPUT_BACKWARD=0 turns it off), and, for operands it
// takes, from grad2d [M, N] (dense) w.r.t. the ReLU's output, {grad_weight, grad_bias, grad_input},
// each where asked for (else undefined).
bool narrow_input_backward_applies(const at::Tensor& relu_out2d, const at::Tensor& input2d, const at::Tensor& w);
std::array<at::Tensor, 3> narrow_input_backward_cuda(
    const at::Tensor& grad2d, const at::Tensor& relu_out2d, const at::Tensor& input2d, const at::Tensor& w,
    bool weight_grad, bool bias_grad, bool input_grad);
// t [M, K] (CUDA) as a dense [M, cols]: its first cols columns, zeros past K
// (ops/cuda/columns_kernel.cu).
at::Tensor resize_columns_cuda(const at::Tensor& t, int64_t cols);
std::vector<at::Tensor> fused_linear_relu_backward_cuda(
    const at::Tensor& grad_out,
    const at::Tensor& input,
    const at::Tensor& weight,
    const at::Tensor& relu_mask,
    bool input_grad,
    bool weight_grad,
    bool bias_grad);
// _fused_mlp_backward's kernel; grad_out and saved_outputs by value, as fused_mlp_backward_with.
std::vector<at::Tensor> fused_mlp_backward_cuda(
    at::Tensor grad_out, const at::Tensor& input, at::TensorList weights, std::vector<at::Tensor> saved_outputs,
    const c10::List<bool>& has_bias, bool relu_last, bool input_grad, bool params_grad);
// act(x @ w.T + b) for 1..256 rows (ops/cuda/skinny_linear_kernel.cu): float32, float16 or
// bfloat16, x [M, K] and w [N, K] dense and 16-byte aligned, K * element size a multiple of 16,
// sm_80 or newer with room for its shared memory. Returns false, doing nothing, on problems it does
// not cover.
bool skinny_linear_cuda(const at::Tensor& x, const at::Tensor& w, const OptionalTensor& b, bool relu, at::Tensor& out);
// The narrow MLP (ops/cuda/narrow_mlp_kernel.cu): 1..16 layers, every width a multiple of 16 and
// <= 128, half or bfloat16, dense 16-byte-aligned operands, sm_80 or newer.
// Forward in one kernel: the layers' outputs [M, N_l], each allocated where keep[l] (undefined
// elsewhere; keep.back() must be set); nullopt, allocating nothing, on shapes it does not cover.
std::optional<std::vector<at::Tensor>> narrow_mlp_forward_cuda(
    const at::Tensor& x2d, at::TensorList weights, const OptionalTensorList& biases, bool relu_last,
    const std::vector<bool>& keep);
// A 256 -> 256 layer's backward in one pass over its rows (ops/cuda/layer_backward_kernel.cu, sm_90a,
// half or bfloat16): from grad2d [M, 256] w.r.t. the layer's output, its weight w [256, 256] and its
// input h2d [M, 256], {grad_weight, grad_bias (where bias_grad, else undefined), grad_input (where
// input_grad): threshold_backward(grad2d @ w, h2d, 0) where relu_below (h2d the ReLU output of the
// layer below), else grad2d @ w}; nullopt, doing nothing, on operands it does not take, for a bottom
// layer (not relu_below) of fewer than 8192 rows (slower there than the per-layer path), and where
// HYPATIA_LAYER_BACKWARD=0.
std::optional<std::array<at::Tensor, 3>> layer_backward_cuda(
    const at::Tensor& grad2d, const at::Tensor& w, const at::Tensor& h2d, bool relu_below, bool bias_grad,
    bool input_grad);
// The medium MLP's forward (ops/cuda/medium_mlp_kernel.cu), as narrow_mlp_forward_cuda: 1..16 layers,
// the input width a multiple of 16, the others of 32, all <= 256; sm_90a (wgmma); where it measured
// faster than the per-layer path, or as HYPATIA_MEDIUM_MLP says.
std::optional<std::vector<at::Tensor>> medium_mlp_forward_cuda(
    const at::Tensor& x2d, at::TensorList weights, const OptionalTensorList& biases, bool relu_last,
    const std::vector<bool>& keep);
// fused_mlp_backward_with's result (2-D grad_input) from one kernel (ReLU masks, dgrads, bias and
// weight-gradient sums of all layers), plus a second for the weight gradients whose fp32 sums do not
// fit in its shared memory; nullopt, doing nothing, on shapes it does not cover.
std::optional<std::vector<at::Tensor>> narrow_mlp_backward_cuda(
    const at::Tensor& grad_out2d, const at::Tensor& input2d, at::TensorList weights, at::TensorList saved_outputs,
    const c10::List<bool>& has_bias, bool relu_last, bool input_grad, bool params_grad);
#endif

// Meta (shapes only; also what FakeTensor and torch.compile trace with)
at::Tensor fused_linear_relu_meta(const at::Tensor& input, const at::Tensor& weight, const OptionalTensor& bias);
at::Tensor fused_mlp_meta(
    const at::Tensor& input, at::TensorList weights, const OptionalTensorList& biases, bool relu_last);
std::tuple<at::Tensor, at::Tensor> fused_linear_relu_masked_meta(
    const at::Tensor& input, const at::Tensor& weight, const OptionalTensor& bias);
at::Tensor relu_mask_backward_meta(const at::Tensor& grad, const at::Tensor& mask);
std::vector<at::Tensor> fused_linear_relu_backward_meta(
    const at::Tensor& grad_out,
    const at::Tensor& input,
    const at::Tensor& weight,
    const at::Tensor& relu_mask,
    bool input_grad,
    bool weight_grad,
    bool bias_grad);
std::vector<at::Tensor> fused_mlp_forward_meta(
    const at::Tensor& input, at::TensorList weights, const OptionalTensorList& biases, bool relu_last);
std::vector<at::Tensor> fused_mlp_backward_meta(
    const at::Tensor& grad_out, const at::Tensor& input, at::TensorList weights, at::TensorList saved_outputs,
    const c10::List<bool>& has_bias, bool relu_last, bool input_grad, bool params_grad);

}  // namespace hypatia::ops
