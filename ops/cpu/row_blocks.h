#pragma once
// Row blocking for the CPU kernels: blocks small enough that one block's activations stay
// in a core's L2 between the GEMM that writes them and the epilogue or layer that reads them.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

namespace hypatia::ops {

// Bytes of one block's widest activation that should fit in L2 together with the weights' panel.
constexpr int64_t kBlockActivationBytes = 256 * 1024;
constexpr int64_t kMinBlockRows = 32;

inline int64_t rows_per_block(int64_t widest, int64_t element_size) {
  const int64_t rows = kBlockActivationBytes / std::max<int64_t>(1, widest * element_size);
  return std::max(kMinBlockRows, rows / kMinBlockRows * kMinBlockRows);
}

// Calls fn(begin, end) on consecutive blocks of at most `block` rows, the blocks spread
// over ATen's intra-op threads. A single block runs on the caller, whose BLAS then uses
// every thread itself.
template <typename Fn>
void for_each_row_block(int64_t rows, int64_t block, const Fn& fn) {
  if (rows <= block) {
    fn(0, rows);
    return;
  }
  at::parallel_for(0, rows, block, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; r += block) {
      fn(r, std::min(end, r + block));
    }
  });
}

}  // namespace hypatia::ops
