#pragma once
// Row blocking for the CPU kernels: a block's activations stay in cache between the GEMM that
// writes them and the epilogue or layer that reads them.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ThreadLocalState.h>

#include <algorithm>
#include <cstdint>

namespace hypatia::ops {

// A block's widest activation aims at one core's L2 ...
constexpr int64_t kBlockActivationBytes = 1024 * 1024;
// ... but each block's GEMM repacks the weights, which costs more than the epilogue saves below
// about a thousand rows (measured: 32-row blocks ran 0.6x eager at 4096x1024x4096 fp32).
constexpr int64_t kMinBlockRows = 1024;

// Rows per block of a call over `rows` rows: the L2 aim, but no more than a thread's share of the
// rows (a 16-core Xeon ran 65536x64 bfloat16 in 8 blocks of 8192 rows: 8 threads idle), and no
// fewer than kMinBlockRows.
inline int64_t rows_per_block(int64_t widest, int64_t element_size, int64_t rows) {
  const int64_t l2_rows = kBlockActivationBytes / std::max<int64_t>(1, widest * element_size);
  const int64_t per_thread = (rows + at::get_num_threads() - 1) / at::get_num_threads();
  return std::max(kMinBlockRows, std::min(l2_rows, per_thread));
}

// Elements per parallel task of an elementwise pass: ATen's grain for elementwise ops (GRAIN_SIZE),
// so that such a pass spreads over as many threads as eager's.
constexpr int64_t kElementwiseGrain = int64_t(1) << 15;

// The same in rows of `cols` elements.
inline int64_t rows_per_task(int64_t cols) {
  return std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, cols));
}

// t itself where each row's elements are adjacent, as the library's raw-pointer kernels read them,
// else a contiguous copy.
inline at::Tensor with_unit_column_stride(const at::Tensor& t) {
  return t.stride(1) == 1 ? t : t.contiguous();
}

// Rows per parallel task of a GEMM kernel over rows of `macs_per_row` multiply-adds: about 2^16
// multiply-adds a task, and no fewer than 8 rows.
inline int64_t rows_per_gemm_task(int64_t macs_per_row) {
  return std::max<int64_t>(8, (int64_t(1) << 16) / std::max<int64_t>(1, macs_per_row));
}

// at::parallel_for whose tasks run with the caller's thread-local state (grad mode, the dispatch
// keys excluded). Tasks that call ATen ops need it: an OpenMP worker thread starts without the
// caller's exclusion of autograd, and would record (or refuse) ops on inputs that require grad.
template <typename Fn>
void parallel_for_with_state(int64_t begin, int64_t end, int64_t grain, const Fn& fn) {
  const at::ThreadLocalState state;
  at::parallel_for(begin, end, grain, [&](int64_t first, int64_t last) {
    const at::ThreadLocalStateGuard guard(state);
    fn(first, last);
  });
}

// Tasks of a reduction over `units` (row blocks, chunks) whose partial sums are added in task
// order: at most one a thread, each over a fixed range of units, so that the sum does not depend on
// how the threads are scheduled.
inline int64_t reduction_tasks(int64_t units) {
  return std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), units));
}

// fn(task, first, end) for each of `tasks` tasks (as reduction_tasks counts them) over the caller's
// threads: task t takes units [units t / tasks, units (t + 1) / tasks).
template <typename Fn>
void for_each_reduction_task(int64_t tasks, int64_t units, const Fn& fn) {
  parallel_for_with_state(0, tasks, 1, [&](int64_t first_task, int64_t end_task) {
    for (int64_t t = first_task; t < end_task; ++t) {
      fn(t, units * t / tasks, units * (t + 1) / tasks);
    }
  });
}

// Calls fn(begin, end) on chunks of rows spread over ATen's intra-op threads, each chunk a whole
// number of `block`-row blocks (the last one may be short). Rows that fit in one block run on the
// caller, whose BLAS then uses every thread itself.
template <typename Fn>
void for_each_row_chunk(int64_t rows, int64_t block, const Fn& fn) {
  if (rows <= block) {
    fn(0, rows);
    return;
  }
  parallel_for_with_state(0, rows, block, fn);
}

}  // namespace hypatia::ops
