// How fast the H100's SMs read data that sits in L2: every CTA reads a buffer small enough to stay
// there (16-byte loads, ld.global.cg so L1 keeps nothing), over and over. This bounds a kernel
// that streams the same weights from L2 for every row block (tag experiment/medium-mlp-forward).
// Build and run on the GPU machine:
//   nvcc -O3 -arch=sm_90a -o /tmp/l2_bandwidth docs/perf/h100/l2_bandwidth.cu && /tmp/l2_bandwidth
#include <cuda_runtime.h>

#include <cstdio>

__global__ void read_loop(const uint4* data, size_t count, int passes, unsigned* sink) {
  unsigned x = 0;
  for (int pass = 0; pass < passes; ++pass) {
    // Each CTA starts at a different place, so that all of them do not read the same lines at once.
    for (size_t i = (blockIdx.x * 977u + threadIdx.x) % count, n = threadIdx.x; n < count; n += blockDim.x) {
      const uint4 v = __ldcg(data + i);
      x ^= v.x ^ v.y ^ v.z ^ v.w;
      i += blockDim.x;
      if (i >= count) {
        i -= count;
      }
    }
  }
  if (x == 0x12345678u) {
    sink[0] = x;
  }
}

int main() {
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  unsigned* sink = nullptr;
  cudaMalloc(&sink, sizeof(unsigned));
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (const size_t bytes : {size_t(256) << 10, size_t(1) << 20, size_t(8) << 20}) {
    uint4* data = nullptr;
    cudaMalloc(&data, bytes);
    cudaMemset(data, 1, bytes);
    const size_t count = bytes / sizeof(uint4);
    const int passes = int((size_t(64) << 20) / bytes);  // 64 MiB a CTA
    for (const int ctas_per_sm : {1, 2}) {
      const int grid = prop.multiProcessorCount * ctas_per_sm, threads = 512;
      read_loop<<<grid, threads>>>(data, count, 1, sink);
      float best = 1e30f;
      for (int rep = 0; rep < 5; ++rep) {
        cudaEventRecord(start);
        read_loop<<<grid, threads>>>(data, count, passes, sink);
        cudaEventRecord(stop);
        cudaEventSynchronize(stop);
        float ms = 0.f;
        cudaEventElapsedTime(&ms, start, stop);
        best = ms < best ? ms : best;
      }
      std::printf("%s: %zu KiB buffer, %d CTAs of %d threads: %.2f TB/s read (best of 5)\n", prop.name, bytes >> 10,
                  grid, threads, double(grid) * passes * bytes / (best * 1e-3) / 1e12);
    }
    cudaFree(data);
  }
  const cudaError_t status = cudaGetLastError();
  std::printf("%s\n", cudaGetErrorString(status));
  return status == cudaSuccess ? 0 : 1;
}
