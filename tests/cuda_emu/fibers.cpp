// fibers.cpp — the CUDA emulator's kernels: every thread of a block is a fiber with its own
// threadIdx; blocks run one after another, threads one at a time, switched only at barriers
// (__syncthreads, warp shuffles), in increasing order in even blocks and decreasing order in odd
// ones. Checks: the launch configuration (cudaErrorInvalidConfiguration from cudaGetLastError); a
// barrier or warp shuffle that not every thread reaches, or one outside a kernel; shuffles with a
// partial mask or in a partial warp, and dynamic shared memory (not emulated).
#include <sys/mman.h>
#include <ucontext.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "cuda_runtime.h"
#include "emu_internal.h"

namespace cuda_emu {

ThreadState* current = nullptr;

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

void run_block(const char* name, dim3 grid, dim3 block, uint3 bidx,
               const std::function<void()>& body) {
  const int n = static_cast<int>(block.x * block.y * block.z);
  while (static_cast<int>(g_stacks.size()) < n) {
    void* s = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
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
      for (int t = first; t < last; ++t)
        waiting += g_fibers[static_cast<size_t>(t)].state == kWarpBarrier;
      if (waiting == 0) continue;
      if (waiting != last - first)
        fatal(
            "kernel %s, block (%u,%u,%u): a warp shuffle in warp %d was reached by %d of its %d "
            "threads (divergence, or threads that exited)",
            name, bidx.x, bidx.y, bidx.z, w, waiting, last - first);
      if (last - first != 32)
        fatal("kernel %s: warp shuffle with full mask in a partial warp (%d threads)", name,
              last - first);
      for (int t = first; t < last; ++t) g_fibers[static_cast<size_t>(t)].state = kReady;
      released = true;
    }
    if (released) continue;
    if (at_block + done == n && done == 0) {
      for (Fiber& f : g_fibers) f.state = kReady;
      continue;
    }
    fatal("kernel %s, block (%u,%u,%u): __syncthreads reached by %d of %d threads (%d exited)",
          name, bidx.x, bidx.y, bidx.z, at_block, n, done);
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
  if (mask != 0xffffffffu)
    fatal("warp shuffle with mask %#x: only full-warp masks are emulated", mask);
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
    std::fprintf(
        stderr,
        "cuda-emu: kernel %s: invalid configuration grid (%u,%u,%u) block (%u,%u,%u) smem %zu\n",
        name, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem);
    fail(e);
    return;
  }
  if (smem != 0) fatal("kernel %s: dynamic shared memory is not emulated", name);
  enqueue_work(stream, name, [name, grid, block, body = std::move(body)] {
    for (unsigned z = 0; z < grid.z; ++z)
      for (unsigned y = 0; y < grid.y; ++y)
        for (unsigned x = 0; x < grid.x; ++x) run_block(name, grid, block, uint3{x, y, z}, body);
  });
}

}  // namespace cuda_emu
