// cpu_device.h — the CPU Device: host memory, OpenMP kernels, GEMM through CBLAS (OpenBLAS).
//
// It implements the memory calls and the do_* half of every kernel (core/device.h): the public
// kernel has checked the arguments before a do_* runs, so the kernels here only compute.
// Files: cpu_device.cpp (memory, copies, GEMM and the packed-B GEMM, the column copy),
// gemm_choice.cpp (which engine runs each GEMM: the policy and its environment variables),
// blas.cpp (cblas_sgemm and OpenBLAS's threads), onednn_gemm.cpp (oneDNN's matmuls),
// peak_probe.cpp (the peak MFU divides by), and kernels/<stem>.cpp, one per concept with the GPU's
// stems (gpu_backend/kernels/<stem>.cu): convert, elementwise, rng, reduce, activation, norm,
// attention, embedding, cross_entropy, adamw; kernels/kernel_util.h is what they share. The math
// of every kernel is in core/device.h.
//
// bf16 (--precision bf16): every kernel but adamw_step takes bf16 tensors. The elementwise ones
// (fill, scale, mul, axpy, add_bias and its backward, GeLU and bias + GeLU, forward and backward)
// and the plain norms (LayerNorm, RMSNorm, forward and backward) read and write bf16 in their loops
// (native_bf16; kernels/kernel_util.h, "storage"), with the bits of the stand-in path the others
// take: the Device front widens them to f32 (exact), runs the f32 kernel and rounds each output
// once (core/device.h, "Dtypes"). The GEMM is native where oneDNN is on: Debian's OpenBLAS exports
// no bf16 GEMM (`nm -D libopenblas.so` lists no sbgemm, only the CPU probe support_avx512_bf16), so
// a bf16 GEMM is either oneDNN's bf16 matmul (onednn_gemm.h: bf16 A and B, f32 accumulation) or
// cblas_sgemm on widened operands, chosen when the device is made (gemm_choice.h).
// adamw_step stays f32: it updates the fp32 master weights and moments.
#pragma once

#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/device.h"
#include "gemm_choice.h"

namespace tp {

/// Device on the host: memory from aligned_alloc, kept for reuse once freed (below), kernels
/// parallelised with OpenMP, GEMMs by OpenBLAS on as many threads as OpenMP has (set when the
/// device is made, after the launcher's thread rule). Kernels run synchronously, so synchronize()
/// has nothing to wait for.
///
/// Freed blocks are cached by size and handed out again for the same size: a training step frees
/// and allocates the same tensors every step, and a fresh block from the system is page faults
/// (and the kernel zeroing each page) on first touch, about 1 µs per 4 KiB page, inside whichever
/// kernel writes it first. The cache holds at most max(64 MiB, the most bytes handed out at once so far) and
/// is given back when the device is destroyed. memory() (the Tensors' bytes) does not count it.
class CpuDevice : public Device {
 public:
  CpuDevice();
  ~CpuDevice() override;
  std::string name() const override;
  bool host_accessible() const override { return true; }
  /// Every kernel but adamw_step (those native_bf16 does not name widened by the front, see above).
  bool takes_bf16(Kernel kernel) const override;
  /// Kernel::gemm when the oneDNN bf16 GEMM is on (gemm_choice.h: choose_bf16_gemm), and the
  /// elementwise kernels and norms above; every other kernel runs on the front's stand-ins.
  bool native_bf16(Kernel kernel) const override;
  /// The bf16 GEMM's line ("oneDNN (avx512_core_amx)", "sgemm on f32 stand-ins (...)").
  const std::string& bf16_gemm_note() const { return bf16_gemm_.note; }

  // ---- The peak MFU divides by: the one-thread sgemm probe (peak_probe.cpp) -------------------
  /// One thread's sgemm ceiling (one_thread_sgemm_gflops), read from the per-machine cache
  /// (peak_cache.h, keyed by the CPU and blas_core_key) or measured now and stored there.
  PeakCeiling measure_peak() override;
  /// The ceiling × this rank's threads, in words: "2 thread(s) × 150 GFLOP/s (one-thread sgemm
  /// ceiling; <key>, cached in <path>)".
  PeakFlops peak_flops(const PeakCeiling& ceiling) const override;
  /// Measures one thread's ceiling again and stores it when above `was`.
  double remeasure_peak(double was, bool* kept) override;
  /// The best GFLOP/s of one thread's f32 GEMM at 512³ and 1024³ (best of 3 after a warm-up):
  /// OpenBLAS's cblas_sgemm, or this device's gemm where it runs its f32 GEMMs on oneDNN instead
  /// (cpu::f32_gemm: an OpenBLAS that does not know an AVX-512 CPU).
  double one_thread_sgemm_gflops();
  /// The peak cache's BLAS part of the key (cpu_backend/peak_cache.h): OpenBLAS's kernels, and
  /// "+ oneDNN f32" when the f32 GEMMs run on oneDNN instead (a different ceiling on the same
  /// machine).
  std::string blas_core_key() const;
  /// "" when OpenBLAS runs its best kernels for this CPU, else a line saying why the GEMMs are
  /// slower than they could be and the variable that changes it (see peak_probe.cpp).
  std::string blas_kernel_note() const;
  /// The OpenMP threads of this rank: the peak is one thread's ceiling times these.
  int threads() const;

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr) override;
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void synchronize() override {}
  /// Bytes of freed blocks held for reuse (see the class comment).
  size_t cached_bytes() const;

 protected:
  // cpu_device.cpp: GEMM and the column copy.
  void do_gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
               float beta, Tensor& c, const GemmDims& dims) override;
  /// f32 B in oneDNN's matmul layout where it has a brgemm kernel (onednn_gemm.h), the packed
  /// copy a Tensor of this device (counted in memory()); else the default (b itself).
  std::shared_ptr<const PackedGemmB> do_pack_gemm_b(const Tensor& b, bool trans_b,
                                                    int64_t m) override;
  void do_gemm_packed(bool trans_a, float alpha, const Tensor& a, const PackedGemmB& b, float beta,
                      Tensor& c, const GemmDims& dims) override;
  void do_copy_columns(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col,
                       int64_t ncols) override;

  // kernels/convert.cpp
  void do_convert(const Tensor& src, Tensor& dst) override;

  // kernels/elementwise.cpp
  void do_fill(Tensor& x, float value) override;
  void do_scale(Tensor& x, float alpha) override;
  void do_axpy(float alpha, const Tensor& x, Tensor& y) override;
  void do_mul(const Tensor& x, const Tensor& m, Tensor& y) override;
  void do_add_bias(Tensor& y, const Tensor& bias) override;
  void do_add_bias_backward(Tensor& dbias, const Tensor& dy) override;

  // kernels/rng.cpp
  void do_fill_random(Tensor& x, const RngKey& key, const GlobalIndex& index,
                      const Distribution& dist) override;
  void do_dropout_mask(Tensor& mask, const RngKey& key, const GlobalIndex& index, float p) override;

  // kernels/reduce.cpp
  double do_sum_squares(const Tensor& x) override;

  // kernels/activation.cpp
  void do_gelu_forward(Tensor& y, const Tensor& x) override;
  void do_gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x) override;
  void do_bias_gelu_forward(Tensor& y, const Tensor& x, const Tensor& bias) override;
  void do_bias_gelu_backward(Tensor& dx, Tensor& dbias, const Tensor& dy, const Tensor& x,
                             const Tensor& bias) override;
  void do_swiglu_forward(Tensor& y, const Tensor& g, const Tensor& u) override;
  void do_swiglu_backward(Tensor& dg, Tensor& du, const Tensor& dy, const Tensor& g,
                          const Tensor& u) override;

  // kernels/norm.cpp
  void do_layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w,
                            const Tensor& b, float eps) override;
  void do_add_layernorm_forward(Tensor& s, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x,
                                const Tensor& r, const Tensor& w, const Tensor& b,
                                float eps) override;
  void do_add_rmsnorm_forward(Tensor& s, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& r,
                              const Tensor& w, float eps) override;
  void do_layernorm_backward_add(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dres,
                                 const Tensor& dy, const Tensor& x, const Tensor& w,
                                 const Tensor& mean, const Tensor& rstd) override;
  void do_rmsnorm_backward_add(Tensor& dx, Tensor& dw, const Tensor& dres, const Tensor& dy,
                               const Tensor& x, const Tensor& w, const Tensor& rstd) override;
  void do_layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x,
                             const Tensor& w, const Tensor& mean, const Tensor& rstd) override;
  void do_rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w,
                          float eps) override;
  void do_rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x,
                           const Tensor& w, const Tensor& rstd) override;

  // kernels/attention.cpp
  void do_attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,
                            const Tensor& v, const AttentionShape& shape) override;
  void do_attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout,
                             const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, const AttentionShape& shape) override;
  // kernels/attention_merge.cpp
  void do_attention_merge(Tensor& out, Tensor& lse, const Tensor& out_part, const Tensor& lse_part,
                          const AttentionShape& shape) override;
  void do_attention_cached_forward(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                                   int64_t past, const AttentionShape& shape) override;

  // kernels/embedding.cpp
  void do_embedding_shard_forward(Tensor& out, const Tensor& ids, const Tensor& wte_shard,
                                  int64_t first_id) override;
  void do_embedding_shard_backward(Tensor& dwte_shard, const Tensor& dout, const Tensor& ids,
                                   int64_t first_id, const float* host_ids) override;
  void do_position_forward(Tensor& x, const Tensor& wpe, int64_t batch, int64_t row0) override;
  void do_position_backward(Tensor& dwpe, const Tensor& dx, int64_t batch, int64_t row0) override;

  // kernels/cross_entropy.cpp
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

  // kernels/adamw.cpp
  void do_adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamWParams& h,
                     int64_t step) override;

 private:
  mutable std::mutex cache_mutex_;  // allocate / deallocate may come from a communicator's thread
  std::unordered_map<size_t, std::vector<void*>> cache_;  // block size → freed blocks
  size_t cached_bytes_ = 0;
  size_t live_bytes_ = 0, peak_live_ = 0;  // blocks handed out now, and the most there were
  cpu::Bf16GemmChoice bf16_gemm_;          // made once, when the device is
  bool packed_gemm_;                       // TP_CPU_PACKED_GEMM (gemm_choice.h), read then too
};

}  // namespace tp
