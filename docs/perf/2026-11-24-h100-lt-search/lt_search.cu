// Does a wider cuBLASLt search find a faster forward GEMM (RELU_BIAS epilogue) than the heuristic's
// top 8, which is all the autotuner times? Three candidate sets per problem:
//   heuristic  the heuristic's best fits (what ops/cuda/linear_act_cuda.cpp times);
//   by-id      every algorithm id of cublasLtMatmulAlgoGetIds, the heuristic asked for its best
//              configurations of that id (CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID);
//   enum       around each heuristic pick, its tile x stages, and its cluster shape x swizzle x
//              custom option, varied, wherever cublasLtMatmulAlgoCheck accepts them.
// Timed the way the benchmark runs them, in steady state: the GPU first runs 300 ms of GEMMs, then
// every candidate is timed in interleaved rounds of bursts of >= 2 ms; the fastest are timed again
// in 9 rounds of >= 5 ms, beside the heuristic's picks, and their outputs compared with pick 0's.
// Build: nvcc -O2 -std=c++17 -arch=sm_90 lt_search.cu -lcublasLt -lcublas -o lt_search
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CHECK_CUDA(x)                                                                  \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                    \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)
#define CHECK_LT(x)                                                                    \
  do {                                                                                 \
    cublasStatus_t s_ = (x);                                                           \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
      std::fprintf(stderr, "%s: %s\n", #x, cublasGetStatusString(s_));                 \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

constexpr size_t kWorkspace = 32u << 20;
constexpr int kMaxEnum = 1500;

// Normal-ish values from a hash (Box-Muller), scaled: x ~ N(0,1), w ~ N(0, 2/k), b ~ N(0, 0.25),
// as in scripts/bench_ops.py.
template <typename T>
__global__ void fill(T* p, size_t n, unsigned seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    unsigned h1 = unsigned(i) * 2654435761u ^ seed, h2 = (unsigned(i) + 0x9e3779b9u) * 2246822519u ^ (seed * 3266489917u);
    h1 ^= h1 >> 15; h1 *= 2246822519u; h1 ^= h1 >> 13;
    h2 ^= h2 >> 16; h2 *= 3266489917u; h2 ^= h2 >> 13;
    const float u1 = (h1 + 1.0f) * 2.3283064e-10f, u2 = h2 * 2.3283064e-10f;
    p[i] = T(scale * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2));
  }
}

struct Problem {
  const char* name;
  cudaDataType_t type;
  cublasComputeType_t compute;
  int elem;
  int64_t M, K, N;  // row-major x[M,K] @ w[N,K].T: cuBLAS m = N, n = M, k = K
};

struct Candidate {
  cublasLtMatmulAlgo_t algo;
  std::string origin;
  std::vector<float> ms;
  float median() const {
    std::vector<float> s = ms;
    std::sort(s.begin(), s.end());
    return s.empty() ? INFINITY : s[s.size() / 2];
  }
};

template <typename T>
T config(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T v{};
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof(v), &written);
  return v;
}

std::string describe(const cublasLtMatmulAlgo_t& a) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "id %d tile %u stages %u cluster %u swizzle %u custom %u splitk %d inner %u",
                config<int32_t>(a, CUBLASLT_ALGO_CONFIG_ID), config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
                config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                unsigned(config<uint16_t>(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID)),
                config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
                config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION), config<int32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                unsigned(config<uint16_t>(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID)));
  return buf;
}

struct Gemm {
  cublasLtHandle_t lt;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, d;
  const void *A, *B, *bias;
  void* D;
  void* ws;
  cudaStream_t stream;
  bool run(const cublasLtMatmulAlgo_t& algo, void* out) const {
    const float one = 1, zero = 0;
    return cublasLtMatmul(lt, desc, &one, A, a, B, b, &zero, out, d, out, d, &algo, ws, kWorkspace, stream) ==
        CUBLAS_STATUS_SUCCESS;
  }
  bool check(const cublasLtMatmulAlgo_t& algo) const {
    cublasLtMatmulHeuristicResult_t r{};
    return cublasLtMatmulAlgoCheck(lt, desc, a, b, d, d, &algo, &r) == CUBLAS_STATUS_SUCCESS &&
        r.workspaceSize <= kWorkspace;
  }
};

// ms per call over a burst of `calls`.
float burst(const Gemm& g, const cublasLtMatmulAlgo_t& algo, int calls, cudaEvent_t e0, cudaEvent_t e1) {
  CHECK_CUDA(cudaEventRecord(e0, g.stream));
  for (int i = 0; i < calls; ++i) {
    if (!g.run(algo, g.D)) return INFINITY;
  }
  CHECK_CUDA(cudaEventRecord(e1, g.stream));
  CHECK_CUDA(cudaEventSynchronize(e1));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
  return ms / calls;
}

std::vector<cublasLtMatmulHeuristicResult_t> heuristic(const Gemm& g, int count, const cublasLtMatmulAlgo_t* limited) {
  cublasLtMatmulPreference_t pref;
  CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspace;
  CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  const uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions,
                                                sizeof reductions));
  std::vector<cublasLtMatmulHeuristicResult_t> results(count);
  if (limited != nullptr) {
    const uint32_t mode = CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID;
    CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_SEARCH_MODE, &mode, sizeof mode));
    for (auto& r : results) r.algo = *limited;
  }
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(g.lt, g.desc, g.a, g.b, g.d, g.d, pref, count, results.data(), &found) !=
      CUBLAS_STATUS_SUCCESS) {
    found = 0;
  }
  results.resize(found);
  cublasLtMatmulPreferenceDestroy(pref);
  return results;
}

template <typename T>
std::vector<T> caps(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attr) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS || bytes == 0) {
    return {};
  }
  std::vector<T> v(bytes / sizeof(T));
  cublasLtMatmulAlgoCapGetAttribute(&algo, attr, v.data(), bytes, &bytes);
  return v;
}

void search(cublasLtHandle_t lt, const Problem& p, void* ws, cudaStream_t stream) {
  const int64_t m = p.N, n = p.M, k = p.K;
  void *A, *B, *D, *D0, *bias;
  CHECK_CUDA(cudaMalloc(&A, m * k * p.elem));
  CHECK_CUDA(cudaMalloc(&B, k * n * p.elem));
  CHECK_CUDA(cudaMalloc(&D, m * n * p.elem));
  CHECK_CUDA(cudaMalloc(&D0, m * n * p.elem));
  CHECK_CUDA(cudaMalloc(&bias, m * p.elem));
  auto fill_any = [&](void* ptr, size_t count, unsigned seed, float scale) {
    if (p.type == CUDA_R_16F) fill<<<1024, 256>>>(static_cast<__half*>(ptr), count, seed, scale);
    else if (p.type == CUDA_R_16BF) fill<<<1024, 256>>>(static_cast<__nv_bfloat16*>(ptr), count, seed, scale);
    else fill<<<1024, 256>>>(static_cast<float*>(ptr), count, seed, scale);
  };
  fill_any(A, m * k, 1, std::sqrt(2.0f / k));
  fill_any(B, k * n, 2, 1.0f);
  fill_any(bias, m, 3, 0.5f);
  CHECK_CUDA(cudaDeviceSynchronize());

  Gemm g{lt, nullptr, nullptr, nullptr, nullptr, A, B, bias, D, ws, stream};
  CHECK_LT(cublasLtMatmulDescCreate(&g.desc, p.compute, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_RELU_BIAS;
  CHECK_LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CHECK_LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  CHECK_LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  CHECK_LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  CHECK_LT(cublasLtMatrixLayoutCreate(&g.a, p.type, k, m, k));
  CHECK_LT(cublasLtMatrixLayoutCreate(&g.b, p.type, k, n, k));
  CHECK_LT(cublasLtMatrixLayoutCreate(&g.d, p.type, m, n, m));

  std::vector<Candidate> cands;
  auto add = [&](const cublasLtMatmulAlgo_t& algo, const std::string& origin) {
    for (const Candidate& c : cands) {
      if (std::memcmp(&c.algo, &algo, sizeof algo) == 0) return false;
    }
    cands.push_back({algo, origin, {}});
    return true;
  };
  const auto top = heuristic(g, 8, nullptr);
  for (size_t i = 0; i < top.size(); ++i) add(top[i].algo, "heuristic " + std::to_string(i));
  const size_t n_heuristic = cands.size();

  int ids[512];
  int n_ids = 0;
  CHECK_LT(cublasLtMatmulAlgoGetIds(lt, p.compute, CUDA_R_32F, p.type, p.type, p.type, p.type, 512, ids, &n_ids));
  int by_id = 0;
  for (int i = 0; i < n_ids; ++i) {
    cublasLtMatmulAlgo_t algo;
    if (cublasLtMatmulAlgoInit(lt, p.compute, CUDA_R_32F, p.type, p.type, p.type, p.type, ids[i], &algo) !=
        CUBLAS_STATUS_SUCCESS) {
      continue;
    }
    const auto found = heuristic(g, 16, &algo);
    for (size_t j = 0; j < found.size(); ++j) {
      by_id += add(found[j].algo, "by-id " + std::to_string(ids[i]) + "/" + std::to_string(j));
    }
  }

  // Around each heuristic pick: every tile x stages with the pick's cluster, swizzle and custom
  // option; every cluster x swizzle x custom option with the pick's tile and stages.
  int enumerated = 0;
  for (const auto& r : top) {
    const cublasLtMatmulAlgo_t& pick = r.algo;
    const std::vector<uint32_t> tiles = caps<uint32_t>(pick, CUBLASLT_ALGO_CAP_TILE_IDS);
    const std::vector<uint32_t> stages = caps<uint32_t>(pick, CUBLASLT_ALGO_CAP_STAGES_IDS);
    int32_t swizzle_support = 0, custom_max = 0;
    size_t w = 0;
    cublasLtMatmulAlgoCapGetAttribute(&pick, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swizzle_support,
                                      sizeof swizzle_support, &w);
    cublasLtMatmulAlgoCapGetAttribute(&pick, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, &custom_max, sizeof custom_max, &w);
    auto try_config = [&](uint32_t tile, uint32_t stage, uint16_t cluster, uint32_t swizzle, uint32_t custom) {
      if (enumerated >= kMaxEnum) return;
      cublasLtMatmulAlgo_t algo = pick;
      cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile);
      cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stage, sizeof stage);
      cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster);
      cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle, sizeof swizzle);
      cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom, sizeof custom);
      if (g.check(algo)) enumerated += add(algo, "enum");
    };
    const uint32_t tile0 = config<uint32_t>(pick, CUBLASLT_ALGO_CONFIG_TILE_ID);
    const uint32_t stage0 = config<uint32_t>(pick, CUBLASLT_ALGO_CONFIG_STAGES_ID);
    const uint16_t cluster0 = config<uint16_t>(pick, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
    const uint32_t swizzle0 = config<uint32_t>(pick, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING);
    const uint32_t custom0 = config<uint32_t>(pick, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION);
    std::printf("# %s: pick %s: %zu tiles, %zu stages, swizzle %d, custom options 0..%d\n", p.name,
                describe(pick).c_str(), tiles.size(), stages.size(), swizzle_support, custom_max);
    for (uint32_t tile : tiles)
      for (uint32_t stage : stages) try_config(tile, stage, cluster0, swizzle0, custom0);
    for (uint16_t cluster = 0; cluster < CUBLASLT_CLUSTER_SHAPE_END; ++cluster)
      for (uint32_t swizzle = 0; swizzle <= uint32_t(swizzle_support ? 1 : 0); ++swizzle)
        for (uint32_t custom = 0; custom <= uint32_t(custom_max); ++custom)
          try_config(tile0, stage0, cluster, swizzle, custom);
  }
  std::printf("# %s: %zu heuristic, %d ids -> %d more by id, %d more enumerated (cap %d)\n", p.name, n_heuristic,
              n_ids, by_id, enumerated, kMaxEnum);

  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  // Steady state: 300 ms of the heuristic's pick, then its reference output.
  const float est = burst(g, cands[0].algo, 3, e0, e1);
  burst(g, cands[0].algo, std::max(1, int(300 / est)), e0, e1);
  g.run(cands[0].algo, D0);
  const double flop = 2.0 * m * n * k;

  auto rounds = [&](std::vector<Candidate*>& set, int n_rounds, float min_ms) {
    for (Candidate* c : set) c->ms.clear();
    for (int r = 0; r < n_rounds; ++r) {
      for (Candidate* c : set) {
        const int calls = std::max(1, int(std::ceil(min_ms / est)));
        const float ms = burst(g, c->algo, calls, e0, e1);
        cudaGetLastError();
        c->ms.push_back(ms);
      }
    }
  };
  std::vector<Candidate*> all;
  for (Candidate& c : cands) all.push_back(&c);
  rounds(all, 3, 2.0f);
  std::vector<Candidate*> ranked = all;
  std::sort(ranked.begin(), ranked.end(), [](Candidate* x, Candidate* y) { return x->median() < y->median(); });
  std::vector<Candidate*> final_set;
  for (size_t i = 0; i < n_heuristic; ++i) final_set.push_back(&cands[i]);
  for (Candidate* c : ranked) {
    if (final_set.size() >= n_heuristic + 8) break;
    if (std::find(final_set.begin(), final_set.end(), c) == final_set.end() && std::isfinite(c->median())) {
      final_set.push_back(c);
    }
  }
  rounds(final_set, 9, 5.0f);
  std::sort(final_set.begin(), final_set.end(), [](Candidate* x, Candidate* y) { return x->median() < y->median(); });
  const float ref_ms = cands[0].median();
  std::printf("%s (cuBLAS m=%lld n=%lld k=%lld, TN, RELU_BIAS): steady-state median of 9 rounds; pick 0 %.4f ms\n",
              p.name, (long long)m, (long long)n, (long long)k, ref_ms);
  std::printf("  %-16s %9s %7s %8s %9s  %s\n", "origin", "ms", "TFLOP/s", "vs pick0", "max|d-d0|", "config");
  const size_t bytes = m * n * p.elem;
  std::vector<unsigned char> h0(bytes), h1(bytes);
  CHECK_CUDA(cudaMemcpy(h0.data(), D0, bytes, cudaMemcpyDeviceToHost));
  for (Candidate* c : final_set) {
    g.run(c->algo, D);
    CHECK_CUDA(cudaMemcpy(h1.data(), D, bytes, cudaMemcpyDeviceToHost));
    double diff = 0;
    for (size_t i = 0; i < size_t(m * n); i += 97) {
      auto value = [&](const std::vector<unsigned char>& h) -> double {
        if (p.type == CUDA_R_16F) return __half2float(reinterpret_cast<const __half*>(h.data())[i]);
        if (p.type == CUDA_R_16BF) return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(h.data())[i]);
        return reinterpret_cast<const float*>(h.data())[i];
      };
      diff = std::max(diff, std::fabs(value(h1) - value(h0)));
    }
    const float med = c->median();
    std::printf("  %-16s %9.4f %7.1f %8.3f %9.2e  %s\n", c->origin.c_str(), med, flop / med * 1e-9, ref_ms / med, diff,
                describe(c->algo).c_str());
  }
  std::printf("  first pass (3 rounds of >= 2 ms), best 5 of %zu:", cands.size());
  for (size_t i = 0; i < std::min<size_t>(5, ranked.size()); ++i) {
    std::printf(" %s %.4f;", ranked[i]->origin.c_str(), ranked[i]->median());
  }
  std::printf("\n\n");
  std::fflush(stdout);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cublasLtMatrixLayoutDestroy(g.a);
  cublasLtMatrixLayoutDestroy(g.b);
  cublasLtMatrixLayoutDestroy(g.d);
  cublasLtMatmulDescDestroy(g.desc);
  for (void* ptr : {A, B, D, D0, bias}) cudaFree(ptr);
}

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  cublasLtHandle_t lt;
  CHECK_LT(cublasLtCreate(&lt));
  void* ws;
  CHECK_CUDA(cudaMalloc(&ws, kWorkspace));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, cuBLASLt %zu, workspace %zu MiB\n", prop.name, cublasLtGetVersion(), kWorkspace >> 20);
  const Problem problems[] = {
      {"8192x4096->4096 float16", CUDA_R_16F, CUBLAS_COMPUTE_32F, 2, 8192, 4096, 4096},
      {"8192x4096->4096 bfloat16", CUDA_R_16BF, CUBLAS_COMPUTE_32F, 2, 8192, 4096, 4096},
      {"8192x4096->4096 tf32", CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 4, 8192, 4096, 4096},
      {"8192x4096->4096 float32", CUDA_R_32F, CUBLAS_COMPUTE_32F, 4, 8192, 4096, 4096},
      {"16384x1024->4096 float16", CUDA_R_16F, CUBLAS_COMPUTE_32F, 2, 16384, 1024, 4096},
      {"16384x1024->4096 bfloat16", CUDA_R_16BF, CUBLAS_COMPUTE_32F, 2, 16384, 1024, 4096},
  };
  for (const Problem& p : problems) {
    if (only.empty() || std::string(p.name).find(only) != std::string::npos) search(lt, p, ws, stream);
  }
  return 0;
}
