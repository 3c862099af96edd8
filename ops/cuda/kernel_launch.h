// Host helpers of the library's own CUDA kernels (narrow_mlp_kernel.cu, skinny_linear_kernel.cu).
#pragma once

#include <ATen/core/Tensor.h>

#include <cuda_runtime_api.h>

#include <cstddef>

namespace hypatia::ops {

// TORCH_CHECKs a CUDA runtime result, naming the kernel family and the call.
void check_cuda(cudaError_t err, const char* family, const char* what);

// Contiguous, with its data 16-byte aligned: what the kernels' 16-byte copies need.
bool dense(const at::Tensor& t);

// CTAs of `kernel` (`threads` each, `smem_bytes` of dynamic shared memory) that fit on one SM of
// `device` (0: none, or no kernel image for it). Asked of the runtime once per kernel, device and
// size, so that launches cost no attribute or occupancy queries; also lifts the kernel's dynamic
// shared-memory limit to the device's opt-in maximum.
int blocks_per_sm(const void* kernel, int threads, int device, size_t smem_bytes);

// A switch read from the environment variable `name`: unset or empty, the library's own choice
// (kChosen); "0", off (kOff); any other value, on (kOn).
enum class EnvSwitch { kChosen, kOff, kOn };
EnvSwitch env_switch(const char* name);

}  // namespace hypatia::ops
