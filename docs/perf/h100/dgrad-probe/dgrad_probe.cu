// Probe (not library code): a hidden layer's input gradient with eager's ReLU backward and the bias
// gradient in the GEMM's epilogue, by CUTLASS's sm90 warp-specialized GEMM and its
// LinCombDeEltActDePerRowBias fusion, against the same GEMM without the epilogue work.
//   D[rows, k_in] = (G[rows, n_out] @ W[n_out, k_in]) where H > 0 (threshold_backward: H <= 0 -> 0, NaN
//   passes), dbias[k_in] = column sums of D (float, rounded once to T).
// In CUTLASS's column-major terms: M = k_in, N = rows, K = n_out; A = W (M-major), B = G (K-major),
// D and H column-major M x N; the bias gradient is one value per M row.
// Built as a shared library with C entry points, called from dgrad_probe.py by ctypes.
#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"

#include <cstdint>
#include <cstdio>

using namespace cute;

// Eager's threshold_backward on the saved output z: 0 where z <= 0, d elsewhere (NaN z passes d).
template <class T>
struct ThresholdBackward {
  CUTLASS_HOST_DEVICE T operator()(T const& d, T const& z) const { return z <= T(0) ? T(0) : d; }
};
template <class T, int N>
struct ThresholdBackward<cutlass::Array<T, N>> {
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& d, cutlass::Array<T, N> const& z) const {
    cutlass::Array<T, N> out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) {
      out[i] = z[i] <= T(0) ? T(0) : d[i];
    }
    return out;
  }
};

// Fused: 0 the GEMM alone, 1 with the ReLU backward, 2 with the ReLU backward and the bias sums.
template <class T, class TileShape, class ClusterShape, int Fused, bool Pingpong>
struct DgradGemm {
  using Layout = cutlass::layout::ColumnMajor;
  static constexpr int kAlign = 16 / sizeof(T);
  using FusionOp = std::conditional_t<
      Fused == 2, cutlass::epilogue::fusion::LinCombDeEltActDePerRowBias<Layout, ThresholdBackward, T, float, T, T>,
      std::conditional_t<Fused == 1, cutlass::epilogue::fusion::LinCombDeEltAct<Layout, ThresholdBackward, T, float, T>,
                         cutlass::epilogue::fusion::LinearCombination<T, float>>>;
  using EpilogueSchedule = std::conditional_t<Pingpong, cutlass::epilogue::TmaWarpSpecialized,
                                              cutlass::epilogue::TmaWarpSpecializedCooperative>;
  using KernelSchedule = std::conditional_t<Pingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                            cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, Layout, kAlign, T, Layout, kAlign,
      EpilogueSchedule, FusionOp>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, T, Layout, kAlign, T, Layout, kAlign, float, TileShape,
      ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      cutlass::gemm::PersistentScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Gemm::Arguments arguments(const void* w, const void* g, const void* h, void* d, void* dbias,
                                            int64_t rows, int64_t n_out, int64_t k_in) {
    const int M = static_cast<int>(k_in), N = static_cast<int>(rows), K = static_cast<int>(n_out);
    auto stride_a = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, make_shape(M, K, 1));
    auto stride_b = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, make_shape(N, K, 1));
    auto stride_d = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, make_shape(M, N, 1));
    cutlass::KernelHardwareInfo hw;
    hw.device_id = 0;
    hw.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(0);
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {M, N, K, 1},
        {static_cast<const T*>(w), stride_a, static_cast<const T*>(g), stride_b},
        {{}, nullptr, stride_d, static_cast<T*>(d), stride_d},
        hw};
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    if constexpr (Fused >= 1) {
      args.epilogue.thread.aux_ptr = static_cast<const T*>(h);
      args.epilogue.thread.dAux = stride_d;
    }
    if constexpr (Fused == 2) {
      args.epilogue.thread.dbias_ptr = static_cast<T*>(dbias);
    }
    return args;
  }

  static size_t workspace(int64_t rows, int64_t n_out, int64_t k_in) {
    return Gemm::get_workspace_size(arguments(nullptr, nullptr, nullptr, nullptr, nullptr, rows, n_out, k_in));
  }

  static int run(const void* w, const void* g, const void* h, void* d, void* dbias, int64_t rows, int64_t n_out,
                 int64_t k_in, void* ws, cudaStream_t stream) {
    auto args = arguments(w, g, h, d, dbias, rows, n_out, k_in);
    Gemm gemm;
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) return 1;
    if (gemm.initialize(args, ws, stream) != cutlass::Status::kSuccess) return 2;
    if (gemm.run(stream) != cutlass::Status::kSuccess) return 3;
    return cudaGetLastError() == cudaSuccess ? 0 : 4;
  }
};

using bf16 = cutlass::bfloat16_t;
using T128x256 = Shape<_128, _256, _64>;
using T64x256 = Shape<_64, _256, _64>;
using T128x128 = Shape<_128, _128, _64>;
using C2x1 = Shape<_2, _1, _1>;
using C1x2 = Shape<_1, _2, _1>;

// Variants, named in dgrad_probe.py.
#define DISPATCH(call)                                                        \
  switch (variant) {                                                          \
    case 0: return DgradGemm<bf16, T128x256, C2x1, 2, false>::call;           \
    case 1: return DgradGemm<bf16, T128x256, C2x1, 1, false>::call;           \
    case 2: return DgradGemm<bf16, T128x256, C2x1, 0, false>::call;           \
    case 3: return DgradGemm<bf16, T64x256, C2x1, 2, true>::call;             \
    case 4: return DgradGemm<bf16, T64x256, C2x1, 1, true>::call;             \
    case 5: return DgradGemm<bf16, T64x256, C2x1, 0, true>::call;             \
    case 6: return DgradGemm<bf16, T128x128, C2x1, 1, true>::call;            \
    default: return 0;                                                        \
  }

extern "C" size_t probe_workspace(int variant, int64_t rows, int64_t n_out, int64_t k_in) {
  DISPATCH(workspace(rows, n_out, k_in))
}

extern "C" int probe_run(int variant, const void* w, const void* g, const void* h, void* d, void* dbias, int64_t rows,
                         int64_t n_out, int64_t k_in, void* ws, void* stream) {
  DISPATCH(run(w, g, h, d, dbias, rows, n_out, k_in, ws, static_cast<cudaStream_t>(stream)))
}
