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

namespace hypatia::ops {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

// to [rows, cols] (dense) = from [rows, from_cols] (rows from_stride apart), zeros past from_cols.
// E: the elements' bits, so that every value, NaN payloads included, is copied as it is.
template <typename E>
__global__ void __launch_bounds__(kThreads) resize_columns_kernel(
    const E* __restrict__ from, int64_t from_stride, int64_t from_cols, E* __restrict__ to, int64_t rows,
    int64_t cols) {
  const int64_t elements = rows * cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < elements; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    to[i] = c < from_cols ? from[r * from_stride + c] : E(0);
  }
}

template <typename E>
void launch(const at::Tensor& from, at::Tensor& to) {
  const int64_t rows = to.size(0), cols = to.size(1);
  const auto blocks = static_cast<unsigned>(std::min(kMaxBlocks, (rows * cols + kThreads - 1) / kThreads));
  resize_columns_kernel<E><<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      static_cast<const E*>(from.const_data_ptr()), from.stride(0), std::min(from.size(1), cols),
      static_cast<E*>(to.mutable_data_ptr()), rows, cols);
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
