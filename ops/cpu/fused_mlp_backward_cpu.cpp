// CPU backward of a narrow fused_mlp: each block of rows goes back through every layer while it is
// in cache (ReLU mask, weight-gradient and bias-sum partials, input gradient), where the per-layer
// ATen backward makes some seven passes over memory per layer. Each task sums its weight and bias
// gradients in its own buffers, added up in a fixed order at the end (deterministic).
#include "ops/checks.h"
#include "ops/cpu/cpu_layer.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>

#include <algorithm>

namespace hypatia::ops {
namespace {

// Widest layer the blocked backward takes: above it the GEMMs are compute-bound and the per-layer
// backward over all rows is as fast as they get, without per-task weight-gradient buffers.
constexpr int64_t kMaxBlockedWidth = 256;
// One block's widest gradient, about a quarter of one core's L2: the two gradient buffers, the
// saved output and the layer input of the block all stay in cache.
constexpr int64_t kBlockGradBytes = 256 * 1024;

// grad = out <= 0 ? 0 : grad, as eager's ReLU backward (threshold_backward) on the saved output.
template <typename T, typename G>
void mask_rows(const T* out, G* grad, int64_t count) {
  for (int64_t j = 0; j < count; ++j) {
    grad[j] = static_cast<at::opmath_type<T>>(out[j]) <= 0 ? G(0) : grad[j];
  }
}

struct Task {
  std::vector<at::Tensor> grad_weights;  // [N_i, K_i] per layer, in the compute dtype
  std::vector<at::Tensor> grad_biases;   // [N_i] per layer with a bias
};

}  // namespace

std::vector<at::Tensor> fused_mlp_backward_cpu(
    const at::Tensor& grad_out,
    const at::Tensor& input,
    at::TensorList weights,
    at::TensorList saved_outputs,
    const c10::List<bool>& has_bias,
    bool relu_last,
    bool input_grad,
    bool params_grad) {
  check_mlp_backward_args("_fused_mlp_backward", grad_out, input, weights, saved_outputs, has_bias, relu_last);
  const size_t depth = weights.size();
  int64_t widest = input.size(-1);
  std::vector<CpuLayer> layers;
  layers.reserve(depth);
  for (size_t i = 0; i < depth; ++i) {
    widest = std::max(widest, weights[i].size(0));
    layers.push_back(prepare_cpu_layer(weights[i], std::nullopt, i + 1 < depth || relu_last));
  }
  // Half precision with native GEMMs (not widened) stays with ATen's backward in that dtype.
  const bool compute_in_storage_dtype = !at::isReducedFloatingType(input.scalar_type());
  if (widest > kMaxBlockedWidth || !(compute_in_storage_dtype || layers.front().widened)) {
    return fused_mlp_backward_aten(
        grad_out, input, weights, saved_outputs, has_bias, relu_last, input_grad, params_grad);
  }
  const at::ScalarType dtype = input.scalar_type();
  const at::ScalarType compute = layers.front().weight_t.scalar_type();
  const at::TensorOptions compute_options = input.options().dtype(compute);
  const int64_t rows = batch_rows(input);
  auto as_2d = [rows](const at::Tensor& t) { return t.reshape({rows, t.size(-1)}).contiguous(); };
  const at::Tensor x = as_2d(input);
  const at::Tensor grad_2d = as_2d(grad_out);
  std::vector<at::Tensor> outputs;  // layer i's output, 2-D, for the layers a ReLU follows
  for (const at::Tensor& o : saved_outputs) {
    outputs.push_back(as_2d(o));
  }
  at::Tensor grad_input = input_grad ? at::empty({rows, input.size(-1)}, input.options()) : at::Tensor();

  const int64_t block = std::max<int64_t>(64, kBlockGradBytes / (widest * c10::elementSize(compute)));
  const int64_t blocks = (rows + block - 1) / block;
  const int64_t n_tasks = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), blocks));
  std::vector<Task> tasks(n_tasks);
  if (params_grad) {
    for (Task& t : tasks) {
      for (size_t i = 0; i < depth; ++i) {
        t.grad_weights.push_back(at::zeros(weights[i].sizes(), compute_options));
        t.grad_biases.push_back(has_bias.get(i) ? at::zeros({weights[i].size(0)}, compute_options) : at::Tensor());
      }
    }
  }

  // Blocks [blocks * t / n_tasks, blocks * (t + 1) / n_tasks) go to task t.
  at::parallel_for(0, n_tasks, 1, [&](int64_t first_task, int64_t end_task) {
    at::Tensor buffers = at::empty({2, block * widest}, compute_options);
    for (int64_t t = first_task; t < end_task; ++t) {
      Task& task = tasks[t];
      for (int64_t b = blocks * t / n_tasks; b < blocks * (t + 1) / n_tasks; ++b) {
        const int64_t r = b * block, n = std::min(block, rows - r);
        auto buffer = [&](int which, int64_t cols) { return buffers[which].narrow(0, 0, n * cols).view({n, cols}); };
        at::Tensor grad = buffer(0, grad_2d.size(1));
        grad.copy_(grad_2d.narrow(0, r, n));
        for (size_t i = depth; i-- > 0;) {
          const int64_t cols = weights[i].size(0);
          if (layers[i].relu) {
            AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "fused_mlp_backward_cpu", [&] {
              using G = at::opmath_type<scalar_t>;
              mask_rows(outputs[i].const_data_ptr<scalar_t>() + r * cols, grad.mutable_data_ptr<G>(), n * cols);
            });
          }
          if (params_grad) {
            const at::Tensor layer_input = (i == 0 ? x : outputs[i - 1]).narrow(0, r, n);
            task.grad_weights[i].addmm_(grad.t(), layer_input.to(compute));
            if (has_bias.get(i)) {
              task.grad_biases[i].add_(grad.sum(0));
            }
          }
          if (i == 0 && !input_grad) {
            break;
          }
          at::Tensor next = buffer(1 - (depth - 1 - i) % 2, weights[i].size(1));
          at::mm_out(next, grad, layers[i].weight_t.t());
          if (i == 0) {
            grad_input.narrow(0, r, n).copy_(next);
          } else if (layers[i].widened) {
            next.copy_(next.to(dtype));  // rounded to the storage dtype, where eager's dgrad GEMM rounds
          }
          grad = next;
        }
      }
    }
  });

  std::vector<at::Tensor> grads;
  if (params_grad) {
    auto total = [&](auto member, size_t i) {
      at::Tensor sum = (tasks[0].*member)[i];
      for (size_t t = 1; t < tasks.size(); ++t) {
        sum.add_((tasks[t].*member)[i]);
      }
      return sum.to(dtype);
    };
    for (size_t i = 0; i < depth; ++i) {
      grads.push_back(total(&Task::grad_weights, i));
    }
    for (size_t i = 0; i < depth; ++i) {
      if (has_bias.get(i)) {
        grads.push_back(total(&Task::grad_biases, i));
      }
    }
  }
  if (input_grad) {
    grads.push_back(grad_input.view(input.sizes()));
  }
  return grads;
}

}  // namespace hypatia::ops
