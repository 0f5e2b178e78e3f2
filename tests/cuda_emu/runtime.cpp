// runtime.cpp — the CUDA emulator's runtime: guarded device memory, streams and events, the fiber
// scheduler that runs kernels, and CPU versions of the cuBLAS and NCCL calls the GPU backend
// makes (NCCL over MPI). See include/cuda_emu.h for what is and is not modelled.
//
// Environment: TP_EMU_GPUS (devices per process, default 1), TP_EMU_SHARED_GPU=1 (every process
// sees the same GPU, as ranks sharing one card do; default: each process has its own),
// TP_EMU_MEMORY_MB (device memory, default 8192).
#include <execinfo.h>
#include <mpi.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cublas_v2.h"
#include "cuda_bf16.h"
#include "cuda_runtime.h"
#include "nccl.h"

namespace cuda_emu {

ThreadState* current = nullptr;

namespace {

const char* g_work = "host code";  // what is running, for the diagnostics
cudaError_t g_last_error = cudaSuccess;
int g_device = 0;

cudaError_t fail(cudaError_t e) {
  if (e != cudaSuccess) g_last_error = e;
  return e;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

}  // namespace

[[noreturn]] void fatal(const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "\ncuda-emu: ERROR in %s: %s\n", g_work, msg);
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, 2);
  std::fflush(stderr);
  std::abort();
}

// ==== device memory ==============================================================================
//
// One reserved arena (PROT_NONE). Each allocation gets its own pages, placed so that it ends at a
// page boundary (to 256 bytes), followed by an unmapped guard page; addresses are never reused, so
// use after free faults too. While host code runs every allocation is inaccessible; queued work
// runs in "device mode", where a fault inside a live allocation opens that allocation (until the
// work returns to the host) and any other fault in the arena is an error.

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
      fatal("host code dereferenced device memory at %p (allocation %p of %zu bytes, offset %td); "
            "device memory must go through cudaMemcpy",
            static_cast<void*>(p), static_cast<void*>(live->ptr), live->bytes, p - live->ptr);
    fatal("host code dereferenced %p, an address in the device arena outside every live "
          "allocation", static_cast<void*>(p));
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

void init_memory() {
  if (g_arena != nullptr) return;
  void* a = mmap(nullptr, kArenaBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
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

// Device mode: entered around every piece of queued work; leaving the outermost level closes
// what the work opened.
struct DeviceMode {
  const char* saved;
  explicit DeviceMode(const char* what) : saved(g_work) {
    ++g_device_depth;
    g_work = what;
  }
  ~DeviceMode() {
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
};

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

bool is_device_pointer(const void* p) { return p == nullptr || find_live(p, true) != nullptr; }

void bad_kernel_pointer(const char* kernel, int index, const void* p) {
  if (const Allocation* f = find_region(g_freed, static_cast<const char*>(p)))
    fatal("kernel %s: argument %d (%p) points into allocation %p (%zu bytes), which was already freed",
          kernel, index, p, static_cast<void*>(f->ptr), f->bytes);
  fatal("kernel %s: argument %d (%p) is %s, not device memory", kernel, index, p,
        in_arena(p) ? "outside every allocation" : "a host pointer");
}

bool is_device_range(const void* p, size_t bytes) {
  const Allocation* a = find_live(p);
  return a != nullptr && static_cast<const char*>(p) + bytes <= a->ptr + a->bytes;
}

// ==== streams and events =========================================================================

}  // namespace cuda_emu

struct CUstream_st {
  std::deque<std::pair<const char*, std::function<void()>>> queue;
  uint64_t enqueued = 0, done = 0;
  bool blocking = false;
};
struct CUevent_st {
  CUstream_st* stream = nullptr;  // of the last record
  uint64_t seq = 0;
  bool timing = true;
};

namespace cuda_emu {
namespace {

CUstream_st g_legacy;  // the NULL stream
std::set<CUstream_st*> g_streams;
std::set<CUevent_st*> g_events;

CUstream_st* resolve(cudaStream_t s, const char* call) {
  if (s == nullptr) return &g_legacy;
  if (g_streams.count(s) == 0) fatal("%s: stream %p was never created or is destroyed", call, static_cast<void*>(s));
  return s;
}

void run_until(CUstream_st* s, uint64_t seq) {
  while (s->done < seq) {
    auto [what, fn] = std::move(s->queue.front());
    s->queue.pop_front();
    {
      DeviceMode mode(what);
      fn();
    }
    ++s->done;
  }
}

void run_all(CUstream_st* s) { run_until(s, s->enqueued); }

void push(CUstream_st* s, const char* what, std::function<void()> fn) {
  // Implicit synchronisation of the legacy NULL stream with blocking streams.
  if (s == &g_legacy) {
    std::vector<std::pair<CUstream_st*, uint64_t>> marks;
    for (CUstream_st* b : g_streams)
      if (b->blocking) marks.emplace_back(b, b->enqueued);
    if (!marks.empty())
      s->queue.emplace_back("legacy-stream sync", [marks] {
        for (auto [b, n] : marks) run_until(b, n);
      }), ++s->enqueued;
  } else if (s->blocking && g_legacy.enqueued > g_legacy.done) {
    const uint64_t n = g_legacy.enqueued;
    s->queue.emplace_back("legacy-stream sync", [n] { run_until(&g_legacy, n); });
    ++s->enqueued;
  }
  s->queue.emplace_back(what, std::move(fn));
  ++s->enqueued;
}

void run_everything() {
  run_all(&g_legacy);
  for (CUstream_st* s : g_streams) run_all(s);
}

}  // namespace

void enqueue_work(cudaStream_t stream, const char* what, std::function<void()> work) {
  push(resolve(stream, what), what, std::move(work));
}

void flush_stream(cudaStream_t stream) { run_all(resolve(stream, "flush")); }

// ==== kernels: a fiber per thread ================================================================

namespace {

constexpr size_t kStackBytes = 256 * 1024;
enum FiberState { kReady, kBlockBarrier, kWarpBarrier, kDone };

// Context switch. On x86-64 ELF a minimal one (callee-saved registers, MXCSR and the x87 control
// word, no signal mask); elsewhere ucontext, whose swapcontext makes a system call per switch
// (test_gpu at np 1 took 94 s with it, 14 s with this, on the 2-core development machine).
#if defined(__x86_64__) && defined(__ELF__)
extern "C" void cuda_emu_switch(void** save_sp, void* next_sp);
asm(R"(
.text
.globl cuda_emu_switch
.hidden cuda_emu_switch
.type cuda_emu_switch, @function
cuda_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size cuda_emu_switch, .-cuda_emu_switch
)");
struct Context {
  void* sp = nullptr;
};
#else
struct Context {
  ucontext_t uc;
};
#endif

struct Fiber {
  Context ctx;
  ThreadState st;
  FiberState state;
  int tid;
};
std::vector<char*> g_stacks;
std::vector<Fiber> g_fibers;
Fiber* g_running = nullptr;
Context g_sched;
const std::function<void()>* g_body = nullptr;
uint64_t g_slots[1024];
int g_nthreads = 0;

void switch_to(Context& save, Context& next) {
#if defined(__x86_64__) && defined(__ELF__)
  cuda_emu_switch(&save.sp, next.sp);
#else
  swapcontext(&save.uc, &next.uc);
#endif
}

[[noreturn]] void fiber_entry() {
  (*g_body)();
  g_running->state = kDone;
  switch_to(g_running->ctx, g_sched);
  fatal("a finished fiber was resumed");
}

void init_fiber(Fiber& f, char* stack) {
#if defined(__x86_64__) && defined(__ELF__)
  // The frame cuda_emu_switch pops: [MXCSR | x87 CW] [r15 r14 r13 r12 rbx rbp] [return address],
  // placed so that fiber_entry starts with rsp ≡ 8 (mod 16), as after a call.
  auto* top = reinterpret_cast<uint64_t*>(stack + kStackBytes);
  uint64_t* sp = top - 9;
  uint32_t mxcsr;
  uint16_t fpucw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  sp[0] = mxcsr | (static_cast<uint64_t>(fpucw) << 32);
  for (int i = 1; i <= 6; ++i) sp[i] = 0;
  sp[7] = reinterpret_cast<uint64_t>(&fiber_entry);
  sp[8] = 0;
  f.ctx.sp = sp;
#else
  getcontext(&f.ctx.uc);
  f.ctx.uc.uc_stack.ss_sp = stack;
  f.ctx.uc.uc_stack.ss_size = kStackBytes;
  f.ctx.uc.uc_link = nullptr;
  makecontext(&f.ctx.uc, reinterpret_cast<void (*)()>(fiber_entry), 0);
#endif
}

void yield(FiberState s) {
  if (g_running == nullptr) fatal("a barrier or warp shuffle outside a kernel");
  g_running->state = s;
  switch_to(g_running->ctx, g_sched);
}

void run_block(const char* name, dim3 grid, dim3 block, uint3 bidx, const std::function<void()>& body) {
  const int n = static_cast<int>(block.x * block.y * block.z);
  while (static_cast<int>(g_stacks.size()) < n) {
    void* s = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (s == MAP_FAILED) fatal("cannot allocate a fiber stack");
    g_stacks.push_back(static_cast<char*>(s));
  }
  g_fibers.resize(static_cast<size_t>(n));
  g_body = &body;
  g_nthreads = n;
  for (int t = 0; t < n; ++t) {
    Fiber& f = g_fibers[static_cast<size_t>(t)];
    f.tid = t;
    f.state = kReady;
    f.st.thread_idx = {t % block.x, t / block.x % block.y, t / (block.x * block.y)};
    f.st.block_idx = bidx;
    f.st.block_dim = block;
    f.st.grid_dim = grid;
    init_fiber(f, g_stacks[static_cast<size_t>(t)]);
  }
  const int nwarps = (n + 31) / 32;
  for (;;) {
    // Threads run one at a time, each until its next barrier. Between two barriers a missing
    // __syncthreads shows only when a reader runs before the writer, so blocks alternate the
    // order: even blocks run threads 0, 1, 2, …, odd blocks the reverse.
    const bool reverse = (bidx.x + bidx.y + bidx.z) % 2 == 1;
    for (int i = 0; i < n; ++i) {
      Fiber& f = g_fibers[static_cast<size_t>(reverse ? n - 1 - i : i)];
      if (f.state != kReady) continue;
      g_running = &f;
      current = &f.st;
      switch_to(g_sched, f.ctx);
    }
    g_running = nullptr;
    current = nullptr;
    int done = 0, at_block = 0;
    for (const Fiber& f : g_fibers) {
      done += f.state == kDone;
      at_block += f.state == kBlockBarrier;
    }
    if (done == n) return;
    bool released = false;
    for (int w = 0; w < nwarps; ++w) {
      const int first = w * 32, last = std::min(n, first + 32);
      int waiting = 0;
      for (int t = first; t < last; ++t) waiting += g_fibers[static_cast<size_t>(t)].state == kWarpBarrier;
      if (waiting == 0) continue;
      if (waiting != last - first)
        fatal("kernel %s, block (%u,%u,%u): a warp shuffle in warp %d was reached by %d of its %d "
              "threads (divergence, or threads that exited)", name, bidx.x, bidx.y, bidx.z, w,
              waiting, last - first);
      if (last - first != 32)
        fatal("kernel %s: warp shuffle with full mask in a partial warp (%d threads)", name, last - first);
      for (int t = first; t < last; ++t) g_fibers[static_cast<size_t>(t)].state = kReady;
      released = true;
    }
    if (released) continue;
    if (at_block + done == n && done == 0) {
      for (Fiber& f : g_fibers) f.state = kReady;
      continue;
    }
    fatal("kernel %s, block (%u,%u,%u): __syncthreads reached by %d of %d threads (%d exited)", name,
          bidx.x, bidx.y, bidx.z, at_block, n, done);
  }
}

cudaError_t check_config(dim3 grid, dim3 block, size_t smem) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (block.x == 0 || block.y == 0 || block.z == 0 || block.x > 1024 || block.y > 1024 ||
      block.z > 64 || threads > 1024)
    return cudaErrorInvalidConfiguration;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 ||
      grid.z > 65535)
    return cudaErrorInvalidConfiguration;
  if (smem > 48 * 1024) return cudaErrorInvalidConfiguration;
  return cudaSuccess;
}

}  // namespace

void syncthreads() { yield(kBlockBarrier); }

int lane_id() {
  if (g_running == nullptr) fatal("a warp shuffle outside a kernel");
  return g_running->tid % 32;
}

void warp_exchange(const void* mine, void* out, size_t bytes, int src, unsigned int mask) {
  if (mask != 0xffffffffu) fatal("warp shuffle with mask %#x: only full-warp masks are emulated", mask);
  const int tid = g_running->tid;
  const int warp = tid / 32;
  std::memcpy(&g_slots[tid], mine, bytes);
  yield(kWarpBarrier);
  const int src_tid = warp * 32 + src;
  if (src < 0 || src >= 32 || src_tid >= g_nthreads) fatal("warp shuffle from lane %d", src);
  std::memcpy(out, &g_slots[src_tid], bytes);
  yield(kWarpBarrier);  // every lane has read before any lane publishes again
}

void enqueue_kernel(const char* name, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                    std::function<void()> body) {
  const cudaError_t e = check_config(grid, block, smem);
  if (e != cudaSuccess) {
    std::fprintf(stderr, "cuda-emu: kernel %s: invalid configuration grid (%u,%u,%u) block (%u,%u,%u) smem %zu\n",
                 name, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem);
    fail(e);
    return;
  }
  if (smem != 0) fatal("kernel %s: dynamic shared memory is not emulated", name);
  push(resolve(stream, name), name, [name, grid, block, body = std::move(body)] {
    for (unsigned z = 0; z < grid.z; ++z)
      for (unsigned y = 0; y < grid.y; ++y)
        for (unsigned x = 0; x < grid.x; ++x) run_block(name, grid, block, uint3{x, y, z}, body);
  });
}

}  // namespace cuda_emu

using namespace cuda_emu;

// ==== CUDA runtime API ===========================================================================

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
  }
  return "unknown error";
}
const char* cudaGetErrorName(cudaError_t e) { return cudaGetErrorString(e); }
cudaError_t cudaGetLastError() {
  const cudaError_t e = g_last_error;
  g_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return g_last_error; }

cudaError_t cudaGetDeviceCount(int* count) {
  *count = env_int("TP_EMU_GPUS", 1);
  return *count > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}
cudaError_t cudaSetDevice(int device) {
  int n = 0;
  cudaGetDeviceCount(&n);
  if (device < 0 || device >= n) return fail(cudaErrorInvalidDevice);
  g_device = device;
  init_memory();
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = g_device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  int n = 0;
  cudaGetDeviceCount(&n);
  if (device < 0 || device >= n) return fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "CUDA emulator on the CPU");
  // Distinct GPUs per process unless TP_EMU_SHARED_GPU=1 (ranks sharing one card).
  const long id = env_int("TP_EMU_SHARED_GPU", 0) != 0 ? 0 : static_cast<long>(getpid());
  const int64_t uuid[2] = {id, device};
  std::memcpy(prop->uuid.bytes, uuid, sizeof uuid);
  prop->totalGlobalMem = static_cast<size_t>(env_int("TP_EMU_MEMORY_MB", 8192)) << 20;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 1;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  run_everything();
  return cudaSuccess;
}
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  *least = 0;
  *greatest = -5;
  return cudaSuccess;
}
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
    std::fprintf(stderr, "cuda-emu: %s: %s %p is device memory, but the copy kind says host\n", call,
                 which, p);
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
  if (!side_ok(src, sspan, src_dev, call, "source") || !side_ok(dst, dspan, dst_dev, call, "destination"))
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
  if (d < s + bytes && s < d + bytes) fatal("cudaMemcpyAsync: overlapping ranges %p, %p (%zu bytes)", dst, src, bytes);
  push(resolve(stream, "cudaMemcpyAsync"), "cudaMemcpyAsync",
       [dst, src, bytes] { std::memcpy(dst, src, bytes); });
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
  if (e != cudaSuccess) return e;
  run_all(&g_legacy);  // synchronous with respect to the NULL stream (not non-blocking streams)
  return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                              size_t height, cudaMemcpyKind kind, cudaStream_t stream) {
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
  push(resolve(stream, "cudaMemcpy2DAsync"), "cudaMemcpy2DAsync", [=] {
    for (size_t r = 0; r < height; ++r)
      std::memcpy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
  });
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (!is_device_range(ptr, bytes)) return fail(cudaErrorInvalidValue);
  push(resolve(stream, "cudaMemsetAsync"), "cudaMemsetAsync", [=] { std::memset(ptr, value, bytes); });
  return cudaSuccess;
}
cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  const cudaError_t e = cudaMemsetAsync(ptr, value, bytes, nullptr);
  run_all(&g_legacy);
  return e;
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int priority) {
  (void)priority;
  auto* s = new CUstream_st;
  s->blocking = (flags & cudaStreamNonBlocking) == 0;
  g_streams.insert(s);
  *stream = s;
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  return cudaStreamCreateWithPriority(stream, flags, 0);
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  CUstream_st* s = resolve(stream, "cudaStreamDestroy");
  if (s == &g_legacy) return fail(cudaErrorInvalidResourceHandle);
  run_all(s);  // queued work still completes
  g_streams.erase(s);
  for (CUevent_st* e : g_events)
    if (e->stream == s) e->stream = nullptr;  // recorded and complete
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  run_all(resolve(stream, "cudaStreamSynchronize"));
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  CUstream_st* s = resolve(stream, "cudaStreamQuery");
  if (s->done == s->enqueued) return cudaSuccess;
  run_all(s);  // "not yet" this time; done by the next query
  return cudaErrorNotReady;
}

namespace {
CUevent_st* event(cudaEvent_t e, const char* call) {
  if (g_events.count(e) == 0) fatal("%s: event %p was never created or is destroyed", call, static_cast<void*>(e));
  return e;
}
}  // namespace

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  auto* ev = new CUevent_st;
  ev->timing = (flags & cudaEventDisableTiming) == 0;
  g_events.insert(ev);
  *e = ev;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  event(e, "cudaEventDestroy");
  g_events.erase(e);
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream) {
  CUevent_st* ev = event(e, "cudaEventRecord");
  CUstream_st* s = resolve(stream, "cudaEventRecord");
  push(s, "cudaEventRecord", [] {});
  ev->stream = s;
  ev->seq = s->enqueued;
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t e, unsigned int flags) {
  (void)flags;
  CUevent_st* ev = event(e, "cudaStreamWaitEvent");
  CUstream_st* s = resolve(stream, "cudaStreamWaitEvent");
  if (ev->stream == nullptr) return cudaSuccess;  // never recorded (or its stream is gone): no-op
  CUstream_st* other = ev->stream;
  const uint64_t seq = ev->seq;  // the record as of this call
  if (other == s) return cudaSuccess;
  push(s, "cudaStreamWaitEvent", [other, seq] {
    if (g_streams.count(other) != 0 || other == &g_legacy) run_until(other, seq);
  });
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  CUevent_st* ev = event(e, "cudaEventSynchronize");
  if (ev->stream != nullptr) run_until(ev->stream, ev->seq);
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  CUevent_st* ev = event(e, "cudaEventQuery");
  if (ev->stream == nullptr || ev->stream->done >= ev->seq) return cudaSuccess;
  run_until(ev->stream, ev->seq);  // "not yet" this time; complete by the next query
  return cudaErrorNotReady;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!event(start, "cudaEventElapsedTime")->timing || !event(end, "cudaEventElapsedTime")->timing)
    return fail(cudaErrorInvalidResourceHandle);
  *ms = 0.0f;  // no timing on the emulator
  return cudaSuccess;
}

// ==== cuBLAS =====================================================================================

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace {

float to_tf32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
  std::memcpy(&f, &u, 4);
  return f;
}

float load(const void* base, cudaDataType_t type, int64_t i, bool tf32) {
  if (type == CUDA_R_16BF) return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  const float v = static_cast<const float*>(base)[i];
  return tf32 ? to_tf32(v) : v;
}

size_t elem_size(cudaDataType_t t) { return t == CUDA_R_16BF ? 2 : 4; }

struct GemmArgs {
  cublasOperation_t ta, tb;
  int m, n, k;
  float alpha, beta;
  const void* A;
  cudaDataType_t at;
  int lda;
  long long sa;
  const void* B;
  cudaDataType_t bt;
  int ldb;
  long long sb;
  float* C;
  int ldc;
  long long sc;
  int batch;
  bool tf32;
};

cublasStatus_t gemm(cublasHandle_t h, const GemmArgs& g, const char* call) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 0 || (g.ta != CUBLAS_OP_N && g.ta != CUBLAS_OP_T) ||
      (g.tb != CUBLAS_OP_N && g.tb != CUBLAS_OP_T))
    return CUBLAS_STATUS_INVALID_VALUE;
  const int a_rows = g.ta == CUBLAS_OP_N ? g.m : g.k, a_cols = g.ta == CUBLAS_OP_N ? g.k : g.m;
  const int b_rows = g.tb == CUBLAS_OP_N ? g.k : g.n, b_cols = g.tb == CUBLAS_OP_N ? g.n : g.k;
  if (g.lda < std::max(1, a_rows) || g.ldb < std::max(1, b_rows) || g.ldc < std::max(1, g.m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (g.m == 0 || g.n == 0 || g.batch == 0) return CUBLAS_STATUS_SUCCESS;
  // Every operand must lie inside device memory (a real GPU would fault or read garbage).
  for (int b = 0; b < g.batch; ++b) {
    const size_t a_span = (static_cast<size_t>(g.lda) * (a_cols - 1) + a_rows) * elem_size(g.at);
    const size_t b_span = (static_cast<size_t>(g.ldb) * (b_cols - 1) + b_rows) * elem_size(g.bt);
    const size_t c_span = (static_cast<size_t>(g.ldc) * (g.n - 1) + g.m) * 4;
    const char* a = static_cast<const char*>(g.A) + b * g.sa * static_cast<long long>(elem_size(g.at));
    const char* bb = static_cast<const char*>(g.B) + b * g.sb * static_cast<long long>(elem_size(g.bt));
    const float* c = g.C + b * g.sc;
    if (g.k > 0 && !is_device_range(a, a_span)) fatal("%s: A (batch %d) %p + %zu bytes is not device memory", call, b, static_cast<const void*>(a), a_span);
    if (g.k > 0 && !is_device_range(bb, b_span)) fatal("%s: B (batch %d) %p + %zu bytes is not device memory", call, b, static_cast<const void*>(bb), b_span);
    if (!is_device_range(c, c_span)) fatal("%s: C (batch %d) %p + %zu bytes is not device memory", call, b, static_cast<const void*>(c), c_span);
  }
  const GemmArgs a = g;
  enqueue_work(h->stream, call, [a] {
    for (int b = 0; b < a.batch; ++b) {
      const char* A = static_cast<const char*>(a.A) + b * a.sa * static_cast<long long>(elem_size(a.at));
      const char* B = static_cast<const char*>(a.B) + b * a.sb * static_cast<long long>(elem_size(a.bt));
      float* C = a.C + b * a.sc;
      for (int j = 0; j < a.n; ++j)
        for (int i = 0; i < a.m; ++i) {
          float acc = 0.0f;
          for (int l = 0; l < a.k; ++l) {
            const int64_t ai = a.ta == CUBLAS_OP_N ? i + static_cast<int64_t>(l) * a.lda : l + static_cast<int64_t>(i) * a.lda;
            const int64_t bi = a.tb == CUBLAS_OP_N ? l + static_cast<int64_t>(j) * a.ldb : j + static_cast<int64_t>(l) * a.ldb;
            acc += load(A, a.at, ai, a.tf32) * load(B, a.bt, bi, a.tf32);
          }
          float& c = C[i + static_cast<int64_t>(j) * a.ldc];
          c = a.beta == 0.0f ? a.alpha * acc : a.alpha * acc + a.beta * c;  // β = 0: C is not read
        }
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                           int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                           const float* beta, float* C, int ldc) {
  return gemm(h, {ta, tb, m, n, k, *alpha, *beta, A, CUDA_R_32F, lda, 0, B, CUDA_R_32F, ldb, 0, C, ldc, 0, 1,
                  h != nullptr && h->math == CUBLAS_TF32_TENSOR_OP_MATH},
              "cublasSgemm");
}
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                         int m, int n, int k, const float* alpha, const float* A,
                                         int lda, long long sa, const float* B, int ldb, long long sb,
                                         const float* beta, float* C, int ldc, long long sc, int batch) {
  return gemm(h, {ta, tb, m, n, k, *alpha, *beta, A, CUDA_R_32F, lda, sa, B, CUDA_R_32F, ldb, sb, C, ldc, sc,
                  batch, h != nullptr && h->math == CUBLAS_TF32_TENSOR_OP_MATH},
              "cublasSgemmStridedBatched");
}

namespace {
cublasStatus_t gemm_ex(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                       const void* alpha, const void* A, cudaDataType_t at, int lda, long long sa,
                       const void* B, cudaDataType_t bt, int ldb, long long sb, const void* beta, void* C,
                       cudaDataType_t ct, int ldc, long long sc, int batch, cublasComputeType_t compute,
                       const char* call) {
  if ((at != CUDA_R_32F && at != CUDA_R_16BF) || bt != at || ct != CUDA_R_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;  // the emulator does f32 or bf16 inputs, f32 output
  if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32 &&
      compute != CUBLAS_COMPUTE_32F_PEDANTIC)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const bool tf32 = at == CUDA_R_32F && (compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
                                         (compute == CUBLAS_COMPUTE_32F && h != nullptr &&
                                          h->math == CUBLAS_TF32_TENSOR_OP_MATH));
  return gemm(h, {ta, tb, m, n, k, *static_cast<const float*>(alpha), *static_cast<const float*>(beta), A,
                  at, lda, sa, B, bt, ldb, sb, static_cast<float*>(C), ldc, sc, batch, tf32},
              call);
}
}  // namespace

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType_t at, int lda,
                            const void* B, cudaDataType_t bt, int ldb, const void* beta, void* C,
                            cudaDataType_t ct, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t) {
  return gemm_ex(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1, compute,
                 "cublasGemmEx");
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                          int m, int n, int k, const void* alpha, const void* A,
                                          cudaDataType_t at, int lda, long long sa, const void* B,
                                          cudaDataType_t bt, int ldb, long long sb, const void* beta,
                                          void* C, cudaDataType_t ct, int ldc, long long sc, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t) {
  return gemm_ex(h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, batch,
                 compute, "cublasGemmStridedBatchedEx");
}

// ==== NCCL over MPI ==============================================================================

struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0, size = 1;
};

namespace {

constexpr int kIdMagic = 0x454d5531;  // "EMU1"
int g_group_depth = 0;
struct P2p {
  bool send;
  const void* sbuf;
  void* rbuf;
  size_t count;
  int peer;
  ncclComm_t comm;
  cudaStream_t stream;
};
std::vector<P2p> g_pending;

ncclResult_t check_comm(ncclComm_t c) { return c == nullptr ? ncclInvalidArgument : ncclSuccess; }

bool supported(ncclDataType_t t) { return t == ncclFloat; }

// A collective: the MPI exchange runs now, after everything already queued on `stream` (so it
// reads its inputs as the stream would, and every rank's MPI calls stay in program order: real
// NCCL progresses on the GPU by itself, and running it lazily here could deadlock against host
// MPI calls), while writing its result is queued on the stream. So, as with NCCL, only work
// ordered after the collective (later on this stream, or waiting for an event recorded after it)
// sees the result: a missing cudaStreamWaitEvent reads stale data.
void collective(cudaStream_t stream, const char* what, void* recv,
                const std::function<std::vector<float>()>& exchange) {
  flush_stream(stream);
  std::vector<float> result;
  {
    DeviceMode mode(what);
    result = exchange();
  }
  auto buf = std::make_shared<std::vector<float>>(std::move(result));
  enqueue_work(stream, what, [recv, buf] {
    if (!buf->empty()) std::memcpy(recv, buf->data(), buf->size() * sizeof(float));
  });
}

std::vector<float> take(const void* p, size_t n) {
  std::vector<float> v(n);
  if (n != 0) std::memcpy(v.data(), p, n * sizeof(float));
  return v;
}

}  // namespace

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument (emulator)";
    case ncclInvalidUsage: return "invalid usage (emulator)";
    default: return "NCCL emulator error";
  }
}
ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static int counter = 0;
  std::memset(id, 0, sizeof *id);
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  const int fields[3] = {kIdMagic, world, counter++};
  std::memcpy(id->internal, fields, sizeof fields);
  return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  int fields[3];
  std::memcpy(fields, id.internal, sizeof fields);
  if (fields[0] != kIdMagic || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  // Rendezvous at the id's creator (which must be a member): it learns every member's world rank
  // and sends the list back; then MPI_Comm_create_group over exactly those ranks, in rank order.
  const int creator = fields[1], tag = 31000 + fields[2] % 1000;
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  std::vector<int> members(static_cast<size_t>(nranks), -1);
  if (world == creator) {
    members[static_cast<size_t>(rank)] = world;
    for (int i = 1; i < nranks; ++i) {
      int msg[2];
      MPI_Recv(msg, 2, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      members[static_cast<size_t>(msg[0])] = msg[1];
    }
    for (int r = 0; r < nranks; ++r)
      if (members[static_cast<size_t>(r)] != world)
        MPI_Send(members.data(), nranks, MPI_INT, members[static_cast<size_t>(r)], tag, MPI_COMM_WORLD);
  } else {
    const int msg[2] = {rank, world};
    MPI_Send(msg, 2, MPI_INT, creator, tag, MPI_COMM_WORLD);
    MPI_Recv(members.data(), nranks, MPI_INT, creator, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  MPI_Group world_group, group;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_incl(world_group, nranks, members.data(), &group);
  auto* c = new ncclComm;
  MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &c->mpi);
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  c->rank = rank;
  c->size = nranks;
  *comm = c;
  return ncclSuccess;
}
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t*) {
  if (check_comm(comm) != ncclSuccess) return ncclInvalidArgument;
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(comm->mpi, color < 0 ? MPI_UNDEFINED : color, key, &sub);
  if (sub == MPI_COMM_NULL) {
    *newcomm = nullptr;
    return ncclSuccess;
  }
  auto* c = new ncclComm;
  c->mpi = sub;
  MPI_Comm_rank(sub, &c->rank);
  MPI_Comm_size(sub, &c->size);
  *newcomm = c;
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (check_comm(comm) != ncclSuccess) return ncclInvalidArgument;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  delete comm;  // its MPI communicator is left to MPI_Abort / MPI_Finalize
  return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (check_comm(comm) != ncclSuccess) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (check_comm(comm) != ncclSuccess) return ncclInvalidArgument;
  *count = comm->size;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  if (check_comm(comm) != ncclSuccess || !supported(type) || (op != ncclSum && op != ncclMax))
    return ncclInvalidArgument;
  if (count == 0) return ncclSuccess;
  if (!is_device_range(send, count * 4) || !is_device_range(recv, count * 4)) return ncclInvalidArgument;
  if (g_group_depth > 0) return ncclInvalidUsage;  // collectives in a group: not emulated
  collective(stream, "ncclAllReduce", recv, [=] {
    std::vector<float> in = take(send, count), out(count);
    MPI_Allreduce(in.data(), out.data(), static_cast<int>(count), MPI_FLOAT, op == ncclMax ? MPI_MAX : MPI_SUM,
                  comm->mpi);
    return out;
  });
  return ncclSuccess;
}
ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
  if (check_comm(comm) != ncclSuccess || !supported(type)) return ncclInvalidArgument;
  if (count == 0) return ncclSuccess;
  if (!is_device_range(send, count * 4) || !is_device_range(recv, count * 4 * comm->size))
    return ncclInvalidArgument;
  if (g_group_depth > 0) return ncclInvalidUsage;
  collective(stream, "ncclAllGather", recv, [=] {
    std::vector<float> in = take(send, count), out(count * comm->size);
    MPI_Allgather(in.data(), static_cast<int>(count), MPI_FLOAT, out.data(), static_cast<int>(count), MPI_FLOAT,
                  comm->mpi);
    return out;
  });
  return ncclSuccess;
}
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
  if (check_comm(comm) != ncclSuccess || !supported(type) || (op != ncclSum && op != ncclMax))
    return ncclInvalidArgument;
  if (count == 0) return ncclSuccess;
  if (!is_device_range(send, count * 4 * comm->size) || !is_device_range(recv, count * 4))
    return ncclInvalidArgument;
  if (g_group_depth > 0) return ncclInvalidUsage;
  collective(stream, "ncclReduceScatter", recv, [=] {
    std::vector<float> in = take(send, count * comm->size), out(count);
    MPI_Reduce_scatter_block(in.data(), out.data(), static_cast<int>(count), MPI_FLOAT,
                             op == ncclMax ? MPI_MAX : MPI_SUM, comm->mpi);
    return out;
  });
  return ncclSuccess;
}
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  if (check_comm(comm) != ncclSuccess || !supported(type) || root < 0 || root >= comm->size)
    return ncclInvalidArgument;
  if (count == 0) return ncclSuccess;
  if ((comm->rank == root && !is_device_range(send, count * 4)) || !is_device_range(recv, count * 4))
    return ncclInvalidArgument;
  if (g_group_depth > 0) return ncclInvalidUsage;
  collective(stream, "ncclBroadcast", recv, [=] {
    std::vector<float> buf = comm->rank == root ? take(send, count) : std::vector<float>(count);
    MPI_Bcast(buf.data(), static_cast<int>(count), MPI_FLOAT, root, comm->mpi);
    return buf;
  });
  return ncclSuccess;
}

namespace {
// Sends read now and receives land stream-ordered, as for the collectives above.
void run_p2p(const std::vector<P2p>& ops) {
  for (const P2p& p : ops) flush_stream(p.stream);  // their inputs are ready
  std::vector<std::shared_ptr<std::vector<float>>> bufs(ops.size());
  std::vector<MPI_Request> reqs(ops.size());
  {
    DeviceMode mode("ncclSend/ncclRecv");
    for (size_t i = 0; i < ops.size(); ++i) {
      const P2p& p = ops[i];
      bufs[i] = std::make_shared<std::vector<float>>(p.send ? take(p.sbuf, p.count) : std::vector<float>(p.count));
      if (p.send)
        MPI_Isend(bufs[i]->data(), static_cast<int>(p.count), MPI_FLOAT, p.peer, 7, p.comm->mpi, &reqs[i]);
      else
        MPI_Irecv(bufs[i]->data(), static_cast<int>(p.count), MPI_FLOAT, p.peer, 7, p.comm->mpi, &reqs[i]);
    }
    MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].send || ops[i].count == 0) continue;
    void* dst = ops[i].rbuf;
    auto buf = bufs[i];
    enqueue_work(ops[i].stream, "ncclRecv", [dst, buf] { std::memcpy(dst, buf->data(), buf->size() * sizeof(float)); });
  }
}
ncclResult_t p2p(const P2p& op) {
  if (check_comm(op.comm) != ncclSuccess || op.peer < 0 || op.peer >= op.comm->size) return ncclInvalidArgument;
  if (op.count != 0 && !is_device_range(op.send ? op.sbuf : op.rbuf, op.count * 4)) return ncclInvalidArgument;
  if (g_group_depth > 0) {
    g_pending.push_back(op);
  } else {
    run_p2p({op});
  }
  return ncclSuccess;
}
}  // namespace

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  if (!supported(type)) return ncclInvalidArgument;
  return p2p({true, send, nullptr, count, peer, comm, stream});
}
ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  if (!supported(type)) return ncclInvalidArgument;
  return p2p({false, nullptr, recv, count, peer, comm, stream});
}
ncclResult_t ncclGroupStart() {
  ++g_group_depth;
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
  if (g_group_depth == 0) return ncclInvalidUsage;
  if (--g_group_depth > 0) return ncclSuccess;
  std::vector<P2p> ops;
  ops.swap(g_pending);
  if (!ops.empty()) run_p2p(ops);
  return ncclSuccess;
}
