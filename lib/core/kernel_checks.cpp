#include "core/kernel_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace tp::checks {

// ---- building blocks -----------------------------------------------------------------------------

void check_placed(const Device& dev, const Tensor& t, const char* what) {
  TP_CHECK(t.defined(), what, ": undefined tensor");
  TP_CHECK(&t.device() == &dev, what, ": tensor lives on another device");
}

void check_on(const Device& dev, const Tensor& t, Kernel kernel) {
  const char* what = kernel_name(kernel);
  check_placed(dev, t, what);
  // Exit 2: a dtype comes from the run's configuration (the same on every rank), not from a bug.
  TP_CHECK_INPUT(t.dtype() == Dtype::f32 || dev.takes_bf16(kernel), dev.backend(), ": ", what,
                 " has no bf16 kernel; run it in f32 (convert the tensor with Device::convert)");
}

void check_convert(const Device& dev, const Tensor& src, const Tensor& dst) {
  const char* what = kernel_name(Kernel::convert);
  check_placed(dev, src, what);
  check_placed(dev, dst, what);
  check_same_numel(what, "src", src, "dst", dst);
}

void check_same_numel(const char* what, const char* a_name, const Tensor& a, const char* b_name,
                      const Tensor& b) {
  TP_CHECK(a.numel() == b.numel(), what, ": ", a_name, " ", a.shape().str(), " and ", b_name, " ",
           b.shape().str(), " differ in size");
}

bool valid_id(float id, int64_t limit) {
  return id >= 0.0f && id < static_cast<float>(limit) && id == std::floor(id);
}

bool valid_token(float id) { return id >= 0.0f && id < 16777216.0f && id == std::floor(id); }

void check_rows(const char* what, const char* name, const Tensor& t, const Tensor& logits) {
  TP_CHECK(t.numel() == logits.rows(), what, ": ", name, " ", t.shape().str(), " should hold ",
           logits.rows(), " rows of logits ", logits.shape().str());
}

int64_t real_columns(const char* what, const VocabShard& shard, int64_t cols) {
  TP_CHECK(shard.first >= 0 && shard.vocab > 0, what, ": shard first=", shard.first,
           " vocab=", shard.vocab, " (need first ≥ 0, vocab > 0)");
  return std::clamp<int64_t>(shard.vocab - shard.first, 0, cols);
}

void check_attention(const Device& dev, Kernel kernel, const AttentionShape& sh, const Tensor& q,
                     const Tensor& k, const Tensor& v, const Tensor& lse) {
  const char* what = kernel_name(kernel);
  check_all_on(dev, kernel, q, k, v, lse);
  TP_CHECK(sh.seq > 0 && sh.batch > 0 && sh.heads > 0 && sh.kv_heads > 0 && sh.head_dim > 0, what,
           ": sizes must be positive (S=", sh.seq, " B=", sh.batch, " nh=", sh.heads,
           " nkv=", sh.kv_heads, " hd=", sh.head_dim, ")");
  TP_CHECK(sh.heads % sh.kv_heads == 0, what, ": nh=", sh.heads,
           " is not a multiple of nkv=", sh.kv_heads);
  TP_CHECK(sh.kv_seq >= 0 && sh.past >= 0, what, ": kv_seq=", sh.kv_seq, " and past=", sh.past,
           " must be ≥ 0");
  const int64_t rows = sh.seq * sh.batch, krows = sh.keys() * sh.batch;
  TP_CHECK(q.rows() == rows && q.cols() == sh.heads * sh.head_dim, what, ": q ", q.shape().str(),
           " should be ", rows, "x", sh.heads * sh.head_dim);
  TP_CHECK(k.rows() == krows && k.cols() == sh.kv_heads * sh.head_dim, what, ": k ",
           k.shape().str(), " should be ", krows, "x", sh.kv_heads * sh.head_dim);
  TP_CHECK(v.rows() == krows && v.cols() == sh.kv_heads * sh.head_dim, what, ": v ",
           v.shape().str(), " should be ", krows, "x", sh.kv_heads * sh.head_dim);
  TP_CHECK(lse.numel() == sh.batch * sh.heads * sh.seq, what, ": lse ", lse.shape().str(),
           " should hold B·nh·S = ", sh.batch * sh.heads * sh.seq);
  TP_CHECK(lse.dtype() == Dtype::f32, what, ": lse is ", dtype_name(lse.dtype()),
           "; the log-sum-exp is always f32");
}

void check_position(const Device& dev, Kernel kernel, const Tensor& x, const Tensor& wpe,
                    int64_t batch, int64_t row0) {
  const char* what = kernel_name(kernel);
  check_all_on(dev, kernel, x, wpe);
  TP_CHECK(batch > 0, what, ": batch=", batch, " must be > 0");
  TP_CHECK(row0 >= 0, what, ": row0=", row0, " must be ≥ 0");
  const int64_t rows = x.rows(), h = x.cols();
  const int64_t need = rows > 0 ? (row0 + rows - 1) / batch + 1 : 0;  // positions read or written
  TP_CHECK(wpe.cols() == h && wpe.rows() >= need, what, ": wpe ", wpe.shape().str(),
           " should have ", h, " columns and at least ", need, " rows for rows [", row0, ", ",
           row0 + rows, ") of x ", x.shape().str(), " at batch=", batch);
}

// ---- memory, GEMM, bias, layout, elementwise -----------------------------------------------------

void check_axpy(const Device& dev, const Tensor& x, const Tensor& y) {
  check_on(dev, x, Kernel::axpy);
  check_on(dev, y, Kernel::axpy);
  TP_CHECK(x.numel() == y.numel(), "axpy: x ", x.shape().str(), " and y ", y.shape().str(),
           " differ in size");
}

GemmDims check_gemm(const Device& dev, bool trans_a, bool trans_b, const Tensor& a, const Tensor& b,
                    const Tensor& c) {
  check_on(dev, a, Kernel::gemm);
  check_on(dev, b, Kernel::gemm);
  check_on(dev, c, Kernel::gemm);
  const int64_t m = trans_a ? a.cols() : a.rows();
  const int64_t k = trans_a ? a.rows() : a.cols();
  const int64_t kb = trans_b ? b.cols() : b.rows();
  const int64_t n = trans_b ? b.rows() : b.cols();
  TP_CHECK(k == kb, "gemm: inner dimensions differ: op(A) is ", m, "x", k, ", op(B) is ", kb, "x",
           n, " (A ", a.shape().str(), trans_a ? "ᵀ" : "", ", B ", b.shape().str(),
           trans_b ? "ᵀ" : "", ")");
  TP_CHECK(c.rows() == m && c.cols() == n, "gemm: C ", c.shape().str(), " should be ", m, "x", n);
  return GemmDims{m, n, k};
}

void check_add_bias(const Device& dev, const Tensor& y, const Tensor& bias) {
  check_on(dev, y, Kernel::add_bias);
  check_on(dev, bias, Kernel::add_bias);
  TP_CHECK(bias.numel() == y.cols(), "add_bias: bias of ", bias.numel(), " for rows of ", y.cols());
}

void check_add_bias_backward(const Device& dev, const Tensor& dbias, const Tensor& dy) {
  check_on(dev, dbias, Kernel::add_bias_backward);
  check_on(dev, dy, Kernel::add_bias_backward);
  TP_CHECK(dbias.numel() == dy.cols(), "add_bias_backward: dbias of ", dbias.numel(),
           " for rows of ", dy.cols());
}

void check_copy_columns(const Device& dev, const Tensor& src, int64_t src_col, const Tensor& dst,
                        int64_t dst_col, int64_t ncols) {
  check_on(dev, src, Kernel::copy_columns);
  check_on(dev, dst, Kernel::copy_columns);
  TP_CHECK(src.rows() == dst.rows(), "copy_columns: ", src.rows(), " source rows, ", dst.rows(),
           " destination rows");
  TP_CHECK(ncols >= 0 && src_col >= 0 && dst_col >= 0 && src_col + ncols <= src.cols() &&
               dst_col + ncols <= dst.cols(),
           "copy_columns: columns out of range");
  // Both backends copy row by row without an order (memcpy per row, cudaMemcpy2DAsync), so the
  // copied elements must not overlap. Pointer arithmetic only: device memory is never read here.
  const int64_t rows = src.rows();
  if (rows == 0 || ncols == 0) return;
  // Byte addresses (raw(): f32 or bf16).
  const auto first = [](const Tensor& t, int64_t col) {
    return reinterpret_cast<uintptr_t>(t.raw()) + static_cast<uintptr_t>(col * t.element_size());
  };
  const auto last = [rows, ncols](const Tensor& t, int64_t col) {
    return reinterpret_cast<uintptr_t>(t.raw()) +
           static_cast<uintptr_t>(((rows - 1) * t.cols() + col + ncols) * t.element_size());
  };
  if (first(src, src_col) >= last(dst, dst_col) || first(dst, dst_col) >= last(src, src_col))
    return;
  // The spans meet: fine only for different columns of the same rows of one tensor.
  TP_CHECK(src.raw() == dst.raw() && src.cols() == dst.cols() &&
               (src_col + ncols <= dst_col || dst_col + ncols <= src_col),
           "copy_columns: the source columns [", src_col, ", ", src_col + ncols,
           ") and the destination columns [", dst_col, ", ", dst_col + ncols,
           ") overlap in memory");
}

void check_mul(const Device& dev, const Tensor& x, const Tensor& m, const Tensor& y) {
  check_all_on(dev, Kernel::mul, x, m, y);
  check_same_numel("mul", "x", x, "m", m);
  check_same_numel("mul", "x", x, "y", y);
}

void check_dropout_mask(const Device& dev, const Tensor& mask, float p) {
  check_on(dev, mask, Kernel::dropout_mask);
  TP_CHECK(p >= 0.0f && p < 1.0f, "dropout_mask: p=", p, " must be in [0, 1)");
}

// ---- activations ---------------------------------------------------------------------------------

void check_gelu_forward(const Device& dev, const Tensor& y, const Tensor& x) {
  check_all_on(dev, Kernel::gelu_forward, y, x);
  check_same_numel("gelu_forward", "y", y, "x", x);
}

void check_gelu_backward(const Device& dev, const Tensor& dx, const Tensor& dy, const Tensor& x) {
  check_all_on(dev, Kernel::gelu_backward, dx, dy, x);
  check_same_numel("gelu_backward", "dx", dx, "x", x);
  check_same_numel("gelu_backward", "dy", dy, "x", x);
}

void check_bias_gelu_forward(const Device& dev, const Tensor& y, const Tensor& x,
                             const Tensor& bias) {
  check_all_on(dev, Kernel::bias_gelu_forward, y, x, bias);
  check_same_numel("bias_gelu_forward", "y", y, "x", x);
  TP_CHECK(bias.numel() == x.cols(), "bias_gelu_forward: bias of ", bias.numel(), " for rows of ",
           x.cols());
}

void check_bias_gelu_backward(const Device& dev, const Tensor& dx, const Tensor& dbias,
                              const Tensor& dy, const Tensor& x, const Tensor& bias) {
  check_all_on(dev, Kernel::bias_gelu_backward, dx, dbias, dy, x, bias);
  check_same_numel("bias_gelu_backward", "dx", dx, "x", x);
  check_same_numel("bias_gelu_backward", "dy", dy, "x", x);
  TP_CHECK(dx.cols() == x.cols(), "bias_gelu_backward: dx of ", dx.cols(), " columns for x of ",
           x.cols());
  TP_CHECK(bias.numel() == x.cols() && dbias.numel() == x.cols(), "bias_gelu_backward: bias of ",
           bias.numel(), " and dbias of ", dbias.numel(), " for rows of ", x.cols());
}

void check_swiglu_forward(const Device& dev, const Tensor& y, const Tensor& g, const Tensor& u) {
  check_all_on(dev, Kernel::swiglu_forward, y, g, u);
  check_same_numel("swiglu_forward", "y", y, "g", g);
  check_same_numel("swiglu_forward", "u", u, "g", g);
}

void check_swiglu_backward(const Device& dev, const Tensor& dg, const Tensor& du, const Tensor& dy,
                           const Tensor& g, const Tensor& u) {
  check_all_on(dev, Kernel::swiglu_backward, dg, du, dy, g, u);
  check_same_numel("swiglu_backward", "dg", dg, "g", g);
  check_same_numel("swiglu_backward", "du", du, "g", g);
  check_same_numel("swiglu_backward", "dy", dy, "g", g);
  check_same_numel("swiglu_backward", "u", u, "g", g);
}

// ---- norms ---------------------------------------------------------------------------------------

void check_layernorm_forward(const Device& dev, const Tensor& y, const Tensor& mean,
                             const Tensor& rstd, const Tensor& x, const Tensor& w,
                             const Tensor& b) {
  check_all_on(dev, Kernel::layernorm_forward, y, mean, rstd, x, w, b);
  const int64_t rows = x.rows(), h = x.cols();
  TP_CHECK(y.rows() == rows && y.cols() == h, "layernorm_forward: y ", y.shape().str(), " for x ",
           x.shape().str());
  TP_CHECK(w.numel() == h && b.numel() == h, "layernorm_forward: w ", w.shape().str(), " and b ",
           b.shape().str(), " for rows of ", h);
  TP_CHECK(mean.numel() == rows && rstd.numel() == rows, "layernorm_forward: mean ",
           mean.shape().str(), " and rstd ", rstd.shape().str(), " for ", rows, " rows");
}

void check_layernorm_backward(const Device& dev, const Tensor& dx, const Tensor& dw,
                              const Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w,
                              const Tensor& mean, const Tensor& rstd) {
  check_all_on(dev, Kernel::layernorm_backward, dx, dw, db, dy, x, w, mean, rstd);
  const int64_t rows = x.rows(), h = x.cols();
  TP_CHECK(dx.rows() == rows && dx.cols() == h && dy.rows() == rows && dy.cols() == h,
           "layernorm_backward: dx ", dx.shape().str(), " and dy ", dy.shape().str(), " for x ",
           x.shape().str());
  TP_CHECK(w.numel() == h && dw.numel() == h && db.numel() == h, "layernorm_backward: w ",
           w.shape().str(), ", dw ", dw.shape().str(), ", db ", db.shape().str(), " for rows of ",
           h);
  TP_CHECK(mean.numel() == rows && rstd.numel() == rows, "layernorm_backward: mean ",
           mean.shape().str(), " and rstd ", rstd.shape().str(), " for ", rows, " rows");
}

void check_rmsnorm_forward(const Device& dev, const Tensor& y, const Tensor& rstd, const Tensor& x,
                           const Tensor& w) {
  check_all_on(dev, Kernel::rmsnorm_forward, y, rstd, x, w);
  const int64_t rows = x.rows(), h = x.cols();
  TP_CHECK(y.rows() == rows && y.cols() == h, "rmsnorm_forward: y ", y.shape().str(), " for x ",
           x.shape().str());
  TP_CHECK(w.numel() == h, "rmsnorm_forward: w ", w.shape().str(), " for rows of ", h);
  TP_CHECK(rstd.numel() == rows, "rmsnorm_forward: rstd ", rstd.shape().str(), " for ", rows,
           " rows");
}

void check_add_norm(const Device& dev, Kernel kernel, const Tensor& s, const Tensor& x,
                    const Tensor& r) {
  const char* what = kernel_name(kernel);
  check_placed(dev, s, what);
  check_placed(dev, x, what);
  check_placed(dev, r, what);
  TP_CHECK(s.shape() == x.shape() && r.shape() == x.shape(), what, ": s ", s.shape().str(), ", x ",
           x.shape().str(), " and r ", r.shape().str(), " should have one shape");
  TP_CHECK(s.dtype() == x.dtype(), what, ": s and x differ in dtype");
}

void check_rmsnorm_backward(const Device& dev, const Tensor& dx, const Tensor& dw, const Tensor& dy,
                            const Tensor& x, const Tensor& w, const Tensor& rstd) {
  check_all_on(dev, Kernel::rmsnorm_backward, dx, dw, dy, x, w, rstd);
  const int64_t rows = x.rows(), h = x.cols();
  TP_CHECK(dx.rows() == rows && dx.cols() == h && dy.rows() == rows && dy.cols() == h,
           "rmsnorm_backward: dx ", dx.shape().str(), " and dy ", dy.shape().str(), " for x ",
           x.shape().str());
  TP_CHECK(w.numel() == h && dw.numel() == h, "rmsnorm_backward: w ", w.shape().str(), " and dw ",
           dw.shape().str(), " for rows of ", h);
  TP_CHECK(rstd.numel() == rows, "rmsnorm_backward: rstd ", rstd.shape().str(), " for ", rows,
           " rows");
}

// ---- attention -----------------------------------------------------------------------------------

void check_attention_forward(const Device& dev, const Tensor& out, const Tensor& lse,
                             const Tensor& q, const Tensor& k, const Tensor& v,
                             const AttentionShape& sh) {
  check_attention(dev, Kernel::attention_forward, sh, q, k, v, lse);
  check_on(dev, out, Kernel::attention_forward);
  TP_CHECK(out.rows() == q.rows() && out.cols() == q.cols(), "attention_forward: out ",
           out.shape().str(), " should match q ", q.shape().str());
}

void check_attention_backward(const Device& dev, const Tensor& dq, const Tensor& dk,
                              const Tensor& dv, const Tensor& dout, const Tensor& q,
                              const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, const AttentionShape& sh) {
  check_attention(dev, Kernel::attention_backward, sh, q, k, v, lse);
  check_all_on(dev, Kernel::attention_backward, dq, dk, dv, dout, out);
  TP_CHECK(dq.rows() == q.rows() && dq.cols() == q.cols() && dout.rows() == q.rows() &&
               dout.cols() == q.cols() && out.rows() == q.rows() && out.cols() == q.cols(),
           "attention_backward: dq ", dq.shape().str(), ", dout ", dout.shape().str(), " and out ",
           out.shape().str(), " should match q ", q.shape().str());
  TP_CHECK(dk.rows() == k.rows() && dk.cols() == k.cols() && dv.rows() == v.rows() &&
               dv.cols() == v.cols(),
           "attention_backward: dk ", dk.shape().str(), " and dv ", dv.shape().str(),
           " should match k ", k.shape().str());
}

void check_attention_merge(const Device& dev, const Tensor& out, const Tensor& lse,
                           const Tensor& out_part, const Tensor& lse_part,
                           const AttentionShape& sh) {
  constexpr Kernel kernel = Kernel::attention_merge;
  check_all_on(dev, kernel, out, lse, out_part, lse_part);
  const int64_t rows = sh.seq * sh.batch, cols = sh.heads * sh.head_dim;
  TP_CHECK(out.rows() == rows && out.cols() == cols && out_part.rows() == rows &&
               out_part.cols() == cols,
           "attention_merge: out ", out.shape().str(), " and out_part ", out_part.shape().str(),
           " should be ", rows, "x", cols);
  TP_CHECK(lse.numel() == sh.batch * sh.heads * sh.seq && lse_part.numel() == lse.numel(),
           "attention_merge: lse ", lse.shape().str(), " and lse_part ", lse_part.shape().str(),
           " should hold B·nh·S = ", sh.batch * sh.heads * sh.seq);
  TP_CHECK(lse.dtype() == Dtype::f32 && lse_part.dtype() == Dtype::f32,
           "attention_merge: the log-sum-exps are always f32");
  TP_CHECK(out.dtype() == out_part.dtype(), "attention_merge: out is ", dtype_name(out.dtype()),
           ", out_part ", dtype_name(out_part.dtype()));
}

void check_attention_cached_forward(const Device& dev, const Tensor& out, const Tensor& q,
                                    const Tensor& k, const Tensor& v, int64_t past,
                                    const AttentionShape& sh) {
  constexpr Kernel kernel = Kernel::attention_cached_forward;
  const char* what = kernel_name(kernel);
  check_all_on(dev, kernel, out, q, k, v);
  TP_CHECK(sh.seq > 0 && sh.batch > 0 && sh.heads > 0 && sh.kv_heads > 0 && sh.head_dim > 0, what,
           ": sizes must be positive (n=", sh.seq, " B=", sh.batch, " nh=", sh.heads,
           " nkv=", sh.kv_heads, " hd=", sh.head_dim, ")");
  TP_CHECK(past >= 0, what, ": past=", past, " must be ≥ 0");
  TP_CHECK(sh.heads % sh.kv_heads == 0, what, ": nh=", sh.heads,
           " is not a multiple of nkv=", sh.kv_heads);
  const int64_t rows = sh.seq * sh.batch, keys = (past + sh.seq) * sh.batch;
  TP_CHECK(q.rows() == rows && q.cols() == sh.heads * sh.head_dim, what, ": q ", q.shape().str(),
           " should be ", rows, "x", sh.heads * sh.head_dim);
  TP_CHECK(out.rows() == q.rows() && out.cols() == q.cols(), what, ": out ", out.shape().str(),
           " should match q ", q.shape().str());
  TP_CHECK(k.rows() == keys && k.cols() == sh.kv_heads * sh.head_dim, what, ": k ", k.shape().str(),
           " should be ", keys, "x", sh.kv_heads * sh.head_dim, " (past + n positions)");
  TP_CHECK(v.rows() == keys && v.cols() == sh.kv_heads * sh.head_dim, what, ": v ", v.shape().str(),
           " should be ", keys, "x", sh.kv_heads * sh.head_dim, " (past + n positions)");
}

// ---- vocabulary-parallel loss --------------------------------------------------------------------

int64_t check_vocab_max(const Device& dev, const Tensor& row_max, const Tensor& logits,
                        const VocabShard& shard) {
  constexpr Kernel kernel = Kernel::vocab_max;
  const char* what = kernel_name(kernel);
  check_all_on(dev, kernel, row_max, logits);
  const int64_t real = real_columns(what, shard, logits.cols());
  check_rows(what, "row_max", row_max, logits);
  return real;
}

void check_vocab_loss(const Device& dev, const Tensor& loss, const Tensor& row_max,
                      const Tensor& sum_exp, const Tensor& target_logit) {
  constexpr Kernel kernel = Kernel::vocab_loss;
  const char* what = kernel_name(kernel);
  check_all_on(dev, kernel, loss, row_max, sum_exp, target_logit);
  check_same_numel(what, "loss", loss, "row_max", row_max);
  check_same_numel(what, "loss", loss, "sum_exp", sum_exp);
  check_same_numel(what, "loss", loss, "target_logit", target_logit);
}

// ---- optimizer -----------------------------------------------------------------------------------

void check_adamw_step(const Device& dev, const Tensor& p, const Tensor& g, const Tensor& m,
                      const Tensor& v, int64_t step) {
  check_all_on(dev, Kernel::adamw_step, p, g, m, v);
  check_same_numel("adamw_step", "p", p, "g", g);
  check_same_numel("adamw_step", "p", p, "m", m);
  check_same_numel("adamw_step", "p", p, "v", v);
  TP_CHECK(step >= 1, "adamw_step: step=", step, " must be ≥ 1");
}

}  // namespace tp::checks
