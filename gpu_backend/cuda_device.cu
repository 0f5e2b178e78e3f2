// cuda_device.cu — the GPU Device's memory, copies, GEMM and generic kernels: construction,
// host/device copies, GEMM through cuBLAS (fp32, TF32 or bf16 inputs), fill / scale / axpy / mul,
// bias forward, column copies, the sum of squares, and the counter-based RNG (fill_random,
// dropout_mask). The caching allocator lives in caching_allocator.cpp, the model kernels in
// kernels_model.cu and kernels_attention.cu. Arguments were checked by the public Device call
// (core/device.cpp) before any do_* here runs.
//
// Semantics are those of core/device.h and of the CPU backend (cpu_backend/cpu_device.cpp,
// cpu_kernels.cpp), which this file mirrors:
//   - elementwise ops round like the CPU: products and sums that the CPU does as two roundings are
//     written with __fmul_rn / __fadd_rn (or __dmul_rn / __dadd_rn) so nvcc cannot contract them
//     into one FMA (the CPU build has no -mfma, so g++ never does);
//   - fill_random / dropout_mask give the numbers of tp::random_value (core/rng.cpp) bit for bit on
//     the uniform path; the normal path may differ in the last ulp (see random_value_device);
//   - reductions are deterministic: sum_squares sums fixed chunks then the chunk sums in a fixed
//     tree order (identical run to run, not necessarily to the CPU's last bit); add_bias_backward
//     is a column sum in kernels_model.cu, with the norms' parameter gradients.
//
// Everything runs on the device's one compute stream, so memory returned to the caching allocator
// may be handed out again at once: later work on the same stream runs after earlier work.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/rng.h"
#include "cuda_check.h"
#include "cuda_device.h"

namespace tp {

namespace {

constexpr int kThreads = 256;          // threads per block of the elementwise kernels
constexpr int64_t kMaxBlocks = 65535;  // grid cap; kernels use grid-stride loops
constexpr int kReduceThreads = 256;    // threads per block of the reductions (a power of two)
constexpr int64_t kSumChunk = 4096;    // elements per partial sum in sum_squares (as the CPU)

// Blocks for n independent items (n > 0), at most kMaxBlocks.
unsigned int blocks_for(int64_t n) {
  return static_cast<unsigned int>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

// ==== kernels =====================================================================================

// x[i] = v
__global__ void fill_kernel(float* __restrict__ x, int64_t n, float v) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = v;
}

// x[i] = alpha · x[i]
__global__ void scale_kernel(float* __restrict__ x, int64_t n, float alpha) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = __fmul_rn(x[i], alpha);
}

// y[i] = y[i] + alpha · x[i]   (two roundings, as on the CPU: no FMA)
__global__ void axpy_kernel(float alpha, const float* __restrict__ x, float* __restrict__ y,
                            int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = __fadd_rn(y[i], __fmul_rn(alpha, x[i]));
}

// y[i] = x[i] · m[i]   (y may alias x, so no __restrict__)
__global__ void mul_kernel(const float* x, const float* m, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = __fmul_rn(x[i], m[i]);
}

// y[r, c] += bias[c]   over the flat index i = r · cols + c
__global__ void add_bias_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t n,
                                int64_t cols) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] += bias[i % cols];
}

// y[i] = bf16(x[i]), round to nearest even: the GEMM inputs under --dtype bf16.
__global__ void to_bf16_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ y,
                               int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}

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
__global__ void sum_squares_partial_kernel(const float* __restrict__ x, int64_t n, int64_t chunks,
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

// tp::random_value on the device (core/rng.cpp), for one global index:
//   bits = Philox4x32-10(counter = (i_lo, i_hi, 0, 0), key)      (core/rng.h, constexpr, shared)
//   unit(w) = (w >> 8) · 2⁻²⁴ ∈ [0, 1)
//   uniform: a + (b − a) · unit(bits[0]), in double, rounded once to f32
//   normal:  a + b · √(−2 ln u1) · cos(2π u2), u1 = unit(bits[0]) + 2⁻²⁴ ∈ (0, 1], u2 = unit(bits[1])
// Every multiply-add is written __dmul_rn / __dadd_rn, two roundings as on the CPU (no FMA), so the
// uniform path is bit-identical to random_value. The normal path calls CUDA's double log / cos
// (≤ 1 / 2 ulp) where the CPU calls glibc's (< 1 ulp): z may differ in the last bit of the double,
// which almost never changes the f32 result — equal up to 1 f32 ulp, not guaranteed bit-identical.
__device__ float random_value_device(RngKey key, int64_t global_index, bool normal, float a,
                                     float b) {
  const uint64_t i = static_cast<uint64_t>(global_index);
  const auto r =
      philox4x32_10({static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), 0u, 0u}, key);
  constexpr double kUnit = 1.0 / 16777216.0;  // 2⁻²⁴; scaling by it is exact
  if (!normal) {
    const double u = static_cast<double>(r[0] >> 8) * kUnit;
    const double width = static_cast<double>(b) - static_cast<double>(a);
    return __double2float_rn(__dadd_rn(static_cast<double>(a), __dmul_rn(width, u)));
  }
  const double u1 = __dadd_rn(static_cast<double>(r[0] >> 8) * kUnit, kUnit);
  const double u2 = static_cast<double>(r[1] >> 8) * kUnit;
  const double z = __dmul_rn(sqrt(-2.0 * log(u1)), cos(__dmul_rn(6.283185307179586, u2)));
  return __double2float_rn(__dadd_rn(static_cast<double>(a), __dmul_rn(static_cast<double>(b), z)));
}

// x[r, c] = random_value(key, offset + r · row_stride + c, dist)   over i = r · cols + c
__global__ void fill_random_kernel(float* __restrict__ x, int64_t n, int64_t cols, RngKey key,
                                   int64_t offset, int64_t row_stride, bool normal, float a,
                                   float b) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    x[i] = random_value_device(key, offset + r * row_stride + c, normal, a, b);
  }
}

// mask[r, c] = keep if u ≥ p else 0, u = random_value(key, offset + r · row_stride + c, U[0, 1));
// keep = 1 / (1 − p) is computed on the host in f32, as the CPU does.
__global__ void dropout_mask_kernel(float* __restrict__ mask, int64_t n, int64_t cols, RngKey key,
                                    int64_t offset, int64_t row_stride, float p, float keep) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const float u = random_value_device(key, offset + r * row_stride + c, false, 0.0f, 1.0f);
    mask[i] = u >= p ? keep : 0.0f;
  }
}

}  // namespace

// ==== CudaDevice: construction, memory, copies ==================================================

CudaDevice::CudaDevice(int ordinal, const DeviceOptions& options)
    : ordinal_(ordinal), options_(options) {
  TP_CHECK_INPUT(options.dtype == "fp32" || options.dtype == "bf16", "--dtype ", options.dtype,
                 ": unknown GEMM input type; use fp32 or bf16");
  CUDA_CHECK(cudaSetDevice(ordinal));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  name_ = "cuda:" + std::to_string(ordinal) + " (" + prop.name + ")";
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  try {
    CUBLAS_CHECK(cublasCreate(&cublas_));
    CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    CUBLAS_CHECK(cublasSetMathMode(
        cublas_, options.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  } catch (...) {
    // The destructor does not run for a half-built object: release what exists.
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
    throw;
  }
}

CudaDevice::~CudaDevice() {
  // Never throws: every error is ignored at shutdown.
  cudaSetDevice(ordinal_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (scratch_ != nullptr) {
    try {
      allocator_.deallocate(scratch_);
    } catch (...) {
    }
    scratch_ = nullptr;
  }
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  try {
    allocator_.release_all();
  } catch (...) {
  }
  // ~CachingAllocator then frees whatever blocks are still live.
}

std::string CudaDevice::name() const { return name_; }

void* CudaDevice::allocate(size_t bytes) { return allocator_.allocate(bytes); }

void CudaDevice::deallocate(void* ptr) { allocator_.deallocate(ptr); }

void* CudaDevice::scratch(size_t bytes) {
  if (bytes > scratch_bytes_) {
    // The old block goes back to the cache; kernels queued on it run before any new user's.
    allocator_.deallocate(scratch_);
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    scratch_ = allocator_.allocate(bytes);
    scratch_bytes_ = bytes;
  }
  return scratch_;
}

void CudaDevice::copy_from_host(void* dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
  // The caller may free or reuse host_src as soon as we return.
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaDevice::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaDevice::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  if (d < s + bytes && s < d + bytes) {
    // Overlapping ranges (memmove semantics, as on the CPU): cudaMemcpy does not allow overlap,
    // so go through a temporary block (freed stream-ordered, after both copies).
    void* tmp = allocator_.allocate(bytes);
    CUDA_CHECK(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, stream_));
    CUDA_CHECK(cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, stream_));
    allocator_.deallocate(tmp);
    return;
  }
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaDevice::synchronize() { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

// ==== CudaDevice: elementwise ====================================================================

void CudaDevice::do_fill(Tensor& x, float value) {
  const int64_t n = x.numel();
  if (n == 0) return;
  fill_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x.data(), n, value);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_scale(Tensor& x, float alpha) {
  const int64_t n = x.numel();
  if (n == 0) return;
  scale_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x.data(), n, alpha);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_axpy(float alpha, const Tensor& x, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  axpy_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(alpha, x.data(), y.data(), n);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_mul(const Tensor& x, const Tensor& m, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  mul_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x.data(), m.data(), y.data(), n);
  CUDA_CHECK_LAUNCH();
}

// ==== CudaDevice: GEMM ===========================================================================

// Row-major C (m×n) is column-major Cᵀ, so C = α op(A) op(B) + β C is computed as the
// column-major Cᵀ = α op(B)ᵀ op(A)ᵀ + β Cᵀ: B is passed first, with each matrix's own row length
// (cols) as its leading dimension and the transposes unchanged.
void CudaDevice::do_gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
                         float beta, Tensor& c, const GemmDims& dims) {
  const auto [m, n, k] = dims;
  if (m == 0 || n == 0) return;
  if (k == 0) {  // op(A) op(B) is zero: C = β C, and β = 0 overwrites (as the CPU does)
    if (beta == 0.0f) {
      do_fill(c, 0.0f);
    } else if (beta != 1.0f) {
      do_scale(c, beta);
    }
    return;
  }
  TP_CHECK(
      m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && a.cols() <= INT_MAX && b.cols() <= INT_MAX,
      "gemm: ", m, "x", n, "x", k, " exceeds cuBLAS's 32-bit sizes");
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
  const int lda = static_cast<int>(a.cols()), ldb = static_cast<int>(b.cols());
  const int ldc = static_cast<int>(c.cols());

  if (options_.dtype == "bf16") {
    // bf16 inputs, f32 accumulation and output: round A and B to bf16 into scratch (B after A, at
    // a 256-byte boundary), then one cublasGemmEx.
    const int64_t na = a.numel(), nb = b.numel();
    const size_t a_bytes = (static_cast<size_t>(na) * sizeof(__nv_bfloat16) + 255) / 256 * 256;
    char* base =
        static_cast<char*>(scratch(a_bytes + static_cast<size_t>(nb) * sizeof(__nv_bfloat16)));
    auto* a16 = reinterpret_cast<__nv_bfloat16*>(base);
    auto* b16 = reinterpret_cast<__nv_bfloat16*>(base + a_bytes);
    to_bf16_kernel<<<blocks_for(na), kThreads, 0, stream_>>>(a.data(), a16, na);
    CUDA_CHECK_LAUNCH();
    to_bf16_kernel<<<blocks_for(nb), kThreads, 0, stream_>>>(b.data(), b16, nb);
    CUDA_CHECK_LAUNCH();
    CUBLAS_CHECK(cublasGemmEx(cublas_, op_b, op_a, in, im, ik, &alpha, b16, CUDA_R_16BF, ldb, a16,
                              CUDA_R_16BF, lda, &beta, c.data(), CUDA_R_32F, ldc,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  // fp32 (TF32 tensor cores when --tf32 set the math mode). With β = 0 cuBLAS does not read C.
  CUBLAS_CHECK(cublasSgemm(cublas_, op_b, op_a, in, im, ik, &alpha, b.data(), ldb, a.data(), lda,
                           &beta, c.data(), ldc));
}

// ==== CudaDevice: bias, layout ===================================================================

void CudaDevice::do_add_bias(Tensor& y, const Tensor& bias) {
  const int64_t n = y.numel();
  if (n == 0) return;
  add_bias_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(y.data(), bias.data(), n, y.cols());
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_copy_columns(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col,
                                 int64_t ncols) {
  const int64_t rows = src.rows();
  if (rows == 0 || ncols == 0) return;
  // A 2-D copy: `rows` rows of ncols floats, pitches = each tensor's row length in bytes.
  CUDA_CHECK(cudaMemcpy2DAsync(
      dst.data() + dst_col, static_cast<size_t>(dst.cols()) * sizeof(float), src.data() + src_col,
      static_cast<size_t>(src.cols()) * sizeof(float), static_cast<size_t>(ncols) * sizeof(float),
      static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, stream_));
}

// ==== CudaDevice: reductions =====================================================================

double CudaDevice::do_sum_squares(const Tensor& x) {
  const int64_t n = x.numel();
  if (n == 0) return 0.0;
  const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  // scratch: [chunks partial sums][the total]
  auto* partial = static_cast<double*>(scratch(static_cast<size_t>(chunks + 1) * sizeof(double)));
  double* total = partial + chunks;
  const auto grid = static_cast<unsigned int>(std::min<int64_t>(chunks, kMaxBlocks));
  sum_squares_partial_kernel<<<grid, kReduceThreads, 0, stream_>>>(x.data(), n, chunks, partial);
  CUDA_CHECK_LAUNCH();
  sum_doubles_kernel<<<1, kReduceThreads, 0, stream_>>>(partial, chunks, total);
  CUDA_CHECK_LAUNCH();
  double result = 0.0;
  copy_to_host(&result, total, sizeof(double));
  return result;
}

// ==== CudaDevice: random numbers =================================================================

void CudaDevice::do_fill_random(Tensor& x, const RngKey& key, const GlobalIndex& index,
                                const Distribution& dist) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const bool normal = dist.kind == Distribution::Kind::Normal;
  fill_random_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(
      x.data(), n, x.cols(), key, index.offset, index.row_stride, normal, dist.a, dist.b);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_dropout_mask(Tensor& mask, const RngKey& key, const GlobalIndex& index,
                                 float p) {
  const int64_t n = mask.numel();
  if (n == 0) return;
  const float keep = 1.0f / (1.0f - p);
  dropout_mask_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(
      mask.data(), n, mask.cols(), key, index.offset, index.row_stride, p, keep);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tp
