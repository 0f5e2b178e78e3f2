// caching_allocator.cpp — the GPU backend's caching allocator (see caching_allocator.h).
#include "caching_allocator.h"

#include <cuda_runtime.h>

#include "core/error.h"
#include "cuda_check.h"

namespace tp {

namespace {

constexpr size_t kSmallRound = 512;              // sizes ≤ 1 MiB: multiples of 512 B
constexpr size_t kSmallMax = size_t{1} << 20;    // 1 MiB
constexpr size_t kLargeRound = size_t{2} << 20;  // sizes > 1 MiB: multiples of 2 MiB

// The size class of a request: ≤ 1 MiB rounds up to 512 B, above to 2 MiB (cudaMalloc itself
// reserves large allocations in 2 MiB pages, so the rounding wastes no more than it does).
size_t size_class(size_t bytes) {
  if (bytes <= kSmallMax) return (bytes + kSmallRound - 1) / kSmallRound * kSmallRound;
  return (bytes + kLargeRound - 1) / kLargeRound * kLargeRound;
}

}  // namespace

CachingAllocator::~CachingAllocator() {
  // Never throws: errors at shutdown (e.g. a device already lost) are ignored.
  for (auto& [ptr, block] : blocks_) {
    (void)block;
    cudaFree(ptr);
  }
  blocks_.clear();
  free_.clear();
  reserved_ = 0;
}

void* CachingAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t cls = size_class(bytes);
  // Best fit among cached blocks: the smallest class ≥ cls, if it wastes at most a quarter.
  auto it = free_.lower_bound(cls);
  if (it != free_.end() && it->first <= cls + cls / 4) {
    void* p = it->second.back();
    it->second.pop_back();
    if (it->second.empty()) free_.erase(it);
    blocks_.at(p).cached = false;
    return p;
  }
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, cls);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the error, or the next CUDA_CHECK_LAUNCH would report it
    release_all();       // give every cached block back to the driver, then try once more
    err = cudaMalloc(&p, cls);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      TP_CHECK(false, "out of GPU memory allocating ", bytes, " bytes (", reserved_,
               " bytes reserved)");
    }
  }
  CUDA_CHECK(err);
  blocks_[p] = Block{cls, false};
  reserved_ += cls;
  return p;
}

void CachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  const auto it = blocks_.find(ptr);
  TP_CHECK(it != blocks_.end(), "CachingAllocator::deallocate: ", ptr,
           " was not allocated by this device");
  TP_CHECK(!it->second.cached, "CachingAllocator::deallocate: ", ptr, " freed twice");
  it->second.cached = true;
  free_[it->second.size_class].push_back(ptr);
}

void CachingAllocator::release_all() {
  if (free_.empty()) return;
  // Blocks in the cache may still be read or written by queued kernels: wait for the device
  // before handing them back. The cache is emptied first, so a failure below leaves no freed
  // pointer in it.
  const cudaError_t sync = cudaDeviceSynchronize();
  std::map<size_t, std::vector<void*>> blocks;
  blocks.swap(free_);
  cudaError_t first = sync;
  for (auto& [cls, list] : blocks) {
    for (void* p : list) {
      blocks_.erase(p);
      reserved_ -= cls;
      const cudaError_t err = cudaFree(p);
      if (first == cudaSuccess) first = err;
    }
  }
  TP_CHECK(first == cudaSuccess, "CachingAllocator::release_all: ", cudaGetErrorString(first));
}

}  // namespace tp
