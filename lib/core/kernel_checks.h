// kernel_checks.h — the host-side argument checks of the Device kernels.
//
// Called from lib/core/device.cpp only: each public Device kernel runs the check of the same name
// and then the backend's do_* method, so every backend rejects the same arguments with the same
// message (a tensor on another device, sizes that do not match, an id that is not a token), and a
// new backend has no check to forget. The checks look at shapes and scalars; the two that must read
// tensor values (token ids, targets) take a `read_host` callable that returns the values in host
// memory, indexable by row (device.cpp reads them in place on a host_accessible() device and
// copies them to the host otherwise).
//
// Every failure is a TP_CHECK (exit code 1): a bad kernel argument is a bug in the caller. One
// exception: a bf16 tensor given to a kernel the backend has only in f32 is TP_CHECK_INPUT (exit
// 2), "cpu: layernorm_forward has no bf16 kernel", because the dtype comes from the run's
// configuration, the same on every rank (Device::takes_bf16).
#pragma once

#include <cstdint>

#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tp::checks {

// ---- building blocks -----------------------------------------------------------------------------

/// `t` is defined and lives on `dev`; `what` names the kernel in the message.
void check_placed(const Device& dev, const Tensor& t, const char* what);

/// check_placed (named by kernel_name(kernel)), and `t` has a dtype `kernel` takes on `dev`: f32,
/// or bf16 where dev.takes_bf16(kernel). Every kernel's check goes through it, so no kernel sees a
/// dtype it does not state.
void check_on(const Device& dev, const Tensor& t, Kernel kernel);

/// check_on for each of `ts`, in order.
template <typename... Ts>
void check_all_on(const Device& dev, Kernel kernel, const Ts&... ts) {
  (check_on(dev, ts, kernel), ...);
}

/// `a` and `b` (named a_name, b_name in the message) have the same number of elements.
void check_same_numel(const char* what, const char* a_name, const Tensor& a, const char* b_name,
                      const Tensor& b);

/// An id stored as f32 must be an integer in [0, limit).
bool valid_id(float id, int64_t limit);

/// An id stored as f32 must be a non-negative integer, exact in f32 (below 2^24).
bool valid_token(float id);

/// `t` (called `name`) holds one value per row of `logits`.
void check_rows(const char* what, const char* name, const Tensor& t, const Tensor& logits);

/// Checks the shard (first ≥ 0, vocab > 0) and returns `real`: columns [0, real) of a logits shard
/// with `cols` columns are real tokens, [real, cols) padding.
int64_t real_columns(const char* what, const VocabShard& shard, int64_t cols);

/// The sizes of an attention call, and q, k, v and the log-sum-exp lse (B·nh·S, f32) against them.
void check_attention(const Device& dev, Kernel kernel, const AttentionShape& sh, const Tensor& q,
                     const Tensor& k, const Tensor& v, const Tensor& lse);

/// position_forward / position_backward: batch > 0, row0 ≥ 0, and wpe has the columns of x and
/// a row for every position that rows [row0, row0 + rows of x) read or write.
void check_position(const Device& dev, Kernel kernel, const Tensor& x, const Tensor& wpe,
                    int64_t batch, int64_t row0);

/// embedding_shard_forward / _backward: out is (numel of ids, cols of wte_shard), first_id ≥ 0 and
/// every id a token. `read_host()` returns the ids in host memory, indexable by row; it is called
/// after the shape checks, and what it returned is returned (embedding_shard_backward uses it).
template <typename ReadHost>
auto check_embedding_shard(const Device& dev, Kernel kernel, const Tensor& out, const Tensor& ids,
                           const Tensor& wte_shard, int64_t first_id, ReadHost read_host) {
  const char* what = kernel_name(kernel);
  check_all_on(dev, kernel, out, ids, wte_shard);
  const int64_t n = ids.numel(), h = wte_shard.cols();
  TP_CHECK(first_id >= 0, what, ": first_id=", first_id, " must be ≥ 0");
  TP_CHECK(out.rows() == n && out.cols() == h, what, ": ", out.shape().str(), " should be ", n, "x",
           h, " (ids ", ids.shape().str(), ", wte_shard ", wte_shard.shape().str(), ")");
  auto host_ids = read_host();
  for (int64_t i = 0; i < n; ++i)
    TP_CHECK(valid_token(host_ids[i]), what, ": id ", host_ids[i], " at row ", i,
             " is not a token id (a non-negative integer below 2^24)");
  return host_ids;
}

/// `targets` holds one value per row of `logits`, each a token of V = vocab. `read_host()` returns
/// the targets in host memory (as for check_embedding_shard); it is called after the row check.
template <typename ReadHost>
void check_targets(const char* what, const Tensor& targets, const Tensor& logits, int64_t vocab,
                   ReadHost read_host) {
  check_rows(what, "targets", targets, logits);
  const auto pt = read_host();
  for (int64_t i = 0; i < targets.numel(); ++i)
    TP_CHECK(valid_id(pt[i], vocab), what, ": target ", pt[i], " at row ", i,
             " is not a token of V=", vocab);
}

// ---- one call per kernel (the arguments of the Device method of the same name) --------------------

void check_axpy(const Device& dev, const Tensor& x, const Tensor& y);
/// convert: src and dst on dev with the same numel (any dtypes).
void check_convert(const Device& dev, const Tensor& src, const Tensor& dst);
/// Returns m, n, k (tp::GemmDims, core/device.h).
GemmDims check_gemm(const Device& dev, bool trans_a, bool trans_b, const Tensor& a, const Tensor& b,
                    const Tensor& c);
void check_add_bias(const Device& dev, const Tensor& y, const Tensor& bias);
void check_add_bias_backward(const Device& dev, const Tensor& dbias, const Tensor& dy);
void check_copy_columns(const Device& dev, const Tensor& src, int64_t src_col, const Tensor& dst,
                        int64_t dst_col, int64_t ncols);
void check_mul(const Device& dev, const Tensor& x, const Tensor& m, const Tensor& y);
void check_dropout_mask(const Device& dev, const Tensor& mask, float p);

void check_gelu_forward(const Device& dev, const Tensor& y, const Tensor& x);
void check_gelu_backward(const Device& dev, const Tensor& dx, const Tensor& dy, const Tensor& x);
/// bias_gelu_*: x, y, dx, dy the same numel, bias and dbias one per column of x.
void check_bias_gelu_forward(const Device& dev, const Tensor& y, const Tensor& x,
                             const Tensor& bias);
void check_bias_gelu_backward(const Device& dev, const Tensor& dx, const Tensor& dbias,
                              const Tensor& dy, const Tensor& x, const Tensor& bias);
void check_swiglu_forward(const Device& dev, const Tensor& y, const Tensor& g, const Tensor& u);
void check_swiglu_backward(const Device& dev, const Tensor& dg, const Tensor& du, const Tensor& dy,
                           const Tensor& g, const Tensor& u);

void check_layernorm_forward(const Device& dev, const Tensor& y, const Tensor& mean,
                             const Tensor& rstd, const Tensor& x, const Tensor& w, const Tensor& b);
void check_layernorm_backward(const Device& dev, const Tensor& dx, const Tensor& dw,
                              const Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w,
                              const Tensor& mean, const Tensor& rstd);
void check_rmsnorm_forward(const Device& dev, const Tensor& y, const Tensor& rstd, const Tensor& x,
                           const Tensor& w);
void check_rmsnorm_backward(const Device& dev, const Tensor& dx, const Tensor& dw, const Tensor& dy,
                            const Tensor& x, const Tensor& w, const Tensor& rstd);

/// The residual add of a fused add + norm: s = x + r (add_layernorm_forward, add_rmsnorm_forward;
/// the backward's dx = dres + the norm's, layernorm_backward_add: s = dx, x = dres, r = dy): s, x,
/// r on this device, one shape, s and x of one dtype (the dtypes are the unfused kernels' to check).
void check_add_norm(const Device& dev, Kernel kernel, const Tensor& s, const Tensor& x,
                    const Tensor& r);

void check_attention_forward(const Device& dev, const Tensor& out, const Tensor& lse,
                             const Tensor& q, const Tensor& k, const Tensor& v,
                             const AttentionShape& sh);
void check_attention_backward(const Device& dev, const Tensor& dq, const Tensor& dk,
                              const Tensor& dv, const Tensor& dout, const Tensor& q,
                              const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, const AttentionShape& sh);
/// q, out: (n·B, nh·hd) with n = sh.seq; k, v: ((past + n)·B, nkv·hd); past ≥ 0.
void check_attention_merge(const Device& dev, const Tensor& out, const Tensor& lse,
                           const Tensor& out_part, const Tensor& lse_part,
                           const AttentionShape& sh);
void check_attention_cached_forward(const Device& dev, const Tensor& out, const Tensor& q,
                                    const Tensor& k, const Tensor& v, int64_t past,
                                    const AttentionShape& sh);

/// Returns the real columns of the shard (see real_columns).
int64_t check_vocab_max(const Device& dev, const Tensor& row_max, const Tensor& logits,
                        const VocabShard& shard);

/// Returns the real columns of the shard. `read_host` returns the targets in host memory (see
/// check_targets).
template <typename ReadHost>
int64_t check_vocab_sum_exp_target(const Device& dev, const Tensor& sum_exp,
                                   const Tensor& target_logit, const Tensor& logits,
                                   const Tensor& row_max, const Tensor& targets,
                                   const VocabShard& shard, ReadHost read_host) {
  constexpr Kernel kernel = Kernel::vocab_sum_exp_target;
  const char* what = kernel_name(kernel);
  check_all_on(dev, kernel, sum_exp, target_logit, logits, row_max, targets);
  const int64_t real = real_columns(what, shard, logits.cols());
  check_rows(what, "sum_exp", sum_exp, logits);
  check_rows(what, "target_logit", target_logit, logits);
  check_rows(what, "row_max", row_max, logits);
  check_targets(what, targets, logits, shard.vocab, read_host);
  return real;
}

void check_vocab_loss(const Device& dev, const Tensor& loss, const Tensor& row_max,
                      const Tensor& sum_exp, const Tensor& target_logit);

/// Returns the real columns of the shard. `read_host` returns the targets in host memory (see
/// check_targets).
template <typename ReadHost>
int64_t check_vocab_softmax_backward(const Device& dev, const Tensor& dlogits, const Tensor& logits,
                                     const Tensor& row_max, const Tensor& sum_exp,
                                     const Tensor& targets, const VocabShard& shard,
                                     ReadHost read_host) {
  constexpr Kernel kernel = Kernel::vocab_softmax_backward;
  const char* what = kernel_name(kernel);
  check_all_on(dev, kernel, dlogits, logits, row_max, sum_exp, targets);
  const int64_t n = logits.rows(), cols = logits.cols();
  TP_CHECK(dlogits.rows() == n && dlogits.cols() == cols, what, ": dlogits ", dlogits.shape().str(),
           " should match logits ", logits.shape().str());
  const int64_t real = real_columns(what, shard, cols);
  check_rows(what, "row_max", row_max, logits);
  check_rows(what, "sum_exp", sum_exp, logits);
  check_targets(what, targets, logits, shard.vocab, read_host);
  return real;
}

void check_adamw_step(const Device& dev, const Tensor& p, const Tensor& g, const Tensor& m,
                      const Tensor& v, int64_t step);

}  // namespace tp::checks
