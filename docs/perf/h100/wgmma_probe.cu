// Hand-written warpgroup MMA (wgmma, sm_90a) on the H100: checks the shared-memory descriptor
// encoding of a K-major, unswizzled ("interleaved") bf16 operand against a CPU product, then times
// m64n256k16 on tiles resident in shared memory (no loads in the loop), one and two warpgroups an
// SM: the groundwork of a wgmma medium-MLP kernel
// (docs/perf/experiments.md#medium-mlp-forward-in-one-mmasync-kernel).
// Build and run on the GPU machine:
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o /tmp/wgmma_probe docs/perf/h100/wgmma_probe.cu && /tmp/wgmma_probe
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

// wgmma.mma_async m64n256k16, bf16 operands from shared memory (descriptors), float32 accumulators d[128].
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Generic-proxy stores to shared memory become visible to wgmma (the async proxy).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

constexpr int kK = 64;     // the tile's K: four k16 steps
constexpr int kN = 256;
constexpr int kCore = 128;  // bytes of a core matrix: 8 rows x 16 bytes

// Byte offset of element (r, k) of a K-major tile with kK columns, stored as 8 x 8 core matrices,
// the kK / 8 of a row group side by side: LBO (next core matrix along K) = 128 bytes, SBO (next
// row group) = kK / 8 * 128 bytes.
__host__ __device__ constexpr int tile_offset(int r, int k) {
  return (r / 8) * (kK / 8) * kCore + (k / 8) * kCore + (r % 8) * 16 + (k % 8) * 2;
}

// A shared-memory matrix descriptor without swizzling: start address, the two byte offsets.
__device__ uint64_t descriptor(const void* smem, uint32_t leading_bytes, uint32_t stride_bytes) {
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return uint64_t((address & 0x3FFFF) >> 4) | (uint64_t((leading_bytes & 0x3FFFF) >> 4) << 16) |
      (uint64_t((stride_bytes & 0x3FFFF) >> 4) << 32);
}

// A [64 x kK] times B [kN x kK]^T with one warpgroup; `swap` exchanges the two byte offsets in the
// descriptors (which of the two encodings the hardware reads is what this checks).
__global__ void product(const __nv_bfloat16* a, const __nv_bfloat16* b, float* d, bool swap) {
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* const sa = smem;
  unsigned char* const sb = smem + 64 * kK * 2;
  for (int i = threadIdx.x; i < 64 * kK; i += blockDim.x) {
    *reinterpret_cast<__nv_bfloat16*>(sa + tile_offset(i / kK, i % kK)) = a[i];
  }
  for (int i = threadIdx.x; i < kN * kK; i += blockDim.x) {
    *reinterpret_cast<__nv_bfloat16*>(sb + tile_offset(i / kK, i % kK)) = b[i];
  }
  fence_proxy_async();
  __syncthreads();
  const uint32_t lbo = swap ? kK / 8 * kCore : kCore, sbo = swap ? kCore : kK / 8 * kCore;
  float acc[128];
  for (float& v : acc) {
    v = 0.f;
  }
  wgmma_fence();
  for (int s = 0; s < kK / 16; ++s) {  // step s starts two core matrices further along K
    wgmma_m64n256k16(acc, descriptor(sa + s * 2 * kCore, lbo, sbo), descriptor(sb + s * 2 * kCore, lbo, sbo), s > 0);
  }
  wgmma_commit();
  wgmma_wait_all();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = warp * 16 + lane / 4;
  for (int j = 0; j < kN / 8; ++j) {
    const int col = j * 8 + (lane % 4) * 2;
    d[row * kN + col] = acc[4 * j];
    d[row * kN + col + 1] = acc[4 * j + 1];
    d[(row + 8) * kN + col] = acc[4 * j + 2];
    d[(row + 8) * kN + col + 1] = acc[4 * j + 3];
  }
}

// Each warpgroup: 64 rows of A against all of B, kK per round, `rounds` times, into the same
// accumulators (as a GEMM's k-loop does).
__global__ void throughput(int rounds, float* sink, uint32_t lbo, uint32_t sbo) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int groups = blockDim.x / 128, group = threadIdx.x / 128;
  unsigned char* const sa = smem + group * 64 * kK * 2;
  unsigned char* const sb = smem + groups * 64 * kK * 2;
  for (int i = threadIdx.x; i < (groups * 64 + kN) * kK * 2 / 4; i += blockDim.x) {
    reinterpret_cast<uint32_t*>(smem)[i] = 0x3c003c00u;
  }
  fence_proxy_async();
  __syncthreads();
  float acc[128];
  for (float& v : acc) {
    v = 0.f;
  }
  for (int r = 0; r < rounds; ++r) {
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < kK / 16; ++s) {
      wgmma_m64n256k16(acc, descriptor(sa + s * 2 * kCore, lbo, sbo), descriptor(sb + s * 2 * kCore, lbo, sbo), 1);
    }
    wgmma_commit();
    wgmma_wait_all();
  }
  float total = 0.f;
  for (const float v : acc) {
    total += v;
  }
  if (total == 1.2345f) {  // never true; keeps the loop alive
    sink[threadIdx.x] = total;
  }
}

int main() {
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  // Small integers over 8: every product and sum is exact in float32.
  std::vector<__nv_bfloat16> a(64 * kK), b(kN * kK);
  std::vector<float> af(a.size()), bf(b.size());
  uint32_t state = 12345u;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return float(int(state >> 28) - 8) / 8.f;
  };
  for (size_t i = 0; i < a.size(); ++i) {
    af[i] = next();
    a[i] = __float2bfloat16(af[i]);
  }
  for (size_t i = 0; i < b.size(); ++i) {
    bf[i] = next();
    b[i] = __float2bfloat16(bf[i]);
  }
  std::vector<float> want(64 * kN, 0.f);
  for (int m = 0; m < 64; ++m) {
    for (int n = 0; n < kN; ++n) {
      for (int k = 0; k < kK; ++k) {
        want[m * kN + n] += af[m * kK + k] * bf[n * kK + k];
      }
    }
  }
  __nv_bfloat16 *da = nullptr, *db = nullptr;
  float* dd = nullptr;
  cudaMalloc(&da, a.size() * 2);
  cudaMalloc(&db, b.size() * 2);
  cudaMalloc(&dd, want.size() * 4);
  cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
  const int product_smem = (64 + kN) * kK * 2;
  cudaFuncSetAttribute(product, cudaFuncAttributeMaxDynamicSharedMemorySize, product_smem);
  int exact = -1;
  for (const bool swap : {false, true}) {
    cudaMemset(dd, 0, want.size() * 4);
    product<<<1, 128, product_smem>>>(da, db, dd, swap);
    std::vector<float> got(want.size());
    const cudaError_t status = cudaMemcpy(got.data(), dd, got.size() * 4, cudaMemcpyDeviceToHost);
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::fmax(worst, std::fabs(double(got[i]) - want[i]));
    }
    std::printf("descriptor LBO=%d SBO=%d bytes: %s, largest |error| %g\n", swap ? kK / 8 * kCore : kCore,
                swap ? kCore : kK / 8 * kCore, cudaGetErrorString(status), worst);
    if (status == cudaSuccess && worst == 0 && exact < 0) {
      exact = swap ? 1 : 0;
    }
  }
  if (exact < 0) {
    std::printf("no encoding gave the exact product\n");
    return 1;
  }
  const uint32_t lbo = exact ? kK / 8 * kCore : kCore, sbo = exact ? kCore : kK / 8 * kCore;
  float* sink = nullptr;
  cudaMalloc(&sink, 1024 * sizeof(float));
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  const int rounds = 4096;
  for (const int groups : {1, 2}) {
    const int smem = (groups * 64 + kN) * kK * 2;
    cudaFuncSetAttribute(throughput, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    const int grid = prop.multiProcessorCount;
    throughput<<<grid, groups * 128, smem>>>(16, sink, lbo, sbo);
    float best = 1e30f;
    for (int rep = 0; rep < 5; ++rep) {
      cudaEventRecord(start);
      throughput<<<grid, groups * 128, smem>>>(rounds, sink, lbo, sbo);
      cudaEventRecord(stop);
      cudaEventSynchronize(stop);
      float ms = 0.f;
      cudaEventElapsedTime(&ms, start, stop);
      best = ms < best ? ms : best;
    }
    const double flops = double(grid) * groups * rounds * (kK / 16) * 64.0 * kN * 16 * 2;
    std::printf("%s, %d SMs, %d warpgroup(s) an SM, m64n256k16 from shared memory: %.0f TFLOP/s (best of 5)\n",
                prop.name, grid, groups, flops / (best * 1e-3) / 1e12);
  }
  const cudaError_t status = cudaGetLastError();
  std::printf("%s\n", cudaGetErrorString(status));
  return status == cudaSuccess ? 0 : 1;
}
