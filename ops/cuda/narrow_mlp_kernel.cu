// fused_mlp for narrow layers (every width a multiple of 16, at most 128; half or bfloat16) as
// ONE kernel: each CTA copies all layers' weights and biases into shared memory once, then its
// warps walk 16-row tiles of the input. A warp keeps its tile in shared memory and runs every
// layer on it with tensor cores (wmma 16x16x16, fp32 accumulation), rounding each layer's output
// to the storage dtype as eager does; so the input is read once and the output written once.
#include "ops/fused_ops.h"

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace hypatia::ops {
namespace {

constexpr int kMaxLayers = 16;
constexpr int kMaxWidth = 128;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTileRows = 16;  // rows of one warp's tile: the wmma M
constexpr int kPad = 8;        // elements added to each shared-memory row: no bank conflicts, 16-byte rows
// Row stride (floats) of the 16x16 accumulator scratch: 24 rather than 16 spreads the rows of a
// fragment store over all banks.
constexpr int kScratchLd = 24;
constexpr int kScratchFloats = 16 * kScratchLd;

// Shared-memory layout (byte offsets, all multiples of 32 as wmma needs): weights[l] as
// [N_l, K_l + kPad], then biases[l] as N_l floats (zeros for None), then per warp two
// activation tiles [kTileRows, act_stride] and a 16x16 float scratch for the accumulators.
struct Params {
  const void* x;   // [rows, width[0]]
  void* out;       // [rows, width[layers]]
  int64_t rows;
  int64_t tiles;   // ceil(rows / kTileRows)
  int layers;
  int width[kMaxLayers + 1];
  const void* weight[kMaxLayers];  // [width[l+1], width[l]]
  const void* bias[kMaxLayers];    // [width[l+1]] or nullptr
  int weight_offset[kMaxLayers];
  int bias_offset[kMaxLayers];
  int warp_offset;
  int warp_bytes;
  int act_stride;       // elements per activation row: max width + kPad
  unsigned relu_mask;   // bit l: ReLU after layer l
};

__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// Two floats rounded to nearest into the storage dtype, `lo` at the lower address.
__device__ __forceinline__ uint32_t pack2(float lo, float hi, __half) {
  return uint32_t(__half_as_ushort(__float2half_rn(lo))) | (uint32_t(__half_as_ushort(__float2half_rn(hi))) << 16);
}
__device__ __forceinline__ uint32_t pack2(float lo, float hi, __nv_bfloat16) {
  return uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
      (uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}

// `v < 0 ? 0 : v` rather than fmaxf: ReLU must keep NaN, as torch.relu does.
__device__ __forceinline__ float relu(float v) { return v < 0.f ? 0.f : v; }

// Rows [tile * 16, tile * 16 + 16) of x [rows, k0] into dst [kTileRows, stride] in shared memory
// with cp.async (16 bytes per copy, one commit group per call); rows past the end are zero-filled.
// The copies land while the warp computes the previous tile.
template <typename T>
__device__ __forceinline__ void issue_tile_load(
    T* dst, int stride, const T* __restrict__ x, int64_t rows, int k0, int64_t tile, int lane) {
  const int chunks_per_row = k0 / 8;
  for (int c = lane; c < kTileRows * chunks_per_row; c += 32) {
    const int r = c / chunks_per_row, col = (c % chunks_per_row) * 8;
    const int64_t row = tile * kTileRows + r;
    const bool in_range = row < rows;
    const T* src = in_range ? x + row * k0 + col : x;  // a valid address even when nothing is read
    const unsigned dst_addr = static_cast<unsigned>(__cvta_generic_to_shared(dst + r * stride + col));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst_addr), "l"(src), "r"(in_range ? 16 : 0)
                 : "memory");
  }
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits for all but the most recent commit group of this thread.
__device__ __forceinline__ void cp_async_wait_all_but_last() {
  asm volatile("cp.async.wait_group 1;\n" ::: "memory");
}

// act[16, N] = act?(act[16, K] @ w.T + b) in place, for one warp's tile. `w` is [N, ldw] in shared
// memory: read as a col_major matrix_b with ldm = ldw it is exactly w.T.
template <typename T, int kMaxNT>
__device__ __forceinline__ void run_layer(
    T* act, int act_stride, const T* w, int ldw, const float* bias, int K, int N, bool apply_relu,
    float* scratch, int lane) {
  using namespace nvcuda;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kMaxNT];
#pragma unroll
  for (int j = 0; j < kMaxNT; ++j) {
    if (j < N / 16) {
      wmma::fill_fragment(acc[j], 0.f);
    }
  }
  for (int k = 0; k < K; k += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
    wmma::load_matrix_sync(a, act + k, act_stride);
#pragma unroll
    for (int j = 0; j < kMaxNT; ++j) {
      if (j < N / 16) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
        wmma::load_matrix_sync(b, w + j * 16 * ldw + k, ldw);
        wmma::mma_sync(acc[j], a, b, acc[j]);
      }
    }
  }
  __syncwarp();  // every lane has read its inputs before the outputs overwrite them

  // Lane handles 8 consecutive outputs of one row of each 16x16 block.
  const int r = lane / 2, c = (lane % 2) * 8;
#pragma unroll
  for (int j = 0; j < kMaxNT; ++j) {
    if (j < N / 16) {
      wmma::store_matrix_sync(scratch, acc[j], kScratchLd, wmma::mem_row_major);
      __syncwarp();
      const float* acc_row = scratch + r * kScratchLd + c;
      const float* b = bias + j * 16 + c;
      const float4 a0 = *reinterpret_cast<const float4*>(acc_row);
      const float4 a1 = *reinterpret_cast<const float4*>(acc_row + 4);
      const float4 b0 = *reinterpret_cast<const float4*>(b);
      const float4 b1 = *reinterpret_cast<const float4*>(b + 4);
      float v[8] = {a0.x + b0.x, a0.y + b0.y, a0.z + b0.z, a0.w + b0.w,
                    a1.x + b1.x, a1.y + b1.y, a1.z + b1.z, a1.w + b1.w};
      if (apply_relu) {
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          v[q] = relu(v[q]);
        }
      }
      const uint4 packed = make_uint4(
          pack2(v[0], v[1], T()), pack2(v[2], v[3], T()), pack2(v[4], v[5], T()), pack2(v[6], v[7], T()));
      *reinterpret_cast<uint4*>(act + r * act_stride + j * 16 + c) = packed;
      __syncwarp();  // scratch is reused by the next block
    }
  }
}

// kMaxNT: the largest width / 16 the instance handles (it sizes the register arrays).
template <typename T, int kMaxNT>
__global__ void __launch_bounds__(kThreads) narrow_mlp_kernel(const __grid_constant__ Params p) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800  // bf16 wmma needs sm_80; the host never launches below
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  unsigned char* warp_smem = smem + p.warp_offset + warp * p.warp_bytes;
  const int tile_elems = kTileRows * p.act_stride;
  // Two activation tiles per warp: one computed on while the next tile streams into the other.
  T* const act_buffers = reinterpret_cast<T*>(warp_smem);
  float* scratch = reinterpret_cast<float*>(warp_smem + 2 * tile_elems * sizeof(T));
  const T* x = static_cast<const T*>(p.x);
  T* out = static_cast<T*>(p.out);
  const int k0 = p.width[0], n_out = p.width[p.layers];
  const int64_t tile_step = int64_t(gridDim.x) * kWarps;
  int64_t tile = int64_t(blockIdx.x) * kWarps + warp;

  // The first tile's copies overlap the weight copy.
  if (tile < p.tiles) {
    issue_tile_load(act_buffers, p.act_stride, x, p.rows, k0, tile, lane);
  }
  cp_async_commit();

  for (int l = 0; l < p.layers; ++l) {
    const int K = p.width[l], N = p.width[l + 1];
    const int chunks_per_row = K / 8;
    T* w = reinterpret_cast<T*>(smem + p.weight_offset[l]);
    const uint4* gw = static_cast<const uint4*>(p.weight[l]);
    for (int c = threadIdx.x; c < N * chunks_per_row; c += kThreads) {
      const int n = c / chunks_per_row, k = (c % chunks_per_row) * 8;
      *reinterpret_cast<uint4*>(w + n * (K + kPad) + k) = __ldg(gw + c);
    }
    float* b = reinterpret_cast<float*>(smem + p.bias_offset[l]);
    const T* gb = static_cast<const T*>(p.bias[l]);
    for (int n = threadIdx.x; n < N; n += kThreads) {
      b[n] = gb ? to_float(gb[n]) : 0.f;
    }
  }
  __syncthreads();  // the only block-wide barrier: from here on each warp works on its own rows

  for (int slot = 0; tile < p.tiles; tile += tile_step, slot ^= 1) {
    T* act = act_buffers + slot * tile_elems;
    if (tile + tile_step < p.tiles) {
      issue_tile_load(act_buffers + (slot ^ 1) * tile_elems, p.act_stride, x, p.rows, k0, tile + tile_step, lane);
    }
    cp_async_commit();  // possibly empty, so that "all but the last group" is always this tile
    cp_async_wait_all_but_last();
    __syncwarp();  // every lane's copies of this tile are visible to the whole warp

    for (int l = 0; l < p.layers; ++l) {
      const int K = p.width[l];
      run_layer<T, kMaxNT>(
          act, p.act_stride, reinterpret_cast<const T*>(smem + p.weight_offset[l]), K + kPad,
          reinterpret_cast<const float*>(smem + p.bias_offset[l]), K, p.width[l + 1], (p.relu_mask >> l) & 1u,
          scratch, lane);
    }

    const int chunks_per_row = n_out / 8;
    for (int c = lane; c < kTileRows * chunks_per_row; c += 32) {
      const int r = c / chunks_per_row, col = (c % chunks_per_row) * 8;
      const int64_t row = tile * kTileRows + r;
      if (row < p.rows) {
        __stcs(reinterpret_cast<uint4*>(out + row * n_out + col),
               *reinterpret_cast<const uint4*>(act + r * p.act_stride + col));
      }
    }
    __syncwarp();  // all lanes are done with `act` before the next iteration refills it
  }
#endif
}

void check_cuda(cudaError_t err, const char* what) {
  TORCH_CHECK(err == cudaSuccess, std::string("hypatia: narrow_mlp: ") + what + " failed: " + cudaGetErrorString(err));
}

bool aligned16(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
}

// Launches one instance; returns false when it cannot run on this device (no kernel image for its
// architecture, or not even one CTA fits on an SM).
template <typename T, int kMaxNT>
bool launch(const Params& p, size_t smem_bytes, const cudaDeviceProp& prop, int device, cudaStream_t stream) {
  const auto kernel = narrow_mlp_kernel<T, kMaxNT>;
  cudaFuncAttributes attributes;
  const cudaError_t err = cudaFuncGetAttributes(&attributes, kernel);
  if (err == cudaErrorInvalidDeviceFunction || err == cudaErrorNoKernelImageForDevice) {
    (void)cudaGetLastError();  // not sticky: clear it so that the fallback path starts clean
    return false;
  }
  check_cuda(err, "cudaFuncGetAttributes");
  if (smem_bytes + attributes.sharedSizeBytes > prop.sharedMemPerBlockOptin) {
    return false;
  }
  {
    // Opt in to the device's whole shared memory once per device; launches then ask for what they use.
    static std::mutex mutex;
    static std::vector<bool> opted_in;
    const std::lock_guard<std::mutex> lock(mutex);
    if (opted_in.size() <= static_cast<size_t>(device)) {
      opted_in.resize(device + 1, false);
    }
    if (!opted_in[device]) {
      check_cuda(
          cudaFuncSetAttribute(
              kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
              static_cast<int>(prop.sharedMemPerBlockOptin - attributes.sharedSizeBytes)),
          "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
      opted_in[device] = true;
    }
  }
  int blocks_per_sm = 0;
  check_cuda(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, kThreads, smem_bytes),
      "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  if (blocks_per_sm == 0) {
    return false;
  }
  // Persistent CTAs: each copies the weights once, so launch no more than fit at once.
  const int64_t needed = (p.tiles + kWarps - 1) / kWarps;
  const int grid = static_cast<int>(std::min<int64_t>(needed, int64_t(blocks_per_sm) * prop.multiProcessorCount));
  kernel<<<grid, kThreads, smem_bytes, stream>>>(p);
  check_cuda(cudaGetLastError(), "kernel launch");
  return true;
}

}  // namespace

bool narrow_mlp_forward_cuda(
    const at::Tensor& x2d, at::TensorList weights, const OptionalTensorList& biases, bool relu_last,
    at::Tensor& out2d) {
  const std::string prefix = "hypatia: narrow_mlp_forward_cuda: ";
  // Misuse by the caller is an error; everything the kernel merely does not cover returns false.
  TORCH_CHECK(
      x2d.dim() == 2 && out2d.dim() == 2,
      prefix + "x2d and out2d must be 2-D, but got " + std::to_string(x2d.dim()) + "-D and " +
          std::to_string(out2d.dim()) + "-D");
  TORCH_CHECK(x2d.is_cuda(), prefix + "x2d must be a CUDA tensor, but is on " + x2d.device().str());
  TORCH_CHECK(
      biases.size() == weights.size(), prefix + "biases must have one entry per layer (" +
          std::to_string(weights.size()) + "), but got " + std::to_string(biases.size()));
  const at::ScalarType dtype = x2d.scalar_type();
  auto check_like_x = [&](const at::Tensor& t, const std::string& name) {
    TORCH_CHECK(
        t.scalar_type() == dtype && t.device() == x2d.device(),
        prefix + name + " must be " + c10::toString(dtype) + " on " + x2d.device().str() + ", but got " +
            c10::toString(t.scalar_type()) + " on " + t.device().str());
  };
  check_like_x(out2d, "out2d");

  const int layers = static_cast<int>(weights.size());
  if (layers == 0 || layers > kMaxLayers || (dtype != at::kHalf && dtype != at::kBFloat16) ||
      !x2d.is_contiguous() || !out2d.is_contiguous() || !aligned16(x2d.data_ptr()) || !aligned16(out2d.data_ptr())) {
    return false;
  }
  Params p{};
  p.layers = layers;
  p.width[0] = static_cast<int>(std::min<int64_t>(x2d.size(1), kMaxWidth + 1));
  for (int l = 0; l < layers; ++l) {
    const at::Tensor& w = weights[l];
    const std::string name = "weights[" + std::to_string(l) + "]";
    check_like_x(w, name);
    TORCH_CHECK(
        w.dim() == 2 && w.size(1) == (l == 0 ? x2d.size(1) : weights[l - 1].size(0)),
        prefix + name + " must be [out_features, " + std::to_string(l == 0 ? x2d.size(1) : weights[l - 1].size(0)) +
            "]");
    if (!w.is_contiguous() || !aligned16(w.data_ptr())) {
      return false;
    }
    p.width[l + 1] = static_cast<int>(std::min<int64_t>(w.size(0), kMaxWidth + 1));
    p.weight[l] = w.data_ptr();
    const std::optional<at::Tensor> b = biases.get(l);
    if (b.has_value() && b->defined()) {
      check_like_x(*b, "biases[" + std::to_string(l) + "]");
      TORCH_CHECK(
          b->dim() == 1 && b->size(0) == w.size(0),
          prefix + "biases[" + std::to_string(l) + "] must be [" + std::to_string(w.size(0)) + "]");
      if (!b->is_contiguous()) {
        return false;
      }
      p.bias[l] = b->data_ptr();
    }
    if (l + 1 < layers || relu_last) {
      p.relu_mask |= 1u << l;
    }
  }
  TORCH_CHECK(
      out2d.size(0) == x2d.size(0) && out2d.size(1) == weights[layers - 1].size(0),
      prefix + "out2d must be [" + std::to_string(x2d.size(0)) + ", " + std::to_string(weights[layers - 1].size(0)) +
          "]");
  int max_width = 0;
  for (int l = 0; l <= layers; ++l) {
    if (p.width[l] == 0 || p.width[l] % 16 != 0 || p.width[l] > kMaxWidth) {
      return false;
    }
    max_width = std::max(max_width, p.width[l]);
  }

  const size_t elem = x2d.element_size();
  size_t offset = 0;
  for (int l = 0; l < layers; ++l) {
    p.weight_offset[l] = static_cast<int>(offset);
    offset += size_t(p.width[l + 1]) * (p.width[l] + kPad) * elem;
  }
  for (int l = 0; l < layers; ++l) {
    p.bias_offset[l] = static_cast<int>(offset);
    offset += size_t(p.width[l + 1]) * sizeof(float);
  }
  p.act_stride = max_width + kPad;
  p.warp_offset = static_cast<int>(offset);
  p.warp_bytes = static_cast<int>(2 * kTileRows * p.act_stride * elem + kScratchFloats * sizeof(float));
  const size_t smem_bytes = offset + size_t(kWarps) * p.warp_bytes;

  const c10::cuda::CUDAGuard device_guard(x2d.device());
  const int device = x2d.device().index();
  const cudaDeviceProp& prop = *at::cuda::getDeviceProperties(device);
  if (prop.major < 8 || smem_bytes > prop.sharedMemPerBlockOptin) {
    return false;
  }
  p.rows = x2d.size(0);
  if (p.rows == 0) {
    return true;
  }
  p.tiles = (p.rows + kTileRows - 1) / kTileRows;
  p.x = x2d.data_ptr();
  p.out = out2d.data_ptr();

  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(device);
  const bool narrow = max_width <= 64;  // a smaller instance: fewer registers, more warps per SM
  if (dtype == at::kHalf) {
    return narrow ? launch<__half, 4>(p, smem_bytes, prop, device, stream)
                  : launch<__half, 8>(p, smem_bytes, prop, device, stream);
  }
  return narrow ? launch<__nv_bfloat16, 4>(p, smem_bytes, prop, device, stream)
                : launch<__nv_bfloat16, 8>(p, smem_bytes, prop, device, stream);
}

}  // namespace hypatia::ops
