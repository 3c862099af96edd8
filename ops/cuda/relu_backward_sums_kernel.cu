// The elementwise half of a layer's unfused backward on CUDA, in one pass over the gradient:
// eager's ReLU backward on the saved ReLU output (threshold_backward at 0) and the gradient's sums
// over its rows (the bias gradient). ATen runs these as two kernels, and its sum over the rows of
// a tall, narrow matrix moved a quarter of the copy bandwidth on the H100: 90 us for 262144 x 64
// float32 (docs/perf/experiments.md#one-pass-relu-backward-and-bias-sums).
#include "ops/fused_ops.h"
#include "ops/cuda/partial_sums.cuh"

#include <ATen/AccumulateType.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace hypatia::ops {
namespace {

// Two blocks of 512 threads per SM keep enough loads in flight to move ~2.8 TB/s on the H100, with
// few chunks of rows: their partial sums are added up by a second kernel, whose time grows with
// their number. Each thread walks at least kMinRowsPerThread rows: at 16, a 64-column gradient of
// 65536 rows ran as 64 blocks and left half the SMs idle.
constexpr int kThreads = 512;
constexpr int kBlocksPerSM = 2;
constexpr int64_t kMinRowsPerThread = 4;

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

// Threads: blockDim.x vectors of V columns by blockDim.y rows. Block (x, y) covers column tile x
// and rows [y * chunk_rows, (y + 1) * chunk_rows). kRelu: relu_out <= 0 ? 0 : grad (NaN in relu_out
// passes the gradient, as in eager), into `dst` where kOut, else over grad. kSums: each thread adds
// up its column vector over its rows, the block adds those over blockDim.y in a fixed order, and
// writes them to row y of `partials` [gridDim.y, cols], or, in one chunk, to `sums` itself.
template <typename T, typename Acc, int V, bool kRelu, bool kSums, bool kOut>
__global__ void __launch_bounds__(kThreads, kBlocksPerSM) relu_backward_sums_kernel(
    T* __restrict__ grad, const T* __restrict__ relu_out, T* __restrict__ dst, Acc* __restrict__ partials,
    T* __restrict__ sums, int64_t rows, int64_t cols, int64_t chunk_rows) {
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  const int64_t first = blockIdx.y * chunk_rows, end = rows < first + chunk_rows ? rows : first + chunk_rows;
  Acc acc[V] = {};
  if (col < cols) {
#pragma unroll 4
    for (int64_t r = first + threadIdx.y; r < end; r += blockDim.y) {
      Vec<T, V> g = *reinterpret_cast<const Vec<T, V>*>(grad + r * cols + col);
      if constexpr (kRelu) {
        const Vec<T, V> out = *reinterpret_cast<const Vec<T, V>*>(relu_out + r * cols + col);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          g.v[j] = static_cast<Acc>(out.v[j]) <= Acc(0) ? static_cast<T>(Acc(0)) : g.v[j];
        }
        *reinterpret_cast<Vec<T, V>*>((kOut ? dst : grad) + r * cols + col) = g;
      }
      if constexpr (kSums) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          acc[j] += static_cast<Acc>(g.v[j]);
        }
      }
    }
  }
  if constexpr (kSums) {
    extern __shared__ unsigned char smem_bytes[];
    Acc* block_sums = reinterpret_cast<Acc*>(smem_bytes);  // [blockDim.y][blockDim.x * V]
    const int width = blockDim.x * V, at = threadIdx.x * V;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      block_sums[threadIdx.y * width + at + j] = acc[j];
    }
    partial_sums::add_rows_into_first<Acc, V>(block_sums, width, at);
    if (threadIdx.y != 0 || col >= cols) {
      return;
    }
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if (gridDim.y == 1) {
        sums[col + j] = static_cast<T>(block_sums[at + j]);
      } else {
        partials[blockIdx.y * cols + col + j] = block_sums[at + j];
      }
    }
  }
}

template <typename T, int V, bool kRelu, bool kSums, bool kOut>
void launch(
    T* grad, const T* relu_out, T* dst, T* sums, int64_t rows, int64_t cols, const at::TensorOptions& options) {
  using Acc = at::acc_type<T, /*is_cuda=*/true>;
  const int64_t vectors = cols / V;
  const int tx = static_cast<int>(std::min<int64_t>(vectors, kThreads)), ty = kThreads / tx;
  const int64_t col_tiles = (vectors + tx - 1) / tx;
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t target_chunks = std::max<int64_t>(
      1, std::min<int64_t>(rows / (ty * kMinRowsPerThread), kBlocksPerSM * sms / col_tiles));
  const int64_t chunk_rows = (rows + target_chunks - 1) / target_chunks;
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  const auto acc_dtype = c10::CppTypeToScalarType<Acc>::value;
  at::Tensor partials = kSums && chunks > 1 ? at::empty({chunks, cols}, options.dtype(acc_dtype)) : at::Tensor();
  Acc* partials_ptr = partials.defined() ? partials.mutable_data_ptr<Acc>() : nullptr;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const size_t smem = kSums ? sizeof(Acc) * tx * ty * V : 0;
  const dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(chunks));
  relu_backward_sums_kernel<T, Acc, V, kRelu, kSums, kOut><<<grid, dim3(tx, ty), smem, stream>>>(
      grad, relu_out, dst, partials_ptr, sums, rows, cols, chunk_rows);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (partials.defined()) {
    partial_sums::add_partials(partials_ptr, cols, sums, chunks, cols, stream);
  }
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// grad2d [M, K] contiguous; where relu_out2d, like it, is defined, its ReLU backward goes into dst
// (dense [M, K]) if that is defined, else over grad2d; sums [K] or undefined.
void relu_backward_sums(
    const at::Tensor& grad2d, const at::Tensor& relu_out2d, const at::Tensor& dst, const at::Tensor& sums) {
  TORCH_INTERNAL_ASSERT(grad2d.is_contiguous() && (!relu_out2d.defined() || relu_out2d.is_contiguous()));
  TORCH_INTERNAL_ASSERT(
      !dst.defined() || (relu_out2d.defined() && dst.is_contiguous() && dst.sizes() == grad2d.sizes()));
  const int64_t rows = grad2d.size(0), cols = grad2d.size(1);
  if (rows == 0 || cols == 0) {
    if (sums.defined()) {
      sums.zero_();  // eager's sum over no rows
    }
    return;
  }
  const bool relu = relu_out2d.defined(), with_sums = sums.defined(), out = dst.defined();
  TORCH_INTERNAL_ASSERT(relu || with_sums);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad2d.scalar_type(), "relu_backward_sums_cuda", [&] {
    auto* grad = const_cast<scalar_t*>(grad2d.const_data_ptr<scalar_t>());
    const scalar_t* relu_out = relu ? relu_out2d.const_data_ptr<scalar_t>() : nullptr;
    scalar_t* dst_ptr = out ? dst.mutable_data_ptr<scalar_t>() : nullptr;
    scalar_t* sums_ptr = with_sums ? sums.mutable_data_ptr<scalar_t>() : nullptr;
    constexpr int V = 16 / sizeof(scalar_t);
    const bool vectorized =
        cols % V == 0 && aligned16(grad) && (!relu || aligned16(relu_out)) && (!out || aligned16(dst_ptr));
    auto run = [&](auto vector) {
      constexpr int W = decltype(vector)::value;
      const at::TensorOptions options = grad2d.options();
      if (relu && out) {
        with_sums ? launch<scalar_t, W, true, true, true>(grad, relu_out, dst_ptr, sums_ptr, rows, cols, options)
                  : launch<scalar_t, W, true, false, true>(grad, relu_out, dst_ptr, sums_ptr, rows, cols, options);
      } else if (relu) {
        with_sums ? launch<scalar_t, W, true, true, false>(grad, relu_out, nullptr, sums_ptr, rows, cols, options)
                  : launch<scalar_t, W, true, false, false>(grad, relu_out, nullptr, sums_ptr, rows, cols, options);
      } else {
        launch<scalar_t, W, false, true, false>(grad, nullptr, nullptr, sums_ptr, rows, cols, options);
      }
    };
    if (vectorized) {
      run(std::integral_constant<int, V>{});
    } else {
      run(std::integral_constant<int, 1>{});
    }
  });
}

}  // namespace

void relu_backward_cuda_(at::Tensor& grad2d, const at::Tensor& relu_out2d, at::Tensor& sums) {
  relu_backward_sums(grad2d, relu_out2d.contiguous(), at::Tensor(), sums);
}

std::pair<at::Tensor, at::Tensor> relu_grad_cuda(
    const at::Tensor& grad2d, const at::Tensor& relu_out2d, bool bias_grad) {
  if (records_backward({grad2d, relu_out2d})) {
    return aten_relu_grad(grad2d, relu_out2d, bias_grad);
  }
  at::Tensor sums = bias_grad ? at::empty({grad2d.size(1)}, grad2d.options()) : at::Tensor();
  if (!grad2d.is_contiguous()) {  // (an expanded gradient, say) its dense copy is this call's own
    at::Tensor grad = grad2d.contiguous();
    relu_backward_sums(grad, relu_out2d.contiguous(), at::Tensor(), sums);
    return {grad, sums};
  }
  at::Tensor grad = at::empty(grad2d.sizes(), grad2d.options());
  relu_backward_sums(grad2d, relu_out2d.contiguous(), grad, sums);
  return {grad, sums};
}

void column_sums_cuda(const at::Tensor& m2d, at::Tensor& sums) {
  relu_backward_sums(m2d.contiguous(), at::Tensor(), at::Tensor(), sums);
}

}  // namespace hypatia::ops
