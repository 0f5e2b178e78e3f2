// memory.cpp — the CUDA emulator's device memory: the guarded arena, cudaMalloc/cudaFree, copies
// and memsets, and device mode (queued work may touch device memory, host code may not).
//
// One reserved arena (PROT_NONE). Each allocation gets its own pages, placed so that it ends at a
// page boundary (to 256 bytes), followed by an unmapped guard page; addresses are never reused, so
// use after free faults too. While host code runs every allocation is inaccessible; queued work
// runs in "device mode", where a fault inside a live allocation opens that allocation (until the
// work returns to the host) and any other fault in the arena is an error.
//
// Checks: a host dereference of device memory; an access before or past an allocation, or after
// its free; a double free; a kernel pointer argument that is not device memory; a copy whose sides
// are not what its kind says, or whose ranges overlap. Device memory: TP_EMU_MEMORY_MB (8192).
#include <signal.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "cuda_runtime.h"
#include "emu_internal.h"

namespace cuda_emu {

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kArenaBytes = size_t{1} << 38;  // 256 GiB of address space, none of it committed
char* g_arena = nullptr;
char* g_cursor = nullptr;
size_t g_live_bytes = 0;

struct Allocation {
  char* region;         // first page
  size_t region_bytes;  // pages (without the guard page)
  char* ptr;            // what cudaMalloc returned
  size_t bytes;         // what was asked for
  bool open = false;
};
std::map<char*, Allocation> g_live;   // by ptr
std::map<char*, Allocation> g_freed;  // by ptr, for the diagnostics
std::vector<char*> g_opened;          // allocations opened by the current device work
int g_device_depth = 0;

size_t round_up(size_t v, size_t m) { return (v + m - 1) / m * m; }

// The allocation (live or freed) whose pages contain p, or null.
const Allocation* find_region(const std::map<char*, Allocation>& m, const char* p) {
  auto it = m.upper_bound(const_cast<char*>(p));
  if (it != m.begin()) {
    --it;
    const Allocation& a = it->second;
    if (p >= a.region && p < a.region + a.region_bytes + kPage) return &a;  // pages or guard
  }
  // p may be in the padding before an allocation's start (its region begins below ptr).
  it = m.upper_bound(const_cast<char*>(p));
  if (it != m.end() && p >= it->second.region) return &it->second;
  return nullptr;
}

void segv_handler(int sig, siginfo_t* info, void* ctx) {
  (void)ctx;
  char* p = static_cast<char*>(info->si_addr);
  if (g_arena == nullptr || p < g_arena || p >= g_arena + kArenaBytes) {
    signal(sig, SIG_DFL);  // not ours: fault again, normally
    return;
  }
  const Allocation* live = find_region(g_live, p);
  if (g_device_depth == 0) {
    if (live != nullptr)
      fatal(
          "host code dereferenced device memory at %p (allocation %p of %zu bytes, offset %td); "
          "device memory must go through cudaMemcpy",
          static_cast<void*>(p), static_cast<void*>(live->ptr), live->bytes, p - live->ptr);
    fatal(
        "host code dereferenced %p, an address in the device arena outside every live "
        "allocation",
        static_cast<void*>(p));
  }
  if (live != nullptr && p >= live->ptr && p < live->region + live->region_bytes) {
    if (p >= live->ptr + round_up(live->bytes, 256))
      fatal("access at %p: %td bytes past the end of allocation %p (%zu bytes)",
            static_cast<void*>(p), p - (live->ptr + live->bytes), static_cast<void*>(live->ptr),
            live->bytes);
    Allocation& a = g_live.at(live->ptr);
    if (mprotect(a.region, a.region_bytes, PROT_READ | PROT_WRITE) != 0) fatal("mprotect failed");
    a.open = true;
    g_opened.push_back(a.ptr);
    return;  // the access is retried
  }
  if (live != nullptr) {
    if (p < live->ptr)
      fatal("access at %p: %td bytes before the start of allocation %p (%zu bytes)",
            static_cast<void*>(p), live->ptr - p, static_cast<void*>(live->ptr), live->bytes);
    fatal("access at %p: %td bytes past the end of allocation %p (%zu bytes)",
          static_cast<void*>(p), p - (live->ptr + live->bytes), static_cast<void*>(live->ptr),
          live->bytes);
  }
  if (const Allocation* f = find_region(g_freed, p))
    fatal("access at %p inside allocation %p (%zu bytes), which was already freed",
          static_cast<void*>(p), static_cast<void*>(f->ptr), f->bytes);
  fatal("access at %p: device arena address outside every allocation", static_cast<void*>(p));
}

// The live allocation holding p (or, with end_ok, also one just ending at p), or null.
const Allocation* find_live(const void* p, bool end_ok = false) {
  auto it = g_live.upper_bound(static_cast<char*>(const_cast<void*>(p)));
  if (it == g_live.begin()) return nullptr;
  --it;
  const char* c = static_cast<const char*>(p);
  const char* end = it->second.ptr + it->second.bytes;
  return c >= it->second.ptr && (c < end || (end_ok && c == end)) ? &it->second : nullptr;
}

bool in_arena(const void* p) {
  const char* c = static_cast<const char*>(p);
  return g_arena != nullptr && c >= g_arena && c < g_arena + kArenaBytes;
}

}  // namespace

void init_memory() {
  if (g_arena != nullptr) return;
  void* a =
      mmap(nullptr, kArenaBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (a == MAP_FAILED) fatal("cannot reserve the device arena");
  g_arena = g_cursor = static_cast<char*>(a);
  static std::vector<char> alt(1 << 16);
  stack_t ss{};
  ss.ss_sp = alt.data();
  ss.ss_size = alt.size();
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = segv_handler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
}

DeviceMode::DeviceMode(const char* what) : saved(g_work) {
  ++g_device_depth;
  g_work = what;
}

DeviceMode::~DeviceMode() {
  g_work = saved;
  if (--g_device_depth > 0) return;
  for (char* p : g_opened) {
    auto it = g_live.find(p);
    if (it == g_live.end() || !it->second.open) continue;
    mprotect(it->second.region, it->second.region_bytes, PROT_NONE);
    it->second.open = false;
  }
  g_opened.clear();
}

bool is_device_pointer(const void* p) { return p == nullptr || find_live(p, true) != nullptr; }

void bad_kernel_pointer(const char* kernel, int index, const void* p) {
  if (const Allocation* f = find_region(g_freed, static_cast<const char*>(p)))
    fatal(
        "kernel %s: argument %d (%p) points into allocation %p (%zu bytes), which was already "
        "freed",
        kernel, index, p, static_cast<void*>(f->ptr), f->bytes);
  fatal("kernel %s: argument %d (%p) is %s, not device memory", kernel, index, p,
        in_arena(p) ? "outside every allocation" : "a host pointer");
}

bool is_device_range(const void* p, size_t bytes) {
  const Allocation* a = find_live(p);
  return a != nullptr && static_cast<const char*>(p) + bytes <= a->ptr + a->bytes;
}

}  // namespace cuda_emu

using namespace cuda_emu;

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  const size_t total = static_cast<size_t>(env_int("TP_EMU_MEMORY_MB", 8192)) << 20;
  *total_bytes = total;
  *free_bytes = total > g_live_bytes ? total - g_live_bytes : 0;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t size) {
  init_memory();
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  const size_t total = static_cast<size_t>(env_int("TP_EMU_MEMORY_MB", 8192)) << 20;
  if (g_live_bytes + size > total) return fail(cudaErrorMemoryAllocation);
  const size_t aligned = round_up(size, 256);
  const size_t region = round_up(aligned, kPage);
  if (g_cursor + region + kPage > g_arena + kArenaBytes) return fail(cudaErrorMemoryAllocation);
  Allocation a;
  a.region = g_cursor;
  a.region_bytes = region;
  a.ptr = g_cursor + region - aligned;
  a.bytes = size;
  g_cursor += region + kPage;
  g_live[a.ptr] = a;
  g_live_bytes += size;
  *ptr = a.ptr;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  run_everything();  // cudaFree synchronises the device
  auto it = g_live.find(static_cast<char*>(ptr));
  if (it == g_live.end()) {
    if (g_freed.count(static_cast<char*>(ptr)) != 0) fatal("cudaFree(%p): freed twice", ptr);
    return fail(cudaErrorInvalidValue);
  }
  Allocation a = it->second;
  g_live.erase(it);
  g_live_bytes -= a.bytes;
  mprotect(a.region, a.region_bytes, PROT_NONE);
  madvise(a.region, a.region_bytes, MADV_DONTNEED);
  a.open = false;
  g_freed[a.ptr] = a;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  *ptr = std::malloc(size == 0 ? 1 : size);
  return *ptr != nullptr ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
cudaError_t cudaFreeHost(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}

namespace {

// Checks one side of a copy: device memory must lie inside one live allocation, host memory
// outside the arena.
bool side_ok(const void* p, size_t span, bool device, const char* call, const char* which) {
  if (device) {
    if (!is_device_range(p, span)) {
      std::fprintf(stderr, "cuda-emu: %s: %s %p (%zu bytes) is not inside one device allocation\n",
                   call, which, p, span);
      return false;
    }
  } else if (in_arena(p)) {
    std::fprintf(stderr, "cuda-emu: %s: %s %p is device memory, but the copy kind says host\n",
                 call, which, p);
    return false;
  }
  return true;
}

cudaError_t copy_check(void* dst, const void* src, size_t dspan, size_t sspan, cudaMemcpyKind& kind,
                       const char* call) {
  if (kind == cudaMemcpyDefault)
    kind = static_cast<cudaMemcpyKind>((in_arena(src) ? 2 : 0) + (in_arena(dst) ? 1 : 0));
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  if (!side_ok(src, sspan, src_dev, call, "source") ||
      !side_ok(dst, dspan, dst_dev, call, "destination"))
    return fail(cudaErrorInvalidValue);
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  const cudaError_t e = copy_check(dst, src, bytes, bytes, kind, "cudaMemcpyAsync");
  if (e != cudaSuccess) return e;
  const char* d = static_cast<const char*>(dst);
  const char* s = static_cast<const char*>(src);
  if (d < s + bytes && s < d + bytes)
    fatal("cudaMemcpyAsync: overlapping ranges %p, %p (%zu bytes)", dst, src, bytes);
  enqueue_work(stream, "cudaMemcpyAsync", [dst, src, bytes] { std::memcpy(dst, src, bytes); });
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
  if (e != cudaSuccess) return e;
  flush_stream(nullptr);  // synchronous with respect to the NULL stream (not non-blocking streams)
  return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream) {
  if (width == 0 || height == 0) return cudaSuccess;
  if (width > dpitch || width > spitch) return fail(cudaErrorInvalidValue);
  const size_t dspan = dpitch * (height - 1) + width, sspan = spitch * (height - 1) + width;
  const cudaError_t e = copy_check(dst, src, dspan, sspan, kind, "cudaMemcpy2DAsync");
  if (e != cudaSuccess) return e;
  const char* d = static_cast<const char*>(dst);
  const char* s = static_cast<const char*>(src);
  // The rows themselves must not overlap (CUDA gives no ordering between them).
  for (size_t r = 0; r < height; ++r)
    for (size_t q = 0; q < height; ++q) {
      const char* dr = d + r * dpitch;
      const char* sq = s + q * spitch;
      if (dr < sq + width && sq < dr + width)
        fatal("cudaMemcpy2DAsync: destination row %zu overlaps source row %zu", r, q);
    }
  enqueue_work(stream, "cudaMemcpy2DAsync", [=] {
    for (size_t r = 0; r < height; ++r)
      std::memcpy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch,
                  width);
  });
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (!is_device_range(ptr, bytes)) return fail(cudaErrorInvalidValue);
  enqueue_work(stream, "cudaMemsetAsync", [=] { std::memset(ptr, value, bytes); });
  return cudaSuccess;
}
cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  const cudaError_t e = cudaMemsetAsync(ptr, value, bytes, nullptr);
  flush_stream(nullptr);
  return e;
}
