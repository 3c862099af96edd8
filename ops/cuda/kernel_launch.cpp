#include "ops/cuda/kernel_launch.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

namespace hypatia::ops {

void check_cuda(cudaError_t err, const char* family, const char* what) {
  TORCH_CHECK(
      err == cudaSuccess, std::string("hypatia: ") + family + ": " + what + " failed: " + cudaGetErrorString(err));
}

EnvSwitch env_switch(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || value[0] == '\0') {
    return EnvSwitch::kChosen;
  }
  return std::string(value) == "0" ? EnvSwitch::kOff : EnvSwitch::kOn;
}

bool dense(const at::Tensor& t) {
  return t.is_contiguous() && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

int blocks_per_sm(const void* kernel, int threads, int device, size_t smem_bytes) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, size_t>, int> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(kernel, device, smem_bytes);
  if (const auto it = cache.find(key); it != cache.end()) {
    return it->second;
  }
  int blocks = 0;
  cudaFuncAttributes attributes;
  const cudaError_t err = cudaFuncGetAttributes(&attributes, kernel);
  if (err == cudaErrorInvalidDeviceFunction || err == cudaErrorNoKernelImageForDevice) {
    (void)cudaGetLastError();  // not sticky: clear it so that the fallback path starts clean
  } else {
    check_cuda(err, "kernel launch", "cudaFuncGetAttributes");
    const cudaDeviceProp& prop = *at::cuda::getDeviceProperties(device);
    if (smem_bytes + attributes.sharedSizeBytes <= prop.sharedMemPerBlockOptin) {
      check_cuda(
          cudaFuncSetAttribute(
              kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
              static_cast<int>(prop.sharedMemPerBlockOptin - attributes.sharedSizeBytes)),
          "kernel launch", "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
      check_cuda(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem_bytes),
          "kernel launch", "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    }
  }
  cache.emplace(key, blocks);
  return blocks;
}

}  // namespace hypatia::ops
