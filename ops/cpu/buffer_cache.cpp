#include "ops/cpu/buffer_cache.h"

#include <ATen/ops/empty.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <cstdlib>
#include <deque>
#include <mutex>

namespace hypatia::ops {
namespace {

struct Block {
  void* data;
  size_t bytes;
};

size_t limit_from_environment() {
  const char* mib = std::getenv("HYPATIA_CPU_BUFFER_CACHE_MIB");
  if (mib == nullptr || *mib == '\0') {
    return size_t{512} << 20;
  }
  char* end = nullptr;
  const unsigned long long value = std::strtoull(mib, &end, 10);
  TORCH_CHECK(*end == '\0' && *mib != '-', "HYPATIA_CPU_BUFFER_CACHE_MIB: expected a whole number of mebibytes, got '",
              mib, "'");
  return static_cast<size_t>(value) << 20;
}

class BufferCache {
 public:
  // Never destroyed: a tensor may be freed after static destructors ran.
  static BufferCache& instance() {
    static BufferCache* cache = new BufferCache();
    return *cache;
  }

  void* take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = kept_.begin(); it != kept_.end(); ++it) {
        if (it->bytes == bytes) {
          void* data = it->data;
          kept_bytes_ -= bytes;
          kept_.erase(it);
          return data;
        }
      }
    }
    return c10::alloc_cpu(bytes);
  }

  void keep(Block block) {
    std::deque<Block> released;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (block.bytes > limit_) {
        released.push_back(block);
      } else {
        while (kept_bytes_ + block.bytes > limit_) {
          released.push_back(pop_oldest());
        }
        kept_.push_back(block);
        kept_bytes_ += block.bytes;
      }
    }
    free_all(released);
  }

  size_t bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return kept_bytes_;
  }

  size_t empty() {
    std::deque<Block> released;
    size_t bytes = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      bytes = kept_bytes_;
      while (!kept_.empty()) {
        released.push_back(pop_oldest());
      }
    }
    free_all(released);
    return bytes;
  }

 private:
  Block pop_oldest() {
    const Block oldest = kept_.front();
    kept_.pop_front();
    kept_bytes_ -= oldest.bytes;
    return oldest;
  }

  // Outside the lock: unmapping takes a while.
  static void free_all(const std::deque<Block>& blocks) {
    for (const Block& block : blocks) {
      c10::free_cpu(block.data);
    }
  }

  const size_t limit_ = limit_from_environment();
  std::mutex mutex_;
  std::deque<Block> kept_;  // oldest first
  size_t kept_bytes_ = 0;
};

void keep_block(void* context) {
  auto* block = static_cast<Block*>(context);
  BufferCache::instance().keep(*block);
  delete block;
}

}  // namespace

at::Tensor empty_from_buffer_cache(at::IntArrayRef sizes, const at::TensorOptions& options) {
  TORCH_INTERNAL_ASSERT(options.device().is_cpu());
  size_t bytes = options.dtype().itemsize();
  for (const int64_t size : sizes) {
    bytes *= static_cast<size_t>(size);
  }
  if (bytes < kBufferCacheMinBytes) {
    return at::empty(sizes, options);
  }
  auto* block = new Block{BufferCache::instance().take(bytes), bytes};
  c10::DataPtr data(block->data, block, &keep_block, c10::Device(c10::kCPU));
  // Resizable, as at::empty's storage is: growing takes new memory from ATen's CPU allocator and
  // hands this block back to the cache.
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, std::move(data), c10::GetCPUAllocator(),
                       /*resizable=*/true);
  return at::empty({0}, options).set_(std::move(storage), 0, sizes);
}

size_t buffer_cache_bytes() {
  return BufferCache::instance().bytes();
}

size_t empty_buffer_cache() {
  return BufferCache::instance().empty();
}

}  // namespace hypatia::ops
