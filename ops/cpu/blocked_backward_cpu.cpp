// CPU backward of narrow fused_linear_relu and fused_mlp layers: each block of rows goes back
// through every layer while it is in cache (ReLU mask, weight-gradient and bias-sum partials, input
// gradient), where the per-layer backward makes some seven passes over memory per layer. Each task
// sums its weight and bias gradients in its own buffers, added up in a fixed order at the end
// (deterministic). Wider float32 layers, compute-bound, keep the per-layer backward; half precision
// without native GEMMs takes blocks at every width, computed in float32.
#include "ops/checks.h"
#include "ops/cpu/cpu_layer.h"
#include "ops/cpu/relu_bits.h"
#include "ops/cpu/row_blocks.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>

#include <algorithm>

namespace hypatia::ops {
namespace {

// Widest float32/float64 layer taken by blocks: above it the GEMMs are compute-bound, and the
// per-layer backward over all rows is as fast as they get without per-task weight-gradient buffers.
// Half precision without native GEMMs takes blocks at any width: they compute in float32, where
// the per-layer backward would run oneDNN's ~10x slower emulation.
constexpr int64_t kMaxBlockedWidth = 256;
// One block's widest gradient, about a quarter of one core's L2: the two gradient buffers, the
// saved output (or mask) and the layer input of the block all stay in cache ...
constexpr int64_t kBlockGradBytes = 256 * 1024;
// ... but no fewer rows than this, the depth of each block's weight-gradient GEMM.
constexpr int64_t kMinBackwardBlockRows = 256;

// One layer going back. Its ReLU mask (where linear.relu) comes from the saved post-ReLU output
// [rows, N] or from its bits [rows, row_bytes].
struct BackLayer {
  CpuLayer linear;
  at::Tensor input;  // [rows, K] contiguous: the wgrad's other operand
  at::Tensor relu_output;
  at::Tensor relu_bits;
  bool has_bias = false;
};

struct Grads {
  at::Tensor input;                  // [rows, K_0] when asked for
  std::vector<at::Tensor> weights;   // per layer; undefined where not asked for
  std::vector<at::Tensor> biases;    // per layer; undefined where not asked for or without a bias
};

// The widest activation of layers `weights` taking `in_features`: what a block's buffers hold.
int64_t widest_width(int64_t in_features, at::TensorList weights) {
  int64_t widest = in_features;
  for (const at::Tensor& w : weights) {
    widest = std::max(widest, w.size(0));
  }
  return widest;
}

// Whether the backward takes blocks (above): narrow layers, or half precision computed in float32.
bool blocks_pay(at::ScalarType dtype, int64_t widest) {
  return at::isReducedFloatingType(dtype) ? computes_widened(dtype) : widest <= kMaxBlockedWidth;
}

// dst = out <= 0 ? 0 : grad, as eager's ReLU backward (threshold_backward) on the saved output.
// Both loaded unconditionally: a load under the condition keeps the loop from vectorizing (and a
// branch on random signs costs ~5 ns an element).
template <typename T, typename G>
void mask_by_output(const T* out, const G* grad, G* dst, int64_t count) {
  for (int64_t j = 0; j < count; ++j) {
    const G o = static_cast<at::opmath_type<T>>(out[j]), g = grad[j];
    dst[j] = o <= 0 ? G(0) : g;
  }
}

// Gradients of layers[0..L) (layer i + 1's input is layer i's output) from grad_out [rows, N_last];
// `widest` is widest_width of the layers.
Grads blocked_backward(
    const at::Tensor& grad_out, const std::vector<BackLayer>& layers, int64_t widest, bool input_grad,
    bool weights_grad, bool biases_grad) {
  const at::Tensor& x = layers.front().input;
  const at::ScalarType dtype = x.scalar_type();
  const at::TensorOptions compute = x.options().dtype(layers.front().linear.weight_t.scalar_type());
  const int64_t rows = x.size(0);
  const size_t depth = layers.size();
  Grads grads;
  if (input_grad) {
    grads.input = at::empty(x.sizes(), x.options());
  }
  const int64_t element_size = c10::elementSize(compute.dtype().toScalarType());
  // widest is 0 when every layer has 0 features (nn.Linear(0, 0)): no division by it then.
  const int64_t block =
      std::max<int64_t>(kMinBackwardBlockRows, kBlockGradBytes / (std::max<int64_t>(1, widest) * element_size));
  const int64_t blocks = (rows + block - 1) / block;
  const int64_t n_tasks = reduction_tasks(blocks);
  // Per task: every layer's weight gradient, then every layer's bias gradient, in the compute dtype.
  // Each task's first block writes them and the others add to them; no rows, no blocks: zeros. (Zero
  // fills of fresh pages were most of a few-row call's time: a 256 x 256 layer's 256 KB, ~25 us.)
  const auto sums_like = [&](at::IntArrayRef sizes) {
    return blocks == 0 ? at::zeros(sizes, compute) : at::empty(sizes, compute);
  };
  std::vector<std::vector<at::Tensor>> partials(n_tasks);
  for (auto& sums : partials) {
    for (const BackLayer& l : layers) {
      sums.push_back(weights_grad ? sums_like(l.linear.weight_t.t().sizes()) : at::Tensor());
    }
    for (const BackLayer& l : layers) {
      sums.push_back(biases_grad && l.has_bias ? sums_like({l.linear.weight_t.size(1)}) : at::Tensor());
    }
  }

  for_each_reduction_task(n_tasks, blocks, [&](int64_t t, int64_t first_block, int64_t end_block) {
    at::Tensor buffers = at::empty({2, block * widest}, compute);
    std::vector<at::Tensor>& sums = partials[t];
    for (int64_t b = first_block; b < end_block; ++b) {
      const int64_t r = b * block, n = std::min(block, rows - r);
      auto buffer = [&](int which, int64_t cols) { return buffers[which].narrow(0, 0, n * cols).view({n, cols}); };
      // The gradient at the current layer's output, in the compute dtype: grad_out's rows as
      // they are where that is possible, else in buffer `in_buffer` (the other one is free).
      at::Tensor grad = grad_out.narrow(0, r, n);
      int in_buffer = -1;
      auto into_buffer = [&](int64_t cols) {
        in_buffer = in_buffer == 0 ? 1 : 0;
        return buffer(in_buffer, cols);
      };
      if (grad.scalar_type() != compute.dtype()) {
        grad = into_buffer(grad.size(1)).copy_(grad);
      }
      for (size_t i = depth; i-- > 0;) {
        const BackLayer& layer = layers[i];
        const int64_t cols = layer.linear.weight_t.size(1);
        if (layer.relu_output.defined() || layer.relu_bits.defined()) {
          // Masked in place once the gradient is in a buffer; grad_out's rows are masked into one.
          const at::Tensor masked = in_buffer < 0 ? into_buffer(cols) : grad;
          if (layer.relu_output.defined()) {
            AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "blocked_backward_cpu", [&] {
              using G = at::opmath_type<scalar_t>;
              mask_by_output(layer.relu_output.const_data_ptr<scalar_t>() + r * cols, grad.const_data_ptr<G>(),
                             masked.mutable_data_ptr<G>(), n * cols);
            });
          } else {
            AT_DISPATCH_FLOATING_TYPES(compute.dtype().toScalarType(), "blocked_backward_cpu", [&] {
              using U = Bits<scalar_t>;
              const int64_t row_bytes = layer.relu_bits.size(1);
              const uint8_t* bits = layer.relu_bits.const_data_ptr<uint8_t>() + r * row_bytes;
              const U* src = static_cast<const U*>(grad.const_data_ptr());
              U* dst = static_cast<U*>(masked.mutable_data_ptr());
              for (int64_t row = 0; row < n; ++row) {
                apply_relu_bits(bits + row * row_bytes, src + row * cols, dst + row * cols, cols);
              }
            });
          }
          grad = masked;
        }
        const bool first = b == first_block;
        if (sums[i].defined()) {
          const at::Tensor h = layer.input.narrow(0, r, n).to(compute.dtype());
          if (first) {
            at::mm_out(sums[i], grad.t(), h);
          } else {
            sums[i].addmm_(grad.t(), h);
          }
        }
        if (sums[depth + i].defined()) {
          if (first) {
            at::sum_out(sums[depth + i], grad, 0);
          } else {
            sums[depth + i].add_(grad.sum(0));
          }
        }
        if (i == 0 && !input_grad) {
          break;
        }
        const at::Tensor w = layer.linear.weight_t.t();
        if (i == 0 && !layer.linear.widened) {
          at::Tensor dst = grads.input.narrow(0, r, n);
          at::mm_out(dst, grad, w);
          break;
        }
        at::Tensor next = into_buffer(w.size(1));
        at::mm_out(next, grad, w);
        if (i == 0) {
          grads.input.narrow(0, r, n).copy_(next);
        } else if (layer.linear.widened) {
          next.copy_(next.to(dtype));  // rounded to the storage dtype, where eager's dgrad GEMM rounds
        }
        grad = next;
      }
    }
  });

  auto total = [&](size_t slot) {
    at::Tensor sum = partials[0][slot];
    if (!sum.defined()) {
      return sum;
    }
    for (size_t t = 1; t < partials.size(); ++t) {
      sum.add_(partials[t][slot]);
    }
    return sum.to(dtype);
  };
  for (size_t i = 0; i < depth; ++i) {
    grads.weights.push_back(total(i));
    grads.biases.push_back(total(depth + i));
  }
  return grads;
}

// The per-layer backward of wide layers (and of native bfloat16 ones): ATen's GEMMs, but the input
// gradient by cpu_input_grad and the weight gradient by cpu_weight_grads, whose other layers stay
// with ATen: on the AMD EPYC oneDNN's (mkldnn_linear_backward_weights, or the inner product on
// transposed copies) ran 0.79-0.98x MKL's.
const BackwardGemms cpu_gemms{
    cpu_input_grad, cpu_weight_grads, cpu_relu_input_grad, aten_relu_grad, nullptr, nullptr};

}  // namespace

std::vector<at::Tensor> fused_mlp_backward_cpu(
    at::Tensor grad_out,
    const at::Tensor& input,
    at::TensorList weights,
    std::vector<at::Tensor> saved_outputs,
    const c10::List<bool>& has_bias,
    bool relu_last,
    bool input_grad,
    bool params_grad) {
  check_mlp_backward_args("_fused_mlp_backward", grad_out, input, weights, saved_outputs, has_bias, relu_last);
  const int64_t widest = widest_width(input.size(-1), weights);
  if (!blocks_pay(input.scalar_type(), widest)) {
    if (auto grads = wide_mlp_backward(
            grad_out, input, weights, saved_outputs, has_bias, relu_last, input_grad, params_grad)) {
      return *std::move(grads);
    }
    return fused_mlp_backward_with(
        cpu_gemms, std::move(grad_out), input, weights, std::move(saved_outputs), has_bias, relu_last, input_grad,
        params_grad);
  }
  auto as_2d = [](const at::Tensor& t) { return as_rows(t).contiguous(); };
  std::vector<BackLayer> layers(weights.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const bool relu = i < saved_outputs.size();
    layers[i].linear = prepare_cpu_layer(weights[i], std::nullopt, relu, /*forward_rows=*/0, /*block_rows=*/0);
    // Read for weight gradients only (without them, the saved input is a stand-in: shape_only).
    const at::Tensor& layer_input = i == 0 ? input : saved_outputs[i - 1];
    layers[i].input = params_grad ? as_2d(layer_input) : as_rows(layer_input);
    layers[i].relu_output = relu ? as_2d(saved_outputs[i]) : at::Tensor();
    layers[i].has_bias = has_bias.get(i);
  }
  const Grads g = blocked_backward(as_2d(grad_out), layers, widest, input_grad, params_grad, params_grad);
  return defined_grads({g.weights, g.biases, input_grad ? g.input.view(input.sizes()) : at::Tensor()});
}

std::vector<at::Tensor> fused_linear_relu_backward_cpu(
    const at::Tensor& grad_out,
    const at::Tensor& input,
    const at::Tensor& weight,
    const at::Tensor& relu_mask,
    bool input_grad,
    bool weight_grad,
    bool bias_grad) {
  check_linear_relu_backward_args("_fused_linear_relu_backward", grad_out, input, weight, relu_mask);
  const int64_t widest = widest_width(input.size(-1), weight);
  if (!blocks_pay(input.scalar_type(), widest)) {
    return fused_linear_relu_backward_with(
        relu_mask_backward_cpu, cpu_gemms, grad_out, input, weight, relu_mask, input_grad, weight_grad,
        bias_grad);
  }
  std::vector<BackLayer> layers(1);
  layers[0].linear = prepare_cpu_layer(weight, std::nullopt, /*relu=*/true, /*forward_rows=*/0, /*block_rows=*/0);
  layers[0].input = weight_grad ? as_rows(input).contiguous() : as_rows(input);  // a stand-in without weight_grad
  layers[0].relu_bits = relu_mask.contiguous();
  layers[0].has_bias = bias_grad;
  const Grads g = blocked_backward(
      as_rows(grad_out).contiguous(), layers, widest, input_grad, weight_grad, bias_grad);
  return defined_grads({input_grad ? g.input.view(input.sizes()) : at::Tensor(), g.weights[0], g.biases[0]});
}

}  // namespace hypatia::ops
