// PyTorch alone under ThreadSanitizer: bfloat16 matrix products (at::mm, which oneDNN runs on CPUs
// with AVX-512 BF16) of shapes nothing has run yet, from 16 threads released at once, in two rounds
// (the first the process's first oneDNN calls, the second new shapes again), as
// Concurrency.FirstCallsOfNewShapesFrom16Threads reaches them through fused_mlp's backward (the
// weight gradient g.T @ h and the input gradient g @ w). No hypatia code. Build and run (T: the
// torch package's folder), without the suppressions, several times:
//   g++ -std=c++17 -O1 -g -fsanitize=thread -isystem $T/include onednn_tsan_control.cpp -o control \
//       -L$T/lib -Wl,-rpath,$T/lib -ltorch_cpu -lc10
//   OMP_NUM_THREADS=1 ./control
// docs/reliability/README.md (Suppressions) has what it reported.
#include <ATen/ATen.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

// One round: thread t multiplies shapes offset by `first` + t, all threads released at once.
void round_of(int first) {
  constexpr int kThreads = 16;
  std::mutex mutex;
  std::condition_variable changed;
  int ready = 0;
  bool go = false;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const auto opts = at::TensorOptions().dtype(at::kBFloat16);
      const int64_t s = first + t;
      const at::Tensor g = at::ones({131 + s, 61 + s}, opts), h = at::ones({131 + s, 97 + 2 * s}, opts);
      const at::Tensor w = at::ones({61 + s, 97 + 2 * s}, opts);
      {
        std::unique_lock<std::mutex> lock(mutex);
        ++ready;
        changed.notify_all();
        changed.wait(lock, [&] { return go; });
      }
      const at::Tensor weight_grad = at::mm(g.t(), h), input_grad = at::mm(g, w);
      if (weight_grad.size(0) != 61 + s || input_grad.size(1) != 97 + 2 * s) {
        std::fprintf(stderr, "thread %d: wrong shapes\n", t);
      }
    });
  }
  {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return ready == kThreads; });
    go = true;
    changed.notify_all();
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
}

int main() {
  round_of(0);
  round_of(100);
  std::printf("two rounds of 16 threads: done\n");
  return 0;
}
