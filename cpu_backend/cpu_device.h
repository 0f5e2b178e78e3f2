// cpu_device.h — the CPU Device: host memory and OpenMP kernels.
#pragma once

#include "core/device.h"

namespace tp {

/// Device on the host: memory from aligned_alloc, kernels parallelised with OpenMP. Kernels run
/// synchronously, so synchronize() has nothing to wait for.
class CpuDevice : public Device {
 public:
  CpuDevice() = default;
  std::string name() const override;
  bool host_accessible() const override { return true; }

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr) override;
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void synchronize() override {}

  void fill(Tensor& x, float value) override;
  void scale(Tensor& x, float alpha) override;
  void axpy(float alpha, const Tensor& x, Tensor& y) override;
  void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
            Tensor& c) override;
  void add_bias(Tensor& y, const Tensor& bias) override;
  void add_bias_backward(Tensor& dbias, const Tensor& dy) override;
  void copy_columns(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col,
                    int64_t ncols) override;
  void fill_random(Tensor& x, const RngKey& key, const GlobalIndex& index,
                   const Distribution& dist) override;
};

}  // namespace tp
