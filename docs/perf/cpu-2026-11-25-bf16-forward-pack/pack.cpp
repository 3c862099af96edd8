// pack_bf16_weight alone on a [2048, 784] and a [4096, 1024] bfloat16 weight, one thread: with the
// weight and the packed buffer in cache ("warm"), after 256 MiB of other data evicted both ("cold"),
// and with only the weight evicted ("cold w"). Best and mean of 20 calls. Built by run.sh against
// the kernel with variants.patch, whose HYP_PACK_PREFETCH and HYP_PACK_NT select the variants.
#include "ops/cpu/bf16_gemm.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace hypatia::ops;

int main() {
  std::vector<char> flush(256 << 20);
  auto evict = [&] {
    for (size_t i = 0; i < flush.size(); i += 64) flush[i]++;
  };
  for (auto [n, k] : {std::pair<int64_t, int64_t>{2048, 784}, {4096, 1024}}) {
    std::vector<uint16_t> w(n * k);
    for (auto& v : w) v = static_cast<uint16_t>(rand());
    const size_t bytes = (bf16_packed_elements(n, k) * 2 + 63) / 64 * 64;
    auto* packed = static_cast<uint16_t*>(std::aligned_alloc(64, bytes));  // 64-byte aligned, as ATen's
    for (const char* state : {"warm", "cold", "cold w"}) {
      double best = 1e30, sum = 0;
      for (int r = 0; r < 20; ++r) {
        if (std::strcmp(state, "warm") != 0) evict();
        if (std::strcmp(state, "cold w") == 0) std::memset(packed, 0, bytes);
        const auto t = std::chrono::steady_clock::now();
        pack_bf16_weight(w.data(), k, false, n, k, 0, bf16_gemm_panels(n), packed);
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
        best = std::min(best, us);
        sum += us;
      }
      std::printf("  %ldx%ld %-6s best %5.0f us  mean %5.0f us\n", n, k, state, best, sum / 20);
    }
    double best = 1e30;
    std::vector<uint16_t> copy(n * k);
    for (int r = 0; r < 20; ++r) {
      evict();
      const auto t = std::chrono::steady_clock::now();
      std::memcpy(copy.data(), w.data(), n * k * 2);
      best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count());
    }
    std::printf("  %ldx%ld memcpy of the weight, cold: best %5.0f us\n", n, k, best);
    std::free(packed);
  }
}
