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
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

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

// ---- column sums of parameter gradients (kernels/reduce.cu) ----------------------------------------
// Deterministic in two steps: f64 partial sums over fixed chunks of rows, rows in order, then one
// thread per column adds the chunks in chunk order, so the result depends only on the shape.

/// out[c] += Σ_r dy[r, c] for dy: (rows, h), through dev's scratch memory (the bias gradient).
void column_sums(CudaDevice& dev, float* out, const float* dy, int64_t rows, int64_t h);
/// out[c] += f32(Σ_k partial[k, c]), k in [0, nchunks) in order; partial: (nchunks, h), f64.
void column_finish(CudaDevice& dev, float* out, const double* partial, int64_t h, int64_t nchunks);

}  // namespace gpu
}  // namespace tp
