// CUDA: act(x @ w.T + b) as one cuBLASLt matmul whose epilogue adds the bias and applies
// the ReLU (CUBLASLT_EPILOGUE_RELU_BIAS and friends), on the current stream with PyTorch's
// cuBLASLt handle and workspace. Where cuBLASLt offers no algorithm, ATen's addmm + relu.
#include "ops/fused_ops.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/relu.h>
#include <c10/util/Exception.h>

#include <cublasLt.h>

#include <cstdint>
#include <memory>

namespace hypatia::ops {
namespace {

#define HYPATIA_CUBLAS_CHECK(expr)                                                                 \
  do {                                                                                             \
    const cublasStatus_t status_ = (expr);                                                        \
    TORCH_CHECK(status_ == CUBLAS_STATUS_SUCCESS,                                                  \
                std::string("hypatia: " #expr " failed: ") + cublasGetStatusString(status_));      \
  } while (0)

// Owners for the cuBLASLt descriptors, so that an error thrown midway leaks nothing.
struct MatmulDescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
};
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const { cublasLtMatrixLayoutDestroy(l); }
};
struct PreferenceDeleter {
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, MatmulDescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PreferenceDeleter>;

cudaDataType_t cuda_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return CUDA_R_32F;
    case at::kDouble: return CUDA_R_64F;
    case at::kHalf: return CUDA_R_16F;
    case at::kBFloat16: return CUDA_R_16BF;
    default: TORCH_CHECK(false, std::string("hypatia: no cuBLASLt type for ") + c10::toString(t));
  }
}

// Column-major rows x cols matrix with leading dimension ld.
Layout make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t layout = nullptr;
  HYPATIA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, rows, cols, ld));
  return Layout(layout);
}

// Largest power of two (up to 256) dividing the address: cuBLASLt's heuristics assume
// 256-byte alignment unless told otherwise.
uint32_t alignment(const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  uint32_t a = 256;
  while (a > 1 && address % a != 0) {
    a /= 2;
  }
  return a;
}

cublasLtEpilogue_t epilogue_for(bool bias, bool relu) {
  if (relu) {
    return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
  }
  return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

void linear_act_aten(const at::Tensor& x, const at::Tensor& w, const OptionalTensor& b, bool relu, at::Tensor& out) {
  if (b.has_value() && b->defined()) {
    at::addmm_out(out, *b, x, w.t());
  } else {
    at::mm_out(out, x, w.t());
  }
  if (relu) {
    at::relu_(out);
  }
}

// Runs the matmul through cuBLASLt; returns false when cuBLASLt has no algorithm for it.
bool linear_act_lt(const at::Tensor& x, const at::Tensor& w, const OptionalTensor& b, bool relu, at::Tensor& out) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const at::ScalarType dtype = x.scalar_type();
  const cudaDataType_t type = cuda_dtype(dtype);
  const bool is_double = dtype == at::kDouble;
  const cublasComputeType_t compute = is_double ? CUBLAS_COMPUTE_64F
      : (dtype == at::kFloat && at::globalContext().allowTF32CuBLAS()) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                        : CUBLAS_COMPUTE_32F;
  const cudaDataType_t scale_type = is_double ? CUDA_R_64F : CUDA_R_32F;

  // Row-major out[M,N] = x[M,K] @ w[N,K].T is column-major out^T[N,M] = w^T... i.e. op(A)=W (A is
  // w read as column-major K x N, transposed), B = x read as column-major K x M.
  cublasLtMatmulDesc_t raw_desc = nullptr;
  HYPATIA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&raw_desc, compute, scale_type));
  MatmulDesc desc(raw_desc);
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  HYPATIA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  HYPATIA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  const bool has_bias = b.has_value() && b->defined();
  const cublasLtEpilogue_t epilogue = epilogue_for(has_bias, relu);
  HYPATIA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  const void* bias_ptr = has_bias ? b->data_ptr() : nullptr;
  if (has_bias) {
    HYPATIA_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
  }

  const Layout a_layout = make_layout(type, K, N, K);
  const Layout b_layout = make_layout(type, K, M, K);
  const Layout c_layout = make_layout(type, N, M, N);

  cublasLtMatmulPreference_t raw_pref = nullptr;
  HYPATIA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw_pref));
  Preference pref(raw_pref);
  const size_t workspace_size = at::cuda::getCUDABlasLtWorkspaceSize();
  HYPATIA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_size, sizeof(workspace_size)));
  const uint32_t align_a = alignment(w.data_ptr()), align_b = alignment(x.data_ptr()),
                 align_c = alignment(out.data_ptr());
  HYPATIA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
  HYPATIA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
  HYPATIA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
  HYPATIA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c)));

  cublasLtHandle_t handle = at::cuda::getCurrentCUDABlasLtHandle();
  cublasLtMatmulHeuristicResult_t heuristic = {};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle, desc.get(), a_layout.get(), b_layout.get(), c_layout.get(), c_layout.get(), pref.get(), 1, &heuristic,
      &found);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
    return false;
  }

  const float alpha_f = 1.0f, beta_f = 0.0f;
  const double alpha_d = 1.0, beta_d = 0.0;
  const void* alpha = is_double ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = is_double ? static_cast<const void*>(&beta_d) : &beta_f;
  HYPATIA_CUBLAS_CHECK(cublasLtMatmul(
      handle, desc.get(), alpha, w.data_ptr(), a_layout.get(), x.data_ptr(), b_layout.get(), beta, out.data_ptr(),
      c_layout.get(), out.data_ptr(), c_layout.get(), &heuristic.algo, at::cuda::getCUDABlasLtWorkspace(),
      workspace_size, at::cuda::getCurrentCUDAStream()));
  return true;
}

}  // namespace

void linear_act_cuda_out(
    const at::Tensor& x, const at::Tensor& w, const OptionalTensor& b, bool relu, at::Tensor& out) {
  if (out.numel() == 0) {
    return;
  }
  // cuBLASLt needs dense operands and at least one term in each dot product.
  if (x.size(1) > 0 && linear_act_lt(x.contiguous(), w.contiguous(), b ? std::optional(b->contiguous()) : b, relu, out)) {
    return;
  }
  linear_act_aten(x, w, b, relu, out);
}

}  // namespace hypatia::ops
