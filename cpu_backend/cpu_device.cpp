#include "cpu_device.h"

#include <omp.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/kernel_checks.h"
#include "gemm.h"

namespace tp {

namespace {
constexpr int64_t kParallelMin = 1 << 14;  // below this many elements, one thread is faster
}  // namespace

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

void CpuDevice::copy_from_host(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuDevice::copy_to_host(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuDevice::copy(void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }

void CpuDevice::fill(Tensor& x, float value) {
  checks::check_on(*this, x, "fill");
  float* p = x.data();
  const int64_t n = x.numel();
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) p[i] = value;
}

void CpuDevice::scale(Tensor& x, float alpha) {
  checks::check_on(*this, x, "scale");
  float* p = x.data();
  const int64_t n = x.numel();
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) p[i] *= alpha;
}

void CpuDevice::axpy(float alpha, const Tensor& x, Tensor& y) {
  checks::check_axpy(*this, x, y);
  const float* px = x.data();
  float* py = y.data();
  const int64_t n = x.numel();
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) py[i] += alpha * px[i];
}

void CpuDevice::gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
                     float beta, Tensor& c) {
  const auto [m, n, k] = checks::check_gemm(*this, trans_a, trans_b, a, b, c);
  cpu::gemm_blocked(trans_a, trans_b, m, n, k, alpha, a.data(), a.cols(), b.data(), b.cols(), beta,
                    c.data(), c.cols());
}

void CpuDevice::add_bias(Tensor& y, const Tensor& bias) {
  checks::check_add_bias(*this, y, bias);
  float* py = y.data();
  const float* pb = bias.data();
  const int64_t rows = y.rows(), cols = y.cols();
#pragma omp parallel for if (rows * cols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) py[r * cols + c] += pb[c];
}

void CpuDevice::add_bias_backward(Tensor& dbias, const Tensor& dy) {
  checks::check_add_bias_backward(*this, dbias, dy);
  float* pdb = dbias.data();
  const float* pdy = dy.data();
  const int64_t rows = dy.rows(), cols = dy.cols();
  // Each column is summed by one thread, rows in order: the result does not depend on threads.
#pragma omp parallel for if (rows * cols > kParallelMin)
  for (int64_t c = 0; c < cols; ++c) {
    float sum = 0.0f;
    for (int64_t r = 0; r < rows; ++r) sum += pdy[r * cols + c];
    pdb[c] += sum;
  }
}

void CpuDevice::copy_columns(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col,
                             int64_t ncols) {
  checks::check_copy_columns(*this, src, src_col, dst, dst_col, ncols);
  const float* ps = src.data();
  float* pd = dst.data();
  const int64_t rows = src.rows(), sc = src.cols(), dc = dst.cols();
#pragma omp parallel for if (rows * ncols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(pd + r * dc + dst_col, ps + r * sc + src_col, static_cast<size_t>(ncols) * sizeof(float));
}

void CpuDevice::fill_random(Tensor& x, const RngKey& key, const GlobalIndex& index,
                            const Distribution& dist) {
  checks::check_on(*this, x, "fill_random");
  float* p = x.data();
  const int64_t rows = x.rows(), cols = x.cols();
#pragma omp parallel for if (rows * cols > 4096)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      p[r * cols + c] = random_value(key, index.offset + r * index.row_stride + c, dist);
}

}  // namespace tp
