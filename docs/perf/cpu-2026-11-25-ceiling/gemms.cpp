// The six GEMMs of fused_mlp 8192x1024-4096 bfloat16 forward+backward, each by the library's own
// kernel (ops/cpu/bf16_gemm_avx512.cpp, compiled in) over all 8192 rows on one thread, packing
// included, as the op calls them: the time they need with nothing else around them. Five rounds;
// prints each GEMM's median and its share of vdpbf16ps's peak (PEAK_GFLOPS, run.sh measures it).
// Usage: ./gemms PEAK_GFLOPS
#include "ops/cpu/bf16_gemm.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

using namespace hypatia::ops;

namespace {

constexpr int64_t kRows = 8192, kIn = 1024, kHidden = 4096, kOut = 1024, kChunkRows = 1024;

// 64-byte aligned, as ATen's CPU allocations (pack_bf16_weight streams whole vectors).
template <typename T>
T* aligned(int64_t count) {
  return static_cast<T*>(std::aligned_alloc(64, (count * sizeof(T) + 63) / 64 * 64));
}

uint16_t* random_bf16(int64_t count, float scale, std::mt19937& gen) {
  std::uniform_real_distribution<float> uniform(-scale, scale);
  uint16_t* v = aligned<uint16_t>(count);
  for (int64_t i = 0; i < count; ++i) {
    const float f = uniform(gen);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    v[i] = static_cast<uint16_t>(u >> 16);
  }
  return v;
}

double ms_of(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const double peak_gflops = std::atof(argv[1]);
  std::mt19937 gen(0);
  uint16_t* x = random_bf16(kRows * kIn, 1, gen);
  uint16_t* w1 = random_bf16(kHidden * kIn, 0.05f, gen);  // [hidden, in], as a Linear's
  uint16_t* w2 = random_bf16(kOut * kHidden, 0.03f, gen);  // [out, hidden]
  uint16_t* grad_out = random_bf16(kRows * kOut, 1, gen);
  std::vector<float> b1(kHidden, 0.1f), b2(kOut, 0.1f), bias_sums(kHidden);
  uint16_t* h = aligned<uint16_t>(kRows * kHidden);
  uint16_t* y = aligned<uint16_t>(kRows * kOut);
  uint16_t* grad_h = aligned<uint16_t>(kRows * kHidden);
  uint16_t* grad_x = aligned<uint16_t>(kRows * kIn);
  uint16_t* packed = aligned<uint16_t>(bf16_packed_elements(kHidden, kHidden));
  float* sums = aligned<float>(bf16_grad_padded(kHidden) * bf16_grad_padded(kHidden));
  uint16_t* scratch = aligned<uint16_t>(std::max(wide_weight_grad_scratch_elements(kOut, kHidden),
                                                 wide_weight_grad_scratch_elements(kHidden, kIn)));

  // out[rows, n] = epilogue(in[rows, k] @ w.T), w packed from [n, k] or, when inputs_major, [k, n].
  auto gemm = [&](const uint16_t* in, int64_t k, const uint16_t* w, bool inputs_major, int64_t n,
                  const Bf16Epilogue& e, uint16_t* out) {
    pack_bf16_weight(w, inputs_major ? n : k, inputs_major, n, k, 0, bf16_gemm_panels(n), packed);
    bf16_gemm_act(in, k, kRows, k, packed, n, e, out, n);
  };
  Bf16Epilogue bias_relu, bias_only, none, relu_grad;
  bias_relu.bias = b1.data();
  bias_relu.relu = true;
  bias_only.bias = b2.data();
  relu_grad.relu_out = h;
  relu_grad.ld_relu_out = kHidden;
  relu_grad.column_sums = bias_sums.data();

  struct Gemm {
    const char* name;
    std::function<void()> run;
    std::vector<double> ms;
  };
  std::vector<Gemm> gemms = {
      {"forward 1: relu(x @ w1.T + b1)", [&] { gemm(x, kIn, w1, false, kHidden, bias_relu, h); }, {}},
      {"forward 2: h @ w2.T + b2", [&] { gemm(h, kHidden, w2, false, kOut, bias_only, y); }, {}},
      {"w2 grad: grad_out.T @ h",
       [&] { wide_weight_grad_bf16(grad_out, kOut, h, kHidden, kRows, kOut, kHidden, sums, kHidden, false, scratch); },
       {}},
      {"h grad: (grad_out @ w2) * (h > 0), b1 sums", [&] { gemm(grad_out, kOut, w2, true, kHidden, relu_grad, grad_h); },
       {}},
      {"w1 grad: grad_h.T @ x, 1024-row chunks",
       [&] {
         for (int64_t r = 0; r < kRows; r += kChunkRows) {
           wide_weight_grad_bf16(grad_h + r * kHidden, kHidden, x + r * kIn, kIn, kChunkRows, kHidden, kIn, sums, kIn,
                                 /*accumulate=*/r > 0, scratch);
         }
       },
       {}},
      {"x grad: grad_h @ w1", [&] { gemm(grad_h, kHidden, w1, true, kIn, none, grad_x); }, {}},
  };
  for (int round = 0; round < 6; ++round) {
    for (Gemm& g : gemms) {
      const double ms = ms_of(g.run);
      if (round > 0) {  // the first round warms up
        g.ms.push_back(ms);
      }
    }
  }
  const double flops = 2.0 * kRows * kIn * kHidden;  // every one of the six
  double total = 0;
  for (Gemm& g : gemms) {
    std::sort(g.ms.begin(), g.ms.end());
    const double median = g.ms[g.ms.size() / 2];
    total += median;
    std::printf("%-44s %7.1f ms  %5.1f GFLOP/s  %4.1f%% of peak\n", g.name, median, flops / median / 1e6,
                100 * flops / median / 1e6 / peak_gflops);
  }
  std::printf("%-44s %7.1f ms  %5.1f GFLOP/s  %4.1f%% of peak\n", "all six", total, 6 * flops / total / 1e6,
              100 * 6 * flops / total / 1e6 / peak_gflops);
}
