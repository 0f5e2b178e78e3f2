// cpu_device.cpp — the CPU Device itself: construction, host memory and copies, GEMM (through
// blas.h) and the column copy. Every other kernel is in kernels/<stem>.cpp (cpu_device.h lists them).
#include "cpu_device.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "blas.h"
#include "core/error.h"
#include "kernels/kernel_util.h"
#include "onednn_gemm.h"

namespace tp {

CpuDevice::CpuDevice()
    : bf16_gemm_(cpu::choose_bf16_gemm()), packed_gemm_(cpu::choose_packed_gemm()) {
  cpu::f32_gemm();  // a bad TP_CPU_F32_GEMM fails here, not in the first GEMM
  cpu::set_blas_threads(omp_get_max_threads());
}

std::string CpuDevice::name() const {
  return "cpu (openmp x" + std::to_string(omp_get_max_threads()) + ")";
}

bool CpuDevice::takes_bf16(Kernel kernel) const { return kernel != Kernel::adamw_step; }
bool CpuDevice::native_bf16(Kernel kernel) const {
  if (kernel == Kernel::gemm) return bf16_gemm_.path == cpu::Bf16Gemm::onednn;
  // The kernels that read and write bf16 in their loops (kernels/kernel_util.h, "storage").
  constexpr KernelSet kNative{Kernel::fill,
                              Kernel::scale,
                              Kernel::mul,
                              Kernel::axpy,
                              Kernel::add_bias,
                              Kernel::add_bias_backward,
                              Kernel::gelu_forward,
                              Kernel::gelu_backward,
                              Kernel::bias_gelu_forward,
                              Kernel::bias_gelu_backward,
                              Kernel::layernorm_forward,
                              Kernel::layernorm_backward,
                              Kernel::rmsnorm_forward,
                              Kernel::rmsnorm_backward};
  return kNative.contains(kernel);
}

// A block is [header of kHeader bytes: its size][the caller's bytes], 64-byte aligned; the size
// lets deallocate file it under its size in the cache.
namespace {
constexpr size_t kHeader = 64;
constexpr size_t kMinCache = size_t{64} << 20;
}  // namespace

CpuDevice::~CpuDevice() {
  for (auto& [size, blocks] : cache_)
    for (void* b : blocks) std::free(static_cast<char*>(b) - kHeader);
}

size_t CpuDevice::cached_bytes() const {
  const std::lock_guard<std::mutex> lock(cache_mutex_);
  return cached_bytes_;
}

void* CpuDevice::allocate(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  {
    const std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(rounded);
    if (it != cache_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_bytes_ -= rounded;
      live_bytes_ += rounded;
      peak_live_ = std::max(peak_live_, live_bytes_);
      return p;
    }
  }
  void* base = std::aligned_alloc(64, rounded + kHeader);
  TP_CHECK(base != nullptr, "out of host memory allocating ", bytes, " bytes");
  *static_cast<size_t*>(base) = rounded;
  const std::lock_guard<std::mutex> lock(cache_mutex_);
  live_bytes_ += rounded;
  peak_live_ = std::max(peak_live_, live_bytes_);
  return static_cast<char*>(base) + kHeader;
}

void CpuDevice::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  char* base = static_cast<char*>(ptr) - kHeader;
  const size_t rounded = *reinterpret_cast<size_t*>(base);
  const std::lock_guard<std::mutex> lock(cache_mutex_);
  live_bytes_ -= rounded;
  const size_t cap = std::max(kMinCache, peak_live_);
  if (cached_bytes_ + rounded > cap) {
    // Over the cap: give back blocks of other sizes first, then this one if still needed.
    for (auto it = cache_.begin(); it != cache_.end() && cached_bytes_ + rounded > cap; ++it)
      while (it->first != rounded && !it->second.empty() && cached_bytes_ + rounded > cap) {
        std::free(static_cast<char*>(it->second.back()) - kHeader);
        it->second.pop_back();
        cached_bytes_ -= it->first;
      }
    if (cached_bytes_ + rounded > cap) {
      std::free(base);
      return;
    }
  }
  cache_[rounded].push_back(ptr);
  cached_bytes_ += rounded;
}

void CpuDevice::copy_from_host(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void CpuDevice::copy_to_host(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void CpuDevice::copy(void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }

// All f32: cpu::sgemm (cblas_sgemm, or oneDNN where OpenBLAS does not know the CPU: blas.h). A bf16
// tensor reaches here only with the oneDNN path on (native_bf16): bf16 A and B go to oneDNN; a case
// it refuses, or an f32 input meeting a bf16 one, runs on the Device front's stand-ins
// (gemm_on_stand_ins: bf16 widened, this GEMM in f32, a bf16 C rounded back once).
void CpuDevice::do_gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
                        float beta, Tensor& c, const GemmDims& dims) {
  const auto bf16 = [](const Tensor& t) { return t.dtype() == Dtype::bf16; };
  if (bf16(a) || bf16(b) || bf16(c)) {
    if (!bf16(a) || !bf16(b) ||
        !cpu::onednn_gemm_bf16(trans_a, trans_b, dims.m, dims.n, dims.k, alpha,
                               static_cast<const uint16_t*>(a.raw()), a.cols(),
                               static_cast<const uint16_t*>(b.raw()), b.cols(), beta, c.raw(),
                               bf16(c), c.cols()))
      gemm_on_stand_ins(trans_a, trans_b, alpha, a, b, beta, c, dims);
    return;
  }
  cpu::sgemm(trans_a, trans_b, dims.m, dims.n, dims.k, alpha, a.data(), a.cols(), b.data(),
             b.cols(), beta, c.data(), c.cols());
}

namespace {
// B in oneDNN's layout for its f32 matmul, beside B itself (the fallback for a GEMM whose kernel
// wants another layout).
class OnednnPackedB : public PackedGemmB {
 public:
  OnednnPackedB(const Tensor& b, bool trans_b, int64_t m,
                std::shared_ptr<const cpu::F32PackedLayout> layout, Tensor storage)
      : PackedGemmB(b, trans_b, m), layout(std::move(layout)), storage(std::move(storage)) {}
  bool packed() const override { return true; }
  std::shared_ptr<const cpu::F32PackedLayout> layout;
  Tensor storage;  // (bytes / 4): the packed B
};
}  // namespace

std::shared_ptr<const PackedGemmB> CpuDevice::do_pack_gemm_b(const Tensor& b, bool trans_b,
                                                             int64_t m) {
  const int64_t k = trans_b ? b.cols() : b.rows(), n = trans_b ? b.rows() : b.cols();
  auto layout = packed_gemm_ ? cpu::onednn_f32_layout(trans_b, m, n, k, b.cols()) : nullptr;
  if (!layout) return Device::do_pack_gemm_b(b, trans_b, m);
  const size_t bytes = cpu::onednn_f32_packed_bytes(*layout);
  Tensor storage(*this, Shape{static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float))});
  cpu::onednn_f32_pack(*layout, b.data(), storage.raw());
  return std::make_shared<const OnednnPackedB>(b, trans_b, m, std::move(layout),
                                               std::move(storage));
}

void CpuDevice::do_gemm_packed(bool trans_a, float alpha, const Tensor& a, const PackedGemmB& b,
                               float beta, Tensor& c, const GemmDims& dims) {
  const auto* p = dynamic_cast<const OnednnPackedB*>(&b);
  if (p != nullptr &&
      cpu::onednn_f32_gemm_packed(*p->layout, trans_a, dims.m, alpha, a.data(), a.cols(),
                                  p->storage.raw(), beta, c.data(), c.cols()))
    return;
  do_gemm(trans_a, b.trans_b(), alpha, a, b.b(), beta, c, dims);  // a layout this A cannot read
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
