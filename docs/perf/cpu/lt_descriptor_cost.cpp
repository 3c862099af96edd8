// cuBLASLt host cost of one plan: a matmul descriptor with its attributes and three layouts, created
// and destroyed 100,000 times (docs/perf/experiments.md, "Medium MLP training: what the host costs").
// No GPU needed. Build and run (paths of the .venv torch wheel's cuBLASLt and the CUDA toolkit headers):
//   L=.venv/lib/python3.11/site-packages/nvidia/cu13/lib
//   g++ -O2 docs/perf/cpu/lt_descriptor_cost.cpp -I/usr/local/cuda/include -L$L -l:libcublasLt.so.13 -Wl,-rpath,$L -o /tmp/lt && /tmp/lt
#include <cublasLt.h>
#include <chrono>
#include <cstdio>
int main() {
  const int iters = 100000;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    cublasLtMatmulDesc_t d; cublasLtMatrixLayout_t a, b, c;
    if (cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F) != 0) { puts("fail"); return 1; }
    cublasOperation_t t = CUBLAS_OP_T; cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_RELU_BIAS; void* p = &t;
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &t, sizeof t);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof p);
    cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, 512, 65536, 512);
    cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, 512, 256, 512);
    cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, 256, 65536, 256);
    cublasLtMatrixLayoutDestroy(a); cublasLtMatrixLayoutDestroy(b); cublasLtMatrixLayoutDestroy(c);
    cublasLtMatmulDescDestroy(d);
  }
  auto t1 = std::chrono::steady_clock::now();
  printf("%.3f us per plan\n", std::chrono::duration<double, std::micro>(t1 - t0).count() / iters);
}
