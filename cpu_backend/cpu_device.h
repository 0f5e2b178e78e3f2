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

  // Model kernels: cpu_kernels.cpp.
  void mul(const Tensor& x, const Tensor& m, Tensor& y) override;
  double sum_squares(const Tensor& x) override;
  void dropout_mask(Tensor& mask, const RngKey& key, const GlobalIndex& index, float p) override;
  void gelu_forward(Tensor& y, const Tensor& x) override;
  void gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x) override;
  void swiglu_forward(Tensor& y, const Tensor& g, const Tensor& u) override;
  void swiglu_backward(Tensor& dg, Tensor& du, const Tensor& dy, const Tensor& g, const Tensor& u) override;
  void layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w,
                         const Tensor& b, float eps) override;
  void layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x,
                          const Tensor& w, const Tensor& mean, const Tensor& rstd) override;
  void rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, float eps) override;
  void rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                        const Tensor& rstd) override;
  void attention_forward(Tensor& out, Tensor& probs, const Tensor& q, const Tensor& k, const Tensor& v,
                         const AttentionShape& shape) override;
  void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q,
                          const Tensor& k, const Tensor& v, const Tensor& probs,
                          const AttentionShape& shape) override;
  void embedding_shard_forward(Tensor& out, const Tensor& ids, const Tensor& wte_shard,
                               int64_t first_id) override;
  void embedding_shard_backward(Tensor& dwte_shard, const Tensor& dout, const Tensor& ids,
                                int64_t first_id) override;
  void position_forward(Tensor& x, const Tensor& wpe, int64_t batch, int64_t row0) override;
  void position_backward(Tensor& dwpe, const Tensor& dx, int64_t batch, int64_t row0) override;
  void vocab_max(Tensor& row_max, const Tensor& logits, const VocabShard& shard) override;
  void vocab_sum_exp_target(Tensor& sum_exp, Tensor& target_logit, const Tensor& logits,
                            const Tensor& row_max, const Tensor& targets,
                            const VocabShard& shard) override;
  void vocab_loss(Tensor& loss, const Tensor& row_max, const Tensor& sum_exp,
                  const Tensor& target_logit) override;
  void vocab_softmax_backward(Tensor& dlogits, const Tensor& logits, const Tensor& row_max,
                              const Tensor& sum_exp, const Tensor& targets, const VocabShard& shard,
                              float scale) override;
  void adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamWParams& h,
                  int64_t step) override;
};

}  // namespace tp
