// reduce.cu — the GPU backend's reductions: sum_squares (Σ x², the gradient norm's pieces), and
// the deterministic column sums that the parameter gradients share (gpu::column_sums for the bias
// gradient, gpu::column_finish for the norms' dw and db; kernels/kernel_util.cuh declares them).
// The math is in core/device.h; the CPU's sum_squares is in cpu_backend/kernels/reduce.cpp.
//
// Every kernel here reads (and the column sums write) bf16 itself (native_bf16; kernel_util.cuh,
// "Storage types"): a bf16 dy is widened on load, a bf16 gradient rounded once per store.
//
// Determinism: sum_squares sums fixed chunks, then the chunk sums in a fixed tree order (identical
// run to run, not necessarily to the CPU's last bit); the column sums depend only on the shape.
#include <algorithm>
#include <cstdint>

#include "cuda_check.h"
#include "cuda_device.h"
#include "kernels/kernel_util.cuh"

namespace tp {

// =================================================================================================
// Kernels
// =================================================================================================

namespace {

constexpr int kReduceThreads = 256;    // threads per block of sum_squares (a power of two)
constexpr int64_t kSumChunk = 4096;    // elements per partial sum in sum_squares (as the CPU)
constexpr int64_t kMaxBlocks = 65535;  // grid cap of sum_squares's partial sums (grid stride)
constexpr int64_t kRowChunk = 64;      // rows per partial column sum

// Block-wide sum of one double per thread (blockDim.x == kReduceThreads), in a fixed tree order;
// the total is returned to thread 0. Ends with a barrier, so `s` may be reused at once.
__device__ double block_sum(double v, double* s) {
  const int t = threadIdx.x;
  s[t] = v;
  __syncthreads();
  for (int stride = kReduceThreads / 2; stride > 0; stride /= 2) {
    if (t < stride) s[t] += s[t + stride];
    __syncthreads();
  }
  const double total = s[0];
  __syncthreads();
  return total;
}

// partial[b] = Σ x[i]² over chunk b = [b · kSumChunk, (b + 1) · kSumChunk), in double. Thread t
// takes elements t, t + 256, … of the chunk in order, then the block adds the 256 sums in a fixed
// tree: the result depends only on n, never on the grid or on timing.
template <bool T>
__global__ void sum_squares_partial_kernel(gpu::In<T> x, int64_t n, int64_t chunks,
                                           double* __restrict__ partial) {
  __shared__ double s[kReduceThreads];
  for (int64_t b = blockIdx.x; b < chunks; b += gridDim.x) {
    const int64_t begin = b * kSumChunk;
    const int64_t end = min(n, begin + kSumChunk);
    double acc = 0.0;
    for (int64_t i = begin + threadIdx.x; i < end; i += kReduceThreads) {
      const double v = x[i];
      acc = __dadd_rn(acc, __dmul_rn(v, v));  // v² is exact in double (24-bit mantissa)
    }
    const double total = block_sum(acc, s);
    if (threadIdx.x == 0) partial[b] = total;
  }
}

// *out = Σ partial[b], one block: thread t takes b = t, t + 256, … in order, then a fixed tree.
__global__ void sum_doubles_kernel(const double* __restrict__ partial, int64_t count,
                                   double* __restrict__ out) {
  __shared__ double s[kReduceThreads];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kReduceThreads) acc += partial[i];
  const double total = block_sum(acc, s);
  if (threadIdx.x == 0) *out = total;
}

// Column sums out[c] += Σ_r term(r, c), deterministic in two steps:
//   partial[k, c] = Σ_{r in chunk k, in order} term(r, c)          (f64; one thread per (k, c))
//   out[c] += f32(Σ_k partial[k, c], k in order)                    (one thread per c)
// column_finish_kernel also finishes the norms' fused backward (kernels/norm.cu).
template <bool T>
struct DyTerm {
  gpu::In<T> dy;
  __device__ double operator()(int64_t, int64_t i) const { return static_cast<double>(dy[i]); }
};

// One thread per (chunk k, column c), item = k·h + c: consecutive threads read consecutive columns.
template <typename Term>
__global__ void column_partial_sums_kernel(double* partial, int64_t rows, int64_t h,
                                           int64_t nchunks, Term term) {
  const int64_t items = nchunks * h;
  for (int64_t item = gpu::global_thread(); item < items; item += gpu::grid_threads()) {
    const int64_t k = item / h, c = item % h;
    const int64_t r0 = k * kRowChunk;
    const int64_t r1 = r0 + kRowChunk < rows ? r0 + kRowChunk : rows;
    double acc = 0.0;
    for (int64_t r = r0; r < r1; ++r) acc += term(r, r * h + c);
    partial[item] = acc;
  }
}

template <bool T>
__global__ void column_finish_kernel(gpu::Out<T> out, const double* partial, int64_t h,
                                     int64_t nchunks) {
  for (int64_t c = gpu::global_thread(); c < h; c += gpu::grid_threads()) {
    double acc = 0.0;
    for (int64_t k = 0; k < nchunks; ++k) acc += partial[k * h + c];
    out.set(c, out[c] + static_cast<float>(acc));
  }
}

}  // namespace

// =================================================================================================
// Launchers
// =================================================================================================

namespace {
// out[c] += Σ_r term(r, c) for a (rows, h) tensor, through the device's scratch memory.
template <typename Term>
void column_sums_of(CudaDevice& dev, Tensor& out, int64_t rows, int64_t h, Term term) {
  if (h == 0) return;
  const int64_t nchunks = (rows + kRowChunk - 1) / kRowChunk;  // 0 rows: 0 chunks, out += 0
  double* partial = nullptr;
  if (nchunks > 0) {
    partial = static_cast<double*>(dev.scratch(static_cast<size_t>(nchunks * h) * sizeof(double)));
    column_partial_sums_kernel<<<gpu::grid_blocks(nchunks * h, gpu::kThreads), gpu::kThreads, 0,
                                 dev.stream()>>>(partial, rows, h, nchunks, term);
    CUDA_CHECK_LAUNCH();
  }
  gpu::column_finish(dev, out, partial, h, nchunks);
}
}  // namespace

namespace gpu {

void column_sums(CudaDevice& dev, Tensor& out, const Tensor& dy) {
  const int64_t rows = dy.rows(), h = dy.cols();
  if (dy.dtype() == Dtype::bf16)
    column_sums_of(dev, out, rows, h, DyTerm<true>{in<true>(dy)});
  else
    column_sums_of(dev, out, rows, h, DyTerm<false>{in<false>(dy)});
}

void column_finish(CudaDevice& dev, Tensor& dst, const double* partial, int64_t h,
                   int64_t nchunks) {
  storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    column_finish_kernel<T>
        <<<grid_blocks(h, kThreads), kThreads, 0, dev.stream()>>>(out<T>(dst), partial, h, nchunks);
      },
      dst);
  CUDA_CHECK_LAUNCH();
}

}  // namespace gpu

double CudaDevice::do_sum_squares(const Tensor& x) {
  const int64_t n = x.numel();
  if (n == 0) return 0.0;
  const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  // scratch: [chunks partial sums][the total]
  auto* partial = static_cast<double*>(scratch(static_cast<size_t>(chunks + 1) * sizeof(double)));
  double* total = partial + chunks;
  const auto grid = static_cast<unsigned int>(std::min<int64_t>(chunks, kMaxBlocks));
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    sum_squares_partial_kernel<T>
        <<<grid, kReduceThreads, 0, stream_>>>(gpu::in<T>(x), n, chunks, partial);
      },
      x);
  CUDA_CHECK_LAUNCH();
  sum_doubles_kernel<<<1, kReduceThreads, 0, stream_>>>(partial, chunks, total);
  CUDA_CHECK_LAUNCH();
  double result = 0.0;
  copy_to_host(&result, total, sizeof(double));
  return result;
}

}  // namespace tp
