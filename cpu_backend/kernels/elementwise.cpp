// elementwise.cpp — the CPU backend's elementwise kernels: fill, scale, axpy, mul (dropout's
// forward and backward), add_bias and its backward (the bias gradient, a column sum). The math of
// each is in core/device.h; the GPU's are in gpu_backend/kernels/elementwise.cu.
//
// Every kernel here reads and writes bf16 itself (native_bf16; kernel_util.h, "storage"): a loop
// template on its tensors' element types, the f32 call the same template on floats. The loops are
// cloned per vector width (TP_CPU_CLONES), though one or two flops per element read leave memory to
// set the pace (the f32 loops ran at 0.13-0.28 ns per element over 1 Mi elements in the baseline's
// 4 lanes, 1 thread, the bench machine): a bf16 store's rounding is a few integer operations per
// element that SSE2 lacks the instructions to vectorise well (no unsigned 32 → 16-bit pack).
#include <cstdint>

#include "cpu_device.h"
#include "kernels/kernel_util.h"

namespace tp {

namespace {
template <typename X>
TP_CPU_CLONES void fill_loop(X* p, float value, int64_t n) {
#pragma omp parallel for simd if (parallel : n > cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) cpu::store(p, i, value);
}

template <typename X>
TP_CPU_CLONES void scale_loop(X* p, float alpha, int64_t n) {
#pragma omp parallel for simd if (parallel : n > cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) cpu::store(p, i, cpu::load(p, i) * alpha);
}

// y = x ⊙ m (dropout: m the f32 mask; y may be x).
template <typename X, typename M, typename Y>
TP_CPU_CLONES void mul_loop(const X* px, const M* pm, Y* py, int64_t n) {
#pragma omp parallel for simd if (parallel : n > cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) cpu::store(py, i, cpu::load(px, i) * cpu::load(pm, i));
}

// y += alpha x (the residual adds, and the fused add + norm's unfused steps).
template <typename X, typename Y>
TP_CPU_CLONES void axpy_loop(float alpha, const X* px, Y* py, int64_t n) {
#pragma omp parallel for simd if (parallel : n > cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) cpu::store(py, i, cpu::load(py, i) + alpha * cpu::load(px, i));
}

template <typename Y, typename B>
TP_CPU_CLONES void add_bias_loop(Y* py, const B* pb, int64_t rows, int64_t cols) {
#pragma omp parallel for if (rows * cols > cpu::kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    Y* yr = py + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) cpu::store(yr, c, cpu::load(yr, c) + cpu::load(pb, c));
  }
}

// A float sum per column, rows in order, each column summed by one thread (cpu::column_sums: the
// result does not depend on threads), reading dy row after row.
template <typename DB, typename DY>
TP_CPU_CLONES void add_bias_backward_loop(DB* pdb, const DY* pdy, int64_t rows, int64_t cols) {
#pragma omp parallel if (rows * cols > cpu::kParallelMin)
  cpu::column_sums(pdb, rows, cols,
                   [&](int64_t i, int64_t) TP_CPU_INLINE { return cpu::load(pdy, i); });
}
}  // namespace

void CpuDevice::do_fill(Tensor& x, float value) {
  cpu::typed([&](auto* p) { fill_loop(p, value, x.numel()); }, x);
}

void CpuDevice::do_scale(Tensor& x, float alpha) {
  cpu::typed([&](auto* p) { scale_loop(p, alpha, x.numel()); }, x);
}

void CpuDevice::do_mul(const Tensor& x, const Tensor& m, Tensor& y) {
  cpu::typed([&](auto* px, auto* pm, auto* py) { mul_loop(px, pm, py, x.numel()); }, x, m, y);
}

void CpuDevice::do_axpy(float alpha, const Tensor& x, Tensor& y) {
  cpu::typed([&](auto* px, auto* py) { axpy_loop(alpha, px, py, x.numel()); }, x, y);
}

void CpuDevice::do_add_bias(Tensor& y, const Tensor& bias) {
  cpu::typed([&](auto* py, auto* pb) { add_bias_loop(py, pb, y.rows(), y.cols()); }, y, bias);
}

void CpuDevice::do_add_bias_backward(Tensor& dbias, const Tensor& dy) {
  cpu::typed([&](auto* pdb, auto* pdy) { add_bias_backward_loop(pdb, pdy, dy.rows(), dy.cols()); },
             dbias, dy);
}

}  // namespace tp
