// act(x @ w.T + b) for few rows (M <= 256: small-batch inference). With so few rows the GEMM is
// bound by reading w once, where cuBLAS(Lt)'s kernels reach a fraction of the floor (on the H100,
// 32x4096->4096 ran at 22% of the memory floor in float32, 17-37% in bf16/fp16), or the call is
// bound by host time, where one kernel launch costs less than a cuBLASLt call. Each CTA owns 32
// output features and a block of 32 rows; its 8 warps split the dot products' K among them, each
// streaming its slices of w and x through its own cp.async ring in shared memory, and the CTA adds
// the 8 partial sums at the end, adds the bias, rounds once to the storage dtype and applies the
// ReLU, as eager's addmm + relu do. bf16/fp16 multiply on tensor cores (mma.sync, fp32
// accumulators); float32 on the CUDA cores in full precision, which is what eager computes with
// TF32 off and more than it owes with TF32 on. linear_act_cuda.cpp times it against cuBLASLt's
// candidates and ATen on each problem (docs/perf/README.md says where it wins). The input gradient of few
// rows stays with cuBLAS: this kernel reading w transposed only tied ATen's mm there
// (docs/perf/experiments.md#skinny-kernel-for-the-input-gradient).
#include "ops/fused_ops.h"
#include "ops/cuda/kernel_launch.h"
#include "ops/cuda/mma_primitives.cuh"

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>

#include <cstdint>
#include <limits>

namespace hypatia::ops {
namespace {

constexpr int kRows = 32;     // rows of x (and of out) a CTA covers: blockIdx.y's block of them
// Rows the kernel takes at most: past a few row blocks (each re-reads w) cuBLASLt's tiles win on
// the device, and below that the autotuner decides; small problems are bound by host time, where
// one kernel launch costs less than a cuBLASLt call.
constexpr int kMaxRows = 256;
constexpr int kFeatures = 32; // output features (rows of w) per CTA
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kStages = 3;    // each warp's ring: two slices in flight while it multiplies a third
constexpr int kSliceBytes = 128;  // of each row of x and w per slice: 64 bf16/fp16 or 32 floats
// Elements added to each shared-memory row (16 bytes): rows then start 16 bytes apart modulo
// 128, so that the 8 rows one ldmatrix (or a quarter-warp's float4 loads) reads hit different banks.
constexpr int kPadBytes = 16;
constexpr int kRowBytes = kSliceBytes + kPadBytes;
// A stage: the slice of w's kFeatures rows, then of x's kRows rows.
constexpr int kStageBytes = (kFeatures + kRows) * kRowBytes;
constexpr int kWarpBytes = kStages * kStageBytes;
constexpr int kSmemBytes = kWarps * kWarpBytes;
// The warps' partial sums at the end, [kWarps][kRows][kFeatures + 1] floats, over the rings.
constexpr int kSumStride = kFeatures + 1;
static_assert(kWarps * kRows * kSumStride * 4 <= kSmemBytes, "the partial sums reuse the rings");

struct Params {
  const void* x;     // [M, K]
  const void* w;     // [N, K]
  const void* bias;  // [N] or null
  void* out;         // [M, N]
  int M, N, K;
  bool relu;
};

// Slice `slice` (kSliceBytes of each row, from column slice * kSliceBytes / sizeof(T)) of w's rows
// [n0, n0 + kFeatures) and of x's rows [m0, m0 + kRows) into a stage; rows and columns past the
// ends read as 0.
template <typename T>
__device__ __forceinline__ void load_slice(
    unsigned char* stage, const Params& p, int n0, int m0, int slice, int lane) {
  constexpr int kChunks = kSliceBytes / 16;  // 16-byte copies per row
  constexpr int kPerChunk = 16 / sizeof(T);
  const int k0 = slice * (kSliceBytes / int(sizeof(T)));
  for (int c = lane; c < (kFeatures + kRows) * kChunks; c += 32) {
    const int r = c / kChunks, k = k0 + (c % kChunks) * kPerChunk;
    const bool is_w = r < kFeatures;
    const int row = is_w ? n0 + r : m0 + r - kFeatures;
    const T* base = static_cast<const T*>(is_w ? p.w : p.x);
    const bool valid = row < (is_w ? p.N : p.M) && k < p.K;  // K is a multiple of kPerChunk
    cp_async16(stage + r * kRowBytes + (c % kChunks) * 16, valid ? base + int64_t(row) * p.K + k : base, valid);
  }
}

// acc[mt][nt] += x_slice[16 mt.., :] @ w_slice[8 nt.., :].T on tensor cores (mma layouts as in
// mma_primitives.cuh: rows g, g + 8 of the m-tile, columns 2t, 2t + 1 of the n-tile).
template <typename T>
struct TensorCoreTile {
  float acc[kRows / 16][kFeatures / 8][4] = {};

  __device__ __forceinline__ void multiply(const unsigned char* stage, int lane) {
    const unsigned char* w_rows = stage;
    const unsigned char* x_rows = stage + kFeatures * kRowBytes;
#pragma unroll
    for (int kk = 0; kk < kSliceBytes / 32; ++kk) {  // 16 columns of 2 bytes
      uint32_t a[kRows / 16][4];
#pragma unroll
      for (int mt = 0; mt < kRows / 16; ++mt) {
        // Lanes 0-15: rows 0-15 at column 0 of the 16-column block; lanes 16-31: at column 8.
        ldmatrix_x4(a[mt], x_rows + (16 * mt + lane % 16) * kRowBytes + kk * 32 + (lane / 16) * 16);
      }
#pragma unroll
      for (int np = 0; np < kFeatures / 16; ++np) {
        // Matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15) of w's
        // 16x16 block: the b registers of n-tiles 2np and 2np + 1.
        uint32_t b[4];
        ldmatrix_x4(b, w_rows + (16 * np + (lane / 16) * 8 + lane % 8) * kRowBytes + kk * 32 + ((lane / 8) % 2) * 16);
#pragma unroll
        for (int mt = 0; mt < kRows / 16; ++mt) {
          mma(acc[mt][2 * np], a[mt], b[0], b[1], acc[mt][2 * np], T());
          mma(acc[mt][2 * np + 1], a[mt], b[2], b[3], acc[mt][2 * np + 1], T());
        }
      }
    }
  }

  // acc into this warp's [kRows][kSumStride] partial sums.
  __device__ __forceinline__ void store(float* sums, int lane) const {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int mt = 0; mt < kRows / 16; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kFeatures / 8; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          sums[(16 * mt + g + 8 * (i / 2)) * kSumStride + 8 * nt + 2 * t + i % 2] = acc[mt][nt][i];
        }
      }
    }
  }
};

// The same in float32 on the CUDA cores: lane (g, t) sums rows 4g.. 4g + 3 and features t, t + 4,
// .., t + 28, four columns at a time (float4 loads; each quarter-warp reads 2 rows of x and 4 of w).
struct CudaCoreTile {
  float acc[4][8] = {};

  __device__ __forceinline__ void multiply(const unsigned char* stage, int lane) {
    const int g = lane / 4, t = lane % 4;
    const unsigned char* w_rows = stage;
    const unsigned char* x_rows = stage + kFeatures * kRowBytes;
#pragma unroll 2
    for (int k4 = 0; k4 < kSliceBytes / 16; ++k4) {
      float4 xv[4], wv[8];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        xv[i] = *reinterpret_cast<const float4*>(x_rows + (4 * g + i) * kRowBytes + k4 * 16);
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        wv[j] = *reinterpret_cast<const float4*>(w_rows + (t + 4 * j) * kRowBytes + k4 * 16);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          float s = acc[i][j];
          s = fmaf(xv[i].x, wv[j].x, s);
          s = fmaf(xv[i].y, wv[j].y, s);
          s = fmaf(xv[i].z, wv[j].z, s);
          acc[i][j] = fmaf(xv[i].w, wv[j].w, s);
        }
      }
    }
  }

  __device__ __forceinline__ void store(float* sums, int lane) const {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        sums[(4 * g + i) * kSumStride + t + 4 * j] = acc[i][j];
      }
    }
  }
};

template <typename T, typename Tile>
__global__ void __launch_bounds__(kThreads) skinny_linear_kernel(const __grid_constant__ Params p) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800  // bf16 mma and cp.async need sm_80; the host never launches below
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n0 = blockIdx.x * kFeatures, m0 = blockIdx.y * kRows;
  unsigned char* ring = smem + warp * kWarpBytes;
  // Warp w multiplies slices w, w + kWarps, ...: at any time the CTA reads kWarps adjacent slices.
  const int slices = static_cast<int>((int64_t(p.K) * sizeof(T) + kSliceBytes - 1) / kSliceBytes);
  const int mine = slices > warp ? (slices - 1 - warp) / kWarps + 1 : 0;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < mine) {
      load_slice<T>(ring + s * kStageBytes, p, n0, m0, warp + s * kWarps, lane);
    }
    cp_async_commit();
  }
  Tile tile;
  for (int i = 0; i < mine; ++i) {
    cp_async_wait<kStages - 2>();
    __syncwarp();  // slice i has landed for every lane, and every lane is done with slice i - 1
    const int ahead = i + kStages - 1;
    if (ahead < mine) {
      load_slice<T>(ring + (ahead % kStages) * kStageBytes, p, n0, m0, warp + ahead * kWarps, lane);
    }
    cp_async_commit();
    tile.multiply(ring + (i % kStages) * kStageBytes, lane);
  }
  cp_async_wait();
  __syncthreads();  // every ring is idle: the partial sums go over them
  float* sums = reinterpret_cast<float*>(smem);
  tile.store(sums + warp * kRows * kSumStride, lane);
  __syncthreads();
  for (int o = threadIdx.x; o < kRows * kFeatures; o += kThreads) {
    const int m = o / kFeatures, n = n0 + o % kFeatures;
    if (m0 + m >= p.M || n >= p.N) {
      continue;
    }
    float v = p.bias != nullptr ? to_float(static_cast<const T*>(p.bias)[n]) : 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      v += sums[(w * kRows + m) * kSumStride + o % kFeatures];
    }
    const T r = rounded(v, T());
    // The ReLU after the rounding, as eager's relu after addmm; NaN stays NaN (it is not <= 0).
    static_cast<T*>(p.out)[int64_t(m0 + m) * p.N + n] = p.relu && to_float(r) <= 0.f ? rounded(0.f, T()) : r;
  }
#endif
}

template <typename T, typename Tile>
bool launch(const Params& p, int device) {
  const auto kernel = skinny_linear_kernel<T, Tile>;
  if (blocks_per_sm(reinterpret_cast<const void*>(kernel), kThreads, device, kSmemBytes) == 0) {
    return false;
  }
  const dim3 ctas((p.N + kFeatures - 1) / kFeatures, (p.M + kRows - 1) / kRows);
  kernel<<<ctas, kThreads, kSmemBytes, at::cuda::getCurrentCUDAStream(device)>>>(p);
  check_cuda(cudaGetLastError(), "skinny_linear", "kernel launch");
  return true;
}

bool covers(const at::Tensor& x, const at::Tensor& w, const OptionalTensor& b) {
  const at::ScalarType dtype = x.scalar_type();
  if (dtype != at::kFloat && dtype != at::kHalf && dtype != at::kBFloat16) {
    return false;
  }
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const bool bias_ok = !b.has_value() || !b->defined() || (b->scalar_type() == dtype && b->is_contiguous());
  return M >= 1 && M <= kMaxRows && K >= 1 && N >= 1 && K * int64_t(x.element_size()) % 16 == 0 &&
      K <= std::numeric_limits<int>::max() / 2 && N <= std::numeric_limits<int>::max() / 2 &&
      w.scalar_type() == dtype && dense(x) && dense(w) && bias_ok &&
      at::cuda::getDeviceProperties(x.get_device())->major >= 8;
}

}  // namespace

bool skinny_linear_cuda(const at::Tensor& x, const at::Tensor& w, const OptionalTensor& b, bool relu, at::Tensor& out) {
  if (!covers(x, w, b) || !out.is_contiguous()) {
    return false;
  }
  const Params p{x.data_ptr(), w.data_ptr(), b.has_value() && b->defined() ? b->data_ptr() : nullptr, out.data_ptr(),
                 static_cast<int>(x.size(0)), static_cast<int>(w.size(0)), static_cast<int>(x.size(1)), relu};
  const int device = x.get_device();
  switch (x.scalar_type()) {
    case at::kHalf: return launch<__half, TensorCoreTile<__half>>(p, device);
    case at::kBFloat16: return launch<__nv_bfloat16, TensorCoreTile<__nv_bfloat16>>(p, device);
    default: return launch<float, CudaCoreTile>(p, device);
  }
}

}  // namespace hypatia::ops
