// cuda_device.h — the GPU Device: memory from a caching allocator over cudaMalloc, GEMM through
// cuBLAS, a CUDA kernel for every other op, all on one compute stream.
//
// It implements the memory calls and the do_* half of every kernel (core/device.h): the public
// kernel has checked the arguments on the host before a do_* queues any work. Files:
// caching_allocator.{h,cpp} (the allocator), cuda_device.cu (memory, copies, GEMM, the column
// copy), and kernels/<stem>.cu, one per concept with the CPU backend's stems
// (cpu_backend/kernels/<stem>.cpp): convert, elementwise, rng, reduce, activation, norm, attention,
// embedding, cross_entropy, adamw; kernels/kernel_util.cuh is what they share. The math of every
// kernel is in core/device.h, the same for both backends.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "caching_allocator.h"
#include "core/device.h"

namespace tp {

class CudaDevice : public Device {
 public:
  /// Uses GPU `ordinal`; creates the compute stream and the cuBLAS handle.
  CudaDevice(int ordinal, const DeviceOptions& options);
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;
  std::string name() const override;  ///< "cuda:0 (NVIDIA H200)"
  bool host_accessible() const override { return false; }
  /// --precision bf16: every kernel but adamw_step (the fp32 master's update) takes bf16, and all
  /// but attention_cached_forward (generation) read and write it natively: the GEMM through
  /// cuBLAS with bf16 operands (CUBLAS_COMPUTE_32F), the attention on f32 staging in scratch
  /// (kernels/attention.cu says why), the others as kernel<kTyped> over bf16-aware accessors
  /// (load → float, the f32 arithmetic, one rounding per store; kernels/kernel_util.cuh) — bit
  /// for bit what the Device front's widening gives (core/device.h, "Dtypes"), so the rounding
  /// points are the CPU backend's.
  bool takes_bf16(Kernel kernel) const override;
  bool native_bf16(Kernel kernel) const override;
  int ordinal() const { return ordinal_; }
  cudaStream_t stream() const { return stream_; }  ///< every kernel of this device runs here

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr) override;
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void synchronize() override;

  /// At least `bytes` of device scratch memory, valid until the next call (stream-ordered).
  void* scratch(size_t bytes);
  /// Row-major C_i = α op(A_i) op(B_i) + β C_i for i < batch, fp32 (TF32 under --tf32), each
  /// operand at base + i · stride with its row stride ld: one cublasSgemmStridedBatched.
  void batched_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
                    int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c,
                    int64_t batch);

 protected:
  // cuda_device.cu: GEMM and the column copy.
  void do_gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
               float beta, Tensor& c, const GemmDims& dims) override;
  void do_copy_columns(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col,
                       int64_t ncols) override;

  // kernels/convert.cu
  void do_convert(const Tensor& src, Tensor& dst) override;

  // kernels/elementwise.cu
  void do_fill(Tensor& x, float value) override;
  void do_scale(Tensor& x, float alpha) override;
  void do_axpy(float alpha, const Tensor& x, Tensor& y) override;
  void do_mul(const Tensor& x, const Tensor& m, Tensor& y) override;
  void do_add_bias(Tensor& y, const Tensor& bias) override;
  void do_add_bias_backward(Tensor& dbias, const Tensor& dy) override;

  // kernels/rng.cu
  void do_fill_random(Tensor& x, const RngKey& key, const GlobalIndex& index,
                      const Distribution& dist) override;
  void do_dropout_mask(Tensor& mask, const RngKey& key, const GlobalIndex& index, float p) override;

  // kernels/reduce.cu
  double do_sum_squares(const Tensor& x) override;

  // kernels/activation.cu
  void do_gelu_forward(Tensor& y, const Tensor& x) override;
  void do_gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x) override;
  void do_swiglu_forward(Tensor& y, const Tensor& g, const Tensor& u) override;
  void do_swiglu_backward(Tensor& dg, Tensor& du, const Tensor& dy, const Tensor& g,
                          const Tensor& u) override;

  // kernels/norm.cu
  void do_layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w,
                            const Tensor& b, float eps) override;
  void do_layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x,
                             const Tensor& w, const Tensor& mean, const Tensor& rstd) override;
  void do_rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w,
                          float eps) override;
  void do_rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x,
                           const Tensor& w, const Tensor& rstd) override;

  // kernels/attention.cu
  void do_attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,
                            const Tensor& v, const AttentionShape& shape) override;
  void do_attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout,
                             const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, const AttentionShape& shape) override;
  void do_attention_merge(Tensor& out, Tensor& lse, const Tensor& out_part, const Tensor& lse_part,
                          const AttentionShape& shape) override;
  void do_attention_cached_forward(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                                   int64_t past, const AttentionShape& shape) override;

  // kernels/embedding.cu
  void do_embedding_shard_forward(Tensor& out, const Tensor& ids, const Tensor& wte_shard,
                                  int64_t first_id) override;
  /// Groups the positions by owned row on the host, from host_ids (the copy the check read).
  void do_embedding_shard_backward(Tensor& dwte_shard, const Tensor& dout, const Tensor& ids,
                                   int64_t first_id, const float* host_ids) override;
  void do_position_forward(Tensor& x, const Tensor& wpe, int64_t batch, int64_t row0) override;
  void do_position_backward(Tensor& dwpe, const Tensor& dx, int64_t batch, int64_t row0) override;

  // kernels/cross_entropy.cu
  void do_vocab_max(Tensor& row_max, const Tensor& logits, const VocabShard& shard,
                    int64_t real_cols) override;
  void do_vocab_sum_exp_target(Tensor& sum_exp, Tensor& target_logit, const Tensor& logits,
                               const Tensor& row_max, const Tensor& targets,
                               const VocabShard& shard, int64_t real_cols) override;
  void do_vocab_loss(Tensor& loss, const Tensor& row_max, const Tensor& sum_exp,
                     const Tensor& target_logit) override;
  void do_vocab_softmax_backward(Tensor& dlogits, const Tensor& logits, const Tensor& row_max,
                                 const Tensor& sum_exp, const Tensor& targets,
                                 const VocabShard& shard, float scale, int64_t real_cols) override;

  // kernels/adamw.cu
  void do_adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamWParams& h,
                     int64_t step) override;

 private:
  int ordinal_;
  DeviceOptions options_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  CachingAllocator allocator_;
  void* scratch_ = nullptr;  // reduction scratch (sum_squares) and bf16 staging, grown on demand
  size_t scratch_bytes_ = 0;
};

}  // namespace tp
