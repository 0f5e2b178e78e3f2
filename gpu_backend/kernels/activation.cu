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
__global__ void gelu_forward_kernel(float* y, const float* x, int64_t n) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads()) {
    const float xi = x[i];
    y[i] = 0.5f * xi * (1.0f + tanhf(kGeluA * (xi + kGeluC * xi * xi * xi)));
  }
}

__global__ void gelu_backward_kernel(float* dx, const float* dy, const float* x, int64_t n) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads()) {
    const float xi = x[i];
    const float t = tanhf(kGeluA * (xi + kGeluC * xi * xi * xi));
    const float grad =
        0.5f * (1.0f + t) + 0.5f * xi * (1.0f - t * t) * kGeluA * (1.0f + 3.0f * kGeluC * xi * xi);
    dx[i] = dy[i] * grad;
  }
}

__global__ void swiglu_forward_kernel(float* y, const float* g, const float* u, int64_t n) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads()) {
    const float gi = g[i];
    const float sig = 1.0f / (1.0f + expf(-gi));
    y[i] = gi * sig * u[i];
  }
}

__global__ void swiglu_backward_kernel(float* dg, float* du, const float* dy, const float* g,
                                       const float* u, int64_t n) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads()) {
    const float gi = g[i], ui = u[i], dyi = dy[i];  // read all before writing (no aliasing rule)
    const float sig = 1.0f / (1.0f + expf(-gi));
    dg[i] = dyi * ui * sig * (1.0f + gi * (1.0f - sig));
    du[i] = dyi * gi * sig;
  }
}

}  // namespace

// =================================================================================================
// Launchers
// =================================================================================================

void CudaDevice::do_gelu_forward(Tensor& y, const Tensor& x) {
  const int64_t n = x.numel();
  if (n == 0) return;
  gelu_forward_kernel<<<gpu::elementwise_blocks(n), gpu::kThreads, 0, stream()>>>(y.data(),
                                                                                  x.data(), n);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x) {
  const int64_t n = x.numel();
  if (n == 0) return;
  gelu_backward_kernel<<<gpu::elementwise_blocks(n), gpu::kThreads, 0, stream()>>>(
      dx.data(), dy.data(), x.data(), n);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_swiglu_forward(Tensor& y, const Tensor& g, const Tensor& u) {
  const int64_t n = g.numel();
  if (n == 0) return;
  swiglu_forward_kernel<<<gpu::elementwise_blocks(n), gpu::kThreads, 0, stream()>>>(
      y.data(), g.data(), u.data(), n);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_swiglu_backward(Tensor& dg, Tensor& du, const Tensor& dy, const Tensor& g,
                                    const Tensor& u) {
  const int64_t n = g.numel();
  if (n == 0) return;
  swiglu_backward_kernel<<<gpu::elementwise_blocks(n), gpu::kThreads, 0, stream()>>>(
      dg.data(), du.data(), dy.data(), g.data(), u.data(), n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tp
