// Host cost of one call's cuBLASLt descriptors (a matmul descriptor with four attributes and three
// layouts): created and destroyed, as linear_act_cuda.cpp does, against initialized in place.
// Needs no GPU. g++ -O2 lt_descriptors.cpp -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcublasLt
#include <cublasLt.h>
#include <chrono>
#include <cstdio>
int main() {
  const int n = 200000;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    cublasLtMatmulDesc_t d; cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasOperation_t t = CUBLAS_OP_T; cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_RELU_BIAS; void* bias = (void*)256;
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t));
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &t, sizeof(t));
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e));
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    cublasLtMatrixLayoutCreate(&a, CUDA_R_16F, 784, 2048, 784);
    cublasLtMatrixLayoutCreate(&b, CUDA_R_16F, 784, 1024, 784);
    cublasLtMatrixLayoutCreate(&c, CUDA_R_16F, 2048, 1024, 2048);
    cublasLtMatrixLayoutDestroy(a); cublasLtMatrixLayoutDestroy(b); cublasLtMatrixLayoutDestroy(c);
    cublasLtMatmulDescDestroy(d);
  }
  auto t1 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    cublasLtMatmulDescOpaque_t d; cublasLtMatrixLayoutOpaque_t a, b, c;
    cublasLtMatmulDescInit(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasOperation_t t = CUBLAS_OP_T; cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_RELU_BIAS; void* bias = (void*)256;
    cublasLtMatmulDescSetAttribute(&d, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t));
    cublasLtMatmulDescSetAttribute(&d, CUBLASLT_MATMUL_DESC_TRANSB, &t, sizeof(t));
    cublasLtMatmulDescSetAttribute(&d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e));
    cublasLtMatmulDescSetAttribute(&d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    cublasLtMatrixLayoutInit(&a, CUDA_R_16F, 784, 2048, 784);
    cublasLtMatrixLayoutInit(&b, CUDA_R_16F, 784, 1024, 784);
    cublasLtMatrixLayoutInit(&c, CUDA_R_16F, 2048, 1024, 2048);
    asm volatile("" :: "r"(&d), "r"(&a), "r"(&b), "r"(&c) : "memory");
  }
  auto t2 = std::chrono::steady_clock::now();
  printf("create/destroy %.3f us, init %.3f us\n",
    std::chrono::duration<double, std::micro>(t1 - t0).count() / n, std::chrono::duration<double, std::micro>(t2 - t1).count() / n);
}
