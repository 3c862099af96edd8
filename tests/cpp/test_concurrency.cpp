// The ops and passes from many threads at once (docs/reliability/README.md#concurrency): one fused
// module called from 16 threads (10,000 calls in all), equal to serial calls; the first calls of new
// shapes from 16 threads at once; hypatia::fuse from several threads on different modules; the CPU
// buffer cache from 16 threads. On CUDA (skipped without a GPU): a stream per thread, equal to serial
// calls; the autotuner's first calls of new shapes from 16 threads on 16 streams; the ops captured in
// CUDA graphs on a non-default stream, replayed, equal to eager. scripts/sanitize.sh tsan runs the CPU
// tests under ThreadSanitizer, scripts/sanitize.sh gpu the CUDA ones under compute-sanitizer.
#include <hypatia/fuse.h>
#include <hypatia/ops.h>
#include "ops/cpu/buffer_cache.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/api/module.h>

#ifdef HYPATIA_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kThreads = 16;

// Calls in all, over kThreads threads: 10,000, or HYPATIA_TEST_CONCURRENCY_CALLS (fewer under
// compute-sanitizer, which runs every kernel tens of times slower).
int total_calls() {
  const char* env = std::getenv("HYPATIA_TEST_CONCURRENCY_CALLS");
  return env != nullptr && *env != '\0' ? std::max(kThreads, std::atoi(env)) : 10000;
}

using OptionalTensorList = c10::List<std::optional<at::Tensor>>;

// Every thread waits here until all have arrived, so that their first calls race.
class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (--count_ == 0) {
      cv_.notify_all();
    } else {
      cv_.wait(lock, [this] { return count_ == 0; });
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int count_;
};

// Runs body(thread index) on `threads` threads at once; returns the failures they recorded (gtest
// assertions are thread-safe, but a message per thread says which one failed).
std::vector<std::string> run_threads(int threads, const std::function<void(int, std::vector<std::string>&)>& body) {
  std::vector<std::vector<std::string>> failures(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      try {
        body(t, failures[t]);
      } catch (const std::exception& e) {
        failures[t].push_back("thread " + std::to_string(t) + " threw: " + e.what());
      }
    });
  }
  for (std::thread& th : pool) {
    th.join();
  }
  std::vector<std::string> all;
  for (const auto& f : failures) {
    all.insert(all.end(), f.begin(), f.end());
  }
  return all;
}

// A result computed on a thread of its own, as the workers are: OpenMP's thread count is a
// per-thread setting, and the serial reference must split its work as the workers do.
template <typename F>
auto on_fresh_thread(const F& f) {
  decltype(f()) result;
  std::thread([&] { result = f(); }).join();
  return result;
}

std::string describe_difference(const at::Tensor& got, const at::Tensor& want) {
  std::ostringstream out;
  if (got.sizes() != want.sizes()) {
    out << "sizes " << got.sizes() << " vs " << want.sizes();
  } else {
    out << "max abs diff " << (got.to(at::kDouble).cpu() - want.to(at::kDouble).cpu()).abs().max().item<double>();
  }
  return out.str();
}

// An MLP 24-48-32-8 (linear, relu, linear, relu, linear) and a Linear+ReLU head beside it: fused,
// one hypatia::fused_mlp and one hypatia::fused_linear_relu.
torch::jit::Module make_module(int64_t in, int64_t hidden, int64_t out, at::ScalarType dtype) {
  at::manual_seed(7);
  torch::jit::Module m("Net");
  const auto opts = at::TensorOptions().dtype(dtype);
  m.register_parameter("w1", at::randn({hidden, in}, opts) / 4, false);
  m.register_parameter("b1", at::randn({hidden}, opts), false);
  m.register_parameter("w2", at::randn({hidden / 2 + 8, hidden}, opts) / 6, false);
  m.register_parameter("b2", at::randn({hidden / 2 + 8}, opts), false);
  m.register_parameter("w3", at::randn({out, hidden / 2 + 8}, opts) / 4, false);
  m.register_parameter("wh", at::randn({out, in}, opts) / 4, false);
  m.register_parameter("bh", at::randn({out}, opts), false);
  m.define(R"(
def forward(self, x):
    h = torch.relu(torch.linear(x, self.w1, self.b1))
    h = torch.relu(torch.linear(h, self.w2, self.b2))
    y = torch.linear(h, self.w3)
    head = torch.relu(torch.linear(x, self.wh, self.bh))
    return y + head
)");
  return m;
}

// Inputs of several batch shapes (1 to 3 leading dims, one of them empty).
std::vector<at::Tensor> make_inputs(int count, int64_t in, at::ScalarType dtype) {
  at::manual_seed(11);
  std::vector<at::Tensor> xs;
  const std::vector<std::vector<int64_t>> leads = {{1}, {5}, {3, 7}, {2, 2, 3}, {64}, {0}, {17}};
  for (int i = 0; i < count; ++i) {
    std::vector<int64_t> sizes = leads[i % leads.size()];
    sizes.push_back(in);
    xs.push_back(at::randn(sizes, at::TensorOptions().dtype(dtype)));
  }
  return xs;
}

// 16 threads, 10,000 calls of one fused module in all, each equal to the serial call on its input.
TEST(Concurrency, FusedModuleFrom16ThreadsEqualsSerial) {
  torch::jit::Module module = make_module(24, 48, 8, at::kFloat);
  const hypatia::FusionReport report = hypatia::fuse(module);
  ASSERT_EQ(report.mlp, 1) << report.to_string();
  ASSERT_EQ(report.linear_relu, 1) << report.to_string();
  const std::vector<at::Tensor> inputs = make_inputs(21, 24, at::kFloat);
  const std::vector<at::Tensor> serial = on_fresh_thread([&] {
    std::vector<at::Tensor> out;
    for (const at::Tensor& x : inputs) {
      out.push_back(module.forward({x}).toTensor());
    }
    return out;
  });
  std::atomic<int> calls{0};
  Barrier barrier(kThreads);
  const auto failures = run_threads(kThreads, [&](int t, std::vector<std::string>& failed) {
    torch::jit::Module mine = module;  // a handle on the same module (shared methods and executors)
    barrier.wait();
    for (int i = 0; i < total_calls() / kThreads; ++i) {
      const size_t k = (t * 5 + i) % inputs.size();
      const at::Tensor y = mine.forward({inputs[k]}).toTensor();
      calls.fetch_add(1, std::memory_order_relaxed);
      if (!y.equal(serial[k])) {
        failed.push_back("thread " + std::to_string(t) + " call " + std::to_string(i) + " input " +
                         std::to_string(k) + ": " + describe_difference(y, serial[k]));
        return;
      }
    }
  });
  EXPECT_TRUE(failures.empty()) << failures.front();
  EXPECT_GE(calls.load(), total_calls() / kThreads * kThreads);
}

// The ops themselves from 16 threads, forward and backward (autograd), every dtype the CPU kernels
// take, against the serial results.
TEST(Concurrency, OpsForwardAndBackwardFrom16ThreadsEqualSerial) {
  struct Call {
    at::Tensor x, w1, b1, w2;
  };
  std::vector<Call> cases;
  at::manual_seed(3);
  for (const at::ScalarType dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf}) {
    const auto opts = at::TensorOptions().dtype(dtype);
    cases.push_back({at::randn({9, 40}, opts), at::randn({24, 40}, opts) / 6, at::randn({24}, opts),
                     at::randn({16, 24}, opts) / 5});
  }
  // Forward of both ops and the gradients of fused_mlp's input and weights.
  auto compute = [&](const Call& c) {
    const at::Tensor x = c.x.detach().requires_grad_(), w1 = c.w1.detach().requires_grad_();
    const at::Tensor single = hypatia::fused_linear_relu(x, w1, c.b1);
    const at::Tensor mlp = hypatia::fused_mlp(x, {w1, c.w2}, OptionalTensorList({c.b1, std::nullopt}), true);
    const auto grads = torch::autograd::grad({(mlp * mlp).sum() + single.sum()}, {x, w1});
    return std::vector<at::Tensor>{single.detach(), mlp.detach(), grads[0], grads[1]};
  };
  const auto serial = on_fresh_thread([&] {
    std::vector<std::vector<at::Tensor>> out;
    for (const Call& c : cases) {
      out.push_back(compute(c));
    }
    return out;
  });
  Barrier barrier(kThreads);
  const auto failures = run_threads(kThreads, [&](int t, std::vector<std::string>& failed) {
    barrier.wait();
    for (int i = 0; i < 40; ++i) {
      const size_t k = (t + i) % cases.size();
      const auto got = compute(cases[k]);
      for (size_t j = 0; j < got.size(); ++j) {
        if (!got[j].equal(serial[k][j])) {
          failed.push_back("thread " + std::to_string(t) + " case " + std::to_string(k) + " result " +
                           std::to_string(j) + ": " + describe_difference(got[j], serial[k][j]));
          return;
        }
      }
    }
  });
  EXPECT_TRUE(failures.empty()) << failures.front();
}

// The first calls of shapes no call has used yet, from 16 threads at once (each thread its own
// shape and one shape all share), forward and backward; then the same calls serially.
TEST(Concurrency, FirstCallsOfNewShapesFrom16Threads) {
  auto compute = [](int64_t rows, int64_t in, int64_t out, at::ScalarType dtype) {
    // A generator of its own: the global one, seeded from 16 threads at once, would interleave them.
    const at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(rows * 1000 + in);
    const auto opts = at::TensorOptions().dtype(dtype);
    const at::Tensor x = at::randn({rows, in}, gen, opts).requires_grad_();
    const at::Tensor w = (at::randn({out, in}, gen, opts) / 8).requires_grad_();
    const at::Tensor b = at::randn({out}, gen, opts);
    const at::Tensor y = hypatia::fused_mlp(x, {w, w.narrow(1, 0, out).t()}, OptionalTensorList({b, b}), false);
    const auto grads = torch::autograd::grad({y.sum()}, {x, w});
    return std::vector<at::Tensor>{y.detach(), grads[0], grads[1]};
  };
  auto shape_of = [](int t) {  // thread t's own shape (odd, never used elsewhere in this file)
    return std::vector<int64_t>{37 + t, 43 + 2 * t, 29 + t};
  };
  const at::ScalarType dtypes[] = {at::kFloat, at::kBFloat16};
  std::vector<std::vector<at::Tensor>> first(2 * kThreads);
  Barrier barrier(kThreads);
  const auto failures = run_threads(kThreads, [&](int t, std::vector<std::string>&) {
    const auto s = shape_of(t);
    const at::ScalarType dtype = dtypes[t % 2];
    barrier.wait();
    first[2 * t] = compute(131, 97, 61, dtype);  // shared by every thread of this dtype
    first[2 * t + 1] = compute(s[0], s[1], s[2], dtype);
  });
  ASSERT_TRUE(failures.empty()) << failures.front();
  for (int t = 0; t < kThreads; ++t) {
    const auto s = shape_of(t);
    const auto shared = on_fresh_thread([&] { return compute(131, 97, 61, dtypes[t % 2]); });
    const auto own = on_fresh_thread([&] { return compute(s[0], s[1], s[2], dtypes[t % 2]); });
    for (size_t j = 0; j < shared.size(); ++j) {
      EXPECT_TRUE(first[2 * t][j].equal(shared[j])) << "thread " << t << " shared shape, result " << j << ": "
                                                    << describe_difference(first[2 * t][j], shared[j]);
      EXPECT_TRUE(first[2 * t + 1][j].equal(own[j])) << "thread " << t << " own shape, result " << j << ": "
                                                     << describe_difference(first[2 * t + 1][j], own[j]);
    }
  }
}

// hypatia::fuse from 8 threads at once, each on a module of its own (different widths, some
// frozen), and each fused module's output equal to its unfused original's.
TEST(Concurrency, FuseFromSeveralThreadsOnDifferentModules) {
  constexpr int kFusers = 8;
  std::vector<torch::jit::Module> modules;
  std::vector<at::Tensor> inputs, expected;
  for (int t = 0; t < kFusers; ++t) {
    modules.push_back(make_module(8 + 2 * t, 16 + 4 * t, 3 + t, at::kDouble));
    inputs.push_back(at::randn({6, 8 + 2 * t}, at::kDouble));
    expected.push_back(modules.back().forward({inputs.back()}).toTensor());
  }
  Barrier barrier(kFusers);
  std::vector<hypatia::FusionReport> reports(kFusers);
  std::vector<at::Tensor> outputs(kFusers);
  const auto failures = run_threads(kFusers, [&](int t, std::vector<std::string>&) {
    torch::jit::Module fused = modules[t];
    barrier.wait();
    reports[t] = hypatia::fuse(fused, {/*freeze=*/t % 2 == 1, /*mlp=*/true});
    outputs[t] = fused.forward({inputs[t]}).toTensor();
  });
  ASSERT_TRUE(failures.empty()) << failures.front();
  for (int t = 0; t < kFusers; ++t) {
    EXPECT_EQ(reports[t].mlp, 1) << "module " << t << ": " << reports[t].to_string();
    EXPECT_EQ(reports[t].linear_relu, 1) << "module " << t << ": " << reports[t].to_string();
    EXPECT_LT((outputs[t] - expected[t]).abs().max().item<double>(), 1e-12) << "module " << t;
  }
}

// The CPU buffer cache (blocks of 32 MiB and more, shared by all threads) from 16 threads: a block
// is never handed to two live tensors at once (each thread's marks survive until it frees its
// tensor), while another thread empties the cache now and then.
TEST(Concurrency, CpuBufferCacheFrom16Threads) {
  const int64_t floats = hypatia::ops::kBufferCacheMinBytes / sizeof(float);
  std::atomic<bool> done{false};
  std::thread emptier([&] {
    while (!done.load()) {
      hypatia::ops::empty_buffer_cache();
      std::this_thread::yield();
    }
  });
  Barrier barrier(kThreads);
  const auto failures = run_threads(kThreads, [&](int t, std::vector<std::string>& failed) {
    barrier.wait();
    for (int i = 0; i < 20; ++i) {
      const int64_t n = floats + (t % 2) * 1024;  // two sizes
      at::Tensor a = hypatia::ops::empty_from_buffer_cache({n}, at::TensorOptions().dtype(at::kFloat));
      float* p = a.data_ptr<float>();
      const float mark = static_cast<float>(t * 100 + i);
      for (int64_t j : {int64_t{0}, n / 2, n - 1}) {
        p[j] = mark;
      }
      std::this_thread::yield();
      for (int64_t j : {int64_t{0}, n / 2, n - 1}) {
        if (p[j] != mark) {
          failed.push_back("thread " + std::to_string(t) + ": a block shared by two live tensors");
          return;
        }
      }
    }
  });
  done = true;
  emptier.join();
  EXPECT_TRUE(failures.empty()) << failures.front();
  hypatia::ops::empty_buffer_cache();
  EXPECT_EQ(hypatia::ops::buffer_cache_bytes(), 0u);
}

#ifdef HYPATIA_WITH_CUDA

bool has_gpu() {
  return at::hasCUDA() && at::cuda::device_count() > 0;
}

// The operands of one CUDA case: fused_linear_relu (cuBLASLt or the skinny kernel), fused_mlp per
// layer (float32) and the narrow-MLP kernel (bf16, widths multiples of 16 up to 128).
struct CudaCase {
  at::Tensor x, w1, b1, w2, xn;
  std::vector<at::Tensor> wn;
  std::vector<std::optional<at::Tensor>> bn;
};

CudaCase make_cuda_case(int64_t rows, int64_t in, int64_t hidden, int64_t seed) {
  at::manual_seed(seed);
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA);
  const auto bf16 = f32.dtype(at::kBFloat16);
  CudaCase c;
  c.x = at::randn({rows, in}, f32);
  c.w1 = at::randn({hidden, in}, f32) / 8;
  c.b1 = at::randn({hidden}, f32);
  c.w2 = at::randn({24, hidden}, f32) / 8;
  c.xn = at::randn({rows * 4, 64}, bf16);
  c.wn = {at::randn({64, 64}, bf16) / 8, at::randn({32, 64}, bf16) / 8};
  c.bn = {at::randn({64}, bf16), std::nullopt};
  return c;
}

std::vector<at::Tensor> run_cuda_case(const CudaCase& c) {
  return {hypatia::fused_linear_relu(c.x, c.w1, c.b1),
          hypatia::fused_mlp(c.x, {c.w1, c.w2}, OptionalTensorList({c.b1, std::nullopt}), false),
          hypatia::fused_mlp(c.xn, c.wn, OptionalTensorList(c.bn), true)};
}

// 16 threads, each on a stream of its own, 10,000 calls in all (each 3 ops), equal to serial calls
// on the default stream. The shapes are tuned first, serially: then every call runs the cached choice.
TEST(ConcurrencyCuda, StreamPerThreadEqualsSerial) {
  if (!has_gpu()) {
    GTEST_SKIP() << "needs a GPU";
  }
  std::vector<CudaCase> cases;
  for (int i = 0; i < 4; ++i) {
    cases.push_back(make_cuda_case(8 + 56 * i, 96, 128 + 32 * i, i));
  }
  std::vector<std::vector<at::Tensor>> serial;
  for (const CudaCase& c : cases) {
    run_cuda_case(c);  // tuned
    serial.push_back(run_cuda_case(c));
  }
  at::cuda::device_synchronize();
  Barrier barrier(kThreads);
  const auto failures = run_threads(kThreads, [&](int t, std::vector<std::string>& failed) {
    const c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool(false, 0);
    const c10::cuda::CUDAStreamGuard guard(stream);
    barrier.wait();
    std::vector<std::pair<size_t, std::vector<at::Tensor>>> results;
    for (int i = 0; i < total_calls() / kThreads; ++i) {
      const size_t k = (t + i) % cases.size();
      auto out = run_cuda_case(cases[k]);
      if (i % 25 == 0) {  // every 25th call kept and checked (the rest may be freed and reused on this stream)
        results.emplace_back(k, std::move(out));
      }
    }
    stream.synchronize();
    for (const auto& [k, out] : results) {
      for (size_t j = 0; j < out.size(); ++j) {
        if (!out[j].equal(serial[k][j])) {
          failed.push_back("thread " + std::to_string(t) + " case " + std::to_string(k) + " op " + std::to_string(j) +
                           ": " + describe_difference(out[j], serial[k][j]));
          return;
        }
      }
    }
  });
  EXPECT_TRUE(failures.empty()) << failures.front();
}

double rel_error(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.to(at::kDouble).cpu(), w = want.to(at::kDouble).cpu();
  return ((g - w).norm() / w.norm().clamp_min(1e-300)).item<double>();
}

// The autotuner's first calls of new shapes from 16 threads at once, each on its own stream: all
// threads tune the same shapes (a forward and backward of each op), against float64.
TEST(ConcurrencyCuda, FirstCallsOfNewShapesFrom16ThreadsOnStreams) {
  if (!has_gpu()) {
    GTEST_SKIP() << "needs a GPU";
  }
  const CudaCase c = make_cuda_case(77, 104, 136, 99);  // shapes no other test uses
  const at::Tensor x64 = c.x.to(at::kDouble), w1 = c.w1.to(at::kDouble), b1 = c.b1.to(at::kDouble);
  const at::Tensor w2 = c.w2.to(at::kDouble);
  const at::Tensor ref_single = at::relu(at::linear(x64, w1, b1));
  const at::Tensor ref_mlp = at::linear(ref_single, w2);
  at::cuda::device_synchronize();  // the operands, made on the default stream, before the threads' streams read them
  Barrier barrier(kThreads);
  const auto failures = run_threads(kThreads, [&](int t, std::vector<std::string>& failed) {
    const c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool(false, 0);
    const c10::cuda::CUDAStreamGuard guard(stream);
    const at::Tensor x = c.x.clone().requires_grad_(), w = c.w1.clone().requires_grad_();
    stream.synchronize();
    barrier.wait();
    const at::Tensor single = hypatia::fused_linear_relu(x, w, c.b1);
    const at::Tensor mlp = hypatia::fused_mlp(x, {w, c.w2}, OptionalTensorList({c.b1, std::nullopt}), false);
    const auto grads = torch::autograd::grad({mlp.sum()}, {x, w});
    stream.synchronize();
    const double errors[] = {rel_error(single, ref_single), rel_error(mlp, ref_mlp)};
    for (double e : errors) {
      if (!(e < 1e-5)) {
        failed.push_back("thread " + std::to_string(t) + ": relative error " + std::to_string(e));
      }
    }
    if (!grads[0].isfinite().all().item<bool>() || !grads[1].isfinite().all().item<bool>()) {
      failed.push_back("thread " + std::to_string(t) + ": non-finite gradient");
    }
  });
  EXPECT_TRUE(failures.empty()) << failures.front();
  // The gradients against float64, once every shape is tuned.
  const at::Tensor x = c.x.clone().requires_grad_(), w = c.w1.clone().requires_grad_();
  const auto grads = torch::autograd::grad(
      {hypatia::fused_mlp(x, {w, c.w2}, OptionalTensorList({c.b1, std::nullopt}), false).sum()}, {x, w});
  const at::Tensor xd = x64.clone().requires_grad_(), wd = w1.clone().requires_grad_();
  const auto ref = torch::autograd::grad({at::linear(at::relu(at::linear(xd, wd, b1)), w2).sum()}, {xd, wd});
  EXPECT_LT(rel_error(grads[0], ref[0]), 1e-5);
  EXPECT_LT(rel_error(grads[1], ref[1]), 1e-5);
}

// The ops captured into a CUDA graph on a non-default stream and replayed on new inputs, equal to
// eager calls on the same inputs: shapes tuned before the capture (the cached choice is captured),
// and a shape first seen inside the capture (ATen's way runs there), against float64.
TEST(ConcurrencyCuda, OpsInCudaGraphOnNonDefaultStream) {
  if (!has_gpu()) {
    GTEST_SKIP() << "needs a GPU";
  }
  // A capture allocates from the caching allocator's private pool; without the cache (as under
  // compute-sanitizer, scripts/sanitize.sh) each allocation is a cudaMalloc, which a capture forbids.
  if (std::getenv("PYTORCH_NO_CUDA_MEMORY_CACHING") != nullptr) {
    GTEST_SKIP() << "CUDA graph capture needs the caching allocator (PYTORCH_NO_CUDA_MEMORY_CACHING is set)";
  }
  CudaCase c = make_cuda_case(48, 96, 160, 5);
  run_cuda_case(c);  // tuned outside the capture
  const CudaCase fresh = make_cuda_case(19, 72, 88, 6);  // first seen inside the capture
  at::cuda::device_synchronize();
  const c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool(false, 0);
  std::vector<at::Tensor> captured;
  at::Tensor captured_fresh;
  at::cuda::CUDAGraph graph;
  {
    const c10::cuda::CUDAStreamGuard guard(stream);
    graph.capture_begin();
    captured = run_cuda_case(c);
    captured_fresh = hypatia::fused_linear_relu(fresh.x, fresh.w1, fresh.b1);
    graph.capture_end();
  }
  for (int round = 0; round < 3; ++round) {
    for (const at::Tensor& x : {c.x, c.xn, fresh.x}) {
      x.copy_(at::randn_like(x));
    }
    at::cuda::device_synchronize();
    {
      const c10::cuda::CUDAStreamGuard guard(stream);
      graph.replay();
      stream.synchronize();
    }
    const std::vector<at::Tensor> eager = run_cuda_case(c);
    for (size_t j = 0; j < eager.size(); ++j) {
      EXPECT_TRUE(captured[j].equal(eager[j])) << "round " << round << " op " << j << ": "
                                               << describe_difference(captured[j], eager[j]);
    }
    const at::Tensor ref = at::relu(at::linear(fresh.x.to(at::kDouble), fresh.w1.to(at::kDouble),
                                               fresh.b1.to(at::kDouble)));
    EXPECT_LT(rel_error(captured_fresh, ref), 1e-5) << "round " << round;
  }
}

#endif  // HYPATIA_WITH_CUDA

}  // namespace
