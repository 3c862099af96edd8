// PyTorch's cuBLASLt handle and workspace, looked up once per op call rather than per GEMM.
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <optional>

namespace hypatia::ops {

// The handle, workspace and workspace size PyTorch gives cuBLASLt on the current device and stream.
struct LtResources {
  cublasLtHandle_t handle;
  void* workspace;
  size_t workspace_size;
};

// While one lives, this thread's cuBLASLt calls (linear_act_cuda.cpp) take PyTorch's handle and
// workspace as looked up at the first of them. Each lookup costs microseconds of host time
// (at::cuda::getCurrentCUDABlasHandle sets the handle's stream, workspace and math mode; the
// workspace size is parsed from the environment), and a GEMM made two, so a backward of 8 GEMMs
// spent about a tenth of its host time there (docs/perf/experiments.md#cublaslt-lookups-once-per-op).
// Each CUDA op's entry point holds one, after its device guard: the device and the stream must not
// change while it lives.
class CublasLtScope {
 public:
  CublasLtScope();
  ~CublasLtScope();
  CublasLtScope(const CublasLtScope&) = delete;
  CublasLtScope& operator=(const CublasLtScope&) = delete;

  // The innermost scope's resources (looked up at its first call); without a scope, looked up now.
  static LtResources resources();

 private:
  CublasLtScope* outer_;
  std::optional<LtResources> resources_;
};

}  // namespace hypatia::ops
