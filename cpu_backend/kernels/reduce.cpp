// reduce.cpp — the CPU backend's reductions to one number: sum_squares (the gradient norm's
// pieces). The math is in core/device.h; the GPU's is in gpu_backend/kernels/reduce.cu.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu_device.h"
#include "kernels/kernel_util.h"

namespace tp {

// Σ x², in double. Fixed blocks, each summed by one thread in cpu::lane_sum's 16 fixed lanes (the
// same order for every vector width, so the loop is cloned: TP_CPU_CLONES), then the block sums in
// order: the same bits for any thread count and clone. (An `omp simd reduction` in the baseline's
// 2 doubles, not clonable, waited on its two add chains: 0.8 ns per element in a training step,
// 2.5 ms of the bench model's step; 16 lanes keep the adds independent.)
namespace {
TP_CPU_CLONES void sum_squares_loop(double* partial, const float* px, int64_t n, int64_t block) {
  const int64_t nblocks = (n + block - 1) / block;
#pragma omp parallel for if (n > cpu::kParallelMin)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const float* p = px + blk * block;
    const int64_t len = std::min(n, (blk + 1) * block) - blk * block;
    partial[blk] = cpu::lane_sum(len, [&](int64_t i) { return static_cast<double>(p[i]) * p[i]; });
  }
}
}  // namespace

double CpuDevice::do_sum_squares(const Tensor& x) {
  const int64_t n = x.numel();
  constexpr int64_t kBlock = 4096;
  std::vector<double> partial(static_cast<size_t>((n + kBlock - 1) / kBlock), 0.0);
  sum_squares_loop(partial.data(), x.data(), n, kBlock);
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace tp
