// adamw.cpp — the CPU backend's AdamW step on one parameter shard and its moments. The math is
// in core/device.h; the GPU's is in gpu_backend/kernels/adamw.cu.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cpu_device.h"
#include "kernels/kernel_util.h"

namespace tp {

// In blocks of kBlock elements, three loops over each: m, v; the square roots; p. std::sqrt may
// set errno (on a negative argument), so the compiler keeps it out of vector code: on its own it
// runs one element at a time, while the loops around it vectorise (8 lanes with AVX2:
// TP_CPU_CLONES). Each element's arithmetic is the same as in one loop.
namespace {
TP_CPU_CLONES void adamw_loop(float* pp, const float* pg, float* pm, float* pv, int64_t n,
                              const AdamWParams& hp, float bc1, float bc2) {
  constexpr int64_t kBlock = 256;
  const int64_t nblocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for if (n > cpu::kParallelMin)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t i0 = blk * kBlock, len = std::min(kBlock, n - i0);
    float denom[kBlock];  // √(v / (1 − β2^step)) + eps
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) {
      const int64_t i = i0 + j;
      const float gi = hp.grad_scale * pg[i];
      const float mi = hp.beta1 * pm[i] + (1.0f - hp.beta1) * gi;
      const float vi = hp.beta2 * pv[i] + (1.0f - hp.beta2) * gi * gi;
      pm[i] = mi;
      pv[i] = vi;
      denom[j] = vi / bc2;
    }
    for (int64_t j = 0; j < len; ++j) denom[j] = std::sqrt(denom[j]) + hp.eps;
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) {
      const int64_t i = i0 + j;
      const float update = (pm[i] / bc1) / denom[j];
      pp[i] -= hp.lr * update + hp.lr * hp.weight_decay * pp[i];
    }
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
