// convert.cu — the GPU backend's dtype conversion (f32 ↔ bf16), and the f32 → bf16 rounding the
// GEMM uses for its inputs under --dtype bf16 (gpu::to_bf16). The rule is in core/device.h: round
// to nearest even (__float2bfloat16_rn, NaN stays NaN), widen exactly (__bfloat162float); one
// thread per element, so the result is bit-identical to the CPU's (cpu_backend/kernels/convert.cpp).
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda_check.h"
#include "cuda_device.h"
#include "kernels/kernel_util.cuh"

namespace tp {

namespace {

__global__ void to_bf16_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ y,
                               int64_t n) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads())
    y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void to_f32_kernel(const __nv_bfloat16* __restrict__ x, float* __restrict__ y,
                              int64_t n) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads())
    y[i] = __bfloat162float(x[i]);
}

// dst[r, dst_col + j] = src[r, src_col + j] between tensors of different dtypes (copy_columns;
// the same dtype is a cudaMemcpy2DAsync): one thread per (r, j), rounded once into bf16.
__global__ void convert_columns_kernel(gpu::In<true> src, int64_t src_cols, int64_t src_col,
                                       gpu::Out<true> dst, int64_t dst_cols, int64_t dst_col,
                                       int64_t rows, int64_t ncols) {
  const int64_t items = rows * ncols;
  for (int64_t item = gpu::global_thread(); item < items; item += gpu::grid_threads()) {
    const int64_t r = item / ncols, j = item % ncols;
    dst.set(r * dst_cols + dst_col + j, src[r * src_cols + src_col + j]);
  }
}

}  // namespace

void gpu::convert_columns(cudaStream_t stream, const Tensor& src, int64_t src_col, Tensor& dst,
                          int64_t dst_col, int64_t ncols) {
  const int64_t rows = src.rows();
  if (rows == 0 || ncols == 0) return;
  convert_columns_kernel<<<elementwise_blocks(rows * ncols), kThreads, 0, stream>>>(
      in<true>(src), src.cols(), src_col, out<true>(dst), dst.cols(), dst_col, rows, ncols);
  CUDA_CHECK_LAUNCH();
}

void gpu::to_bf16(cudaStream_t stream, const float* x, void* y, int64_t n) {
  if (n == 0) return;
  to_bf16_kernel<<<elementwise_blocks(n), kThreads, 0, stream>>>(x, static_cast<__nv_bfloat16*>(y),
                                                                 n);
  CUDA_CHECK_LAUNCH();
}

void gpu::from_bf16(cudaStream_t stream, const void* x, float* y, int64_t n) {
  if (n == 0) return;
  to_f32_kernel<<<elementwise_blocks(n), kThreads, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(x), y, n);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_convert(const Tensor& src, Tensor& dst) {
  const int64_t n = src.numel();
  if (src.dtype() == Dtype::f32) {
    gpu::to_bf16(stream_, src.data(), dst.raw(), n);
    return;
  }
  gpu::from_bf16(stream_, src.raw(), dst.data(), n);
}

}  // namespace tp
