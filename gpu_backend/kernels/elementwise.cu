// elementwise.cu — the GPU backend's elementwise kernels: fill, scale, axpy, mul (dropout's
// forward and backward), add_bias and its backward (the bias gradient, a column sum). The math of
// each is in core/device.h; the CPU's are in cpu_backend/kernels/elementwise.cpp, whose rounding
// these mirror: a product and a sum the CPU rounds twice are written __fmul_rn / __fadd_rn so nvcc
// cannot contract them into one FMA (the CPU build has no -mfma, so g++ never does). Every kernel
// here reads and writes bf16 itself (native_bf16): the same arithmetic, one rounding per store.
#include <cstdint>

#include "cuda_check.h"
#include "cuda_device.h"
#include "kernels/kernel_util.cuh"

namespace tp {

// =================================================================================================
// Kernels
// =================================================================================================

namespace {

// Each kernel is kernel<kTyped> over gpu::In / gpu::Out (kernel_util.cuh, "Storage types"): the
// f32 arithmetic below, on f32 or bf16 tensors.

template <bool T>
__global__ void fill_kernel(gpu::Out<T> x, int64_t n, float v) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads()) x.set(i, v);
}

template <bool T>
__global__ void scale_kernel(gpu::Out<T> x, int64_t n, float alpha) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads())
    x.set(i, __fmul_rn(x[i], alpha));
}

// Two roundings, as on the CPU: no FMA.
template <bool T>
__global__ void axpy_kernel(float alpha, gpu::In<T> x, gpu::Out<T> y, int64_t n) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads())
    y.set(i, __fadd_rn(y[i], __fmul_rn(alpha, x[i])));
}

// y may alias x: each element is read before it is written, by the same thread.
template <bool T>
__global__ void mul_kernel(gpu::In<T> x, gpu::In<T> m, gpu::Out<T> y, int64_t n) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads())
    y.set(i, __fmul_rn(x[i], m[i]));
}

// Over the flat index i = r · cols + c.
template <bool T>
__global__ void add_bias_kernel(gpu::Out<T> y, gpu::In<T> bias, int64_t n, int64_t cols) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads())
    y.set(i, y[i] + bias[i % cols]);
}

}  // namespace

// =================================================================================================
// Launchers
// =================================================================================================

void CudaDevice::do_fill(Tensor& x, float value) {
  const int64_t n = x.numel();
  if (n == 0) return;
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    fill_kernel<T>
        <<<gpu::elementwise_blocks(n), gpu::kThreads, 0, stream_>>>(gpu::out<T>(x), n, value);
      },
      x);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_scale(Tensor& x, float alpha) {
  const int64_t n = x.numel();
  if (n == 0) return;
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    scale_kernel<T>
        <<<gpu::elementwise_blocks(n), gpu::kThreads, 0, stream_>>>(gpu::out<T>(x), n, alpha);
      },
      x);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_axpy(float alpha, const Tensor& x, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    axpy_kernel<T><<<gpu::elementwise_blocks(n), gpu::kThreads, 0, stream_>>>(alpha, gpu::in<T>(x),
                                                                              gpu::out<T>(y), n);
      },
      x, y);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_mul(const Tensor& x, const Tensor& m, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    mul_kernel<T><<<gpu::elementwise_blocks(n), gpu::kThreads, 0, stream_>>>(
        gpu::in<T>(x), gpu::in<T>(m), gpu::out<T>(y), n);
      },
      x, m, y);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_add_bias(Tensor& y, const Tensor& bias) {
  const int64_t n = y.numel();
  if (n == 0) return;
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    add_bias_kernel<T><<<gpu::elementwise_blocks(n), gpu::kThreads, 0, stream_>>>(
        gpu::out<T>(y), gpu::in<T>(bias), n, y.cols());
      },
      y, bias);
  CUDA_CHECK_LAUNCH();
}

// The two-step column sum (gpu::column_sums, kernels/reduce.cu), so a (tokens, cols) gradient keeps
// the whole GPU busy instead of one thread per column walking every row.
void CudaDevice::do_add_bias_backward(Tensor& dbias, const Tensor& dy) {
  gpu::column_sums(*this, dbias, dy);
}

}  // namespace tp
