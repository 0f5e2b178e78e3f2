// elementwise.cpp — the CPU backend's elementwise kernels: fill, scale, axpy, mul (dropout's
// forward and backward), add_bias and its backward (the bias gradient, a column sum). The math of
// each is in core/device.h; the GPU's are in gpu_backend/kernels/elementwise.cu.
//
// Not cloned per vector width (TP_CPU_CLONES): one or two flops per element read, so memory sets
// the pace, not the lanes; they run in the baseline's 4 lanes (SSE2) at 0.13-0.28 ns per element
// over 1 Mi elements (1 thread, the bench machine), the cloned GeLU's 0.7.
#include <cstdint>

#include "cpu_device.h"
#include "kernels/kernel_util.h"

namespace tp {

void CpuDevice::do_fill(Tensor& x, float value) {
  float* p = x.data();
  const int64_t n = x.numel();
#pragma omp parallel for simd if (parallel : n > cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) p[i] = value;
}

void CpuDevice::do_scale(Tensor& x, float alpha) {
  float* p = x.data();
  const int64_t n = x.numel();
#pragma omp parallel for simd if (parallel : n > cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) p[i] *= alpha;
}

void CpuDevice::do_axpy(float alpha, const Tensor& x, Tensor& y) {
  const float* px = x.data();
  float* py = y.data();
  const int64_t n = x.numel();
#pragma omp parallel for simd if (parallel : n > cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) py[i] += alpha * px[i];
}

void CpuDevice::do_mul(const Tensor& x, const Tensor& m, Tensor& y) {
  const float* px = x.data();
  const float* pm = m.data();
  float* py = y.data();
  const int64_t n = x.numel();
#pragma omp parallel for simd if (parallel : n > cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) py[i] = px[i] * pm[i];
}

void CpuDevice::do_add_bias(Tensor& y, const Tensor& bias) {
  float* py = y.data();
  const float* pb = bias.data();
  const int64_t rows = y.rows(), cols = y.cols();
#pragma omp parallel for if (rows * cols > cpu::kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = py + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) yr[c] += pb[c];
  }
}

void CpuDevice::do_add_bias_backward(Tensor& dbias, const Tensor& dy) {
  float* pdb = dbias.data();
  const float* pdy = dy.data();
  const int64_t rows = dy.rows(), cols = dy.cols();
  // A float sum per column, rows in order, each column summed by one thread (cpu::column_sums: the
  // result does not depend on threads), reading dy row after row.
#pragma omp parallel if (rows * cols > cpu::kParallelMin)
  cpu::column_sums(pdb, rows, cols, [&](int64_t i, int64_t) { return pdy[i]; });
}

}  // namespace tp
