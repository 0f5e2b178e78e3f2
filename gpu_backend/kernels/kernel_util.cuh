// kernel_util.cuh — what the GPU backend's kernels/ files share: warp and block reductions,
// launch sizes, grid-stride indices, and the column sums of parameter gradients (kernels/reduce.cu).
//
// Determinism: no float atomics anywhere. Every output element is written by one thread; sums over
// rows or positions are loops in a fixed order inside that thread or fixed chunks added in order,
// and a block reduction combines its values in a fixed tree (xor-shuffles within a warp, then the
// warp partials in warp order), so for a given block size the result never depends on timing.
// Every thread of the block gets the result.
//
// Launch configurations: elementwise kernels kThreads threads with a grid stride; row kernels one
// block per row (the fused norm backward: per chunk of rows), grid stride, threads = the row
// length rounded up to a warp, at most kRowThreads.
//
// Storage types (--precision bf16). A kernel reads its tensors through gpu::In and writes through
// gpu::Out: each load gives a float (bf16 widened exactly), the arithmetic is float (or double)
// exactly as in f32, and each store rounds to nearest even once (convert.cu's rule), so a kernel
// given bf16 tensors gives the bits the Device front's stand-in path gives (widen every bf16
// tensor, run the f32 kernel, round each bf16 output once; core/device.h, "Dtypes"). Each kernel
// is a template on one flag, instantiated twice: kTyped = false when every tensor of the call is
// f32 (plain float pointers: the f32 kernel, unchanged), true otherwise (every pointer carries its
// tensor's dtype and each access branches on it, uniformly over the grid). gpu::storage_of picks
// the instance: one pair of instances per kernel covers every mix of dtypes (a bf16 activation
// beside an f32 weight gradient, f32 statistics) without one instance per mix.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/tensor.h"

namespace tp {

class CudaDevice;

namespace gpu {

constexpr int kWarp = 32;
constexpr int kThreads = 256;     // threads per block of the elementwise and column-sum kernels
constexpr int kRowThreads = 256;  // most threads for a one-block-per-row kernel

struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

/// Reduces `v` over the 32 lanes of a warp; every lane gets the result (xor butterfly).
template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// Reduces `v` over the whole block; every thread gets the result. Must be called by every thread
/// of the block (it synchronises), with blockDim.x a multiple of 32 and at most 1024. Consecutive
/// calls may reuse the shared buffer: the leading __syncthreads() keeps them apart.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T identity) {
  __shared__ T partial[kWarp];
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int nwarps = static_cast<int>(blockDim.x) / kWarp;
  v = warp_reduce(v, op);
  __syncthreads();  // an earlier call's readers are done with `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  T r = lane < nwarps ? partial[lane] : identity;  // every warp folds the partials the same way
  return warp_reduce(r, op);
}

template <typename T>
__device__ T block_sum(T v) {
  return block_reduce(v, SumOp{}, T(0));
}

__device__ inline float block_max(float v) { return block_reduce(v, MaxOp{}, -INFINITY); }

// ---- storage types (see the top of this file) ------------------------------------------------------

/// Read access to a tensor's elements as floats. In<false>: an f32 tensor; In<true>: f32 or bf16.
template <bool kTyped>
struct In;
template <>
struct In<false> {
  const float* p;
  __device__ __forceinline__ float operator[](int64_t i) const { return p[i]; }
};
template <>
struct In<true> {
  const void* p;
  bool bf16;
  __device__ __forceinline__ float operator[](int64_t i) const {
    return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i])
                : static_cast<const float*>(p)[i];
  }
};

/// Read and write access: o[i] reads as In does, o.set(i, v) stores v (rounded once into bf16).
template <bool kTyped>
struct Out;
template <>
struct Out<false> {
  float* p;
  __device__ __forceinline__ float operator[](int64_t i) const { return p[i]; }
  __device__ __forceinline__ void set(int64_t i, float v) const { p[i] = v; }
};
template <>
struct Out<true> {
  void* p;
  bool bf16;
  __device__ __forceinline__ float operator[](int64_t i) const {
    return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i])
                : static_cast<const float*>(p)[i];
  }
  __device__ __forceinline__ void set(int64_t i, float v) const {
    if (bf16)
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
    else
      static_cast<float*>(p)[i] = v;
  }
};

/// The accessors of tensor `t` (host side); an undefined tensor gives a null pointer.
template <bool kTyped>
In<kTyped> in(const Tensor& t) {
  if constexpr (kTyped) {
    return {t.defined() ? t.raw() : nullptr, t.defined() && t.dtype() == Dtype::bf16};
  } else {
    return {t.defined() ? t.data() : nullptr};
  }
}
template <bool kTyped>
Out<kTyped> out(const Tensor& t) {
  if constexpr (kTyped) {
    return {t.defined() ? t.raw() : nullptr, t.defined() && t.dtype() == Dtype::bf16};
  } else {
    return {t.defined() ? t.data() : nullptr};
  }
}

inline bool any_bf16() { return false; }
template <class... Ts>
bool any_bf16(const Tensor& t, const Ts&... rest) {
  return (t.defined() && t.dtype() == Dtype::bf16) || any_bf16(rest...);
}

/// Calls launch(std::bool_constant<kTyped>{}) with kTyped = true when any of `tensors` is bf16:
/// the launcher then starts kernel<kTyped> on in<kTyped>(...) and out<kTyped>(...) accessors.
template <class Launch, class... Ts>
void storage_of(Launch&& launch, const Ts&... tensors) {
  if (any_bf16(tensors...))
    launch(std::true_type{});
  else
    launch(std::false_type{});
}

/// Blocks for `n` work items of `per_block` each, capped (kernels loop with a grid stride).
inline unsigned int grid_blocks(int64_t n, int64_t per_block) {
  constexpr int64_t kMaxBlocks = int64_t{1} << 30;  // below the 2^31 − 1 limit of gridDim.x
  const int64_t blocks = (n + per_block - 1) / per_block;
  return static_cast<unsigned int>(blocks < kMaxBlocks ? (blocks > 0 ? blocks : 1) : kMaxBlocks);
}

/// Threads for a block whose threads stride over `n` items: n rounded up to a warp, in [32, cap].
inline unsigned int threads_for(int64_t n, int cap) {
  const int64_t t = (n + kWarp - 1) / kWarp * kWarp;
  return static_cast<unsigned int>(t < kWarp ? kWarp : (t > cap ? cap : t));
}

// Grid-stride loops: this thread's first index, and the stride (all threads of the grid).
__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

/// Blocks of kThreads for n independent elements.
inline unsigned int elementwise_blocks(int64_t n) { return grid_blocks(n, kThreads); }
/// One block per row.
inline unsigned int row_blocks(int64_t rows) { return grid_blocks(rows, 1); }

// ---- dtype conversion (kernels/convert.cu) -----------------------------------------------------------

/// y[i] = bf16(x[i]), round to nearest even, i < n (y: n bf16 values); queued on `stream`.
void to_bf16(cudaStream_t stream, const float* x, void* y, int64_t n);
/// y[i] = f32(x[i]), exact, i < n (x: n bf16 values); queued on `stream`.
void from_bf16(cudaStream_t stream, const void* x, float* y, int64_t n);
/// copy_columns between an f32 and a bf16 tensor: dst[r, dst_col + j] = src[r, src_col + j]
/// for j < ncols, converted as above; queued on `stream`.
void convert_columns(cudaStream_t stream, const Tensor& src, int64_t src_col, Tensor& dst,
                     int64_t dst_col, int64_t ncols);

// ---- column sums of parameter gradients (kernels/reduce.cu) ----------------------------------------
// Deterministic in two steps: f64 partial sums over fixed chunks of rows, rows in order, then one
// thread per column adds the chunks in chunk order, so the result depends only on the shape.

/// out[c] += Σ_r dy[r, c] for dy: (rows, h), through dev's scratch memory (the bias gradient).
/// Either tensor f32 or bf16 (a bf16 out rounded once per column).
void column_sums(CudaDevice& dev, Tensor& out, const Tensor& dy);
/// out[c] += f32(Σ_k partial[k, c]), k in [0, nchunks) in order; partial: (nchunks, h), f64;
/// out: (h), f32 or bf16.
void column_finish(CudaDevice& dev, Tensor& out, const double* partial, int64_t h, int64_t nchunks);

}  // namespace gpu
}  // namespace tp
