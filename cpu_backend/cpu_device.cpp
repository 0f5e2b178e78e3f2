// cpu_device.cpp — the CPU Device itself: construction, host memory and copies, GEMM (through
// blas.h) and the column copy. Every other kernel is in kernels/<stem>.cpp (cpu_device.h lists them).
#include "cpu_device.h"

#include <omp.h>

#include <cstdlib>
#include <cstring>

#include "blas.h"
#include "core/error.h"
#include "kernels/kernel_util.h"

namespace tp {

CpuDevice::CpuDevice() { cpu::set_blas_threads(omp_get_max_threads()); }

std::string CpuDevice::name() const {
  return "cpu (openmp x" + std::to_string(omp_get_max_threads()) + ")";
}

bool CpuDevice::takes_bf16(const std::string& kernel) const { return kernel != "adamw_step"; }

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

void CpuDevice::do_gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
                        float beta, Tensor& c, const GemmDims& dims) {
  cpu::sgemm(trans_a, trans_b, dims.m, dims.n, dims.k, alpha, a.data(), a.cols(), b.data(),
             b.cols(), beta, c.data(), c.cols());
}

void CpuDevice::do_copy_columns(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col,
                                int64_t ncols) {
  const float* ps = src.data();
  float* pd = dst.data();
  const int64_t rows = src.rows(), sc = src.cols(), dc = dst.cols();
#pragma omp parallel for if (rows * ncols > cpu::kParallelMin)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(pd + r * dc + dst_col, ps + r * sc + src_col,
                static_cast<size_t>(ncols) * sizeof(float));
}

}  // namespace tp
