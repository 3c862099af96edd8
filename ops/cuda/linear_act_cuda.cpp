// CUDA: the cuBLASLt matmuls with epilogues. Forward: act(x @ w.T + b) as one matmul whose
// epilogue adds the bias and applies the ReLU (CUBLASLT_EPILOGUE_RELU_BIAS and friends). Backward:
// the input gradient grad @ w (in an MLP, through the ReLU of the layer below by the DRELU_BGRAD
// epilogue, which also sums that layer's bias gradient), and the weight gradient grad.T @ h whose
// BGRADB epilogue also sums the bias gradient. On the current stream with PyTorch's cuBLASLt handle
// and workspace. Per problem, the heuristic's top candidates and the unfused way to the same result
// ("aten": ATen's GEMM; in backward, then the library's one-pass ReLU backward and bias sum,
// ops/cuda/relu_backward_sums_kernel.cu) are timed once and the fastest is cached
// (HYPATIA_CUBLASLT_AUTOTUNE=0: the heuristic's first acceptable pick, untimed;
// HYPATIA_CUBLASLT_LOG=1: each choice and its timings on stderr). Where cuBLASLt offers no
// algorithm, the unfused way. The forward of few rows (M <= 256) also times the library's own kernel,
// ops/cuda/skinny_linear_kernel.cu (HYPATIA_SKINNY_LINEAR=0: never; =1: wherever it applies,
// untimed). Split-K partial sums stay in float32 (cuBLASLt may otherwise add them up in the
// half-precision output type, which eager's default allows): one rounding, at the end.
// Some cuBLASLt kernels' ReLU epilogues turn NaN into 0 (bf16/fp16, cuBLAS 13, H100), where
// torch.relu keeps it: a ReLU candidate is used only after it kept a NaN on this very problem;
// likewise a DRELU candidate only after it kept a NaN gradient where the ReLU passed and zeroed it
// where it did not, as eager's threshold_backward does.
#include "ops/fused_ops.h"

#include "ops/checks.h"
#include "ops/cuda/cublaslt_scope.h"
#include "ops/cuda/kernel_launch.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>

#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hypatia::ops {

namespace {
thread_local CublasLtScope* innermost_lt_scope = nullptr;

LtResources look_up_lt_resources() {
  return {at::cuda::getCurrentCUDABlasLtHandle(), at::cuda::getCUDABlasLtWorkspace(),
          at::cuda::getCUDABlasLtWorkspaceSize()};
}
}  // namespace

CublasLtScope::CublasLtScope() : outer_(innermost_lt_scope) {
  innermost_lt_scope = this;
}

CublasLtScope::~CublasLtScope() {
  innermost_lt_scope = outer_;
}

LtResources CublasLtScope::resources() {
  CublasLtScope* scope = innermost_lt_scope;
  if (scope == nullptr) {
    return look_up_lt_resources();
  }
  if (!scope->resources_) {
    scope->resources_ = look_up_lt_resources();
  }
  return *scope->resources_;
}

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

const char* epilogue_name(cublasLtEpilogue_t epilogue) {
  switch (epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "none";
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_RELU: return "RELU";
    case CUBLASLT_EPILOGUE_RELU_BIAS: return "RELU_BIAS";
    case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
    case CUBLASLT_EPILOGUE_DRELU: return "DRELU";
    case CUBLASLT_EPILOGUE_DRELU_BGRAD: return "DRELU_BGRAD";
    default: return "other";
  }
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

// One matmul in cuBLAS's column-major terms: D [m x n] = op(A) op(B), the dot products k long,
// with an epilogue. `bias` is read by the BIAS epilogues and written by the BGRAD ones; `relu_bits`
// (m bits per column of D, columns relu_bits_ld bits apart: the layout of ops/checks.h) is read by DRELU.
struct LtMatmul {
  cublasOperation_t trans_a, trans_b;
  int64_t m, n, k;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  void* d;
  int64_t ldd;
  cublasLtEpilogue_t epilogue;
  void* bias = nullptr;
  const void* relu_bits = nullptr;
  int64_t relu_bits_ld = 0;
};

// Everything that decides which algorithm is best: the problem, its numerics and its pointers'
// alignment (cuBLASLt kernels differ by alignment), and the device.
using AlgoKey = std::array<int64_t, 17>;
struct AlgoKeyHash {
  size_t operator()(const AlgoKey& key) const {
    size_t h = 0;
    for (const int64_t v : key) {
      h = h * 1000003u ^ std::hash<int64_t>()(v);
    }
    return h;
  }
};

// The choice for one key: a cuBLASLt algorithm, ATen's own path (which on some shapes beats every
// algorithm cuBLASLt's heuristic offers), or the library's own kernel for the problem.
struct AlgoChoice {
  enum class Way { cublaslt, aten, own_kernel } way = Way::cublaslt;
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

// HYPATIA_CUBLASLT_AUTOTUNE=0: the heuristic's first acceptable pick, untimed.
bool autotune_enabled() {
  static const bool enabled = env_switch("HYPATIA_CUBLASLT_AUTOTUNE") != EnvSwitch::kOff;
  return enabled;
}

// The library's own kernels' switches: unset, the kernel is timed with the rest (kChosen); "0",
// never used; "1", used wherever it applies, untimed (how the tests reach it on every problem it
// covers). HYPATIA_SKINNY_LINEAR: the forward of few rows (ops/cuda/skinny_linear_kernel.cu);
// HYPATIA_FUSED_INPUT_GRAD: a hidden layer's input gradient with its ReLU backward in the GEMM
// (ops/cuda/relu_input_grad_kernel.cu).
EnvSwitch skinny_linear_mode() {
  static const EnvSwitch mode = env_switch("HYPATIA_SKINNY_LINEAR");
  return mode;
}
EnvSwitch fused_input_grad_mode() {
  static const EnvSwitch mode = env_switch("HYPATIA_FUSED_INPUT_GRAD");
  return mode;
}

bool log_enabled() {
  static const bool enabled = env_switch("HYPATIA_CUBLASLT_LOG") == EnvSwitch::kOn;
  return enabled;
}

// HYPATIA_CUBLASLT_SEARCH: unset, the heuristic's picks' variants (LtPlan::variants) join the search
// where a call is long (kWideSearchMs); "heuristic", never; "wide", on every problem; "variants",
// only they contend (then the unfused way, if none passes the probes): how the tests run them.
enum class Search { by_length, heuristic, wide, variants };
Search search_mode() {
  static const Search mode = [] {
    const char* env = std::getenv("HYPATIA_CUBLASLT_SEARCH");
    const std::string value = env == nullptr ? "" : env;
    if (value.empty()) {
      return Search::by_length;
    }
    TORCH_CHECK(value == "heuristic" || value == "wide" || value == "variants",
                "hypatia: HYPATIA_CUBLASLT_SEARCH must be unset, \"heuristic\", \"wide\" or \"variants\", got \"",
                value, "\"");
    return value == "heuristic" ? Search::heuristic : value == "wide" ? Search::wide : Search::variants;
  }();
  return mode;
}

constexpr int kCandidates = 8;
constexpr int kTimings = 3;
constexpr int kMaxCallsPerTiming = 32;
// Each timing spans calls back to back for at least this long: single calls of a few
// microseconds are too noisy to rank (a 2.6x slower algorithm once won on one).
constexpr float kMinTimingMs = 0.1f;
// Where the fastest first timing is this long, the kernel rather than the host sets a call's time:
// there the picks' variants join the search, and every contender is timed again in steady state,
// as a busy GPU runs it. After idle the GPU clocks higher than under sustained load, and kernels
// rank differently: the heuristic's 8th pick, fastest after idle at 8192x4096->4096 fp16, ran 3%
// slower than its 1st in steady state (docs/perf/experiments.md#cublaslt-variant-search).
constexpr float kWideSearchMs = 0.05f;
// Steady state: the fastest contender runs this long first; then every contender one burst of at
// least kFirstPassMs; then the kFinalists fastest kFinalRounds bursts each, interleaved, of at
// least kFinalMs, whose medians decide.
constexpr float kWarmUpMs = 50.0f;
constexpr float kFirstPassMs = 0.5f;
constexpr size_t kFinalists = 8;
constexpr int kFinalRounds = 5;
constexpr float kFinalMs = 1.0f;

// CUDA-event timings on one stream.
class Timer {
 public:
  explicit Timer(cudaStream_t stream) : stream_(stream) {
    C10_CUDA_CHECK(cudaEventCreate(&start_));
    C10_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~Timer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // Milliseconds per call over `calls` calls of `run` back to back; infinity if one fails.
  template <typename Run>
  float burst(const Run& run, int calls) {
    C10_CUDA_CHECK(cudaEventRecord(start_, stream_));
    for (int i = 0; i < calls; ++i) {
      if (!run()) {
        return std::numeric_limits<float>::infinity();
      }
    }
    C10_CUDA_CHECK(cudaEventRecord(stop_, stream_));
    C10_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    C10_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms / calls;
  }

  // The best of kTimings bursts, after a warm-up call; the first burst's length sets how many calls
  // each spans. Infinity if `run` fails.
  template <typename Run>
  float best_of(const Run& run) {
    if (!run()) {
      return std::numeric_limits<float>::infinity();
    }
    const float first = burst(run, 1);
    const int calls = std::clamp(static_cast<int>(kMinTimingMs / std::max(first, 1e-4f)), 1, kMaxCallsPerTiming);
    float best = std::numeric_limits<float>::infinity();
    for (int i = 0; i < kTimings; ++i) {
      best = std::min(best, burst(run, calls));
    }
    return best;
  }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_, stop_;
};

// Calls of `per_call_ms` each that span at least `ms`.
int calls_spanning(float ms, float per_call_ms) {
  return static_cast<int>(std::clamp(std::ceil(ms / std::max(per_call_ms, 1e-4f)), 1.0f, 1e6f));
}

cublasComputeType_t compute_type(at::ScalarType dtype) {
  return dtype == at::kDouble ? CUBLAS_COMPUTE_64F
      : (dtype == at::kFloat && at::globalContext().allowTF32CuBLAS()) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                       : CUBLAS_COMPUTE_32F;
}

// The cluster shapes a variant may take: powers of two up to 4 x 4 CTAs, and cuBLASLt's own choice.
// Every variant in the finals of docs/perf/experiments.md#cublaslt-variant-search had one of these; the other
// 42 shapes (odd sizes, 8 and 16 CTAs long) would have it check five times as many configurations.
constexpr uint16_t kClusterShapes[] = {
    CUBLASLT_CLUSTER_SHAPE_AUTO, CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1,
    CUBLASLT_CLUSTER_SHAPE_4x1x1, CUBLASLT_CLUSTER_SHAPE_1x2x1, CUBLASLT_CLUSTER_SHAPE_2x2x1,
    CUBLASLT_CLUSTER_SHAPE_4x2x1, CUBLASLT_CLUSTER_SHAPE_1x4x1, CUBLASLT_CLUSTER_SHAPE_2x4x1,
    CUBLASLT_CLUSTER_SHAPE_4x4x1};

// An LtMatmul's descriptors, ready to run with any algorithm.
class LtPlan {
 public:
  LtPlan(const LtMatmul& p, at::ScalarType dtype, int device) : p_(p), dtype_(dtype), key_(key_of(p, dtype, device)) {
    const cudaDataType_t type = cuda_dtype(dtype);
    is_double_ = dtype == at::kDouble;
    const cublasComputeType_t compute = compute_type(dtype);
    cublasLtMatmulDesc_t raw_desc = nullptr;
    HYPATIA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&raw_desc, compute, is_double_ ? CUDA_R_64F : CUDA_R_32F));
    desc_.reset(raw_desc);
    set_desc(CUBLASLT_MATMUL_DESC_TRANSA, p.trans_a);
    set_desc(CUBLASLT_MATMUL_DESC_TRANSB, p.trans_b);
    set_desc(CUBLASLT_MATMUL_DESC_EPILOGUE, p.epilogue);
    if (p.bias != nullptr) {
      set_desc(CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
    }
    if (p.relu_bits != nullptr) {
      set_desc(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.relu_bits);
      set_desc(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, p.relu_bits_ld);
    }
    const bool a_n = p.trans_a == CUBLAS_OP_N, b_n = p.trans_b == CUBLAS_OP_N;
    a_layout_ = make_layout(type, a_n ? p.m : p.k, a_n ? p.k : p.m, p.lda);
    b_layout_ = make_layout(type, b_n ? p.k : p.n, b_n ? p.n : p.k, p.ldb);
    d_layout_ = make_layout(type, p.m, p.n, p.ldd);
  }

  // The algorithm cache's key of a problem, without its descriptors.
  static AlgoKey key_of(const LtMatmul& p, at::ScalarType dtype, int device) {
    return {device, p.trans_a, p.trans_b, p.m, p.n, p.k, p.lda, p.ldb, p.ldd, int64_t(dtype),
            int64_t(compute_type(dtype)), p.epilogue, alignment(p.a), alignment(p.b), alignment(p.d),
            p.bias ? alignment(p.bias) : 0, p.relu_bits ? alignment(p.relu_bits) : 0};
  }

  const AlgoKey& key() const { return key_; }

  // "m x n x k" in cuBLAS's column-major terms, the transposes, the dtype (float32 with TF32 marked)
  // and the epilogue.
  std::string describe() const {
    auto op = [](cublasOperation_t t) { return t == CUBLAS_OP_N ? "N" : "T"; };
    const bool tf32 = compute_type(dtype_) == CUBLAS_COMPUTE_32F_FAST_TF32;
    return std::to_string(p_.m) + "x" + std::to_string(p_.n) + "x" + std::to_string(p_.k) + " " + op(p_.trans_a) +
        op(p_.trans_b) + " " + c10::toString(dtype_) + (tf32 ? " (TF32)" : "") + " epilogue " +
        epilogue_name(p_.epilogue);
  }

  // With B and D replaced (the NaN probe's copies), or as planned.
  cublasStatus_t run(const cublasLtMatmulAlgo_t& algo, const void* b, void* d) const {
    const float alpha_f = 1.0f, beta_f = 0.0f;
    const double alpha_d = 1.0, beta_d = 0.0;
    const void* alpha = is_double_ ? static_cast<const void*>(&alpha_d) : &alpha_f;
    const void* beta = is_double_ ? static_cast<const void*>(&beta_d) : &beta_f;
    const LtResources lt = CublasLtScope::resources();
    return cublasLtMatmul(
        lt.handle, desc_.get(), alpha, p_.a, a_layout_.get(), b, b_layout_.get(), beta, d, d_layout_.get(), d,
        d_layout_.get(), &algo, lt.workspace, lt.workspace_size, at::cuda::getCurrentCUDAStream());
  }
  cublasStatus_t run(const cublasLtMatmulAlgo_t& algo) const { return run(algo, p_.b, p_.d); }

  // Up to kCandidates algorithms from the heuristic, for these alignments and this workspace.
  std::vector<cublasLtMatmulAlgo_t> candidates() const {
    cublasLtMatmulPreference_t raw_pref = nullptr;
    HYPATIA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw_pref));
    Preference pref(raw_pref);
    const LtResources lt = CublasLtScope::resources();
    HYPATIA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt.workspace_size, sizeof(lt.workspace_size)));
    const uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    const uint32_t align_a = alignment(p_.a), align_b = alignment(p_.b), align_d = alignment(p_.d);
    const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> attributes[] = {
        {CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reductions},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_d},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d}};
    for (const auto& [attribute, value] : attributes) {
      HYPATIA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), attribute, &value, sizeof(value)));
    }
    cublasLtMatmulHeuristicResult_t heuristics[kCandidates] = {};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        lt.handle, desc_.get(), a_layout_.get(), b_layout_.get(), d_layout_.get(),
        d_layout_.get(), pref.get(), kCandidates, heuristics, &found);
    std::vector<cublasLtMatmulAlgo_t> algos;
    for (int i = 0; status == CUBLAS_STATUS_SUCCESS && i < found; ++i) {
      algos.push_back(heuristics[i].algo);
    }
    return algos;
  }

  // Each pick with every cluster shape (of kClusterShapes), CTA swizzling and custom option that
  // cuBLASLt accepts for this problem and workspace: the heuristic offers one of each per kernel,
  // and on the H100 other ones ran up to 1.29x faster than its first pick (16384x1024->4096 fp16
  // forward; docs/perf/experiments.md#cublaslt-variant-search). The picks themselves are left out.
  std::vector<cublasLtMatmulAlgo_t> variants(const std::vector<cublasLtMatmulAlgo_t>& picks) const {
    std::vector<cublasLtMatmulAlgo_t> found;
    auto known = [&](const cublasLtMatmulAlgo_t& algo) {
      auto same = [&](const cublasLtMatmulAlgo_t& other) { return std::memcmp(&algo, &other, sizeof algo) == 0; };
      return std::any_of(picks.begin(), picks.end(), same) || std::any_of(found.begin(), found.end(), same);
    };
    const LtResources lt = CublasLtScope::resources();
    for (const cublasLtMatmulAlgo_t& pick : picks) {
      uint32_t swizzling = 0;
      int32_t custom_max = 0;
      size_t written = 0;
      if (cublasLtMatmulAlgoCapGetAttribute(&pick, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swizzling,
                                            sizeof swizzling, &written) != CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulAlgoCapGetAttribute(&pick, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, &custom_max,
                                            sizeof custom_max, &written) != CUBLAS_STATUS_SUCCESS) {
        continue;
      }
      for (const uint16_t cluster : kClusterShapes) {
        for (uint32_t swizzle = 0; swizzle <= (swizzling != 0 ? 1u : 0u); ++swizzle) {
          for (uint32_t custom = 0; custom <= static_cast<uint32_t>(std::max(custom_max, 0)); ++custom) {
            cublasLtMatmulAlgo_t algo = pick;
            cublasLtMatmulHeuristicResult_t check = {};
            if (set_config(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, cluster) &&
                set_config(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, swizzle) &&
                set_config(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, custom) &&
                cublasLtMatmulAlgoCheck(lt.handle, desc_.get(), a_layout_.get(),
                                        b_layout_.get(), d_layout_.get(), d_layout_.get(), &algo,
                                        &check) == CUBLAS_STATUS_SUCCESS &&
                check.workspaceSize <= lt.workspace_size && !known(algo)) {
              found.push_back(algo);
            }
          }
        }
      }
    }
    return found;
  }

 private:
  template <typename T>
  static bool set_config(cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute, const T& value) {
    return cublasLtMatmulAlgoConfigSetAttribute(&algo, attribute, &value, sizeof(value)) == CUBLAS_STATUS_SUCCESS;
  }

  template <typename T>
  void set_desc(cublasLtMatmulDescAttributes_t attribute, const T& value) {
    HYPATIA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_.get(), attribute, &value, sizeof(value)));
  }

  LtMatmul p_;
  at::ScalarType dtype_;
  bool is_double_ = false;
  MatmulDesc desc_;
  Layout a_layout_, b_layout_, d_layout_;
  AlgoKey key_;
};

// One way to run a problem in the search, and its time.
struct Contender {
  AlgoChoice choice;
  std::string name;  // in the log: aten, own, i (the heuristic's i-th pick) or vi (the i-th variant)
  float ms = std::numeric_limits<float>::infinity();
};

bool faster(const Contender& x, const Contender& y) {
  return x.ms < y.ms;
}

// Times `contenders` again in steady state (kWarmUpMs and after), fastest first.
template <typename Execute>
void time_in_steady_state(Timer& timer, std::vector<Contender>& contenders, const Execute& execute) {
  const Contender& fastest = *std::min_element(contenders.begin(), contenders.end(), faster);
  timer.burst([&] { return execute(fastest.choice); }, calls_spanning(kWarmUpMs, fastest.ms));
  const float typical = fastest.ms;
  for (Contender& c : contenders) {
    // An untimed call first: a kernel's first launch loads its module (CUDA loads lazily), which
    // would otherwise count against a variant that nothing has run yet.
    c.ms = execute(c.choice)
        ? timer.burst([&] { return execute(c.choice); }, calls_spanning(kFirstPassMs, std::min(c.ms, typical)))
        : std::numeric_limits<float>::infinity();
  }
  std::stable_sort(contenders.begin(), contenders.end(), faster);
  const size_t finalists = std::min(kFinalists, contenders.size());
  std::vector<std::vector<float>> rounds(finalists);
  for (int r = 0; r < kFinalRounds; ++r) {
    for (size_t i = 0; i < finalists; ++i) {
      const Contender& c = contenders[i];
      rounds[i].push_back(timer.burst([&] { return execute(c.choice); }, calls_spanning(kFinalMs, c.ms)));
    }
  }
  for (size_t i = 0; i < finalists; ++i) {
    std::sort(rounds[i].begin(), rounds[i].end());
    contenders[i].ms = rounds[i][rounds[i].size() / 2];
  }
  std::stable_sort(contenders.begin(), contenders.end(), faster);
}

// Runs `plan` with the way chosen for its key. On first use, `aten` (the unfused way to the same
// result), `own_kernel` (the library's kernel for the problem: false, doing nothing, where it does
// not apply; `own_mode` its switch) and the heuristic's candidates are timed; on long problems (kWideSearchMs) their
// variants too, all in steady state. The fastest that `acceptable` passes (ATen's and the own
// kernel always do) is cached. Returns false when `aten` should run instead: chosen as fastest, no
// candidate, or none chosen yet while the stream is captured into a CUDA graph (whose capture
// forbids the host syncs of probing and timing; the choice is made on a later, uncaptured call).
// `prepare` makes what only the plan reads (the unfused way does without it), before each of its
// runs, timed ones included.
template <typename Aten, typename Acceptable, typename Prepare, typename OwnKernelRun>
bool run_fastest(
    const LtPlan& plan, const Aten& aten, const Acceptable& acceptable, const Prepare& prepare,
    const OwnKernelRun& own_kernel, EnvSwitch own_mode) {
  using Way = AlgoChoice::Way;
  // Runs a choice whose plan is prepared: false where the unfused way should run instead.
  auto run_choice = [&](const AlgoChoice& choice) {
    switch (choice.way) {
      case Way::aten: return false;
      case Way::own_kernel: return own_kernel();
      case Way::cublaslt: break;
    }
    HYPATIA_CUBLAS_CHECK(plan.run(choice.algo));
    return true;
  };
  if (const std::optional<AlgoChoice> cached = algo_cache().find(plan.key())) {
    if (cached->way == Way::cublaslt) {
      prepare();
    }
    return run_choice(*cached);
  }
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    return false;
  }
  auto decide = [&](const AlgoChoice& choice, const std::string& timings, const std::string& chosen) {
    if (log_enabled()) {
      std::fprintf(stderr, "hypatia cuBLASLt %s: %s; chosen: %s\n", plan.describe().c_str(), timings.c_str(),
                   chosen.c_str());
    }
    algo_cache().insert(plan.key(), choice);
    // The last timed or probed run may have been another contender: write the result with this one.
    return run_choice(choice);
  };
  if (own_mode == EnvSwitch::kOn && own_kernel()) {
    return decide(AlgoChoice{Way::own_kernel}, "own kernel untimed", "own");
  }
  prepare();
  const std::vector<cublasLtMatmulAlgo_t> picks = plan.candidates();
  if (!autotune_enabled()) {  // the heuristic's first acceptable pick
    std::string timings = "untimed, candidates";
    for (size_t i = 0; i < picks.size(); ++i) {
      if (acceptable(picks[i])) {
        return decide(AlgoChoice{Way::cublaslt, picks[i]}, timings, std::to_string(i));
      }
      timings += " " + std::to_string(i) + ":rejected";
    }
    return decide(AlgoChoice{Way::aten}, timings, "aten");
  }
  // Runs any contender, the unfused way included: false if it fails. A cuBLASLt way runs `prepare`
  // first, as every call of it does (the cached path above), so that its time includes it.
  auto execute = [&](const AlgoChoice& choice) {
    switch (choice.way) {
      case Way::aten: aten(); return true;
      case Way::own_kernel: return own_kernel();
      case Way::cublaslt: break;
    }
    prepare();
    if (plan.run(choice.algo) == CUBLAS_STATUS_SUCCESS) {
      return true;
    }
    (void)cudaGetLastError();  // a kernel that failed to launch leaves an error the next check would take for its own
    return false;
  };
  Timer timer(stream);
  std::vector<Contender> contenders;
  std::string timings;
  if (search_mode() != Search::variants) {
    contenders.push_back({AlgoChoice{Way::aten}, "aten"});
    if (own_mode == EnvSwitch::kChosen) {
      contenders.push_back({AlgoChoice{Way::own_kernel}, "own"});
    }
    for (size_t i = 0; i < picks.size(); ++i) {
      contenders.push_back({AlgoChoice{Way::cublaslt, picks[i]}, std::to_string(i)});
    }
    for (Contender& c : contenders) {
      c.ms = timer.best_of([&] { return execute(c.choice); });
      if (c.choice.way == Way::cublaslt) {
        timings += (c.name == "0" ? ", candidates " : " ") + c.name + ":" + std::to_string(c.ms);
      } else if (c.choice.way == Way::aten || std::isfinite(c.ms)) {
        timings += (timings.empty() ? "" : ", ") + c.name + " " + std::to_string(c.ms) + " ms";
      }
    }
  }
  const bool wide = search_mode() == Search::wide || search_mode() == Search::variants ||
      (search_mode() == Search::by_length &&
       std::min_element(contenders.begin(), contenders.end(), faster)->ms >= kWideSearchMs);
  if (wide) {
    const std::vector<cublasLtMatmulAlgo_t> variants = plan.variants(picks);
    for (size_t i = 0; i < variants.size(); ++i) {
      contenders.push_back({AlgoChoice{Way::cublaslt, variants[i]}, "v" + std::to_string(i)});
    }
    timings += (timings.empty() ? "" : ", ") + std::to_string(variants.size()) + " variants; in steady state";
    if (!contenders.empty()) {
      time_in_steady_state(timer, contenders, execute);
    }
    for (size_t i = 0; i < std::min(kFinalists, contenders.size()); ++i) {
      timings += " " + contenders[i].name + ":" + std::to_string(contenders[i].ms);
    }
  } else {
    std::stable_sort(contenders.begin(), contenders.end(), faster);
  }
  std::string rejected;
  for (const Contender& c : contenders) {
    if (!std::isfinite(c.ms)) {
      break;  // the rest failed to run (or, the own kernel, does not apply)
    }
    if (c.choice.way != Way::cublaslt || acceptable(c.choice.algo)) {
      return decide(c.choice, timings + rejected, c.name);
    }
    rejected += (rejected.empty() ? ", rejected " : " ") + c.name;
  }
  return decide(AlgoChoice{Way::aten}, timings + rejected, "aten");
}

// Where the library has no kernel of its own for the problem.
bool no_own_kernel() {
  return false;
}

template <typename Aten, typename Acceptable>
bool run_fastest(const LtPlan& plan, const Aten& aten, const Acceptable& acceptable) {
  return run_fastest(plan, aten, acceptable, [] {}, no_own_kernel, EnvSwitch::kOff);
}

// For problems without an epilogue whose results a probe must vet.
bool any_algorithm(const cublasLtMatmulAlgo_t&) {
  return true;
}

// act(x @ w.T + b) through cuBLASLt; false where ATen's path should run instead (run_fastest).
bool linear_act_lt(const at::Tensor& x, const at::Tensor& w, const OptionalTensor& b, bool relu, at::Tensor& out) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const bool has_bias = b.has_value() && b->defined();
  // Row-major out[M,N] = x[M,K] @ w[N,K].T is, in cuBLAS's column-major terms, out^T[N,M] =
  // op(A) B with A = w read as a K x N matrix and transposed, and B = x read as K x M.
  auto problem = [&](const void* w_data, const void* x_data, void* out_data, void* bias_data) {
    return LtMatmul{CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, w_data, K, x_data, K, out_data, N,
                    epilogue_for(has_bias, relu), bias_data};
  };
  const LtPlan plan(
      problem(w.data_ptr(), x.data_ptr(), out.data_ptr(), has_bias ? b->data_ptr() : nullptr), x.scalar_type(),
      x.get_device());

  // The NaN probe: this problem with a NaN in row 0 of x, whose output row must come out all NaN.
  at::Tensor x_nan, out_nan;
  auto keeps_nan = [&](const cublasLtMatmulAlgo_t& algo) {
    if (!x_nan.defined()) {
      x_nan = x.clone();
      x_nan.select(0, 0).select(0, 0).fill_(std::numeric_limits<double>::quiet_NaN());
      out_nan = at::empty_like(out);
    }
    return plan.run(algo, x_nan.data_ptr(), out_nan.data_ptr()) == CUBLAS_STATUS_SUCCESS &&
        out_nan[0].isnan().all().item<bool>();
  };
  // The rounding probe: some bf16/fp16 kernels round x @ w.T to the output type before adding
  // the bias (measured on the H100: 3 of 9900 ReLU signs flipped at 33x64->300 bf16), where
  // eager rounds once. Same shape, only column 0 nonzero: x = 2^7 (1+u), w = 1+u, b = -2^7 (1+2u),
  // u the dtype's unit step at 1, so out[0] = 2^7 u^2 exactly, but 0 when the product is rounded first.
  const double u = x.scalar_type() == at::kHalf ? 0x1p-10 : 0x1p-7;
  std::optional<LtPlan> rounding;
  at::Tensor x_r, w_r, b_r, out_r;  // what `rounding` points to
  auto rounds_once = [&](const cublasLtMatmulAlgo_t& algo) {
    if (!rounding) {
      x_r = at::zeros_like(x);
      w_r = at::zeros_like(w);
      x_r.select(1, 0).select(0, 0).fill_(0x1p7 * (1 + u));
      w_r.select(1, 0).fill_(1 + u);
      b_r = at::full_like(*b, -0x1p7 * (1 + 2 * u));
      out_r = at::empty_like(out);
      rounding.emplace(
          problem(w_r.data_ptr(), x_r.data_ptr(), out_r.data_ptr(), b_r.data_ptr()), x.scalar_type(), x.get_device());
    }
    return rounding->run(algo) == CUBLAS_STATUS_SUCCESS && out_r[0].eq(0x1p7 * u * u).all().item<bool>();
  };
  const bool half = at::isReducedFloatingType(x.scalar_type());
  auto acceptable = [&](const cublasLtMatmulAlgo_t& algo) {
    return (!relu || keeps_nan(algo)) && (!has_bias || !half || rounds_once(algo));
  };
  return run_fastest(
      plan, [&] { linear_act_aten(x, w, b, relu, out); }, acceptable, [] {},
      [&] { return skinny_linear_cuda(x, w, b, relu, out); }, skinny_linear_mode());
}

// The dot products' length k rounded up to a whole number of 16 bytes of t's elements. cuBLAS(Lt)'s
// tensor-core kernels need rows that start 16 bytes apart; on ragged widths (DLRM's 13 dense
// features) only its slow kernels remain. Zero columns appended to both operands (pad_k) add 0 * 0
// terms: the products are exactly those of the unpadded problem, NaN and Inf included.
int64_t aligned_k(int64_t k, const at::Tensor& t) {
  const int64_t per_16_bytes = std::max<int64_t>(1, 16 / static_cast<int64_t>(t.element_size()));
  return (k + per_16_bytes - 1) / per_16_bytes * per_16_bytes;
}

// t [rows, k0] with k - k0 zero columns appended (t itself, made dense, where k0 == k).
at::Tensor pad_k(const at::Tensor& t, int64_t k) {
  return k == t.size(1) ? t.contiguous() : resize_columns_cuda(t, k);
}

}  // namespace

void linear_act_cuda_out(
    const at::Tensor& x, const at::Tensor& w, const OptionalTensor& b, bool relu, at::Tensor& out) {
  if (out.numel() == 0) {
    return;
  }
  // cuBLASLt needs dense operands and at least one term in each dot product.
  if (x.size(1) > 0) {
    const int64_t k = aligned_k(x.size(1), x);
    if (linear_act_lt(pad_k(x, k), pad_k(w, k), b ? std::optional(b->contiguous()) : b, relu, out)) {
      return;
    }
  }
  linear_act_aten(x, w, b, relu, out);
}

namespace {

at::Tensor input_grad_cuda(const at::Tensor& grad2d, const at::Tensor& w) {
  const int64_t k = w.size(1), padded = aligned_k(k, w);
  if (padded != k && grad2d.numel() > 0 && k > 0) {  // grad_input's columns too: computed padded, then cut
    return resize_columns_cuda(input_grad_cuda(grad2d, pad_k(w, padded)), k);
  }
  const at::Tensor g = grad2d.contiguous(), wc = w.contiguous();
  const int64_t M = g.size(0), N = g.size(1), K = wc.size(1);
  at::Tensor grad_input = at::empty({M, K}, g.options());
  auto aten = [&] { at::mm_out(grad_input, g, wc); };
  if (M == 0 || N == 0 || K == 0) {  // cuBLASLt needs a nonempty problem
    aten();
    return grad_input;
  }
  // Row-major grad_input[M,K] = g[M,N] @ w[N,K] is, column-major, D[K x M] = A B with A = w read
  // as K x N and B = g read as N x M.
  const LtPlan plan(
      LtMatmul{CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, wc.data_ptr(), K, g.data_ptr(), N, grad_input.data_ptr(), K,
               CUBLASLT_EPILOGUE_DEFAULT},
      g.scalar_type(), g.get_device());
  if (!run_fastest(plan, aten, any_algorithm)) {
    aten();
  }
  return grad_input;
}

std::pair<at::Tensor, at::Tensor> weight_grads_cuda(const at::Tensor& grad2d, const at::Tensor& h2d, bool bias_grad) {
  const int64_t k = h2d.size(1), padded = aligned_k(k, h2d);
  if (padded != k && grad2d.numel() > 0 && k > 0) {  // grad_weight's columns too: computed padded, then cut
    auto [grad_weight, grad_bias] = weight_grads_cuda(grad2d, pad_k(h2d, padded), bias_grad);
    return {resize_columns_cuda(grad_weight, k), grad_bias};
  }
  const at::Tensor g = grad2d.contiguous(), h = h2d.contiguous();
  const int64_t M = g.size(0), N = g.size(1), K = h.size(1);
  at::Tensor grad_weight = at::empty({N, K}, g.options());
  at::Tensor grad_bias = bias_grad ? at::empty({N}, g.options()) : at::Tensor();
  auto aten = [&] {
    at::mm_out(grad_weight, g.t(), h);
    if (bias_grad) {
      column_sums_cuda(g, grad_bias);
    }
  };
  if (M == 0 || N == 0 || K == 0) {  // cuBLASLt needs a nonempty problem
    aten();
    return {grad_weight, grad_bias};
  }
  // Row-major grad_weight[N,K] = g[M,N].T @ h[M,K] is, column-major, D[K x N] = A B^T with A = h
  // read as K x M and B = g read as N x M; BGRADB sums B over the dot products' dimension (M),
  // one per column of D: grad_bias[N].
  const LtPlan plan(
      LtMatmul{CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, h.data_ptr(), K, g.data_ptr(), N, grad_weight.data_ptr(), K,
               bias_grad ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT,
               bias_grad ? grad_bias.data_ptr() : nullptr},
      g.scalar_type(), g.get_device());
  if (!run_fastest(plan, aten, any_algorithm)) {
    aten();
  }
  return {grad_weight, grad_bias};
}

std::pair<at::Tensor, at::Tensor> relu_input_grad_cuda(
    const at::Tensor& grad2d, const at::Tensor& w, const at::Tensor& relu_out2d, bool bias_grad) {
  const at::Tensor g = grad2d.contiguous(), wc = w.contiguous();
  const int64_t M = g.size(0), N = g.size(1), K = wc.size(1);
  // The unfused way: the (tuned) input-gradient GEMM, then eager's ReLU backward on the saved output
  // and the bias gradient, in one pass.
  auto aten = [&] {
    at::Tensor grad_input = input_grad_cuda(g, wc);
    at::Tensor grad_bias = bias_grad ? at::empty({K}, g.options()) : at::Tensor();
    relu_backward_cuda_(grad_input, relu_out2d, grad_bias);
    return std::pair{grad_input, grad_bias};
  };
  if (M == 0 || N == 0 || K == 0) {  // cuBLASLt needs a nonempty problem
    return aten();
  }
  // As input_grad_cuda, with the ReLU's bits applied to D and (DRELU_BGRAD) D summed over its
  // columns (the rows of grad_input): the bias gradient of the layer below.
  const int64_t row_bytes = relu_mask_row_bytes(K).expect_int();
  auto problem = [&](const void* g_data, void* d_data, void* bias_data, const void* bits_data) {
    return LtMatmul{CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, wc.data_ptr(), K, g_data, N, d_data, K,
                    bias_grad ? CUBLASLT_EPILOGUE_DRELU_BGRAD : CUBLASLT_EPILOGUE_DRELU, bias_data, bits_data,
                    row_bytes * 8};
  };
  // Where the unfused way is the cached choice, none of the epilogue's buffers is allocated: the key
  // takes their alignment as the caching allocator's (at least 256 bytes, the most a key tells).
  void* const fresh = reinterpret_cast<void*>(uintptr_t{256});
  const LtMatmul unallocated = problem(g.data_ptr(), fresh, bias_grad ? fresh : nullptr, fresh);
  const std::optional<AlgoChoice> cached =
      algo_cache().find(LtPlan::key_of(unallocated, g.scalar_type(), g.get_device()));
  if (cached && cached->way == AlgoChoice::Way::aten) {
    return aten();
  }
  at::Tensor grad_input = at::empty({M, K}, g.options());
  at::Tensor grad_bias = bias_grad ? at::empty({K}, g.options()) : at::Tensor();
  // The library's GEMM with the ReLU backward in its epilogue, then the bias by the column-sum pass.
  const at::Tensor relu_out = relu_out2d.contiguous();
  auto fused = [&] { return relu_input_grad_fused_cuda(g, wc, relu_out, grad_input, grad_bias); };
  if (cached && cached->way == AlgoChoice::Way::own_kernel) {
    return fused() ? std::pair{grad_input, grad_bias} : aten();
  }
  // The ReLU's mask as bits, which the DRELU epilogue reads: packed only when that runs.
  at::Tensor bits = at::empty({M, row_bytes}, g.options().dtype(at::kByte));
  auto pack_bits = [&] { pack_relu_mask_cuda(relu_out, bits); };
  const LtPlan plan(
      problem(g.data_ptr(), grad_input.data_ptr(), bias_grad ? grad_bias.data_ptr() : nullptr, bits.data_ptr()),
      g.scalar_type(), g.get_device());
  // The NaN probe: g with a NaN in rows 0 and 1, so that both rows of g @ w are all NaN; the ReLU
  // passed nothing of row 0 (eager's threshold_backward writes 0 there) and all of row 1 (NaN stays).
  std::optional<LtPlan> probe;
  at::Tensor g_p, bits_p, d_p, bias_p;  // what `probe` points to
  auto as_eager = [&](const cublasLtMatmulAlgo_t& algo) {
    if (!probe) {
      g_p = g.clone();
      g_p.select(1, 0).narrow(0, 0, std::min<int64_t>(M, 2)).fill_(std::numeric_limits<double>::quiet_NaN());
      bits_p = at::zeros_like(bits);
      if (M > 1) {
        bits_p.select(0, 1).fill_(0xff);
      }
      d_p = at::empty_like(grad_input);
      bias_p = bias_grad ? at::empty_like(grad_bias) : at::Tensor();
      probe.emplace(
          problem(g_p.data_ptr(), d_p.data_ptr(), bias_grad ? bias_p.data_ptr() : nullptr, bits_p.data_ptr()),
          g.scalar_type(), g.get_device());
    }
    return probe->run(algo) == CUBLAS_STATUS_SUCCESS && d_p[0].eq(0).all().item<bool>() &&
        (M == 1 || d_p[1].isnan().all().item<bool>());
  };
  if (run_fastest(plan, [&] { aten(); }, as_eager, pack_bits, fused, fused_input_grad_mode())) {
    return {grad_input, grad_bias};
  }
  return aten();
}

// The bottom layer's gradients by the narrow-input kernel, from the input gradient of the layer
// above (the tuned GEMM) before its ReLU backward, which the kernel applies as it reads it.
std::optional<std::array<at::Tensor, 3>> relu_bottom_grads_cuda(
    const at::Tensor& grad2d, const at::Tensor& w, const at::Tensor& relu_out2d, const at::Tensor& input2d,
    const at::Tensor& w0, bool weight_grad, bool bias_grad, bool input_grad) {
  if (!(weight_grad || input_grad) || !narrow_input_backward_applies(relu_out2d, input2d, w0) ||
      records_backward({grad2d, w, relu_out2d, input2d, w0})) {
    return std::nullopt;
  }
  return narrow_input_backward_cuda(
      input_grad_cuda(grad2d, w), relu_out2d, input2d, w0, weight_grad, bias_grad, input_grad);
}

// A layer's gradients in one pass (ops/cuda/layer_backward_kernel.cu), outside double backwards.
std::optional<std::array<at::Tensor, 3>> layer_grads_cuda(
    const at::Tensor& grad2d, const at::Tensor& w, const at::Tensor& h2d, bool relu_below, bool bias_grad,
    bool input_grad) {
  if (records_backward({grad2d, w, h2d})) {
    return std::nullopt;
  }
  return layer_backward_cuda(grad2d, w, h2d, relu_below, bias_grad, input_grad);
}

}  // namespace

const BackwardGemms cuda_gemms{
    input_grad_cuda,        weight_grads_cuda,      relu_input_grad_cuda, relu_grad_cuda,
    relu_bottom_grads_cuda, layer_grads_cuda};

}  // namespace hypatia::ops
