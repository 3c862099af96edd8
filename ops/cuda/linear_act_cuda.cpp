// CUDA: act(x @ w.T + b) as one cuBLASLt matmul whose epilogue adds the bias and applies
// the ReLU (CUBLASLT_EPILOGUE_RELU_BIAS and friends), on the current stream with PyTorch's
// cuBLASLt handle and workspace. Per shape, the heuristic's top candidates and ATen's own
// addmm + relu are timed once and the fastest is cached (HYPATIA_CUBLASLT_AUTOTUNE=0: the
// heuristic's first acceptable pick, untimed). Where cuBLASLt offers no algorithm, ATen's addmm + relu.
// Some cuBLASLt kernels' ReLU epilogues turn NaN into 0 (bf16/fp16, cuBLAS 13, H100), where
// torch.relu keeps it: a ReLU candidate is used only after it kept a NaN on this very problem.
#include "ops/fused_ops.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/relu.h>
#include <c10/util/Exception.h>

#include <cublasLt.h>

#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>

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

// Everything that decides which algorithm is best: the problem, its numerics and its pointers'
// alignment (cuBLASLt kernels differ by alignment), and the device.
struct AlgoKey {
  int device;
  int64_t m, n, k;  // of out [m, n] = x [m, k] @ w.T
  int dtype, compute, epilogue;
  uint32_t align_a, align_b, align_c, align_bias;
  bool operator==(const AlgoKey& o) const {
    return std::tie(device, m, n, k, dtype, compute, epilogue, align_a, align_b, align_c, align_bias) ==
        std::tie(o.device, o.m, o.n, o.k, o.dtype, o.compute, o.epilogue, o.align_a, o.align_b, o.align_c, o.align_bias);
  }
};
struct AlgoKeyHash {
  size_t operator()(const AlgoKey& key) const {
    size_t h = 0;
    for (const int64_t v : {int64_t(key.device), key.m, key.n, key.k, int64_t(key.dtype), int64_t(key.compute),
                            int64_t(key.epilogue), int64_t(key.align_a), int64_t(key.align_b), int64_t(key.align_c),
                            int64_t(key.align_bias)}) {
      h = h * 1000003u ^ std::hash<int64_t>()(v);
    }
    return h;
  }
};

// The choice for one key: a cuBLASLt algorithm, or ATen's own path (cuBLAS GEMM then ReLU),
// which on some shapes beats every algorithm cuBLASLt's heuristic offers.
struct AlgoChoice {
  bool use_aten = false;
  cublasLtMatmulAlgo_t algo = {};
};

// Chosen once per key (timed on first use), then read by every call; thread-safe.
class AlgoCache {
 public:
  std::optional<AlgoChoice> find(const AlgoKey& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = choices_.find(key);
    return it == choices_.end() ? std::nullopt : std::optional<AlgoChoice>(it->second);
  }
  void insert(const AlgoKey& key, const AlgoChoice& choice) {
    std::lock_guard<std::mutex> lock(mutex_);
    choices_.emplace(key, choice);
  }

 private:
  std::mutex mutex_;
  std::unordered_map<AlgoKey, AlgoChoice, AlgoKeyHash> choices_;
};

AlgoCache& algo_cache() {
  static AlgoCache cache;
  return cache;
}

bool autotune_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("HYPATIA_CUBLASLT_AUTOTUNE");
    return env == nullptr || std::string(env) != "0";
  }();
  return enabled;
}

constexpr int kCandidates = 8;
constexpr int kTimings = 3;
constexpr int kMaxCallsPerTiming = 32;
// Each timing spans calls back to back for at least this long: single calls of a few
// microseconds are too noisy to rank (a 2.6x slower algorithm once won on one).
constexpr float kMinTimingMs = 0.1f;

// Milliseconds per call of `run` (the best of kTimings, after a warm-up call that also sets how
// many calls each timing spans); infinity if `run` fails.
template <typename Run>
float time_ms(cudaStream_t stream, const Run& run) {
  cudaEvent_t start, stop;
  C10_CUDA_CHECK(cudaEventCreate(&start));
  C10_CUDA_CHECK(cudaEventCreate(&stop));
  auto timed = [&](int calls) {
    C10_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < calls; ++i) {
      run();
    }
    C10_CUDA_CHECK(cudaEventRecord(stop, stream));
    C10_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    C10_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms / calls;
  };
  float best = std::numeric_limits<float>::infinity();
  if (run()) {
    const float first = timed(1);
    const int calls = std::clamp(static_cast<int>(kMinTimingMs / std::max(first, 1e-4f)), 1, kMaxCallsPerTiming);
    for (int i = 0; i < kTimings; ++i) {
      best = std::min(best, timed(calls));
    }
  }
  C10_CUDA_CHECK(cudaEventDestroy(start));
  C10_CUDA_CHECK(cudaEventDestroy(stop));
  return best;
}

// Runs the matmul through cuBLASLt with the algorithm chosen for its key; returns false when
// ATen's path should run instead (chosen as faster, or cuBLASLt has no algorithm for it that
// keeps NaN through the ReLU, or none is chosen yet and the stream is being captured).
bool linear_act_lt(const at::Tensor& x, const at::Tensor& w, const OptionalTensor& b, bool relu, at::Tensor& out) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const at::ScalarType dtype = x.scalar_type();
  const cudaDataType_t type = cuda_dtype(dtype);
  const bool is_double = dtype == at::kDouble;
  const cublasComputeType_t compute = is_double ? CUBLAS_COMPUTE_64F
      : (dtype == at::kFloat && at::globalContext().allowTF32CuBLAS()) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                        : CUBLAS_COMPUTE_32F;
  const cudaDataType_t scale_type = is_double ? CUDA_R_64F : CUDA_R_32F;

  // Row-major out[M,N] = x[M,K] @ w[N,K].T is, in cuBLAS's column-major terms, out^T[N,M] =
  // op(A) B with A = w read as a K x N matrix and transposed, and B = x read as K x M.
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

  const AlgoKey key{x.get_device(), M, N, K, int(dtype), int(compute), int(epilogue),
                    alignment(w.data_ptr()), alignment(x.data_ptr()), alignment(out.data_ptr()),
                    has_bias ? alignment(bias_ptr) : 0};
  cublasLtHandle_t handle = at::cuda::getCurrentCUDABlasLtHandle();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  void* workspace = at::cuda::getCUDABlasLtWorkspace();
  const size_t workspace_size = at::cuda::getCUDABlasLtWorkspaceSize();
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const double alpha_d = 1.0, beta_d = 0.0;
  const void* alpha = is_double ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = is_double ? static_cast<const void*>(&beta_d) : &beta_f;
  auto run_lt_on = [&](const cublasLtMatmulAlgo_t& algo, const at::Tensor& x_in, at::Tensor& out_to) {
    return cublasLtMatmul(handle, desc.get(), alpha, w.data_ptr(), a_layout.get(), x_in.data_ptr(), b_layout.get(),
                          beta, out_to.data_ptr(), c_layout.get(), out_to.data_ptr(), c_layout.get(), &algo, workspace,
                          workspace_size, stream);
  };
  auto run_lt = [&](const cublasLtMatmulAlgo_t& algo) { return run_lt_on(algo, x, out); };

  if (const std::optional<AlgoChoice> cached = algo_cache().find(key)) {
    if (cached->use_aten) {
      return false;
    }
    HYPATIA_CUBLAS_CHECK(run_lt(cached->algo));
    return true;
  }

  cublasLtMatmulPreference_t raw_pref = nullptr;
  HYPATIA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw_pref));
  Preference pref(raw_pref);
  HYPATIA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_size, sizeof(workspace_size)));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c}};
  for (const auto& [attribute, value] : alignments) {
    HYPATIA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), attribute, &value, sizeof(value)));
  }
  cublasLtMatmulHeuristicResult_t heuristics[kCandidates] = {};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle, desc.get(), a_layout.get(), b_layout.get(), c_layout.get(), c_layout.get(), pref.get(),
      kCandidates, heuristics, &found);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
    algo_cache().insert(key, AlgoChoice{/*use_aten=*/true});
    return false;
  }

  // Probing and timing need host syncs, which a stream being captured into a CUDA graph forbids:
  // there, ATen's path (uncached); the choice is made on a later, uncaptured call.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    return false;
  }

  // The NaN probe: this problem with a NaN in row 0 of x, whose output row must come out all NaN.
  at::Tensor x_nan, out_nan;
  if (relu) {
    x_nan = x.clone();
    x_nan.select(0, 0).select(0, 0).fill_(std::numeric_limits<double>::quiet_NaN());
    out_nan = at::empty_like(out);
  }
  auto keeps_nan = [&](const cublasLtMatmulAlgo_t& algo) {
    return !relu || (run_lt_on(algo, x_nan, out_nan) == CUBLAS_STATUS_SUCCESS && out_nan[0].isnan().all().item<bool>());
  };

  AlgoChoice best{/*use_aten=*/true};
  float best_ms = !autotune_enabled() ? std::numeric_limits<float>::infinity() : time_ms(stream, [&] {
    linear_act_aten(x, w, b, relu, out);
    return true;
  });
  for (int i = 0; i < found; ++i) {
    if (!keeps_nan(heuristics[i].algo)) {
      continue;
    }
    if (!autotune_enabled()) {  // the heuristic's first acceptable pick
      best = AlgoChoice{/*use_aten=*/false, heuristics[i].algo};
      break;
    }
    const float ms = time_ms(stream, [&] { return run_lt(heuristics[i].algo) == CUBLAS_STATUS_SUCCESS; });
    if (ms < best_ms) {
      best_ms = ms;
      best = AlgoChoice{/*use_aten=*/false, heuristics[i].algo};
    }
  }
  algo_cache().insert(key, best);
  // The last timed run may have been another candidate: write the output with the winner.
  if (best.use_aten) {
    return false;
  }
  HYPATIA_CUBLAS_CHECK(run_lt(best.algo));
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
