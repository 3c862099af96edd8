// A 256 -> 256 layer's whole backward in ONE pass over its rows, on the H100's warpgroup MMA (wgmma)
// and tensor memory accelerator (TMA), sm_90a. From g = dL/d(layer output) [rows, 256], the layer's
// input x [rows, 256] and its weight w [256 out, 256 in]:
//   dw = g^T x,  db = g summed over rows    the layer's parameter gradients
//   dx = threshold_backward(g @ w, x, 0)   where x is the ReLU output of the layer below (kMaskedDx);
//   dx = g @ w                             the bottom layer's input gradient (kPlainDx); or none
// reading g and x once from memory (the per-layer path reads them in the input gradient's GEMM, its
// ReLU backward and the weight gradient's GEMM).
//
// CTA (q, grp) of a (4, groups) grid holds columns [64 q, 64 q + 64) of dw in one warpgroup's
// registers (four m64n64 accumulator sets over its group's row blocks: a 256 x 256 float32 sum does
// not fit one SM) and computes columns [64 q, 64 q + 64) of dx. Each 64-row block of g and x's quarter
// q come by TMA (128-byte swizzled 64-column panels) into a ring of stages; the four CTAs of a group
// read the same g, through L2, and each its own quarter of x. Warpgroup 0: dw[:, q] += g^T x[:, q] by
// m64n64k16 with both operands MN-major (the rows are the reduction), db[q] by m64n8k16 of g's
// quarter against a tile of ones. Warpgroup 1: dx[:, q] = g w[:, q] by m64n64k16 (w's quarter
// resident), masked by x's quarter, written into one of two swizzled shared buffers and stored by TMA
// while the next block's MMAs run (stored from registers, 4-byte stores held the kernel on the
// load/store unit; x's quarters, not its whole block, leave the shared memory for the buffers).
// Warpgroup 2: one TMA thread. The groups' float32 partial sums of dw and db are added in a fixed
// order by a second kernel and rounded once: the same result in every run.
// Measured: docs/perf/experiments.md, "A 256-wide layer's backward in one pass".
#include "ops/fused_ops.h"
#include "ops/cuda/hopper.h"
#include "ops/cuda/hopper_primitives.cuh"
#include "ops/cuda/kernel_launch.h"
#include "ops/cuda/mma_primitives.cuh"

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstdint>
#include <limits>

namespace hypatia::ops {
namespace {

constexpr int kRows = 64;    // a row block
constexpr int kWidth = 256;  // the layer's inputs and outputs
constexpr int kPanelBytes = kRows * 128;      // 64 rows x 64 columns
constexpr int kBlockBytes = 4 * kPanelBytes;  // a [64, 256] block
constexpr int kStageBytes = kBlockBytes + kPanelBytes;  // g's block, then x's quarter q
// Four stages of 40 KB beside w's quarter and dx's two buffers (209 KB); two let the loads stall (a
// stage is refilled only after its block's MMAs; experiments.md).
constexpr int kStages = 4;
constexpr int kWeightBytes = kWidth * 128;  // w[:, quarter]: 256 rows of 64 columns
constexpr int kDxBufferBytes = kPanelBytes;  // a block's dx quarter: 64 rows x 64 columns
constexpr int kOnesBytes = 1024;
constexpr int kThreads = 384;
constexpr int kAtom = 1024;  // the 128-byte swizzle's unit, and the alignment it needs
constexpr int kSmemBytes =
    kStages * kStageBytes + kWeightBytes + 2 * kDxBufferBytes + kOnesBytes + (2 * kStages + 1) * 8 + kAtom;

struct Params {
  CUtensorMap g_map, x_map;  // boxes of 64 columns x 64 rows
  CUtensorMap w_map;         // boxes of 64 columns x 256 rows
  CUtensorMap dx_map;        // boxes of 64 columns x 64 rows of dx [blocks * 64, 256]: a last block's
                             // rows past `rows` land in its padding
  float* dw_part;            // [groups, 256, 256]
  float* db_part;            // [groups, 256]
  int64_t blocks;
};

// What the dx warpgroup computes (a template parameter: a branch on a runtime value around wgmma
// would serialize them, C7518).
enum DxMode : int { kNoDx, kMaskedDx, kPlainDx };

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
using namespace hopper;

// Registers a thread, set by setmaxnreg (128 x 40 + 256 x 232 <= 65536).
constexpr int kProducerRegisters = 40;
constexpr int kConsumerRegisters = 232;
#endif

template <typename T, DxMode kDx>
__global__ void __launch_bounds__(kThreads, 1) layer_backward_kernel(const __grid_constant__ Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* const smem = smem_raw + ((kAtom - static_cast<int>(smem_address(smem_raw) % kAtom)) % kAtom);
  unsigned char* const ring = smem;
  unsigned char* const wq = ring + kStages * kStageBytes;
  unsigned char* const dx_buffers = wq + kWeightBytes;
  unsigned char* const ones = dx_buffers + 2 * kDxBufferBytes;
  uint64_t* const full = reinterpret_cast<uint64_t*>(ones + kOnesBytes);  // a stage's block landed
  uint64_t* const empty = full + kStages;  // every (working) consumer warp is done with the stage
  uint64_t* const w_full = empty + kStages;
  const int q = blockIdx.x, grp = blockIdx.y, groups = gridDim.y;
  const int tid = threadIdx.x;
  const int64_t my_blocks = p.blocks > grp ? (p.blocks - 1 - grp) / groups + 1 : 0;
  if (tid == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbarrier_init(&full[i], 1);
      mbarrier_init(&empty[i], kDx == kNoDx ? 4 : 8);
    }
    mbarrier_init(w_full, 1);
    fence_mbarrier_init();
  }
  {
    const uint32_t one2 = std::is_same_v<T, __half> ? 0x3C003C00u : 0x3F803F80u;
    for (int i = tid; i < kOnesBytes / 4; i += kThreads) {
      reinterpret_cast<uint32_t*>(ones)[i] = one2;
    }
    fence_proxy_async();
  }
  __syncthreads();
  auto stage_of = [](int64_t b) { return static_cast<int>(b % kStages); };
  auto parity_of = [](int64_t b) { return static_cast<int>((b / kStages) & 1); };
  auto row0_of = [&](int64_t b) { return (grp + b * groups) * kRows; };

  if (tid >= 256) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegisters));
    if (tid == 256) {
      if constexpr (kDx != kNoDx) {
        mbarrier_arrive_expect_tx(w_full, kWeightBytes);
        tma_load(wq, &p.w_map, q * 64, 0, w_full);
      }
      for (int64_t b = 0; b < my_blocks; ++b) {
        const int stage = stage_of(b), row0 = static_cast<int>(row0_of(b));
        mbarrier_wait(&empty[stage], parity_of(b) ^ 1);
        mbarrier_arrive_expect_tx(&full[stage], kStageBytes);
        unsigned char* const at = ring + stage * kStageBytes;
        for (int j = 0; j < 4; ++j) {
          tma_load(at + j * kPanelBytes, &p.g_map, j * 64, row0, &full[stage]);
        }
        tma_load(at + kBlockBytes, &p.x_map, q * 64, row0, &full[stage]);
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegisters));
  const int wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  auto free_stage = [&](int64_t b) {
    __syncwarp();
    if (lane == 0) {
      mbarrier_arrive(&empty[stage_of(b)]);
    }
  };

  if (wg == 0) {  // dw columns [64 q, 64 q + 64), rows [64 i, 64 i + 64) in acc[i]; db [64 q, 64 q + 64)
    float acc[4][32], dbacc[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        acc[i][j] = 0.f;
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      dbacc[i] = 0.f;
    }
    const uint64_t ones_desc = desc_plain(ones, 128, 256);
    for (int64_t b = 0; b < my_blocks; ++b) {
      mbarrier_wait(&full[stage_of(b)], parity_of(b));
      unsigned char* const g = ring + stage_of(b) * kStageBytes;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kRows / 16; ++kk) {  // a k16 step: 16 rows, two 8-row groups of 1024 bytes
        // g's quarter i 64 x 16 M-major, x's quarter 16 x 64 N-major: the rows are the reduction
        const uint64_t b_x = desc_sw128(g + kBlockBytes + kk * 2048, kPanelBytes, 1024);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          wgmma_m64n64k16<T, 1, 1>(acc[i], desc_sw128(g + i * kPanelBytes + kk * 2048, kPanelBytes, 1024), b_x, 1);
        }
        wgmma_m64n8k16<T, 1, 0>(dbacc, desc_sw128(g + q * kPanelBytes + kk * 2048, kPanelBytes, 1024), ones_desc, 1);
      }
      wgmma_commit();
      wgmma_wait<0>();  // this block's MMAs are done: its stage is free for the next load at once
      free_stage(b);
    }
    // acc[i]: rows 64 i + 16 warp + lane / 4 (+ 8), columns 64 q + 8 j + 2 (lane % 4) (+ 1)
    const int m = q * 64 + warp * 16 + lane / 4;
    float* const dw = p.dw_part + int64_t(grp) * kWidth * kWidth;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = 64 * i + warp * 16 + lane / 4;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int n = 64 * q + 8 * j + 2 * (lane % 4);
        *reinterpret_cast<float2*>(dw + r * kWidth + n) = make_float2(acc[i][4 * j], acc[i][4 * j + 1]);
        *reinterpret_cast<float2*>(dw + (r + 8) * kWidth + n) = make_float2(acc[i][4 * j + 2], acc[i][4 * j + 3]);
      }
    }
    if (lane % 4 == 0) {  // column 0 of the product with ones: the row sums of g's quarter, transposed
      p.db_part[int64_t(grp) * kWidth + m] = dbacc[0];
      p.db_part[int64_t(grp) * kWidth + m + 8] = dbacc[2];
    }
  } else if constexpr (kDx != kNoDx) {  // dx columns [64 q, 64 q + 64)
    mbarrier_wait(w_full, 0);
    const bool store_leader = tid == 128;  // issues the TMA stores and waits for them
    int64_t stores = 0;
    // Row r, columns 8 j + 2 (lane % 4) (+ 1) of a 64 x 64 panel in the 128-byte swizzle: the byte
    // offset of this thread's pair, in x's quarter and in dx's buffers alike.
    auto pair_offset = [&](int r, int j) { return r * 128 + ((j ^ (r & 7)) << 4) + (lane % 4) * 4; };
    // Rows 16 warp + lane / 4 (+ 8 h) of a block of x's quarter (the stage's x panel): the pairs that
    // mask this thread's accumulators.
    auto read_x = [&](const unsigned char* stage_base, uint32_t (&xr)[16]) {
      if constexpr (kDx == kPlainDx) {
        return;
      }
      const unsigned char* const xq = stage_base + kBlockBytes;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = warp * 16 + lane / 4 + 8 * h;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          xr[8 * h + j] = *reinterpret_cast<const uint32_t*>(xq + pair_offset(r, j));
        }
      }
    };
    auto issue = [&](const unsigned char* stage_base, float (&acc)[32]) {
      fence_operands(acc);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kWidth / 16; ++kk) {  // g K-major (its columns), w's quarter N-major
        wgmma_m64n64k16<T, 0, 1>(acc, desc_sw128(stage_base + (kk / 4) * kPanelBytes + (kk % 4) * 32, 16, 1024),
                                 desc_sw128(wq + kk * 2048, kPanelBytes, 1024), kk > 0);
      }
      wgmma_commit();
      fence_operands(acc);
    };
    // Store n writes buffer n % 2, whose TMA store n - 2 the leader waited for in store n - 1, before
    // the barrier: one barrier a store.
    auto store = [&](const float (&acc)[32], const uint32_t (&xr)[16], int64_t row0) {
      unsigned char* const buffer = dx_buffers + (stores & 1) * kDxBufferBytes;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = warp * 16 + lane / 4 + 8 * h;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const uint32_t v = pack2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1], T());
          *reinterpret_cast<uint32_t*>(buffer + pair_offset(r, j)) =
              kDx == kMaskedDx ? v & above_zero_or_nan2(xr[8 * h + j], T()) : v;
        }
      }
      fence_proxy_async();
      if (store_leader) {
        bulk_wait_read<0>();  // store n - 1 has read its buffer: store n + 1 may write it
      }
      asm volatile("bar.sync 1, 128;\n" ::: "memory");
      if (store_leader) {
        tma_store(&p.dx_map, buffer, q * 64, static_cast<int>(row0));
        bulk_commit();
      }
      ++stores;
    };
    float acc0[32], acc1[32];
    uint32_t xr0[16], xr1[16];
    // Blocks in pairs: block b's MMAs run while block b - 1 is masked and stored, block b + 1's while
    // b is; each pair ends with nothing in flight (ptxas serializes every wgmma where a loop's head
    // may find MMAs in flight, C7514, or where a wait happens on some paths only, C7518). x's quarter
    // goes to registers as its block lands, so that a stage is free once its MMAs are done.
    auto begin = [&](int64_t b, float (&acc)[32], uint32_t (&xr)[16]) {
      mbarrier_wait(&full[stage_of(b)], parity_of(b));
      const unsigned char* const at = ring + stage_of(b) * kStageBytes;
      read_x(at, xr);
      issue(at, acc);
    };
    // The first pair alone (no block before it to store): a store skipped inside the loop would
    // serialize every wgmma (C7518).
    auto pair = [&](int64_t b, bool store_before) {
      begin(b, acc0, xr0);
      if (store_before) {
        store(acc1, xr1, row0_of(b - 1));
      }
      begin(b + 1, acc1, xr1);
      wgmma_wait<1>();
      fence_operands(acc0);
      free_stage(b);
      store(acc0, xr0, row0_of(b));
      wgmma_wait<0>();
      fence_operands(acc1);
      free_stage(b + 1);
    };
    int64_t b = 0;
    if (my_blocks >= 2) {
      pair(0, false);
      b = 2;
    }
    for (; b + 1 < my_blocks; b += 2) {  // acc1 holds block b - 1, done, not yet stored
      pair(b, true);
    }
    // Nothing in flight: the pair before's second block, then the last block of an odd count alone.
    if (b > 0) {
      store(acc1, xr1, row0_of(b - 1));
    }
    if (b < my_blocks) {
      begin(b, acc0, xr0);
      wgmma_wait<0>();
      fence_operands(acc0);
      free_stage(b);
      store(acc0, xr0, row0_of(b));
    }
    if (store_leader) {
      bulk_wait<0>();  // shared memory lives until the stores have read it
    }
  }
#endif
}

// dw [256, 256] and db [256] from the groups' float32 partial sums, added in group order and rounded
// once into the storage dtype (db where db_part is given).
template <typename T>
__global__ void add_partials_kernel(const float4* dw_part, const float* db_part, T* dw, T* db, int groups) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;  // 4 columns of dw, or one of db
  if (i < kWidth * kWidth / 4) {
    float4 sum = dw_part[i];
    for (int gr = 1; gr < groups; ++gr) {
      const float4 v = dw_part[int64_t(gr) * (kWidth * kWidth / 4) + i];
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    reinterpret_cast<uint2*>(dw)[i] = make_uint2(pack2(sum.x, sum.y, T()), pack2(sum.z, sum.w, T()));
  } else if (db != nullptr && i < kWidth * kWidth / 4 + kWidth) {
    const int c = i - kWidth * kWidth / 4;
    float sum = 0.f;
    for (int gr = 0; gr < groups; ++gr) {
      sum += db_part[int64_t(gr) * kWidth + c];
    }
    store_rounded(db + c, sum);
  }
}

// HYPATIA_LAYER_BACKWARD: "0" never; else wherever the kernel applies, which is where it measured:
// on the H100, the training step of a 256-wide MLP of 4 layers ran as fast as or faster than with the
// per-layer path from 1024 to 262144 rows with the three layers above the bottom one taken, and with
// the bottom one taken too from kBottomMinRows (experiments.md). Read once.
EnvSwitch layer_backward_policy() {
  static const EnvSwitch policy = env_switch("HYPATIA_LAYER_BACKWARD");
  return policy;
}

// Below this many rows the bottom layer's per-layer path (cuBLAS's dx and dw GEMMs, no ReLU mask to
// apply) beat one pass of 4 CTAs a row block: by 5-7 us at 1024 and 2048 rows, 2-4 at 4096 on the
// H100, even at 8192, ahead from 16384.
constexpr int64_t kBottomMinRows = 8192;

template <typename T, DxMode kDx>
const void* kernel() {
  return reinterpret_cast<const void*>(&layer_backward_kernel<T, kDx>);
}
const void* kernel_for(at::ScalarType dtype, DxMode mode) {
  const bool half = dtype == at::kHalf;
  switch (mode) {
    case kNoDx:
      return half ? kernel<__half, kNoDx>() : kernel<__nv_bfloat16, kNoDx>();
    case kMaskedDx:
      return half ? kernel<__half, kMaskedDx>() : kernel<__nv_bfloat16, kMaskedDx>();
    default:
      return half ? kernel<__half, kPlainDx>() : kernel<__nv_bfloat16, kPlainDx>();
  }
}

template <typename T>
void launch(const void* kernel, Params p, int groups, const at::Tensor& dw_part, const at::Tensor& db_part,
            at::Tensor& dw, at::Tensor& db, cudaStream_t stream) {
  void* args[] = {&p};
  check_cuda(cudaLaunchKernel(kernel, dim3(4, groups), dim3(kThreads), args, kSmemBytes, stream), "layer backward",
             "kernel launch");
  constexpr int kPerBlock = 256, kThreadsNeeded = kWidth * kWidth / 4 + kWidth;
  add_partials_kernel<T><<<(kThreadsNeeded + kPerBlock - 1) / kPerBlock, kPerBlock, 0, stream>>>(
      reinterpret_cast<const float4*>(dw_part.data_ptr<float>()), db_part.data_ptr<float>(),
      static_cast<T*>(dw.data_ptr()), db.defined() ? static_cast<T*>(db.data_ptr()) : nullptr, groups);
  check_cuda(cudaGetLastError(), "layer backward", "partial sums launch");
}

}  // namespace

std::optional<std::array<at::Tensor, 3>> layer_backward_cuda(
    const at::Tensor& grad2d, const at::Tensor& w, const at::Tensor& h2d, bool relu_below, bool bias_grad,
    bool input_grad) {
  const at::ScalarType dtype = grad2d.scalar_type();
  const int64_t rows = grad2d.size(0);
  const EnvSwitch policy = layer_backward_policy();
  if (policy == EnvSwitch::kOff || (dtype != at::kHalf && dtype != at::kBFloat16) || rows == 0 ||
      grad2d.size(1) != kWidth || w.size(0) != kWidth || w.size(1) != kWidth || h2d.size(1) != kWidth ||
      w.scalar_type() != dtype || h2d.scalar_type() != dtype ||
      // TMA coordinates are 32-bit: a row block's first row must fit.
      rows > std::numeric_limits<int32_t>::max() - kRows || (!relu_below && rows < kBottomMinRows)) {
    return std::nullopt;
  }
  const DxMode mode = !input_grad ? kNoDx : relu_below ? kMaskedDx : kPlainDx;
  const int device = grad2d.get_device();
  const cudaDeviceProp& props = *at::cuda::getDeviceProperties(device);
  const c10::cuda::CUDAGuard device_guard(grad2d.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(device);
  const void* const kernel = kernel_for(dtype, mode);
  const int per_sm = props.major == 9 && has_wgmma(device, stream) ? blocks_per_sm(kernel, kThreads, device, kSmemBytes)
                                                                   : 0;
  if (per_sm == 0) {
    return std::nullopt;
  }
  // TMA reads rows that start 16 bytes apart, from 16-byte aligned data.
  const at::Tensor g = dense(grad2d) ? grad2d : grad2d.contiguous();
  const at::Tensor x = dense(h2d) ? h2d : h2d.contiguous();
  const at::Tensor wc = dense(w) ? w : w.contiguous();
  Params p{};
  if (!swizzled_tensor_map(p.g_map, g, kRows) || !swizzled_tensor_map(p.x_map, x, kRows) ||
      !swizzled_tensor_map(p.w_map, wc, kWidth)) {
    return std::nullopt;
  }
  p.blocks = (rows + kRows - 1) / kRows;
  // A group of four CTAs per resident slot, no more than there are blocks: more groups add partial
  // sums to add up, fewer leave SMs idle.
  const int groups = static_cast<int>(std::min<int64_t>(p.blocks, std::max(1, per_sm * props.multiProcessorCount / 4)));
  at::Tensor dx = mode == kNoDx ? at::Tensor() : at::empty({p.blocks * kRows, kWidth}, g.options());
  at::Tensor dw_part = at::empty({groups, kWidth, kWidth}, g.options().dtype(at::kFloat));
  at::Tensor db_part = at::empty({groups, kWidth}, g.options().dtype(at::kFloat));
  at::Tensor dw = at::empty({kWidth, kWidth}, g.options());
  at::Tensor db = bias_grad ? at::empty({kWidth}, g.options()) : at::Tensor();
  if (dx.defined() && !swizzled_tensor_map(p.dx_map, dx, kRows)) {
    return std::nullopt;
  }
  p.dw_part = dw_part.data_ptr<float>();
  p.db_part = db_part.data_ptr<float>();
  if (dtype == at::kHalf) {
    launch<__half>(kernel, p, groups, dw_part, db_part, dw, db, stream);
  } else {
    launch<__nv_bfloat16>(kernel, p, groups, dw_part, db_part, dw, db, stream);
  }
  return std::array<at::Tensor, 3>{dw, db, dx.defined() ? dx.narrow(0, 0, rows) : dx};
}

}  // namespace hypatia::ops
