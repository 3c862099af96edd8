// The library's float32 weight-gradient kernel alone, one thread: out = g.T @ h for g [m, n] and
// h [m, k] on random data, four rounds, and its largest error against a float64 sum at 200 entries.
// Built against the repository's ops/cpu/f32_weight_grad_avx512.cpp by run.sh:  ./kernel M N K
#include "ops/cpu/f32_weight_grad.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

using namespace hypatia::ops;

int main(int argc, char** argv) {
  const int64_t m = std::atoll(argv[1]), n = std::atoll(argv[2]), k = std::atoll(argv[3]);
  std::vector<float> g(m * n), h(m * k), out(n * k), scratch(weight_grad_f32_scratch_elements(n, k));
  std::mt19937 gen(1);
  std::normal_distribution<float> normal;
  for (auto& v : g) v = normal(gen);
  for (auto& v : h) v = normal(gen);
  for (int round = 0; round < 4; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    weight_grad_f32(g.data(), n, h.data(), k, m, n, k, out.data(), k, scratch.data());
    const double ms = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3;
    std::printf("m%ld n%ld k%ld: kernel %.1f ms = %.1f GFLOP/s\n", long(m), long(n), long(k), ms,
                2.0 * m * n * k / ms / 1e6);
  }
  double err = 0, scale = 0;
  for (int64_t t = 0; t < 200; ++t) {
    const int64_t i = t * 7919 % n, j = t * 104729 % k;
    double sum = 0;
    for (int64_t r = 0; r < m; ++r) sum += double(g[r * n + i]) * h[r * k + j];
    err = std::max(err, std::abs(sum - out[i * k + j]));
    scale = std::max(scale, std::abs(sum));
  }
  std::printf("m%ld n%ld k%ld: largest error %.2g of entries up to %.3g\n", long(m), long(n), long(k), err, scale);
}
