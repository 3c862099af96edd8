// The H100's throughput for mma.sync.m16n8k16 (bf16 in, float32 accumulators), the instruction the
// medium-MLP forward of tag experiment/medium-mlp-forward is built on: every warp issues
// back-to-back MMAs into kChains independent accumulators, with 1, 2 and 4 warps per scheduler.
// No memory is read in the loop, so this is the most any mma.sync kernel can do. Build and run on
// the GPU machine:
//   nvcc -O3 -arch=sm_90a -o /tmp/mma_sync_peak docs/perf/h100/mma_sync_peak.cu && /tmp/mma_sync_peak
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

constexpr int kChains = 8;
constexpr int kIterations = 1 << 14;

__global__ void mma_loop(float* sink, uint32_t seed) {
  uint32_t a[4] = {seed, seed * 3u, seed * 5u, seed * 7u}, b[2] = {seed * 11u, seed * 13u};
  float acc[kChains][4] = {};
  for (int i = 0; i < kIterations; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(acc[c][0]), "+f"(acc[c][1]), "+f"(acc[c][2]), "+f"(acc[c][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
  }
  float total = 0.f;
  for (int c = 0; c < kChains; ++c) {
    total += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  }
  if (total == 1.2345f) {  // never true on these inputs; keeps the loop alive
    sink[threadIdx.x] = total;
  }
}

int main() {
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  float* sink = nullptr;
  cudaMalloc(&sink, 1024 * sizeof(float));
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (const int warps_per_scheduler : {1, 2, 4}) {
    const int threads = 4 * warps_per_scheduler * 32;  // one CTA per SM, 4 schedulers an SM
    const int grid = prop.multiProcessorCount;
    mma_loop<<<grid, threads>>>(sink, 0x3c003c00u);  // warm-up
    float best = 1e30f;
    for (int rep = 0; rep < 5; ++rep) {
      cudaEventRecord(start);
      mma_loop<<<grid, threads>>>(sink, 0x3c003c00u);
      cudaEventRecord(stop);
      cudaEventSynchronize(stop);
      float ms = 0.f;
      cudaEventElapsedTime(&ms, start, stop);
      best = ms < best ? ms : best;
    }
    const double flops = double(grid) * (threads / 32) * kIterations * kChains * 16.0 * 8 * 16 * 2;
    std::printf("%s, %d SMs, %d warps per scheduler: %.0f TFLOP/s (best of 5, %.3f ms)\n", prop.name,
                grid, warps_per_scheduler, flops / (best * 1e-3) / 1e12, best);
  }
  const cudaError_t status = cudaGetLastError();
  std::printf("%s\n", cudaGetErrorString(status));
  return status == cudaSuccess ? 0 : 1;
}
