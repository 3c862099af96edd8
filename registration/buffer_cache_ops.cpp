// Private ops through which Python reads and empties the CPU buffer cache (ops/cpu/buffer_cache.h):
// torch.ops.hypatia._cpu_buffer_cache_bytes() and torch.ops.hypatia._empty_cpu_buffer_cache().
#include "ops/cpu/buffer_cache.h"

#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(hypatia, m) {
  m.def("_cpu_buffer_cache_bytes() -> int",
        [] { return static_cast<int64_t>(hypatia::ops::buffer_cache_bytes()); });
  m.def("_empty_cpu_buffer_cache() -> int",
        [] { return static_cast<int64_t>(hypatia::ops::empty_buffer_cache()); });
}
