// Sums over rows in a fixed order, so that a gradient summed by blocks is the same in every run:
// within a block (add_rows_into_first), and of the blocks' partial sums by a second kernel
// (add_partials). Used by relu_backward_sums_kernel.cu and narrow_input_backward_kernel.cu.
#pragma once

#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hypatia::ops::partial_sums {

// add_partials' block: 32 columns by 32 threads over the chunks.
constexpr int kAddColumns = 32, kAddRows = 32;

__device__ __forceinline__ int pow2_at_least(int n) {
  int p = 1;
  while (p < n) {
    p *= 2;
  }
  return p;
}

// Rows [0, blockDim.y) of table [blockDim.y][width] added up into row 0, pairwise, halving the
// rows each step: a fixed order. Every thread of the block calls it; column `at` .. at + V - 1 are
// this thread's.
template <typename Acc, int V>
__device__ void add_rows_into_first(Acc* table, int width, int at) {
  const int y = threadIdx.y, rows = blockDim.y;
  for (int half = pow2_at_least(rows) / 2; half > 0; half /= 2) {
    __syncthreads();
    if (y < half && y + half < rows) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        table[y * width + at + j] += table[(y + half) * width + at + j];
      }
    }
  }
}

// sums[c] = partials[:, c] (chunks rows, `stride` apart) added up in a fixed order: blockDim.y
// threads per column, each over every blockDim.y-th chunk, then those pairwise. One rounding to T,
// at the end.
template <typename T, typename Acc>
__global__ void __launch_bounds__(kAddColumns * kAddRows) add_partials_kernel(
    const Acc* __restrict__ partials, int64_t stride, T* __restrict__ sums, int64_t chunks, int64_t cols) {
  __shared__ Acc thread_sums[kAddRows * kAddColumns];
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  Acc acc = 0;
  if (col < cols) {
#pragma unroll 8
    for (int64_t i = threadIdx.y; i < chunks; i += blockDim.y) {
      acc += partials[i * stride + col];
    }
  }
  thread_sums[threadIdx.y * blockDim.x + threadIdx.x] = acc;
  add_rows_into_first<Acc, 1>(thread_sums, blockDim.x, threadIdx.x);
  if (threadIdx.y == 0 && col < cols) {
    sums[col] = static_cast<T>(thread_sums[threadIdx.x]);
  }
}

template <typename T, typename Acc>
void add_partials(const Acc* partials, int64_t stride, T* sums, int64_t chunks, int64_t cols, cudaStream_t stream) {
  const dim3 block(kAddColumns, kAddRows);
  const auto blocks = static_cast<unsigned>((cols + block.x - 1) / block.x);
  add_partials_kernel<T, Acc><<<blocks, block, 0, stream>>>(partials, stride, sums, chunks, cols);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace hypatia::ops::partial_sums
