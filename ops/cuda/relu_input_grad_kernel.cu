// A hidden layer's input gradient through the ReLU below it: grad_input =
// threshold_backward(g @ w, relu_out, 0) (eager's ReLU backward on the saved output: 0 where
// relu_out <= 0, the product elsewhere, NaN relu_out included) in the epilogue of CUTLASS's sm90
// warp-specialized GEMM (the fusion LinCombDeEltAct: the saved output comes in by TMA beside the
// accumulators), then, where asked, grad_bias = its sums over the rows by the library's column-sum
// pass. The unfused way writes g @ w, then reads it back with relu_out and writes the masked
// gradient (ops/cuda/relu_backward_sums_kernel.cu): two passes over the gradient more. The bias
// sums stay out of the epilogue: CUTLASS's (LinCombDeEltActDePerRowBias) and cuBLASLt's (DRELU_BGRAD)
// made the GEMM 1.4-4.1x slower on the H100, where the ReLU alone costs it 0-28 us
// (docs/perf/experiments.md, "Input gradient with the ReLU backward in the GEMM"). Ping-pong
// schedule, 128 x 128 tiles: one warpgroup's epilogue runs under the other's MMAs.
// In CUTLASS's column-major terms: M = the layer's input width, N = rows, K = its output width;
// A = w (M-major), B = g (K-major), D and relu_out column-major M x N.
#include "ops/fused_ops.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>

#if defined(HYPATIA_WITH_CUTLASS)
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>
#endif

#include <climits>
#include <cstdint>

namespace hypatia::ops {

#if defined(HYPATIA_WITH_CUTLASS)
namespace {

// Eager's threshold_backward on the saved output z: 0 where z <= 0, d elsewhere (a NaN z passes d).
template <class T>
struct ThresholdBackward {
  CUTLASS_HOST_DEVICE T operator()(const T& d, const T& z) const { return z <= T(0) ? T(0) : d; }
};
template <class T, int N>
struct ThresholdBackward<cutlass::Array<T, N>> {
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(const cutlass::Array<T, N>& d, const cutlass::Array<T, N>& z) const {
    cutlass::Array<T, N> out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) {
      out[i] = z[i] <= T(0) ? T(0) : d[i];
    }
    return out;
  }
};

template <class T>
struct ReluInputGradGemm {
  using Layout = cutlass::layout::ColumnMajor;
  static constexpr int kAlign = 16 / sizeof(T);  // TMA: rows 16 bytes apart
  using TileShape = cute::Shape<cute::_128, cute::_128, cute::_64>;
  using ClusterShape = cute::Shape<cute::_2, cute::_1, cute::_1>;
  using Fusion = cutlass::epilogue::fusion::LinCombDeEltAct<Layout, ThresholdBackward, T, float, T>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, Layout, kAlign, T, Layout, kAlign,
      cutlass::epilogue::TmaWarpSpecialized, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, T, Layout, kAlign, T, Layout, kAlign, float, TileShape,
      ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedPingpong>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      cutlass::gemm::PersistentScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static bool run(const at::Tensor& g, const at::Tensor& w, const at::Tensor& relu_out, at::Tensor& grad_input) {
    const int M = static_cast<int>(w.size(1)), N = static_cast<int>(g.size(0)), K = static_cast<int>(g.size(1));
    const auto stride_a = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, cute::make_shape(M, K, 1));
    const auto stride_b = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, cute::make_shape(N, K, 1));
    const auto stride_d = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, cute::make_shape(M, N, 1));
    cutlass::KernelHardwareInfo hw;
    hw.device_id = g.get_device();
    hw.sm_count = at::cuda::getDeviceProperties(hw.device_id)->multiProcessorCount;
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {M, N, K, 1},
        {static_cast<const T*>(w.const_data_ptr()), stride_a, static_cast<const T*>(g.const_data_ptr()), stride_b},
        {{}, nullptr, stride_d, static_cast<T*>(grad_input.data_ptr()), stride_d},
        hw};
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    args.epilogue.thread.aux_ptr = static_cast<const T*>(relu_out.const_data_ptr());
    args.epilogue.thread.dAux = stride_d;
    Gemm gemm;
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) {
      return false;
    }
    const at::Tensor workspace = at::empty(
        {static_cast<int64_t>(Gemm::get_workspace_size(args))}, g.options().dtype(at::kByte));
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    if (gemm.initialize(args, workspace.data_ptr(), stream) != cutlass::Status::kSuccess ||
        gemm.run(stream) != cutlass::Status::kSuccess) {
      (void)cudaGetLastError();  // a launch that failed leaves an error the next check would take for its own
      return false;
    }
    return true;
  }
};

// Rows of 16 bytes' multiples from a 16-byte aligned start: what TMA reads and writes.
bool tma_ready(const at::Tensor& t) {
  return t.is_contiguous() && t.size(-1) * t.element_size() % 16 == 0 &&
      reinterpret_cast<uintptr_t>(t.const_data_ptr()) % 16 == 0;
}

}  // namespace
#endif

bool relu_input_grad_fused_cuda(
    const at::Tensor& g, const at::Tensor& w, const at::Tensor& relu_out, at::Tensor& grad_input,
    at::Tensor& grad_bias) {
#if defined(HYPATIA_WITH_CUTLASS)
  const auto* props = at::cuda::getDeviceProperties(g.get_device());
  const at::ScalarType dtype = g.scalar_type();
  if (props->major != 9 || props->minor != 0 || (dtype != at::kBFloat16 && dtype != at::kHalf) ||
      w.scalar_type() != dtype || relu_out.scalar_type() != dtype || g.size(0) == 0 || g.size(1) == 0 ||
      w.size(1) == 0 || g.size(0) > INT_MAX || g.size(1) > INT_MAX || w.size(1) > INT_MAX ||
      !tma_ready(g) || !tma_ready(w) || !tma_ready(relu_out) || !tma_ready(grad_input)) {
    return false;
  }
  const bool ran = dtype == at::kBFloat16 ? ReluInputGradGemm<cutlass::bfloat16_t>::run(g, w, relu_out, grad_input)
                                           : ReluInputGradGemm<cutlass::half_t>::run(g, w, relu_out, grad_input);
  if (ran && grad_bias.defined()) {
    column_sums_cuda(grad_input, grad_bias);
  }
  return ran;
#else
  return false;
#endif
}

}  // namespace hypatia::ops
