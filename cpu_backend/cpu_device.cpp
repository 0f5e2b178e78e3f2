#include "cpu_device.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "blas.h"
#include "core/error.h"

namespace tp {

namespace {
constexpr int64_t kParallelMin = 1 << 14;  // below this many elements, one thread is faster
}  // namespace

CpuDevice::CpuDevice() { cpu::set_blas_threads(omp_get_max_threads()); }

std::string CpuDevice::name() const {
  return "cpu (openmp x" + std::to_string(omp_get_max_threads()) + ")";
}

void* CpuDevice::allocate(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  TP_CHECK(p != nullptr, "out of host memory allocating ", bytes, " bytes");
  return p;
}

void CpuDevice::deallocate(void* ptr) { std::free(ptr); }

void CpuDevice::copy_from_host(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void CpuDevice::copy_to_host(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void CpuDevice::copy(void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }

void CpuDevice::do_fill(Tensor& x, float value) {
  float* p = x.data();
  const int64_t n = x.numel();
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) p[i] = value;
}

void CpuDevice::do_scale(Tensor& x, float alpha) {
  float* p = x.data();
  const int64_t n = x.numel();
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) p[i] *= alpha;
}

void CpuDevice::do_axpy(float alpha, const Tensor& x, Tensor& y) {
  const float* px = x.data();
  float* py = y.data();
  const int64_t n = x.numel();
#pragma omp parallel for simd if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) py[i] += alpha * px[i];
}

void CpuDevice::do_gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
                        float beta, Tensor& c, const GemmDims& dims) {
  cpu::sgemm(trans_a, trans_b, dims.m, dims.n, dims.k, alpha, a.data(), a.cols(), b.data(),
             b.cols(), beta, c.data(), c.cols());
}

void CpuDevice::do_add_bias(Tensor& y, const Tensor& bias) {
  float* py = y.data();
  const float* pb = bias.data();
  const int64_t rows = y.rows(), cols = y.cols();
#pragma omp parallel for if (rows * cols > kParallelMin)
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
  // dbias[c] += Σ_r dy[r, c]. Each block of columns is summed by one thread, rows in order (the
  // result does not depend on threads), reading dy row by row: the loop over a block's columns
  // vectorises, where one column at a time strode through memory.
  constexpr int64_t kBlock = 64;
  const int64_t nblocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for if (rows * cols > kParallelMin)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kBlock, width = std::min(kBlock, cols - c0);
    float sum[kBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = pdy + r * cols + c0;
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) sum[c] += row[c];
    }
    for (int64_t c = 0; c < width; ++c) pdb[c0 + c] += sum[c];
  }
}

void CpuDevice::do_copy_columns(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col,
                                int64_t ncols) {
  const float* ps = src.data();
  float* pd = dst.data();
  const int64_t rows = src.rows(), sc = src.cols(), dc = dst.cols();
#pragma omp parallel for if (rows * ncols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(pd + r * dc + dst_col, ps + r * sc + src_col,
                static_cast<size_t>(ncols) * sizeof(float));
}

void CpuDevice::do_fill_random(Tensor& x, const RngKey& key, const GlobalIndex& index,
                               const Distribution& dist) {
  float* p = x.data();
  const int64_t rows = x.rows(), cols = x.cols();
#pragma omp parallel for if (rows * cols > 4096)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      p[r * cols + c] = random_value(key, index.offset + r * index.row_stride + c, dist);
}

}  // namespace tp
