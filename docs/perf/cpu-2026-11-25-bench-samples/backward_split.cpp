// The backward GEMMs of a Linear+ReLU (grad @ w, grad.T @ x, and the bias sum) three ways, at T
// threads: "seq" as ATen runs them (each GEMM over every thread), "par" the two side by side (one
// task each, single-threaded MKL inside), "split" each thread taking its share of both. Medians of
// 300 calls, 7 rounds (median, min-max of the rounds). Build and run from the repository root:
//   TP=.venv/lib/python3.11/site-packages/torch
//   g++ -O2 -std=c++17 docs/perf/cpu-2026-11-25-bench-samples/backward_split.cpp -I$TP/include -L$TP/lib \
//     -ltorch_cpu -lc10 -Wl,-rpath,$TP/lib -fopenmp -o /tmp/backward_split
//   /tmp/backward_split M K N THREADS [bf16]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <chrono>
#include <cstdio>
#include <algorithm>
#include <vector>
#include <malloc.h>
using clk = std::chrono::steady_clock;
int main(int argc, char** argv) {
  mallopt(M_MMAP_THRESHOLD, 32 << 20); mallopt(M_TRIM_THRESHOLD, 64 << 20);
  int64_t M = atoi(argv[1]), K = atoi(argv[2]), N = atoi(argv[3]);
  auto dt = argc > 5 && std::string(argv[5]) == "bf16" ? at::kBFloat16 : at::kFloat;
  int T = atoi(argv[4]); at::set_num_threads(T);
  std::vector<at::Tensor> gs, hs;
  for (int i = 0; i < 128; ++i) { gs.push_back(at::randn({M, N}).to(dt)); hs.push_back(at::randn({M, K}).to(dt)); }
  at::Tensor w = at::randn({N, K}).to(dt);
  auto seq = [&](int i) { auto a = gs[i].mm(w); auto b = gs[i].t().mm(hs[i]); auto c = gs[i].sum(0); };
  auto par = [&](int i) {
    at::Tensor a, b, c;
    at::parallel_for(0, 2, 1, [&](int64_t s, int64_t e) {
      for (int64_t t = s; t < e; ++t) {
        if (t == 0) a = gs[i].mm(w); else { b = gs[i].t().mm(hs[i]); c = gs[i].sum(0); }
      }
    });
  };
  auto split = [&](int i) {
    at::Tensor a = at::empty({M, K}, gs[i].options()), b = at::empty({N, K}, gs[i].options());
    const at::Tensor& g = gs[i]; const at::Tensor& h = hs[i];
    at::parallel_for(0, T, 1, [&](int64_t s, int64_t e) {
      for (int64_t t = s; t < e; ++t) {
        int64_t r0 = M * t / T, r1 = M * (t + 1) / T, n0 = N * t / T, n1 = N * (t + 1) / T;
        auto ao = a.narrow(0, r0, r1 - r0); at::mm_out(ao, g.narrow(0, r0, r1 - r0), w);
        auto bo = b.narrow(0, n0, n1 - n0); at::mm_out(bo, g.narrow(1, n0, n1 - n0).t(), h);
      }
    });
    auto c = g.sum(0);
  };
  const char* names[] = {"seq", "par", "split"};
  std::vector<double> med[3];
  for (int r = 0; r < 7; ++r) {
    for (int which = 0; which < 3; ++which) {
      std::vector<double> ts;
      for (int it = 0; it < 300; ++it) {
        auto t0 = clk::now();
        if (which == 0) seq(it % 128); else if (which == 1) par(it % 128); else split(it % 128);
        ts.push_back(std::chrono::duration<double, std::milli>(clk::now() - t0).count());
      }
      std::nth_element(ts.begin(), ts.begin() + ts.size() / 2, ts.end());
      med[which].push_back(ts[ts.size() / 2]);
    }
  }
  for (int j = 0; j < 3; ++j) { std::sort(med[j].begin(), med[j].end()); printf("%s %.4f (%.4f-%.4f)  ", names[j], med[j][3], med[j][0], med[j][6]); }
  printf("\n");
}
