// activation.cu — the GPU backend's MLP activations, each forward beside its backward: GeLU (tanh
// approximation) and SwiGLU, one thread per element (grid stride). The math is in core/device.h;
// the CPU's are in cpu_backend/kernels/activation.cpp.
#include <cmath>
#include <cstdint>

#include "cuda_check.h"
#include "cuda_device.h"
#include "kernels/kernel_util.cuh"

namespace tp {

// =================================================================================================
// Kernels
// =================================================================================================

namespace {

constexpr float kGeluA = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluC = 0.044715f;

// GeLU in its tanh form, as device.h writes it (the CPU computes the same function in its σ form).
// Every kernel here is kernel<kTyped> over gpu::In / gpu::Out (kernel_util.cuh): f32 or bf16
// tensors, the float arithmetic below, one rounding per stored element.
template <bool T>
__global__ void gelu_forward_kernel(gpu::Out<T> y, gpu::In<T> x, int64_t n) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads()) {
    const float xi = x[i];
    y.set(i, 0.5f * xi * (1.0f + tanhf(kGeluA * (xi + kGeluC * xi * xi * xi))));
  }
}

template <bool T>
__global__ void gelu_backward_kernel(gpu::Out<T> dx, gpu::In<T> dy, gpu::In<T> x, int64_t n) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads()) {
    const float xi = x[i];
    const float t = tanhf(kGeluA * (xi + kGeluC * xi * xi * xi));
    const float grad =
        0.5f * (1.0f + t) + 0.5f * xi * (1.0f - t * t) * kGeluA * (1.0f + 3.0f * kGeluC * xi * xi);
    dx.set(i, dy[i] * grad);
  }
}

template <bool T>
__global__ void swiglu_forward_kernel(gpu::Out<T> y, gpu::In<T> g, gpu::In<T> u, int64_t n) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads()) {
    const float gi = g[i];
    const float sig = 1.0f / (1.0f + expf(-gi));
    y.set(i, gi * sig * u[i]);
  }
}

template <bool T>
__global__ void swiglu_backward_kernel(gpu::Out<T> dg, gpu::Out<T> du, gpu::In<T> dy, gpu::In<T> g,
                                       gpu::In<T> u, int64_t n) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads()) {
    const float gi = g[i], ui = u[i], dyi = dy[i];  // read all before writing (no aliasing rule)
    const float sig = 1.0f / (1.0f + expf(-gi));
    dg.set(i, dyi * ui * sig * (1.0f + gi * (1.0f - sig)));
    du.set(i, dyi * gi * sig);
  }
}

}  // namespace

// =================================================================================================
// Launchers
// =================================================================================================

void CudaDevice::do_gelu_forward(Tensor& y, const Tensor& x) {
  const int64_t n = x.numel();
  if (n == 0) return;
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    gelu_forward_kernel<T><<<gpu::elementwise_blocks(n), gpu::kThreads, 0, stream()>>>(
        gpu::out<T>(y), gpu::in<T>(x), n);
      },
      y, x);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x) {
  const int64_t n = x.numel();
  if (n == 0) return;
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    gelu_backward_kernel<T><<<gpu::elementwise_blocks(n), gpu::kThreads, 0, stream()>>>(
        gpu::out<T>(dx), gpu::in<T>(dy), gpu::in<T>(x), n);
      },
      dx, dy, x);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_swiglu_forward(Tensor& y, const Tensor& g, const Tensor& u) {
  const int64_t n = g.numel();
  if (n == 0) return;
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    swiglu_forward_kernel<T><<<gpu::elementwise_blocks(n), gpu::kThreads, 0, stream()>>>(
        gpu::out<T>(y), gpu::in<T>(g), gpu::in<T>(u), n);
      },
      y, g, u);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_swiglu_backward(Tensor& dg, Tensor& du, const Tensor& dy, const Tensor& g,
                                    const Tensor& u) {
  const int64_t n = g.numel();
  if (n == 0) return;
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    swiglu_backward_kernel<T><<<gpu::elementwise_blocks(n), gpu::kThreads, 0, stream()>>>(
        gpu::out<T>(dg), gpu::out<T>(du), gpu::in<T>(dy), gpu::in<T>(g), gpu::in<T>(u), n);
      },
      dg, du, dy, g, u);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tp
