// Device primitives of the sm_90a kernels (medium_mlp_kernel.cu, layer_backward_kernel.cu): shared
// addresses, mbarriers, TMA loads and stores, warpgroup MMAs (wgmma) and their descriptors.
// Defined only in sm_90a code (the including kernels guard their bodies the same way).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace hypatia::ops::hopper {

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// A descriptor of a 128-byte-swizzled operand in shared memory (atoms of 8 rows x 128 bytes,
// 1024-byte aligned, so base offset 0), offsets in bytes. K-major: lbo unused (a k16 step stays in
// the 128-byte row: +32 bytes), sbo = 1024 between 8-row atoms. MN-major: lbo = bytes between
// 64-element atoms along M or N, sbo = bytes between 8-row groups along K (a k16 step: 2 of them).
__device__ __forceinline__ uint64_t desc_sw128(const void* smem, uint32_t lbo, uint32_t sbo) {
  return uint64_t((smem_address(smem) & 0x3FFFF) >> 4) | (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32) |
      (uint64_t(1) << 62);
}
// Not swizzled: core matrices of 8 rows x 16 bytes, lbo apart along K and sbo apart along M or N.
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
// Until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(smem_address(bar)),
      "r"(parity)
      : "memory");
}
// Every mbarrier_init of this CTA visible to the async proxy (TMA) and the other threads.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// The box of `map` at (column col, row row) into `to`, counted on `bar`.
__device__ __forceinline__ void tma_load(void* to, const CUtensorMap* map, int col, int row, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
          "r"(smem_address(to)),
      "l"(map), "r"(col), "r"(row), "r"(smem_address(bar))
      : "memory");
}
// The box of `map` at (column col, row row) from `from`, in this thread's bulk group.
__device__ __forceinline__ void tma_store(const CUtensorMap* map, const void* from, int col, int row) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(map), "r"(col),
               "r"(row), "r"(smem_address(from))
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until at most N of this thread's bulk groups still read shared memory / are unfinished.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
// Rows of four 8 x 8 tiles of 16-bit pairs into shared memory (lane L addresses row L % 8 of tile
// L / 8; register i holds this lane's pair of tile i, in mma's accumulator layout).
__device__ __forceinline__ void stmatrix_x4(void* to, const uint32_t (&tiles)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_address(to)),
               "r"(tiles[0]), "r"(tiles[1]), "r"(tiles[2]), "r"(tiles[3])
               : "memory");
}
// cp.async's and plain stores' writes to shared memory, made visible to wgmma's and TMA's reads.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Pins accumulators' registers at this point of the program: without it the compiler may read them
// before the wgmma_wait that makes them final, and ptxas then serializes every wgmma (C7514).
template <int N>
__device__ __forceinline__ void fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    asm volatile("" : "+f"(d[i])::"memory");
  }
}

// The element type's name in wgmma's text.
#define HYPATIA_WGMMA_TYPED(T, ASM) \
  if constexpr (std::is_same_v<T, __half>) { \
    ASM("f16"); \
  } else { \
    ASM("bf16"); \
  }

// The accumulators as read-write operands of an asm: d[i .. i + 7], d[i .. i + 31], d[0 .. 127].
#define HYPATIA_ACC8(i) \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define HYPATIA_ACC32(i) HYPATIA_ACC8(i), HYPATIA_ACC8(i + 8), HYPATIA_ACC8(i + 16), HYPATIA_ACC8(i + 24)
#define HYPATIA_ACC128 HYPATIA_ACC32(0), HYPATIA_ACC32(32), HYPATIA_ACC32(64), HYPATIA_ACC32(96)
// The names of the first 32 in the asm's text.
#define HYPATIA_ACC_NAMES32 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"

// D (+)= A B with A 64 x 16 and B 16 x 256 in shared memory (kTransA / kTransB: 0 K-major, 1 M- or
// N-major); d[4 j .. 4 j + 3] hold rows lane / 4 and lane / 4 + 8 of the warp's 16, columns
// 8 j + 2 (lane % 4) and the next.
template <typename T, int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int accumulate) {
#define HYPATIA_WGMMA_M64N256K16(AB) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." AB "." AB " {" \
      HYPATIA_ACC_NAMES32 ", " \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" \
      "}, %128, %129, p, 1, 1, %131, %132;\n}\n" \
      : HYPATIA_ACC128 \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransA), "n"(kTransB))
  HYPATIA_WGMMA_TYPED(T, HYPATIA_WGMMA_M64N256K16)
#undef HYPATIA_WGMMA_M64N256K16
}
// The same for B 16 x 64, into d[0..31] in the same layout.
template <typename T, int kTransA, int kTransB, int N>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[N], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  static_assert(N >= 32, "m64n64 writes 32 accumulators a thread");
#define HYPATIA_WGMMA_M64N64K16(AB) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." AB "." AB " {" \
      HYPATIA_ACC_NAMES32 \
      "}, %32, %33, p, 1, 1, %35, %36;\n}\n" \
      : HYPATIA_ACC32(0) \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransA), "n"(kTransB))
  HYPATIA_WGMMA_TYPED(T, HYPATIA_WGMMA_M64N64K16)
#undef HYPATIA_WGMMA_M64N64K16
}
// The same for B 16 x 8, into d[0..3].
template <typename T, int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n8k16(float (&d)[4], uint64_t desc_a, uint64_t desc_b, int accumulate) {
#define HYPATIA_WGMMA_M64N8K16(AB) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n8k16.f32." AB "." AB " {%0, %1, %2, %3}, %4, %5, p, 1, 1, %7, %8;\n}\n" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransA), "n"(kTransB))
  HYPATIA_WGMMA_TYPED(T, HYPATIA_WGMMA_M64N8K16)
#undef HYPATIA_WGMMA_M64N8K16
}
#undef HYPATIA_WGMMA_TYPED
#undef HYPATIA_ACC128
#undef HYPATIA_ACC32
#undef HYPATIA_ACC8
#undef HYPATIA_ACC_NAMES32

}  // namespace hypatia::ops::hopper
#endif
