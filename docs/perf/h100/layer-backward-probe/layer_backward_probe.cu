// Probe (issue 39): a 256 -> 256 hidden layer's whole backward in ONE pass over its rows, sm_90a.
// Given g = dL/d(layer output) [rows, 256] (already masked by this layer's ReLU), x = the layer's
// input [rows, 256] (the ReLU output of the layer below) and w [256 out, 256 in], it writes
//   dx = threshold_backward(g @ w, x, 0)       [rows, 256]   (the layer below's masked gradient)
//   dw_part[grp] = g^T x over grp's row blocks [groups, 256, 256] float32 partial sums
//   db_part[grp] = column sums of g             [groups, 256]      float32 partial sums
// reading g and x once from HBM instead of twice (per-layer path: the input gradient's GEMM, its
// ReLU backward and the weight gradient's split-K GEMM each read them).
//
// CTA (q, grp) of a (4, groups) grid holds rows [64 q, 64 q + 64) of dw in one warpgroup's
// registers (m64n256 accumulators over every row block of its group: a 256 x 256 float32 sum does
// not fit one SM) and computes columns [64 q, 64 q + 64) of dx. Each 64-row block of g and x comes
// by TMA (128-byte swizzled 64-column panels) into a ring of stages; the four CTAs of a block read
// the same g and x (through L2, no multicast in this version). Warpgroup 0: dw += g[:, q]^T x by
// m64n256k16 with both operands MN-major (the rows are the reduction), db by m64n8k16 against a
// tile of ones. Warpgroup 1: dx[:, q] = g w[:, q] by m64n64k16 (w's quarter N-major, resident),
// masked by x's quarter from the stage, stored from registers. Warpgroup 2: one TMA thread.
// The library's conversions and masks (pack2, above_zero_or_nan2): build with -I at the repository root.
#include "ops/cuda/mma_primitives.cuh"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace {

using hypatia::ops::above_zero_or_nan2;
using hypatia::ops::pack2;

constexpr int kRows = 64;
constexpr int kWidth = 256;
constexpr int kPanelBytes = kRows * 128;           // 64 rows x 64 columns
constexpr int kBlockBytes = 4 * kPanelBytes;       // a [64, 256] block
constexpr int kStageBytes = 2 * kBlockBytes;       // g's block, then x's
#ifndef PROBE_STAGES
#define PROBE_STAGES 3
#endif
constexpr int kStages = PROBE_STAGES;
constexpr int kWeightBytes = kWidth * 128;  // w[:, quarter]: 256 rows of 64 columns
constexpr int kOnesBytes = 1024;
constexpr int kThreads = 384;
constexpr int kSmemBytes = kStages * kStageBytes + kWeightBytes + kOnesBytes + 1024 /*barriers*/ + 1024 /*align*/;

struct Params {
  CUtensorMap g_map, x_map;  // boxes of 64 columns x 64 rows
  CUtensorMap w_map;         // boxes of 64 columns x 256 rows
  void* dx;
  void* scratch;  // [64, 256]: where the rows of a last block past `rows` go
  float* dw_part;
  float* db_part;
  int64_t rows, blocks;
};

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 128-byte swizzled operand; lbo / sbo in bytes. K-major: sbo = 1024 (8-row atoms), lbo unused.
// MN-major: lbo = bytes between 64-element atoms along M/N, sbo = bytes between 8-row groups along K.
__device__ __forceinline__ uint64_t desc_sw128(const void* smem, uint32_t lbo, uint32_t sbo) {
  return uint64_t((smem_address(smem) & 0x3FFFF) >> 4) | (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32) |
      (uint64_t(1) << 62);
}
// Not swizzled (interleaved core matrices of 8 rows x 16 bytes).
__device__ __forceinline__ uint64_t desc_plain(const void* smem, uint32_t lbo, uint32_t sbo) {
  return uint64_t((smem_address(smem) & 0x3FFFF) >> 4) | (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32);
}
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_address(bar)) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(smem_address(bar)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void tma_load(void* to, const CUtensorMap* map, int col, int row, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
          "r"(smem_address(to)),
      "l"(map), "r"(col), "r"(row), "r"(smem_address(bar))
      : "memory");
}
#ifndef PROBE_MULTICAST
#define PROBE_MULTICAST 0
#endif
// 1: the dw warpgroup frees a block's stage once it has issued the next block's MMAs; 0: once its own are done.
#ifndef PROBE_LAG
#define PROBE_LAG 0
#endif
// 1: the dx warpgroup masks and stores a block while the next block's MMAs run (two accumulator sets,
// x's quarter read into registers as the block lands); 0: MMAs, wait, mask and store, one block after another.
#ifndef PROBE_DX_OVERLAP
#define PROBE_DX_OVERLAP 0
#endif
// The box of `map` into the same offset of every CTA of the cluster in `mask`, counted on each one's `bar`.
__device__ __forceinline__ void tma_load_multicast(void* to, const CUtensorMap* map, int col, int row, uint64_t* bar,
                                                   uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(smem_address(to)),
      "l"(map), "r"(col), "r"(row), "r"(smem_address(bar)), "h"(mask)
      : "memory");
}
// An arrival on `bar` at the same offset in CTA `rank` of the cluster.
__device__ __forceinline__ void mbarrier_arrive_cluster(uint64_t* bar, int rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(smem_address(bar)), "r"(rank));
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

#define ACC128_OPERANDS \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), \
      "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), \
      "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
      "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), \
      "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), \
      "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), \
      "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), \
      "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), \
      "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), \
      "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
      "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), \
      "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), \
      "+f"(d[126]), "+f"(d[127])
#define ACC128_LIST \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

// d += A B: A 64 x 16 M-major, B 16 x 256 N-major (both transposed against wgmma's K-major default).
#define WGMMA_DW(AB) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n256k16.f32." AB "." AB " {" ACC128_LIST \
               "}, %128, %129, p, 1, 1, 1, 1;\n}\n" \
               : ACC128_OPERANDS \
               : "l"(desc_a), "l"(desc_b))
template <typename T>
__device__ __forceinline__ void wgmma_dw(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  if constexpr (std::is_same_v<T, __half>) {
    WGMMA_DW("f16");
  } else {
    WGMMA_DW("bf16");
  }
}
// d += A B: A 64 x 16 M-major, B 16 x 8 K-major (the ones).
#define WGMMA_DB(AB) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n8k16.f32." AB "." AB \
               " {%0, %1, %2, %3}, %4, %5, p, 1, 1, 1, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) \
               : "l"(desc_a), "l"(desc_b))
template <typename T>
__device__ __forceinline__ void wgmma_db(float (&d)[4], uint64_t desc_a, uint64_t desc_b) {
  if constexpr (std::is_same_v<T, __half>) {
    WGMMA_DB("f16");
  } else {
    WGMMA_DB("bf16");
  }
}
// d (+)= A B: A 64 x 16 K-major, B 16 x 64 N-major.
#define WGMMA_DX(AB) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." AB "." AB " {" \
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" \
               "}, %32, %33, p, 1, 1, 0, 1;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), \
                 "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), \
                 "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), \
                 "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate))
template <typename T>
__device__ __forceinline__ void wgmma_dx(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  if constexpr (std::is_same_v<T, __half>) {
    WGMMA_DX("f16");
  } else {
    WGMMA_DX("bf16");
  }
}

// Pins the accumulators' registers at this point of the program: without it the compiler may read
// them before the wgmma_wait that makes them final (ptxas then serializes every wgmma, C7514).
template <int N>
__device__ __forceinline__ void fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    asm volatile("" : "+f"(d[i])::"memory");
  }
}

// A consumer warp is done with a stage: with multicast, every CTA of the cluster refills part of it.
__device__ __forceinline__ void free_stage(uint64_t* empty, int stage, int lane) {
#if PROBE_MULTICAST
  if (lane < 4) {
    mbarrier_arrive_cluster(&empty[stage], lane);
  }
#else
  if (lane == 0) {
    mbarrier_arrive(&empty[stage]);
  }
#endif
}

// kMode 0: all; 1: dw and db only; 2: dx only; 3: neither (the loads alone); the idle warpgroups wait
// and free stages. A template parameter, not a kernel argument: a branch on it around wgmma serializes
// them (C7518).
template <typename T, int kMode>
__global__ void __launch_bounds__(kThreads, 1)
#if PROBE_MULTICAST
    __cluster_dims__(4, 1, 1)
#endif
    layer_backward_kernel(const __grid_constant__ Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* const smem = smem_raw + ((1024 - static_cast<int>(smem_address(smem_raw) % 1024)) % 1024);
  unsigned char* const ring = smem;
  unsigned char* const wq = ring + kStages * kStageBytes;
  unsigned char* const ones = wq + kWeightBytes;
  uint64_t* const full = reinterpret_cast<uint64_t*>(ones + kOnesBytes);
  uint64_t* const empty = full + kStages;
  uint64_t* const w_full = empty + kStages;
  const int q = blockIdx.x, grp = blockIdx.y, groups = gridDim.y;
  const int tid = threadIdx.x;
  const int64_t my_blocks = p.blocks > grp ? (p.blocks - 1 - grp) / groups + 1 : 0;
  if (tid == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbarrier_init(&full[i], 1);
      mbarrier_init(&empty[i], 8 * (PROBE_MULTICAST ? 4 : 1));  // each consumer warp (of each CTA of the cluster)
    }
    mbarrier_init(w_full, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  {
    const uint32_t one2 = std::is_same_v<T, __half> ? 0x3C003C00u : 0x3F803F80u;
    for (int i = tid; i < kOnesBytes / 4; i += kThreads) {
      reinterpret_cast<uint32_t*>(ones)[i] = one2;
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();
#if PROBE_MULTICAST
  cluster_sync();  // every CTA's barriers initialized before any multicast or remote arrival
#endif

  if (tid >= 256) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (tid == 256) {
      mbarrier_arrive_expect_tx(w_full, kWeightBytes);
      tma_load(wq, &p.w_map, q * 64, 0, w_full);
      int stage = 0, parity = 0;
      for (int64_t b = 0; b < my_blocks; ++b) {
        const int row0 = static_cast<int>((grp + b * groups) * kRows);
        mbarrier_wait(&empty[stage], parity ^ 1);
        mbarrier_arrive_expect_tx(&full[stage], kStageBytes);
        unsigned char* const at = ring + stage * kStageBytes;
#if PROBE_MULTICAST
        // this CTA's quarter of g and x, to all four CTAs of the cluster
        tma_load_multicast(at + q * kPanelBytes, &p.g_map, q * 64, row0, &full[stage], 0xF);
        tma_load_multicast(at + kBlockBytes + q * kPanelBytes, &p.x_map, q * 64, row0, &full[stage], 0xF);
#else
        for (int j = 0; j < 4; ++j) {
          tma_load(at + j * kPanelBytes, &p.g_map, j * 64, row0, &full[stage]);
        }
        for (int j = 0; j < 4; ++j) {
          tma_load(at + kBlockBytes + j * kPanelBytes, &p.x_map, j * 64, row0, &full[stage]);
        }
#endif
        if (++stage == kStages) {
          stage = 0;
          parity ^= 1;
        }
      }
    }
#if PROBE_MULTICAST
    cluster_sync();  // peers may still arrive on this CTA's barriers
#endif
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  const int wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;

  if (wg == 0) {  // dw rows [64 q, 64 q + 64) and db
    float acc[128], dbacc[4];
#pragma unroll
    for (int i = 0; i < 128; ++i) {
      acc[i] = 0.f;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      dbacc[i] = 0.f;
    }
    const uint64_t ones_desc = desc_plain(ones, 128, 256);
    int stage = 0, parity = 0, prev = 0;
    for (int64_t b = 0; b < my_blocks; ++b) {
      mbarrier_wait(&full[stage], parity);
      if constexpr (kMode == 0 || kMode == 1) {
        unsigned char* const g = ring + stage * kStageBytes;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kRows / 16; ++kk) {
          const uint64_t a = desc_sw128(g + q * kPanelBytes + kk * 2048, kPanelBytes, 1024);
          wgmma_dw<T>(acc, a, desc_sw128(g + kBlockBytes + kk * 2048, kPanelBytes, 1024));
          wgmma_db<T>(dbacc, a, ones_desc);
        }
        wgmma_commit();
      }
#if PROBE_LAG
      if (b > 0) {  // the block before's MMAs are done: free its stage
        wgmma_wait<1>();
        __syncwarp();
        free_stage(empty, prev, lane);
      }
#else
      wgmma_wait<0>();  // this block's MMAs are done: free its stage for the next load at once
      __syncwarp();
      free_stage(empty, stage, lane);
#endif
      prev = stage;
      if (++stage == kStages) {
        stage = 0;
        parity ^= 1;
      }
    }
    wgmma_wait<0>();
    // rows 64 q + 16 warp + lane / 4 (+ 8), columns 8 j + 2 (lane % 4) (+ 1)
    const int m = q * 64 + warp * 16 + lane / 4;
    float* const dw = p.dw_part + int64_t(grp) * kWidth * kWidth;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int n = 8 * j + 2 * (lane % 4);
      *reinterpret_cast<float2*>(dw + m * kWidth + n) = make_float2(acc[4 * j], acc[4 * j + 1]);
      *reinterpret_cast<float2*>(dw + (m + 8) * kWidth + n) = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
    }
    if (lane % 4 == 0) {
      p.db_part[int64_t(grp) * kWidth + m] = dbacc[0];
      p.db_part[int64_t(grp) * kWidth + m + 8] = dbacc[2];
    }
  } else {  // dx columns [64 q, 64 q + 64)
    mbarrier_wait(w_full, 0);
    T* const dx = static_cast<T*>(p.dx);
    constexpr bool computes = kMode == 0 || kMode == 2;
    // Rows 16 warp + lane / 4 (+ 8 h) of a block, columns 8 j + 2 (lane % 4) of x's quarter (panel q of
    // the stage's x block, swizzled): the pairs that mask this thread's accumulators.
    auto read_x = [&](const unsigned char* stage_base, uint32_t (&xr)[16]) {
      const unsigned char* const xq = stage_base + kBlockBytes + q * kPanelBytes;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = warp * 16 + lane / 4 + 8 * h;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          xr[8 * h + j] = *reinterpret_cast<const uint32_t*>(xq + r * 128 + ((j ^ (r & 7)) << 4) + (lane % 4) * 4);
        }
      }
    };
    auto issue = [&](const unsigned char* stage_base, float (&acc)[32]) {
      fence_operands(acc);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kWidth / 16; ++kk) {
        wgmma_dx<T>(acc, desc_sw128(stage_base + (kk / 4) * kPanelBytes + (kk % 4) * 32, 16, 1024),
                    desc_sw128(wq + kk * 2048, kPanelBytes, 1024), kk > 0);
      }
      wgmma_commit();
      fence_operands(acc);
    };
    auto store = [&](const float (&acc)[32], const uint32_t (&xr)[16], int64_t row0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = warp * 16 + lane / 4 + 8 * h;
        // a row past the last goes to scratch: a branch here, with MMAs in flight, makes ptxas serialize
        // every wgmma of the kernel (C7518)
        T* const to = (row0 + r < p.rows ? dx + (row0 + r) * kWidth : static_cast<T*>(p.scratch) + r * kWidth) +
            q * 64 + 2 * (lane % 4);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          *reinterpret_cast<uint32_t*>(to + 8 * j) =
              pack2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1], T()) & above_zero_or_nan2(xr[8 * h + j], T());
        }
      }
    };
    auto stage_of = [](int64_t b) { return static_cast<int>(b % kStages); };
    auto parity_of = [](int64_t b) { return static_cast<int>((b / kStages) & 1); };
    auto row0_of = [&](int64_t b) { return (grp + b * groups) * kRows; };
#if PROBE_DX_OVERLAP
    float acc0[32], acc1[32];
    uint32_t xr0[16], xr1[16];
    // Blocks in pairs: block b's MMAs run while block b - 1 is masked and stored, block b + 1's while b
    // is; each pair ends with nothing in flight (ptxas serializes every wgmma where a loop's head may
    // find MMAs in flight, C7514, or where a wait happens on some paths only, C7518). x's quarter goes
    // to registers as its block lands, so a stage is free as soon as its MMAs are done.
    auto begin = [&](int64_t b, float (&acc)[32], uint32_t (&xr)[16]) {
      mbarrier_wait(&full[stage_of(b)], parity_of(b));
      unsigned char* const at = ring + stage_of(b) * kStageBytes;
      if (computes) {
        read_x(at, xr);
        issue(at, acc);
      }
    };
    auto finish = [&](int64_t b) {
      __syncwarp();
      free_stage(empty, stage_of(b), lane);
    };
    // The first pair alone (no block before it to store), then the others; a store skipped at the
    // first pair inside the loop would again serialize every wgmma (C7518).
    auto pair = [&](int64_t b, bool store_before) {
      begin(b, acc0, xr0);
      if (store_before) {
        store(acc1, xr1, row0_of(b - 1));
      }
      begin(b + 1, acc1, xr1);
      wgmma_wait<1>();
      fence_operands(acc0);
      finish(b);
      if (computes) {
        store(acc0, xr0, row0_of(b));
      }
      wgmma_wait<0>();
      fence_operands(acc1);
      finish(b + 1);
    };
    int64_t b = 0;
    if (my_blocks >= 2) {
      pair(0, false);
      b = 2;
    }
    for (; b + 1 < my_blocks; b += 2) {  // acc1 holds block b - 1, done, not yet stored
      pair(b, computes);
    }
    // Nothing in flight: the pair before's second block, then the last block of an odd count alone.
    if (computes && b > 0) {
      store(acc1, xr1, row0_of(b - 1));
    }
    if (b < my_blocks) {
      begin(b, acc0, xr0);
      wgmma_wait<0>();
      fence_operands(acc0);
      finish(b);
      if (computes) {
        store(acc0, xr0, row0_of(b));
      }
    }
#else
    float acc[32];
    uint32_t xr[16];
    for (int64_t b = 0; b < my_blocks; ++b) {
      mbarrier_wait(&full[stage_of(b)], parity_of(b));
      unsigned char* const at = ring + stage_of(b) * kStageBytes;
      if (computes) {
        issue(at, acc);
        read_x(at, xr);
        wgmma_wait<0>();
        store(acc, xr, row0_of(b));
      }
      __syncwarp();
      free_stage(empty, stage_of(b), lane);
    }
#endif
  }
#if PROBE_MULTICAST
  cluster_sync();  // no CTA leaves while a peer may still arrive on its barriers or load into it
#endif
#endif
}

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
}

bool map2d(CUtensorMap& map, bool half, const void* base, int64_t rows, int64_t cols, int box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encoder();
  if (encode == nullptr) {
    return false;
  }
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(cols) * 2};
  const cuuint32_t box[2] = {64, cuuint32_t(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  return encode(&map, half ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
                const_cast<void*>(base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace

template <typename T, int kMode>
int launch_mode(const Params& p, int groups, void* stream) {
  const void* kernel = reinterpret_cast<const void*>(&layer_backward_kernel<T, kMode>);
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes) != cudaSuccess) {
    return 2;
  }
  layer_backward_kernel<T, kMode><<<dim3(4, groups), kThreads, kSmemBytes, static_cast<cudaStream_t>(stream)>>>(p);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
template <typename T>
int launch(const Params& p, int mode, int groups, void* stream) {
  switch (mode) {
    case 0:
      return launch_mode<T, 0>(p, groups, stream);
    case 1:
      return launch_mode<T, 1>(p, groups, stream);
    case 2:
      return launch_mode<T, 2>(p, groups, stream);
    default:
      return launch_mode<T, 3>(p, groups, stream);
  }
}

// dtype: 0 bfloat16, 1 half; mode: kMode. Returns 0, or a nonzero code (1 maps, 2 attribute, 3 launch, 4 mode).
extern "C" int layer_backward(int dtype, const void* g, const void* x, const void* w, void* dx, void* scratch,
                              float* dw_part, float* db_part, int64_t rows, int groups, int mode, void* stream) {
  Params p{};
  const bool half = dtype == 1;
  if (!map2d(p.g_map, half, g, rows, kWidth, kRows) || !map2d(p.x_map, half, x, rows, kWidth, kRows) ||
      !map2d(p.w_map, half, w, kWidth, kWidth, kWidth)) {
    return 1;
  }
  p.dx = dx;
  p.scratch = scratch;
  p.dw_part = dw_part;
  p.db_part = db_part;
  p.rows = rows;
  p.blocks = (rows + kRows - 1) / kRows;
  if (mode < 0 || mode > 3) {
    return 4;
  }
  return half ? launch<__half>(p, mode, groups, stream) : launch<__nv_bfloat16>(p, mode, groups, stream);
}

// Groups (of four CTAs) resident at once, by the occupancy API: clusters in the multicast build; -1 on error.
extern "C" int layer_backward_max_active(int groups) {
  const void* kernel = reinterpret_cast<const void*>(&layer_backward_kernel<__nv_bfloat16, 0>);
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes) != cudaSuccess) {
    return -1;
  }
#if PROBE_MULTICAST
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(4, groups);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kSmemBytes;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = 4;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  int clusters = 0;
  return cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) == cudaSuccess ? clusters : -1;
#else
  int per_sm = 0, sms = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, kSmemBytes) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) {
    return -1;
  }
  return per_sm * sms / 4;
#endif
}

// dw [256, 256] and db [256] in the storage dtype from the groups' float32 partial sums.
template <typename T>
__global__ void reduce_partials_kernel(const float4* dw_part, const float* db_part, T* dw, T* db, int groups) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;  // 4 columns of dw
  if (i < kWidth * kWidth / 4) {
    float4 sum = dw_part[i];
    for (int gr = 1; gr < groups; ++gr) {
      const float4 v = dw_part[int64_t(gr) * (kWidth * kWidth / 4) + i];
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    const uint32_t lo = pack2(sum.x, sum.y, T()), hi = pack2(sum.z, sum.w, T());
    reinterpret_cast<uint2*>(dw)[i] = make_uint2(lo, hi);
  } else if (i < kWidth * kWidth / 4 + kWidth) {
    const int c = i - kWidth * kWidth / 4;
    float sum = 0.f;
    for (int gr = 0; gr < groups; ++gr) {
      sum += db_part[int64_t(gr) * kWidth + c];
    }
    db[c] = static_cast<T>(sum);
  }
}

extern "C" int layer_backward_reduce(int dtype, const float* dw_part, const float* db_part, void* dw, void* db,
                                     int groups, void* stream) {
  const int threads = kWidth * kWidth / 4 + kWidth, per_block = 256;
  const dim3 grid((threads + per_block - 1) / per_block);
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype == 1) {
    reduce_partials_kernel<__half><<<grid, per_block, 0, s>>>(reinterpret_cast<const float4*>(dw_part), db_part,
                                                              static_cast<__half*>(dw), static_cast<__half*>(db), groups);
  } else {
    reduce_partials_kernel<__nv_bfloat16><<<grid, per_block, 0, s>>>(
        reinterpret_cast<const float4*>(dw_part), db_part, static_cast<__nv_bfloat16*>(dw),
        static_cast<__nv_bfloat16*>(db), groups);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
