// Host helpers of the sm_90a kernels (medium_mlp_kernel.cu, layer_backward_kernel.cu): whether the
// device runs their code, and the TMA maps they load and store by.
#pragma once

#include <ATen/core/Tensor.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

namespace hypatia::ops {

// Whether `device` runs sm_90a code: asked once per device (a synchronizing copy), never while the
// stream is being captured (false then, until asked on an uncaptured stream).
bool has_wgmma(int device, cudaStream_t stream);

// A TMA map of `t`, [rows, cols] row-major, half or bfloat16 (16-byte aligned, cols a multiple of
// 8): boxes of box_rows x 64 columns (128 bytes), 128-byte swizzled, as wgmma reads them; loads read
// zeros outside the tensor, stores drop what falls outside. False where the driver has no encoder.
bool swizzled_tensor_map(CUtensorMap& map, const at::Tensor& t, int box_rows);

}  // namespace hypatia::ops
