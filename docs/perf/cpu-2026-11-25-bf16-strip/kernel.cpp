// The library's bfloat16 kernel alone, one thread: packing the [n, k] weight, then out = relu(x @ w.T + b)
// for m rows, on random data, six rounds; each line starts with a hash of the output. Built by run.sh
// against ops/cpu/bf16_gemm_avx512.cpp of this tree, and with -DBASE_SIGNATURE against dd3fb6f's
// (bias and relu as arguments, before Bf16Epilogue):  ./kernel M K N
#include "ops/cpu/bf16_gemm.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

using namespace hypatia::ops;

int main(int argc, char** argv) {
  const int64_t m = std::atoll(argv[1]), k = std::atoll(argv[2]), n = std::atoll(argv[3]);
  std::vector<uint16_t> x(m * k), w(n * k), out(m * n), packed(bf16_packed_elements(n, k));
  std::vector<float> bias(n);
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> uniform(-1, 1);
  auto bf16 = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return uint16_t(u >> 16);
  };
  for (auto& v : x) v = bf16(uniform(gen));
  for (auto& v : w) v = bf16(uniform(gen) * 0.05f);
  for (auto& v : bias) v = uniform(gen);
  for (int round = 0; round < 6; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    pack_bf16_weight(w.data(), k, /*inputs_major=*/false, n, k, 0, bf16_gemm_panels(n), packed.data());
    const auto t1 = std::chrono::steady_clock::now();
#ifdef BASE_SIGNATURE
    bf16_gemm_act(x.data(), k, m, k, packed.data(), bias.data(), n, /*relu=*/true, out.data(), n);
#else
    Bf16Epilogue epilogue;
    epilogue.bias = bias.data();
    epilogue.relu = true;
    bf16_gemm_act(x.data(), k, m, k, packed.data(), n, epilogue, out.data(), n);
#endif
    const auto t2 = std::chrono::steady_clock::now();
    const double pack_ms = std::chrono::duration<double>(t1 - t0).count() * 1e3;
    const double gemm_ms = std::chrono::duration<double>(t2 - t1).count() * 1e3;
    uint64_t hash = 0;
    for (const uint16_t v : out) hash = hash * 31 + v;
    std::printf("%016lx ", static_cast<unsigned long>(hash));
    std::printf("%ldx%ld->%ld: pack %.3f ms, GEMM %.3f ms = %.1f GFLOP/s\n", long(m), long(k), long(n), pack_ms, gemm_ms,
                2.0 * m * n * k / gemm_ms / 1e6);
  }
}
