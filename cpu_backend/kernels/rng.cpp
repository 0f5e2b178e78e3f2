// rng.cpp — the CPU backend's counter-based random kernels: fill_random (parameter
// initialisation) and dropout_mask, both tp::random_value (core/rng.h) of each element's global
// index, so a shard holds the same numbers whatever t is. The math is in core/device.h; the GPU's
// are in gpu_backend/kernels/rng.cu.
#include <cstdint>

#include "core/rng.h"
#include "cpu_device.h"

namespace tp {

void CpuDevice::do_fill_random(Tensor& x, const RngKey& key, const GlobalIndex& index,
                               const Distribution& dist) {
  float* p = x.data();
  const int64_t rows = x.rows(), cols = x.cols();
#pragma omp parallel for if (rows * cols > 4096)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      p[r * cols + c] = random_value(key, index.offset + r * index.row_stride + c, dist);
}

void CpuDevice::do_dropout_mask(Tensor& mask, const RngKey& key, const GlobalIndex& index,
                                float p) {
  float* pm = mask.data();
  const int64_t rows = mask.rows(), cols = mask.cols();
  const float keep = 1.0f / (1.0f - p);
  const Distribution uniform = Distribution::uniform(0.0f, 1.0f);
#pragma omp parallel for if (rows * cols > 4096)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float u = random_value(key, index.offset + r * index.row_stride + c, uniform);
      pm[r * cols + c] = u >= p ? keep : 0.0f;
    }
}

}  // namespace tp
