// caching_allocator.h — device memory in size classes over cudaMalloc, reused instead of freed:
// no cudaMalloc / cudaFree per training step.
//
// A request is rounded up to its size class (512 B steps up to 1 MiB, 2 MiB steps above). A freed
// block goes back to its class's free list and is handed out again to the next request it fits
// (best fit, at most a quarter larger). The owner (CudaDevice) runs all its work on one stream, so
// a block may be reused at once: later work on that stream runs after the work that used it. When
// cudaMalloc runs out, the cached blocks are released and the allocation is tried once more.
//
// Host code only (CUDA runtime API calls, no kernels), so it is a .cpp: the Makefile compiles it
// with mpicxx against the CUDA headers, and the emulator build against tests/cuda_emu/include.
#pragma once

#include <cstddef>
#include <map>
#include <vector>

namespace tp {

/// Device memory in size classes, reused instead of freed.
class CachingAllocator {
 public:
  CachingAllocator() = default;
  ~CachingAllocator();  ///< cudaFree every block, live or cached (errors ignored)
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// Rounds up to a size class; reuses a cached block when one fits, else cudaMalloc.
  void* allocate(size_t bytes);
  /// Returns the block to its class's free list (a double free throws).
  void deallocate(void* ptr);
  /// cudaFree every cached block (at shutdown, or when cudaMalloc runs out).
  void release_all();
  /// Bytes held from cudaMalloc, live or cached.
  size_t reserved_bytes() const { return reserved_; }

 private:
  struct Block {
    size_t size_class;
    bool cached;  // in free_ (a second deallocate is a double free)
  };
  std::map<size_t, std::vector<void*>> free_;  // size class → free blocks
  std::map<void*, Block> blocks_;              // every block from cudaMalloc, live or cached
  size_t reserved_ = 0;
};

}  // namespace tp
