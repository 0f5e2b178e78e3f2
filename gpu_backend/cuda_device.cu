// cuda_device.cu — the GPU Device itself: construction, memory and copies (the caching allocator
// is in caching_allocator.cpp), GEMM through cuBLAS (fp32, TF32 or bf16 inputs; the batched GEMM
// of the attention) and the column copy. Every other kernel is in kernels/<stem>.cu, with the CPU
// backend's stems (cuda_device.h lists them); their math is in core/device.h. Arguments were
// checked by the public Device call (core/device.cpp) before any do_* here runs.
//
// Everything runs on the device's one compute stream, so memory returned to the caching allocator
// may be handed out again at once: later work on the same stream runs after earlier work.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "cuda_check.h"
#include "cuda_device.h"
#include "kernels/kernel_util.cuh"

namespace tp {

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

// ==== CudaDevice: GEMM ===========================================================================

bool CudaDevice::takes_bf16(Kernel kernel) const { return kernel != Kernel::adamw_step; }
// Native: every kernel the training step calls (kernels/*.cu read and write bf16 through gpu::In /
// gpu::Out, kernel_util.cuh; the attention through f32 staging, kernels/attention.cu), each bit
// for bit what the stand-in path gives (tests/gpu_backend/test_gpu.cpp, GpuBf16Native). Only
// attention_cached_forward (generation's; no training step calls it) stays on the front's
// stand-ins; adamw_step takes no bf16 at all.
bool CudaDevice::native_bf16(Kernel kernel) const {
  return takes_bf16(kernel) && kernel != Kernel::attention_cached_forward;
}

// Row-major C (m×n) is column-major Cᵀ, so C = α op(A) op(B) + β C is computed as the
// column-major Cᵀ = α op(B)ᵀ op(A)ᵀ + β Cᵀ: B is passed first, with each matrix's own row length
// (cols) as its leading dimension and the transposes unchanged.
void CudaDevice::do_gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
                         float beta, Tensor& c, const GemmDims& dims) {
  const auto [m, n, k] = dims;
  if (m == 0 || n == 0) return;
  if (k == 0) {  // op(A) op(B) is zero: C = β C, and β = 0 overwrites (as the CPU does)
    if (beta == 0.0f) {
      fill(c, 0.0f);  // the public kernels: a bf16 C is widened and rounded there
    } else if (beta != 1.0f) {
      scale(c, beta);
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

  if (a.dtype() == Dtype::bf16 || b.dtype() == Dtype::bf16 || c.dtype() == Dtype::bf16) {
    // bf16 tensors (--precision bf16): cuBLAS reads bf16 A and B (an f32 operand is rounded into
    // scratch first) and accumulates in f32 into an f32 C; a bf16 C goes through an f32 copy
    // (widened when β reads it) and is rounded once at the end, as the CPU's widening does.
    const size_t a_bytes =
        a.dtype() == Dtype::bf16 ? 0 : (static_cast<size_t>(a.numel()) * 2 + 255) / 256 * 256;
    const size_t b_bytes =
        b.dtype() == Dtype::bf16 ? 0 : (static_cast<size_t>(b.numel()) * 2 + 255) / 256 * 256;
    const size_t c_bytes = c.dtype() == Dtype::f32 ? 0 : static_cast<size_t>(c.numel()) * 4;
    char* base = static_cast<char*>(scratch(a_bytes + b_bytes + c_bytes + 1));
    const void* a16 = a.raw();
    const void* b16 = b.raw();
    if (a_bytes > 0) {
      gpu::to_bf16(stream_, a.data(), base, a.numel());
      a16 = base;
    }
    if (b_bytes > 0) {
      gpu::to_bf16(stream_, b.data(), base + a_bytes, b.numel());
      b16 = base + a_bytes;
    }
    float* c32 =
        c.dtype() == Dtype::f32 ? c.data() : reinterpret_cast<float*>(base + a_bytes + b_bytes);
    if (c.dtype() == Dtype::bf16 && beta != 0.0f) gpu::from_bf16(stream_, c.raw(), c32, c.numel());
    CUBLAS_CHECK(cublasGemmEx(cublas_, op_b, op_a, in, im, ik, &alpha, b16, CUDA_R_16BF, ldb, a16,
                              CUDA_R_16BF, lda, &beta, c32, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
    if (c.dtype() == Dtype::bf16) gpu::to_bf16(stream_, c32, c.raw(), c.numel());
    return;
  }
  if (options_.dtype == "bf16") {
    // bf16 inputs, f32 accumulation and output: round A and B to bf16 into scratch (B after A, at
    // a 256-byte boundary), then one cublasGemmEx.
    const int64_t na = a.numel(), nb = b.numel();
    const size_t a_bytes = (static_cast<size_t>(na) * sizeof(__nv_bfloat16) + 255) / 256 * 256;
    char* base =
        static_cast<char*>(scratch(a_bytes + static_cast<size_t>(nb) * sizeof(__nv_bfloat16)));
    auto* a16 = reinterpret_cast<__nv_bfloat16*>(base);
    auto* b16 = reinterpret_cast<__nv_bfloat16*>(base + a_bytes);
    gpu::to_bf16(stream_, a.data(), a16, na);  // kernels/convert.cu
    gpu::to_bf16(stream_, b.data(), b16, nb);
    CUBLAS_CHECK(cublasGemmEx(cublas_, op_b, op_a, in, im, ik, &alpha, b16, CUDA_R_16BF, ldb, a16,
                              CUDA_R_16BF, lda, &beta, c.data(), CUDA_R_32F, ldc,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  // fp32 (TF32 tensor cores when --tf32 set the math mode). With β = 0 cuBLAS does not read C.
  CUBLAS_CHECK(cublasSgemm(cublas_, op_b, op_a, in, im, ik, &alpha, b.data(), ldb, a.data(), lda,
                           &beta, c.data(), ldc));
}

// The attention's GEMMs over the (batch, head) pairs (kernels/attention.cu); see cuda_device.h.
void CudaDevice::batched_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                              float alpha, const float* a, int64_t lda, int64_t stride_a,
                              const float* b, int64_t ldb, int64_t stride_b, float beta, float* c,
                              int64_t ldc, int64_t stride_c, int64_t batch) {
  TP_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX &&
               ldc <= INT_MAX && batch <= INT_MAX,
           "batched_gemm: sizes exceed cuBLAS's 32-bit arguments");
  // Row-major C is column-major Cᵀ = op(B)ᵀ op(A)ᵀ: B first, as in gemm().
  CUBLAS_CHECK(cublasSgemmStridedBatched(
      cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
      static_cast<int>(ldb), stride_b, a, static_cast<int>(lda), stride_a, &beta, c,
      static_cast<int>(ldc), stride_c, static_cast<int>(batch)));
}

// ==== CudaDevice: layout =========================================================================

void CudaDevice::do_copy_columns(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col,
                                 int64_t ncols) {
  const int64_t rows = src.rows();
  if (rows == 0 || ncols == 0) return;
  if (src.dtype() != dst.dtype()) {  // f32 ↔ bf16: a converting copy (kernels/convert.cu)
    gpu::convert_columns(stream_, src, src_col, dst, dst_col, ncols);
    return;
  }
  // A 2-D copy: `rows` rows of ncols elements (f32 or bf16), pitches = each tensor's row length
  // in bytes.
  const size_t es = static_cast<size_t>(src.element_size());
  CUDA_CHECK(cudaMemcpy2DAsync(
      static_cast<char*>(dst.raw()) + dst_col * es, static_cast<size_t>(dst.cols()) * es,
      static_cast<const char*>(src.raw()) + src_col * es, static_cast<size_t>(src.cols()) * es,
      static_cast<size_t>(ncols) * es, static_cast<size_t>(rows), cudaMemcpyDeviceToDevice,
      stream_));
}

}  // namespace tp
