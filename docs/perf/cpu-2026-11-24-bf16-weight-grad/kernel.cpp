// The library's wide bfloat16 weight-gradient kernel alone, one thread: sums = g.T @ h for g [m, n]
// and h [m, k] of random bfloat16 values, four rounds, and its largest error against a float64 sum
// at 200 entries. Built against the repository's ops/cpu/bf16_gemm_avx512.cpp by run.sh:  ./kernel M N K
#include "ops/cpu/bf16_gemm.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

using namespace hypatia::ops;

uint16_t to_bf16(float f) {  // round to nearest even (no NaN here)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
double from_bf16(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

int main(int argc, char** argv) {
  const int64_t m = std::atoll(argv[1]), n = std::atoll(argv[2]), k = std::atoll(argv[3]);
  const int64_t ld = bf16_grad_padded(k);
  std::vector<uint16_t> g(m * n), h(m * k), scratch(wide_weight_grad_scratch_elements(n, k));
  std::vector<float> sums(bf16_grad_padded(n) * ld);
  std::mt19937 gen(1);
  std::normal_distribution<float> normal;
  for (auto& v : g) v = to_bf16(normal(gen));
  for (auto& v : h) v = to_bf16(normal(gen));
  for (int round = 0; round < 4; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    wide_weight_grad_bf16(g.data(), n, h.data(), k, m, n, k, sums.data(), ld, scratch.data());
    const double ms = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3;
    std::printf("m%ld n%ld k%ld: kernel %.1f ms = %.1f GFLOP/s\n", long(m), long(n), long(k), ms,
                2.0 * m * n * k / ms / 1e6);
  }
  double err = 0, scale = 0;
  for (int64_t t = 0; t < 200; ++t) {
    const int64_t i = t * 7919 % n, j = t * 104729 % k;
    double sum = 0;
    for (int64_t r = 0; r < m; ++r) sum += from_bf16(g[r * n + i]) * from_bf16(h[r * k + j]);
    err = std::max(err, std::abs(sum - sums[i * ld + j]));
    scale = std::max(scale, std::abs(sum));
  }
  std::printf("m%ld n%ld k%ld: largest error %.2g of entries up to %.3g\n", long(m), long(n), long(k), err, scale);
}
