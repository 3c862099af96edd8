#pragma once
// Large CPU tensors whose memory outlives them, kept for the next tensor of the same size. glibc maps
// every allocation above 32 MiB afresh and unmaps it when freed, so each call's first writes to such
// a tensor fault its pages in one at a time (docs/perf/experiments.md#cpu-buffer-cache).
#include <ATen/core/Tensor.h>

#include <cstddef>

namespace hypatia::ops {

// Below this, glibc's heap already keeps freed memory mapped.
constexpr size_t kBufferCacheMinBytes = size_t{32} << 20;

// at::empty(sizes, options) for a contiguous CPU tensor. With kBufferCacheMinBytes or more, its
// memory is a freed block of the same size from the cache, if there is one, and goes back to the
// cache when the tensor is freed. The cache keeps HYPATIA_CPU_BUFFER_CACHE_MIB mebibytes of blocks at
// most (default 512; 0 keeps none), giving the oldest back to the system first.
at::Tensor empty_from_buffer_cache(at::IntArrayRef sizes, const at::TensorOptions& options);

// The bytes of freed blocks the cache keeps now.
size_t buffer_cache_bytes();

// Gives every kept block back to the system; returns their bytes.
size_t empty_buffer_cache();

}  // namespace hypatia::ops
