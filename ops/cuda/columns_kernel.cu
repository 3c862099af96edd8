// A matrix with its column count changed in one launch: zero columns appended (a GEMM operand whose
// rows are not a whole number of 16 bytes, DLRM's 13 features, padded for the tensor-core kernels)
// or trailing columns dropped (that GEMM's result cut back). ATen takes several calls for either
// (constant_pad_nd: an empty, a fill, a slice and a copy; narrow and contiguous), 17-20 us of host
// time each on the H200 (docs/perf/h200/host_parts.py), where this takes an empty and a launch.
#include "ops/fused_ops.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <limits>

namespace hypatia::ops {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

// to [rows, cols] (dense) = from [rows, from_cols] (rows from_stride apart), zeros past from_cols.
// E: the elements' bits, so that every value, NaN payloads included, is copied as it is. I: the
// index type; 32-bit where every index fits, since a 64-bit division is a called subroutine.
template <typename E, typename I>
__global__ void __launch_bounds__(kThreads) resize_columns_kernel(
    const E* __restrict__ from, I from_stride, I from_cols, E* __restrict__ to, I rows, I cols) {
  const I elements = rows * cols;
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < elements; i += I(gridDim.x) * blockDim.x) {
    const I r = i / cols, c = i - r * cols;
    to[i] = c < from_cols ? from[r * from_stride + c] : E(0);
  }
}

template <typename E>
void launch(const at::Tensor& from, at::Tensor& to) {
  const int64_t rows = to.size(0), cols = to.size(1), from_cols = std::min(from.size(1), cols);
  const auto blocks = static_cast<unsigned>(std::min(kMaxBlocks, (rows * cols + kThreads - 1) / kThreads));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const auto* src = static_cast<const E*>(from.const_data_ptr());
  auto* dst = static_cast<E*>(to.mutable_data_ptr());
  // Indices reach rows * cols in `to`, rows * from_stride in `from`; the grid stride adds at most
  // kMaxBlocks * kThreads past the end.
  const int64_t last = std::max(rows * cols, rows * from.stride(0)) + kMaxBlocks * kThreads;
  if (last <= std::numeric_limits<uint32_t>::max()) {
    resize_columns_kernel<E, uint32_t><<<blocks, kThreads, 0, stream>>>(
        src, static_cast<uint32_t>(from.stride(0)), static_cast<uint32_t>(from_cols), dst,
        static_cast<uint32_t>(rows), static_cast<uint32_t>(cols));
  } else {
    resize_columns_kernel<E, int64_t><<<blocks, kThreads, 0, stream>>>(
        src, from.stride(0), from_cols, dst, rows, cols);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

at::Tensor resize_columns_cuda(const at::Tensor& t, int64_t cols) {
  TORCH_INTERNAL_ASSERT(t.is_cuda() && t.dim() == 2 && cols >= 0);
  const c10::cuda::CUDAGuard device_guard(t.device());
  at::Tensor out = at::empty({t.size(0), cols}, t.options());
  if (out.numel() == 0) {
    return out;
  }
  // The kernel reads rows of unit-stride columns.
  const at::Tensor from = t.size(1) <= 1 || t.stride(1) == 1 ? t : t.contiguous();
  switch (t.element_size()) {
    case 2: launch<uint16_t>(from, out); break;
    case 4: launch<uint32_t>(from, out); break;
    case 8: launch<uint64_t>(from, out); break;
    default:
      TORCH_CHECK(false, "hypatia: resize_columns_cuda: ", t.scalar_type(), " is not a GEMM operand's type");
  }
  return out;
}

}  // namespace hypatia::ops
