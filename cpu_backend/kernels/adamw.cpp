// adamw.cpp — the CPU backend's AdamW step on one parameter shard and its moments. The math is
// in core/device.h; the GPU's is in gpu_backend/kernels/adamw.cu.
#include <cmath>
#include <cstdint>

#include "cpu_device.h"
#include "kernels/kernel_util.h"

namespace tp {

// One pass, each element read and written once, the loop vectorised (16 lanes with AVX-512, 8
// with AVX2: TP_CPU_CLONES). std::sqrt vectorises because cpu_backend/ is compiled with
// -fno-math-errno (the Makefile): with errno it was a call per element that kept the square roots
// out of vector code (they ran in a scalar loop of their own). Each element's arithmetic is the
// one of device.h's formula, in f32.
namespace {
TP_CPU_CLONES void adamw_loop(float* pp, const float* pg, float* pm, float* pv, int64_t n,
                              const AdamWParams& hp, float bc1, float bc2) {
  const float b1 = hp.beta1, b2 = hp.beta2, eps = hp.eps, lr = hp.lr, wd = hp.weight_decay;
  const float gs = hp.grad_scale;
#pragma omp parallel for simd if (parallel : n > cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = gs * pg[i];
    const float mi = b1 * pm[i] + (1.0f - b1) * gi;
    const float vi = b2 * pv[i] + (1.0f - b2) * gi * gi;
    pm[i] = mi;
    pv[i] = vi;
    const float update = (mi / bc1) / (std::sqrt(vi / bc2) + eps);
    pp[i] -= lr * update + lr * wd * pp[i];
  }
}
}  // namespace

void CpuDevice::do_adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v,
                              const AdamWParams& hp, int64_t step) {
  const float bc1 =
      static_cast<float>(1.0 - std::pow(static_cast<double>(hp.beta1), static_cast<double>(step)));
  const float bc2 =
      static_cast<float>(1.0 - std::pow(static_cast<double>(hp.beta2), static_cast<double>(step)));
  adamw_loop(p.data(), g.data(), m.data(), v.data(), p.numel(), hp, bc1, bc2);
}

}  // namespace tp
