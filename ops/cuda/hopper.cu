// Host helpers of the sm_90a kernels (ops/cuda/hopper.h). Built with sm_90a code among the others,
// so that has_wgmma_kernel tells which code the device runs.
#include "ops/cuda/hopper.h"
#include "ops/cuda/kernel_launch.h"

#include <cudaTypedefs.h>

#include <mutex>
#include <vector>

namespace hypatia::ops {
namespace {

__global__ void has_wgmma_kernel(int* result) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *result = 1;
#else
  *result = 0;
#endif
}

// cuTensorMapEncodeTiled from the driver, found once (the library does not link libcuda).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      fn = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

}  // namespace

bool has_wgmma(int device, cudaStream_t stream) {
  static std::mutex mutex;
  static std::vector<int> known;  // -1 unknown, 0 no, 1 yes
  std::lock_guard<std::mutex> lock(mutex);
  if (known.size() <= size_t(device)) {
    known.resize(device + 1, -1);
  }
  if (known[device] < 0) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    check_cuda(cudaStreamIsCapturing(stream, &capture), "sm_90a kernels", "cudaStreamIsCapturing");
    if (capture != cudaStreamCaptureStatusNone) {
      return false;
    }
    int* flag = nullptr;
    int value = 0;
    check_cuda(cudaMalloc(&flag, sizeof(int)), "sm_90a kernels", "cudaMalloc");
    has_wgmma_kernel<<<1, 1, 0, stream>>>(flag);
    const cudaError_t launched = cudaGetLastError();
    const cudaError_t copied = cudaMemcpyAsync(&value, flag, sizeof(int), cudaMemcpyDeviceToHost, stream);
    const cudaError_t synced = cudaStreamSynchronize(stream);
    cudaFree(flag);
    known[device] = launched == cudaSuccess && copied == cudaSuccess && synced == cudaSuccess && value == 1;
  }
  return known[device] == 1;
}

bool swizzled_tensor_map(CUtensorMap& map, const at::Tensor& t, int box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) {
    return false;
  }
  const cuuint64_t dims[2] = {cuuint64_t(t.size(1)), cuuint64_t(t.size(0))};
  const cuuint64_t strides[1] = {cuuint64_t(t.size(1)) * 2};
  const cuuint32_t box[2] = {64, cuuint32_t(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUtensorMapDataType type =
      t.scalar_type() == at::kHalf ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  return encode(&map, type, 2, t.data_ptr(), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace hypatia::ops
