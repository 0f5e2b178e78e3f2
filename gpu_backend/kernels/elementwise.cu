// elementwise.cu — the GPU backend's elementwise kernels: fill, scale, axpy, mul (dropout's
// forward and backward), add_bias and its backward (the bias gradient, a column sum). The math of
// each is in core/device.h; the CPU's are in cpu_backend/kernels/elementwise.cpp, whose rounding
// these mirror: a product and a sum the CPU rounds twice are written __fmul_rn / __fadd_rn so nvcc
// cannot contract them into one FMA (the CPU build has no -mfma, so g++ never does).
#include <cstdint>

#include "cuda_check.h"
#include "cuda_device.h"
#include "kernels/kernel_util.cuh"

namespace tp {

// =================================================================================================
// Kernels
// =================================================================================================

namespace {

__global__ void fill_kernel(float* __restrict__ x, int64_t n, float v) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = v;
}

__global__ void scale_kernel(float* __restrict__ x, int64_t n, float alpha) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = __fmul_rn(x[i], alpha);
}

// Two roundings, as on the CPU: no FMA.
__global__ void axpy_kernel(float alpha, const float* __restrict__ x, float* __restrict__ y,
                            int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = __fadd_rn(y[i], __fmul_rn(alpha, x[i]));
}

// y may alias x, so no __restrict__.
__global__ void mul_kernel(const float* x, const float* m, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = __fmul_rn(x[i], m[i]);
}

// Over the flat index i = r · cols + c.
__global__ void add_bias_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t n,
                                int64_t cols) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] += bias[i % cols];
}

}  // namespace

// =================================================================================================
// Launchers
// =================================================================================================

void CudaDevice::do_fill(Tensor& x, float value) {
  const int64_t n = x.numel();
  if (n == 0) return;
  fill_kernel<<<gpu::elementwise_blocks(n), gpu::kThreads, 0, stream_>>>(x.data(), n, value);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_scale(Tensor& x, float alpha) {
  const int64_t n = x.numel();
  if (n == 0) return;
  scale_kernel<<<gpu::elementwise_blocks(n), gpu::kThreads, 0, stream_>>>(x.data(), n, alpha);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_axpy(float alpha, const Tensor& x, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  axpy_kernel<<<gpu::elementwise_blocks(n), gpu::kThreads, 0, stream_>>>(alpha, x.data(), y.data(),
                                                                         n);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_mul(const Tensor& x, const Tensor& m, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  mul_kernel<<<gpu::elementwise_blocks(n), gpu::kThreads, 0, stream_>>>(x.data(), m.data(),
                                                                        y.data(), n);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_add_bias(Tensor& y, const Tensor& bias) {
  const int64_t n = y.numel();
  if (n == 0) return;
  add_bias_kernel<<<gpu::elementwise_blocks(n), gpu::kThreads, 0, stream_>>>(y.data(), bias.data(),
                                                                             n, y.cols());
  CUDA_CHECK_LAUNCH();
}

// The two-step column sum (gpu::column_sums, kernels/reduce.cu), so a (tokens, cols) gradient keeps
// the whole GPU busy instead of one thread per column walking every row.
void CudaDevice::do_add_bias_backward(Tensor& dbias, const Tensor& dy) {
  gpu::column_sums(*this, dbias.data(), dy.data(), dy.rows(), dy.cols());
}

}  // namespace tp
