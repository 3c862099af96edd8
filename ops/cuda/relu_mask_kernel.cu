// The ReLU mask that fused_linear_relu's CUDA training forward saves for its backward: one bit
// per output element (1/16 of a bf16 output), packed from the output and read by the backward.
// Eager relu's backward passes the gradient where !(out <= 0), NaN included. cuBLASLt's
// RELU_AUX_BIAS epilogue, which writes such bits from the GEMM itself, was measured and not used:
// on the H100 (cuBLAS 13, bf16/fp16) it cleared the bit of NaN outputs and disagreed with the
// rounded output on values near 0, and it ran ~7% slower than the RELU_BIAS GEMM that this pack
// follows (docs/perf/experiments.md#relu-aux-bias-epilogue).
#include "ops/fused_ops.h"

#include "ops/checks.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>

namespace hypatia::ops {
namespace {

constexpr int kThreads = 256;

int64_t blocks_for(int64_t work) { return (work + kThreads - 1) / kThreads; }

// Rows whose width is a multiple of 8 (and 8-element-aligned data) move 8 elements as one
// vector: per-element kernels ran at half of eager's threshold_backward bandwidth.
template <typename T>
struct alignas(sizeof(T) * 8) Pack8 {
  T v[8];
};

template <typename T, bool kVectorized>
__global__ void relu_mask_backward_kernel(
    const T* __restrict__ grad, const uint8_t* __restrict__ bits, T* __restrict__ grad_in, int64_t rows,
    int64_t cols, int64_t row_bytes) {
  const int64_t chunks_per_row = (cols + 7) / 8;
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= rows * chunks_per_row) {
    return;
  }
  const int64_t row = i / chunks_per_row, chunk = i % chunks_per_row;
  const unsigned byte = bits[row * row_bytes + chunk];
  const int64_t first = row * cols + chunk * 8;
  if constexpr (kVectorized) {
    Pack8<T> g = *reinterpret_cast<const Pack8<T>*>(grad + first);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      g.v[j] = (byte >> j) & 1u ? g.v[j] : T(0);
    }
    *reinterpret_cast<Pack8<T>*>(grad_in + first) = g;
  } else {
    for (int j = 0; j < 8 && chunk * 8 + j < cols; ++j) {
      grad_in[first + j] = (byte >> j) & 1u ? grad[first + j] : T(0);
    }
  }
}

// One thread per mask byte: the bits of 8 consecutive outputs of one row, lowest bit first.
template <typename T, bool kVectorized>
__global__ void pack_relu_mask_kernel(
    const T* __restrict__ out, uint8_t* __restrict__ bits, int64_t rows, int64_t cols, int64_t row_bytes) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= rows * row_bytes) {
    return;
  }
  const int64_t row = i / row_bytes, chunk = i % row_bytes, first = row * cols + chunk * 8;
  const int count = static_cast<int>(std::min<int64_t>(8, cols - chunk * 8));  // <= 0 in the padding
  uint8_t byte = 0;
  if constexpr (kVectorized) {
    if (count == 8) {
      const Pack8<T> o = *reinterpret_cast<const Pack8<T>*>(out + first);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        byte |= uint8_t(!(static_cast<at::opmath_type<T>>(o.v[j]) <= 0)) << j;
      }
      bits[i] = byte;
      return;
    }
  }
  for (int j = 0; j < count; ++j) {
    byte |= uint8_t(!(static_cast<at::opmath_type<T>>(out[first + j]) <= 0)) << j;
  }
  bits[i] = byte;
}

}  // namespace

void pack_relu_mask_cuda(const at::Tensor& out2d, at::Tensor& bits) {
  const int64_t rows = out2d.size(0), cols = out2d.size(1), row_bytes = bits.size(1);
  if (bits.numel() == 0) {
    return;
  }
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out2d.scalar_type(), "pack_relu_mask_cuda", [&] {
    const auto* out_ptr = out2d.const_data_ptr<scalar_t>();
    const bool vectorized = cols % 8 == 0 && reinterpret_cast<uintptr_t>(out_ptr) % sizeof(Pack8<scalar_t>) == 0;
    const auto kernel = vectorized ? pack_relu_mask_kernel<scalar_t, true> : pack_relu_mask_kernel<scalar_t, false>;
    kernel<<<blocks_for(rows * row_bytes), kThreads, 0, stream>>>(
        out_ptr, bits.mutable_data_ptr<uint8_t>(), rows, cols, row_bytes);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor relu_mask_backward_cuda(const at::Tensor& grad, const at::Tensor& mask) {
  check_relu_mask("_relu_mask_backward", grad, mask);
  const c10::cuda::CUDAGuard device_guard(grad.device());
  const at::Tensor g = grad.contiguous();
  at::Tensor grad_in = at::empty(grad.sizes(), grad.options());
  if (grad.numel() == 0) {
    return grad_in;
  }
  const int64_t cols = grad.size(-1), rows = grad.numel() / cols;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int64_t chunks = rows * ((cols + 7) / 8);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad.scalar_type(), "relu_mask_backward_cuda", [&] {
    const auto* g_ptr = g.const_data_ptr<scalar_t>();
    auto* out_ptr = grad_in.mutable_data_ptr<scalar_t>();
    const uintptr_t vector_bytes = sizeof(Pack8<scalar_t>);
    const bool vectorized = cols % 8 == 0 && reinterpret_cast<uintptr_t>(g_ptr) % vector_bytes == 0 &&
        reinterpret_cast<uintptr_t>(out_ptr) % vector_bytes == 0;
    const auto kernel =
        vectorized ? relu_mask_backward_kernel<scalar_t, true> : relu_mask_backward_kernel<scalar_t, false>;
    kernel<<<blocks_for(chunks), kThreads, 0, stream>>>(
        g_ptr, mask.const_data_ptr<uint8_t>(), out_ptr, rows, cols, mask.size(1));
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return grad_in;
}

}  // namespace hypatia::ops
