// cuda_emu.h — the kernel side of the CUDA emulator (tests/cuda_emu): runs the GPU backend's
// kernels on the CPU, so their indexing, reductions and launch configurations are tested on a
// machine without a GPU. Not a GPU: no timing, no memory model, no races (threads of a block run
// one at a time, switched only at barriers), no float behaviour beyond IEEE round-to-nearest.
//
// What it does model:
//   - the CUDA thread hierarchy: every thread of a block is a fiber with its own threadIdx; blocks
//     run one after another; `__shared__` variables are per-block (blocks never overlap, so a
//     static local is exactly one block's shared memory — but it keeps the previous block's
//     contents where a GPU's would be undefined);
//   - __syncthreads() as a barrier of the whole block, warp shuffles as a barrier of the warp;
//     a barrier that not every thread reaches (divergence, an exited thread) is reported; threads
//     run in increasing order in even blocks and decreasing order in odd ones, so a missing
//     barrier between a write and a read shows in one of the two (when the grid has two blocks);
//   - launch-configuration limits (cudaErrorInvalidConfiguration from cudaGetLastError);
//   - streams and events: work is queued and runs only when something waits for it (a stream or
//     device synchronisation, a synchronous copy, an event a stream waits for), so a missing
//     synchronisation reads stale data here too;
//   - device memory the host may not touch: every allocation sits in a guarded arena that is
//     inaccessible while host code runs (a host dereference of a device pointer is reported with
//     a backtrace) and opened only for the queued work; out-of-bounds accesses past the end of an
//     allocation and use after free fault and are reported; a pointer argument of a kernel that
//     is not device memory (a host pointer) is reported at the launch.
//
// The .cu sources are compiled by g++ after scripts/cuda-emu-translate.pl rewrites each launch
// `k<<<grid, block, smem, stream>>>(args)` into `::cuda_emu::launch("k", <k as a lambda>, grid,
// block, smem, stream)(args)`.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __shared__ static
#define __launch_bounds__(...)

struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1)
      : x(x_), y(y_), z(z_) {}
};

typedef struct CUstream_st* cudaStream_t;

namespace cuda_emu {

/// The built-in variables of the running thread.
struct ThreadState {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
extern ThreadState* current;

void syncthreads();
/// Every lane of the calling warp publishes `bytes` of `mine`; returns (into out) lane `src`'s.
void warp_exchange(const void* mine, void* out, size_t bytes, int src, unsigned int mask);
int lane_id();

/// Queues a kernel: `body` runs once per thread of every block. Checks the configuration
/// (cudaGetLastError reports a bad one, as after a real launch).
void enqueue_kernel(const char* name, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                    std::function<void()> body);

/// True when p is null or points into (or just past) a live device allocation.
bool is_device_pointer(const void* p);
[[noreturn]] void bad_kernel_pointer(const char* kernel, int index, const void* p);

template <typename T>
void check_kernel_arg(const char* kernel, int index, const T& arg) {
  if constexpr (std::is_pointer<T>::value) {
    if (!is_device_pointer(arg)) bad_kernel_pointer(kernel, index, arg);
  }
}

template <typename F>
struct Launcher {
  const char* name;
  F kernel;
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
  template <typename... A>
  void operator()(A... args) const {
    // A pointer argument must be device memory: a GPU cannot dereference a host pointer.
    int index = 0;
    (check_kernel_arg(name, index++, args), ...);
    F k = kernel;
    // Arguments are copied at launch (as CUDA copies them into the parameter buffer); every
    // thread then receives its own copies, as kernel parameters are passed by value.
    enqueue_kernel(name, grid, block, smem, stream, [k, args...]() { k(args...); });
  }
};

template <typename F>
Launcher<F> launch(const char* name, F kernel, dim3 grid, dim3 block, size_t smem = 0,
                   cudaStream_t stream = nullptr) {
  return Launcher<F>{name, kernel, grid, block, smem, stream};
}

}  // namespace cuda_emu

#define threadIdx (::cuda_emu::current->thread_idx)
#define blockIdx (::cuda_emu::current->block_idx)
#define blockDim (::cuda_emu::current->block_dim)
#define gridDim (::cuda_emu::current->grid_dim)

inline void __syncthreads() { ::cuda_emu::syncthreads(); }

template <typename T>
T __shfl_xor_sync(unsigned int mask, T v, int lane_mask, int width = 32) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8, "shuffle of <= 8 bytes");
  const int lane = ::cuda_emu::lane_id();
  const int base = lane / width * width;
  T out;
  ::cuda_emu::warp_exchange(&v, &out, sizeof(T), base + ((lane - base) ^ lane_mask) % width, mask);
  return out;
}
template <typename T>
T __shfl_down_sync(unsigned int mask, T v, unsigned int delta, int width = 32) {
  const int lane = ::cuda_emu::lane_id();
  const int in_seg = lane % width;
  const int src = in_seg + static_cast<int>(delta) < width ? lane + static_cast<int>(delta) : lane;
  T out;
  ::cuda_emu::warp_exchange(&v, &out, sizeof(T), src, mask);
  return out;
}
template <typename T>
T __shfl_up_sync(unsigned int mask, T v, unsigned int delta, int width = 32) {
  const int lane = ::cuda_emu::lane_id();
  const int in_seg = lane % width;
  const int src = in_seg >= static_cast<int>(delta) ? lane - static_cast<int>(delta) : lane;
  T out;
  ::cuda_emu::warp_exchange(&v, &out, sizeof(T), src, mask);
  return out;
}
template <typename T>
T __shfl_sync(unsigned int mask, T v, int src_lane, int width = 32) {
  const int lane = ::cuda_emu::lane_id();
  T out;
  ::cuda_emu::warp_exchange(&v, &out, sizeof(T), lane / width * width + src_lane % width, mask);
  return out;
}

// Arithmetic intrinsics: IEEE round to nearest (the build has no FMA contraction).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline float __double2float_rn(double a) { return static_cast<float>(a); }
inline float __expf(float a) { return std::exp(a); }
inline float __logf(float a) { return std::log(a); }
inline float rsqrtf(float a) { return 1.0f / std::sqrt(a); }
inline double rsqrt(double a) { return 1.0 / std::sqrt(a); }
template <typename T>
T __ldg(const T* p) {
  return *p;
}
using std::max;
using std::min;
