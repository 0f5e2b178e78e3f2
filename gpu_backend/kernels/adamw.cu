// adamw.cu — the GPU backend's AdamW step on one parameter shard and its moments, one thread per
// element. The math is in core/device.h; the CPU's is in cpu_backend/kernels/adamw.cpp.
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

// bc1 = 1 − β1^step, bc2 = 1 − β2^step are computed on the host in f64, as on the CPU.
__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, AdamWParams hp,
                             float bc1, float bc2, int64_t n) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads()) {
    const float gi = hp.grad_scale * g[i];
    const float mi = hp.beta1 * m[i] + (1.0f - hp.beta1) * gi;
    const float vi = hp.beta2 * v[i] + (1.0f - hp.beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float update = (mi / bc1) / (sqrtf(vi / bc2) + hp.eps);
    const float pi = p[i];
    p[i] = pi - (hp.lr * update + hp.lr * hp.weight_decay * pi);
  }
}

}  // namespace

// =================================================================================================
// Launchers
// =================================================================================================

void CudaDevice::do_adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v,
                               const AdamWParams& hp, int64_t step) {
  const float bc1 =
      static_cast<float>(1.0 - std::pow(static_cast<double>(hp.beta1), static_cast<double>(step)));
  const float bc2 =
      static_cast<float>(1.0 - std::pow(static_cast<double>(hp.beta2), static_cast<double>(step)));
  const int64_t n = p.numel();
  if (n == 0) return;
  adamw_kernel<<<gpu::elementwise_blocks(n), gpu::kThreads, 0, stream()>>>(
      p.data(), g.data(), m.data(), v.data(), hp, bc1, bc2, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tp
