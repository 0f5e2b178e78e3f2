// device.cpp — the public Device kernels: each runs its argument check (core/kernel_checks.h)
// once, then the backend's do_* with what the check worked out (GEMM sizes, real vocabulary
// columns, host ids), as a span of the timeline when one is set (observe/timeline.h; the check is
// not in the span). The only place the checks are called from.
#include "core/device.h"

#include <vector>

#include "core/error.h"
#include "core/kernel_checks.h"
#include "observe/timeline.h"

namespace tp {

namespace {
// Token ids or targets of a tensor on `dev`, in host memory for the checks that read values: the
// tensor's own memory when the host can read it (the one place lib/ reads data(), and only on a
// host_accessible() device), else a copy (Tensor::to_host: one copy_to_host and a synchronise).
class HostValues {
 public:
  HostValues(const Device& dev, const Tensor& t)
      : in_place_(dev.host_accessible() ? t.data() : nullptr) {
    if (!dev.host_accessible()) copy_ = t.to_host();
  }
  const float* data() const { return in_place_ != nullptr ? in_place_ : copy_.data(); }
  float operator[](int64_t i) const { return data()[i]; }

 private:
  const float* in_place_;
  std::vector<float> copy_;
};

// The `read_host` of the checks that read ids or targets: called only once the shapes passed.
auto host_values(const Device& dev, const Tensor& t) {
  return [&dev, &t] { return HostValues(dev, t); };
}
}  // namespace

// ---- dtypes --------------------------------------------------------------------------------------

std::string Device::backend() const {
  const std::string n = name();
  return n.substr(0, n.find_first_of(" ("));
}

bool Device::takes_bf16(const std::string&) const { return false; }

void Device::convert(const Tensor& src, Tensor& dst) {
  checks::check_convert(*this, src, dst);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "convert");
  if (src.dtype() == dst.dtype()) {
    if (src.numel() > 0) copy(dst.raw(), src.raw(), src.bytes());
    return;
  }
  do_convert(src, dst);
}

void Device::do_convert(const Tensor&, Tensor&) { unsupported("convert"); }

// ---- elementwise, GEMM, bias, layout, initialisation --------------------------------------------

void Device::fill(Tensor& x, float value) {
  checks::check_on(*this, x, "fill");
  const ScopedSpan span(timeline_, SpanKind::Kernel, "fill");
  do_fill(x, value);
}

void Device::scale(Tensor& x, float alpha) {
  checks::check_on(*this, x, "scale");
  const ScopedSpan span(timeline_, SpanKind::Kernel, "scale");
  do_scale(x, alpha);
}

void Device::axpy(float alpha, const Tensor& x, Tensor& y) {
  checks::check_axpy(*this, x, y);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "axpy");
  do_axpy(alpha, x, y);
}

void Device::gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
                  float beta, Tensor& c) {
  const GemmDims dims = checks::check_gemm(*this, trans_a, trans_b, a, b, c);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "gemm");
  do_gemm(trans_a, trans_b, alpha, a, b, beta, c, dims);
}

void Device::add_bias(Tensor& y, const Tensor& bias) {
  checks::check_add_bias(*this, y, bias);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "add_bias");
  do_add_bias(y, bias);
}

void Device::add_bias_backward(Tensor& dbias, const Tensor& dy) {
  checks::check_add_bias_backward(*this, dbias, dy);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "add_bias_backward");
  do_add_bias_backward(dbias, dy);
}

void Device::copy_columns(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col,
                          int64_t ncols) {
  checks::check_copy_columns(*this, src, src_col, dst, dst_col, ncols);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "copy_columns");
  do_copy_columns(src, src_col, dst, dst_col, ncols);
}

void Device::fill_random(Tensor& x, const RngKey& key, const GlobalIndex& index,
                         const Distribution& dist) {
  checks::check_on(*this, x, "fill_random");
  const ScopedSpan span(timeline_, SpanKind::Kernel, "fill_random");
  do_fill_random(x, key, index, dist);
}

void Device::mul(const Tensor& x, const Tensor& m, Tensor& y) {
  checks::check_mul(*this, x, m, y);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "mul");
  do_mul(x, m, y);
}

double Device::sum_squares(const Tensor& x) {
  checks::check_on(*this, x, "sum_squares");
  const ScopedSpan span(timeline_, SpanKind::Kernel, "sum_squares");
  return do_sum_squares(x);
}

void Device::dropout_mask(Tensor& mask, const RngKey& key, const GlobalIndex& index, float p) {
  checks::check_dropout_mask(*this, mask, p);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "dropout_mask");
  do_dropout_mask(mask, key, index, p);
}

// ---- activations and norms ----------------------------------------------------------------------

void Device::gelu_forward(Tensor& y, const Tensor& x) {
  checks::check_gelu_forward(*this, y, x);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "gelu_forward");
  do_gelu_forward(y, x);
}

void Device::gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x) {
  checks::check_gelu_backward(*this, dx, dy, x);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "gelu_backward");
  do_gelu_backward(dx, dy, x);
}

void Device::swiglu_forward(Tensor& y, const Tensor& g, const Tensor& u) {
  checks::check_swiglu_forward(*this, y, g, u);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "swiglu_forward");
  do_swiglu_forward(y, g, u);
}

void Device::swiglu_backward(Tensor& dg, Tensor& du, const Tensor& dy, const Tensor& g,
                             const Tensor& u) {
  checks::check_swiglu_backward(*this, dg, du, dy, g, u);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "swiglu_backward");
  do_swiglu_backward(dg, du, dy, g, u);
}

void Device::layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x,
                               const Tensor& w, const Tensor& b, float eps) {
  checks::check_layernorm_forward(*this, y, mean, rstd, x, w, b);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "layernorm_forward");
  do_layernorm_forward(y, mean, rstd, x, w, b, eps);
}

void Device::layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy,
                                const Tensor& x, const Tensor& w, const Tensor& mean,
                                const Tensor& rstd) {
  checks::check_layernorm_backward(*this, dx, dw, db, dy, x, w, mean, rstd);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "layernorm_backward");
  do_layernorm_backward(dx, dw, db, dy, x, w, mean, rstd);
}

void Device::rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, float eps) {
  checks::check_rmsnorm_forward(*this, y, rstd, x, w);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "rmsnorm_forward");
  do_rmsnorm_forward(y, rstd, x, w, eps);
}

void Device::rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x,
                              const Tensor& w, const Tensor& rstd) {
  checks::check_rmsnorm_backward(*this, dx, dw, dy, x, w, rstd);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "rmsnorm_backward");
  do_rmsnorm_backward(dx, dw, dy, x, w, rstd);
}

// ---- attention ----------------------------------------------------------------------------------

void Device::attention_forward(Tensor& out, Tensor& probs, const Tensor& q, const Tensor& k,
                               const Tensor& v, const AttentionShape& shape) {
  checks::check_attention_forward(*this, out, probs, q, k, v, shape);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "attention_forward");
  do_attention_forward(out, probs, q, k, v, shape);
}

void Device::attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout,
                                const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& probs, const AttentionShape& shape) {
  checks::check_attention_backward(*this, dq, dk, dv, dout, q, k, v, probs, shape);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "attention_backward");
  do_attention_backward(dq, dk, dv, dout, q, k, v, probs, shape);
}

void Device::attention_cached_forward(Tensor& out, const Tensor& q, const Tensor& k,
                                      const Tensor& v, int64_t past, const AttentionShape& shape) {
  checks::check_attention_cached_forward(*this, out, q, k, v, past, shape);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "attention_cached_forward");
  do_attention_cached_forward(out, q, k, v, past, shape);
}

// ---- vocabulary-parallel embedding and loss -----------------------------------------------------

void Device::embedding_shard_forward(Tensor& out, const Tensor& ids, const Tensor& wte_shard,
                                     int64_t first_id) {
  checks::check_embedding_shard(*this, "embedding_shard_forward", out, ids, wte_shard, first_id,
                                host_values(*this, ids));
  const ScopedSpan span(timeline_, SpanKind::Kernel, "embedding_shard_forward");
  do_embedding_shard_forward(out, ids, wte_shard, first_id);
}

void Device::embedding_shard_backward(Tensor& dwte_shard, const Tensor& dout, const Tensor& ids,
                                      int64_t first_id) {
  const HostValues host_ids = checks::check_embedding_shard(
      *this, "embedding_shard_backward", dout, ids, dwte_shard, first_id, host_values(*this, ids));
  const ScopedSpan span(timeline_, SpanKind::Kernel, "embedding_shard_backward");
  do_embedding_shard_backward(dwte_shard, dout, ids, first_id, host_ids.data());
}

void Device::position_forward(Tensor& x, const Tensor& wpe, int64_t batch, int64_t row0) {
  checks::check_position(*this, "position_forward", x, wpe, batch, row0);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "position_forward");
  do_position_forward(x, wpe, batch, row0);
}

void Device::position_backward(Tensor& dwpe, const Tensor& dx, int64_t batch, int64_t row0) {
  checks::check_position(*this, "position_backward", dx, dwpe, batch, row0);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "position_backward");
  do_position_backward(dwpe, dx, batch, row0);
}

void Device::vocab_max(Tensor& row_max, const Tensor& logits, const VocabShard& shard) {
  const int64_t real_cols = checks::check_vocab_max(*this, row_max, logits, shard);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "vocab_max");
  do_vocab_max(row_max, logits, shard, real_cols);
}

void Device::vocab_sum_exp_target(Tensor& sum_exp, Tensor& target_logit, const Tensor& logits,
                                  const Tensor& row_max, const Tensor& targets,
                                  const VocabShard& shard) {
  const int64_t real_cols = checks::check_vocab_sum_exp_target(
      *this, sum_exp, target_logit, logits, row_max, targets, shard, host_values(*this, targets));
  const ScopedSpan span(timeline_, SpanKind::Kernel, "vocab_sum_exp_target");
  do_vocab_sum_exp_target(sum_exp, target_logit, logits, row_max, targets, shard, real_cols);
}

void Device::vocab_loss(Tensor& loss, const Tensor& row_max, const Tensor& sum_exp,
                        const Tensor& target_logit) {
  checks::check_vocab_loss(*this, loss, row_max, sum_exp, target_logit);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "vocab_loss");
  do_vocab_loss(loss, row_max, sum_exp, target_logit);
}

void Device::vocab_softmax_backward(Tensor& dlogits, const Tensor& logits, const Tensor& row_max,
                                    const Tensor& sum_exp, const Tensor& targets,
                                    const VocabShard& shard, float scale) {
  const int64_t real_cols = checks::check_vocab_softmax_backward(
      *this, dlogits, logits, row_max, sum_exp, targets, shard, host_values(*this, targets));
  const ScopedSpan span(timeline_, SpanKind::Kernel, "vocab_softmax_backward");
  do_vocab_softmax_backward(dlogits, logits, row_max, sum_exp, targets, shard, scale, real_cols);
}

// ---- optimizer ----------------------------------------------------------------------------------

void Device::adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamWParams& h,
                        int64_t step) {
  checks::check_adamw_step(*this, p, g, m, v, step);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "adamw_step");
  do_adamw_step(p, g, m, v, h, step);
}

void Device::unsupported(const char* kernel) const {
  throw Error(name() + " device: " + kernel + " not supported");
}

void Device::do_attention_cached_forward(Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                         int64_t, const AttentionShape&) {
  unsupported("attention_cached_forward");
}

}  // namespace tp
