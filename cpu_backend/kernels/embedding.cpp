// embedding.cpp — the CPU backend's vocabulary-parallel token embedding (the masked lookup of a
// shard of wte) and the position embedding, each forward beside its backward. The math is in
// core/device.h; the GPU's are in gpu_backend/kernels/embedding.cu.
//
// The backwards sum rows into shared rows of the gradient (ids and positions repeat): each block of
// columns (dwte) or each position (dwpe) is owned by one thread, its rows in order, so the result
// does not depend on the thread count.
#include <algorithm>
#include <cstdint>

#include "cpu_device.h"
#include "kernels/kernel_util.h"

namespace tp {

namespace {
// The owned row of id, or −1 when another shard owns it.
int64_t owned_row(float id, int64_t first, int64_t rows) {
  const int64_t row = static_cast<int64_t>(id) - first;
  return row >= 0 && row < rows ? row : -1;
}
}  // namespace

void CpuDevice::do_embedding_shard_forward(Tensor& out, const Tensor& ids, const Tensor& wte_shard,
                                           int64_t first_id) {
  const int64_t n = ids.numel(), rows = wte_shard.rows(), h = wte_shard.cols();
  const float* pid = ids.data();
  const float* pwte = wte_shard.data();
  float* pout = out.data();
#pragma omp parallel for if (n * h > cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = owned_row(pid[i], first_id, rows);
    float* o = pout + i * h;
    if (row < 0) {
      for (int64_t c = 0; c < h; ++c) o[c] = 0.0f;
    } else {
      const float* te = pwte + row * h;
      for (int64_t c = 0; c < h; ++c) o[c] = te[c];
    }
  }
}

void CpuDevice::do_embedding_shard_backward(Tensor& dwte_shard, const Tensor& dout,
                                            const Tensor& ids, int64_t first_id,
                                            const float* host_ids) {
  const int64_t n = ids.numel(), rows = dwte_shard.rows(), h = dwte_shard.cols();
  const float* pid = host_ids;  // on the CPU, ids.data() itself
  const float* pdo = dout.data();
  float* pdwte = dwte_shard.data();
  // ids repeat, so each block of columns is owned by one thread, rows i in order.
  const int64_t nblocks = (h + cpu::kColBlock - 1) / cpu::kColBlock;
#pragma omp parallel for if (n * h > cpu::kParallelMin)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * cpu::kColBlock, c1 = std::min(h, c0 + cpu::kColBlock);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = owned_row(pid[i], first_id, rows);
      if (row < 0) continue;
      float* dst = pdwte + row * h;
      const float* src = pdo + i * h;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}

void CpuDevice::do_position_forward(Tensor& x, const Tensor& wpe, int64_t batch, int64_t row0) {
  const int64_t rows = x.rows(), h = x.cols();
  const float* pwpe = wpe.data();
  float* px = x.data();
#pragma omp parallel for if (rows * h > cpu::kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* pe = pwpe + ((row0 + r) / batch) * h;
    float* xr = px + r * h;
    for (int64_t c = 0; c < h; ++c) xr[c] += pe[c];
  }
}

void CpuDevice::do_position_backward(Tensor& dwpe, const Tensor& dx, int64_t batch, int64_t row0) {
  const int64_t rows = dx.rows(), h = dx.cols();
  if (rows == 0) return;
  const int64_t s0 = row0 / batch, s1 = (row0 + rows - 1) / batch + 1;  // positions [s0, s1)
  const float* pdx = dx.data();
  float* pdwpe = dwpe.data();
  // Position s is owned by one thread, its held rows in order.
#pragma omp parallel for if (rows * h > cpu::kParallelMin)
  for (int64_t s = s0; s < s1; ++s) {
    const int64_t r0 = std::max(s * batch, row0) - row0;
    const int64_t r1 = std::min((s + 1) * batch, row0 + rows) - row0;
    float* dst = pdwpe + s * h;
    for (int64_t r = r0; r < r1; ++r) {
      const float* src = pdx + r * h;
      for (int64_t c = 0; c < h; ++c) dst[c] += src[c];
    }
  }
}

}  // namespace tp
