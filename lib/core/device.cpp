// device.cpp — the public Device kernels: each runs its argument check (core/kernel_checks.h)
// once, then the backend's do_* with what the check worked out (GEMM sizes, real vocabulary
// columns, host ids), as a span of the timeline when one is set (core/span_sink.h; the check is
// not in the span). The only place the checks are called from.
#include "core/device.h"

#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/kernel_checks.h"
#include "core/span_sink.h"

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

// A kernel's f32 stand-in for a bf16 tensor (the widening path of a kernel the backend takes in
// bf16 without a native bf16 do_*; Device::native_bf16): a const (input) tensor is widened to f32
// exactly; a non-const one (an output, written or accumulated) is widened too, handed to the f32
// kernel, and rounded back to bf16 once when the kernel is done. An f32 tensor passes as it is.
template <class T>
class StandIn;

template <>
class StandIn<const Tensor> {
 public:
  StandIn(Device& dev, const Tensor& t) : t_(t) {
    if (t.defined() && t.dtype() == Dtype::bf16) {
      wide_ = Tensor(dev, t.shape());
      dev.convert(t, wide_);
    }
  }
  const Tensor& get() const { return wide_.defined() ? wide_ : t_; }
  void finish(Device&) {}

 private:
  const Tensor& t_;
  Tensor wide_;
};

template <>
class StandIn<Tensor> {
 public:
  StandIn(Device& dev, Tensor& t) : t_(t) {
    if (t.defined() && t.dtype() == Dtype::bf16) {
      wide_ = Tensor(dev, t.shape());
      dev.convert(t, wide_);
    }
  }
  Tensor& get() { return wide_.defined() ? wide_ : t_; }
  void finish(Device& dev) {
    if (wide_.defined()) dev.convert(wide_, t_);  // the one rounding of this output
  }

 private:
  Tensor& t_;
  Tensor wide_;
};

bool any_bf16() { return false; }
template <class... Ts>
bool any_bf16(const Tensor& t, const Ts&... rest) {
  return (t.defined() && t.dtype() == Dtype::bf16) || any_bf16(rest...);
}

// Runs fn(tensors...) — one do_* — directly when every tensor is f32 or the backend's do_* takes
// bf16 natively, else on f32 stand-ins: widen, compute in f32, round each output once. This is
// the rounding-point contract of a bf16 kernel (docs/model.md, "Precision").
template <class Fn, class... Ts>
void run_kernel(Device& dev, const char* kernel, Fn&& fn, Ts&... tensors) {
  if (!any_bf16(tensors...) || dev.native_bf16(kernel)) {
    fn(tensors...);
    return;
  }
  std::tuple<StandIn<Ts>...> wide{StandIn<Ts>(dev, tensors)...};
  std::apply([&](auto&... w) { fn(w.get()...); }, wide);
  std::apply([&](auto&... w) { (w.finish(dev), ...); }, wide);
}
}  // namespace

// ---- dtypes --------------------------------------------------------------------------------------

std::string Device::backend() const {
  const std::string n = name();
  return n.substr(0, n.find_first_of(" ("));
}

bool Device::takes_bf16(const std::string&) const { return false; }
bool Device::native_bf16(const std::string&) const { return false; }

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
  run_kernel(
      *this, "fill", [&](Tensor& x_) { do_fill(x_, value); }, x);
}

void Device::scale(Tensor& x, float alpha) {
  checks::check_on(*this, x, "scale");
  const ScopedSpan span(timeline_, SpanKind::Kernel, "scale");
  run_kernel(
      *this, "scale", [&](Tensor& x_) { do_scale(x_, alpha); }, x);
}

void Device::axpy(float alpha, const Tensor& x, Tensor& y) {
  checks::check_axpy(*this, x, y);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "axpy");
  run_axpy(alpha, x, y);
}

void Device::run_axpy(float alpha, const Tensor& x, Tensor& y) {
  run_kernel(
      *this, "axpy", [&](const Tensor& x_, Tensor& y_) { do_axpy(alpha, x_, y_); }, x, y);
}

void Device::gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
                  float beta, Tensor& c) {
  const GemmDims dims = checks::check_gemm(*this, trans_a, trans_b, a, b, c);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "gemm");
  run_kernel(
      *this, "gemm",
      [&](const Tensor& a_, const Tensor& b_, Tensor& c_) {
    do_gemm(trans_a, trans_b, alpha, a_, b_, beta, c_, dims);
      },
      a, b, c);
}

std::shared_ptr<const PackedGemmB> Device::pack_gemm_b(const Tensor& b, bool trans_b, int64_t m) {
  checks::check_on(*this, b, "pack_gemm_b");
  TP_CHECK(m >= 0, "pack_gemm_b: m=", m, " rows must not be negative");
  if (b.dtype() != Dtype::f32) return std::make_shared<const PackedGemmB>(b, trans_b, m);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "pack_gemm_b");
  return do_pack_gemm_b(b, trans_b, m);
}

void Device::gemm_packed(bool trans_a, float alpha, const Tensor& a, const PackedGemmB& b,
                         float beta, Tensor& c) {
  if (!b.packed() || any_bf16(a, b.b(), c)) {
    gemm(trans_a, b.trans_b(), alpha, a, b.b(), beta, c);
    return;
  }
  const GemmDims dims = checks::check_gemm(*this, trans_a, b.trans_b(), a, b.b(), c);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "gemm");
  do_gemm_packed(trans_a, alpha, a, b, beta, c, dims);
}

std::shared_ptr<const PackedGemmB> Device::do_pack_gemm_b(const Tensor& b, bool trans_b,
                                                          int64_t m) {
  return std::make_shared<const PackedGemmB>(b, trans_b, m);
}

void Device::do_gemm_packed(bool trans_a, float alpha, const Tensor& a, const PackedGemmB& b,
                            float beta, Tensor& c, const GemmDims& dims) {
  do_gemm(trans_a, b.trans_b(), alpha, a, b.b(), beta, c, dims);
}

void Device::add_bias(Tensor& y, const Tensor& bias) {
  checks::check_add_bias(*this, y, bias);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "add_bias");
  run_kernel(
      *this, "add_bias", [&](Tensor& y_, const Tensor& bias_) { do_add_bias(y_, bias_); }, y, bias);
}

void Device::add_bias_backward(Tensor& dbias, const Tensor& dy) {
  checks::check_add_bias_backward(*this, dbias, dy);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "add_bias_backward");
  run_kernel(
      *this, "add_bias_backward",
      [&](Tensor& dbias_, const Tensor& dy_) { do_add_bias_backward(dbias_, dy_); }, dbias, dy);
}

void Device::copy_columns(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col,
                          int64_t ncols) {
  checks::check_copy_columns(*this, src, src_col, dst, dst_col, ncols);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "copy_columns");
  run_kernel(
      *this, "copy_columns",
      [&](const Tensor& src_, Tensor& dst_) {
    do_copy_columns(src_, src_col, dst_, dst_col, ncols);
      },
      src, dst);
}

void Device::fill_random(Tensor& x, const RngKey& key, const GlobalIndex& index,
                         const Distribution& dist) {
  checks::check_on(*this, x, "fill_random");
  const ScopedSpan span(timeline_, SpanKind::Kernel, "fill_random");
  run_kernel(
      *this, "fill_random", [&](Tensor& x_) { do_fill_random(x_, key, index, dist); }, x);
}

void Device::mul(const Tensor& x, const Tensor& m, Tensor& y) {
  checks::check_mul(*this, x, m, y);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "mul");
  run_kernel(
      *this, "mul", [&](const Tensor& x_, const Tensor& m_, Tensor& y_) { do_mul(x_, m_, y_); }, x,
      m, y);
}

double Device::sum_squares(const Tensor& x) {
  checks::check_on(*this, x, "sum_squares");
  const ScopedSpan span(timeline_, SpanKind::Kernel, "sum_squares");
  double result = 0;
  run_kernel(
      *this, "sum_squares", [&](const Tensor& x_) { result = do_sum_squares(x_); }, x);
  return result;
}

void Device::dropout_mask(Tensor& mask, const RngKey& key, const GlobalIndex& index, float p) {
  checks::check_dropout_mask(*this, mask, p);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "dropout_mask");
  run_kernel(
      *this, "dropout_mask", [&](Tensor& mask_) { do_dropout_mask(mask_, key, index, p); }, mask);
}

// ---- activations and norms ----------------------------------------------------------------------

void Device::gelu_forward(Tensor& y, const Tensor& x) {
  checks::check_gelu_forward(*this, y, x);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "gelu_forward");
  run_kernel(
      *this, "gelu_forward", [&](Tensor& y_, const Tensor& x_) { do_gelu_forward(y_, x_); }, y, x);
}

void Device::gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x) {
  checks::check_gelu_backward(*this, dx, dy, x);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "gelu_backward");
  run_kernel(
      *this, "gelu_backward",
      [&](Tensor& dx_, const Tensor& dy_, const Tensor& x_) { do_gelu_backward(dx_, dy_, x_); }, dx,
      dy, x);
}

void Device::bias_gelu_forward(Tensor& y, const Tensor& x, const Tensor& bias) {
  checks::check_bias_gelu_forward(*this, y, x, bias);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "bias_gelu_forward");
  run_kernel(
      *this, "bias_gelu_forward",
      [&](Tensor& y_, const Tensor& x_, const Tensor& bias_) {
    do_bias_gelu_forward(y_, x_, bias_);
      },
      y, x, bias);
}

void Device::bias_gelu_backward(Tensor& dx, Tensor& dbias, const Tensor& dy, const Tensor& x,
                                const Tensor& bias) {
  checks::check_bias_gelu_backward(*this, dx, dbias, dy, x, bias);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "bias_gelu_backward");
  run_kernel(
      *this, "bias_gelu_backward",
      [&](Tensor& dx_, Tensor& dbias_, const Tensor& dy_, const Tensor& x_, const Tensor& bias_) {
    do_bias_gelu_backward(dx_, dbias_, dy_, x_, bias_);
      },
      dx, dbias, dy, x, bias);
}

// The fused kernels' default: the unfused do_* on f32 tensors (run_kernel widened any bf16 ones),
// x + bias formed in a temporary.
void Device::do_bias_gelu_forward(Tensor& y, const Tensor& x, const Tensor& bias) {
  Tensor z(*this, x.shape());
  if (x.numel() > 0) copy(z.raw(), x.raw(), x.bytes());
  do_add_bias(z, bias);
  do_gelu_forward(y, z);
}

void Device::do_bias_gelu_backward(Tensor& dx, Tensor& dbias, const Tensor& dy, const Tensor& x,
                                   const Tensor& bias) {
  Tensor z(*this, x.shape());
  if (x.numel() > 0) copy(z.raw(), x.raw(), x.bytes());
  do_add_bias(z, bias);
  do_gelu_backward(dx, dy, z);
  do_add_bias_backward(dbias, dx);
}

void Device::swiglu_forward(Tensor& y, const Tensor& g, const Tensor& u) {
  checks::check_swiglu_forward(*this, y, g, u);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "swiglu_forward");
  run_kernel(
      *this, "swiglu_forward",
      [&](Tensor& y_, const Tensor& g_, const Tensor& u_) { do_swiglu_forward(y_, g_, u_); }, y, g,
      u);
}

void Device::swiglu_backward(Tensor& dg, Tensor& du, const Tensor& dy, const Tensor& g,
                             const Tensor& u) {
  checks::check_swiglu_backward(*this, dg, du, dy, g, u);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "swiglu_backward");
  run_kernel(
      *this, "swiglu_backward",
      [&](Tensor& dg_, Tensor& du_, const Tensor& dy_, const Tensor& g_, const Tensor& u_) {
    do_swiglu_backward(dg_, du_, dy_, g_, u_);
      },
      dg, du, dy, g, u);
}

void Device::layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x,
                               const Tensor& w, const Tensor& b, float eps) {
  checks::check_layernorm_forward(*this, y, mean, rstd, x, w, b);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "layernorm_forward");
  run_layernorm_forward(y, mean, rstd, x, w, b, eps);
}

void Device::run_layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x,
                                   const Tensor& w, const Tensor& b, float eps) {
  run_kernel(
      *this, "layernorm_forward",
      [&](Tensor& y_, Tensor& mean_, Tensor& rstd_, const Tensor& x_, const Tensor& w_,
          const Tensor& b_) { do_layernorm_forward(y_, mean_, rstd_, x_, w_, b_, eps); },
      y, mean, rstd, x, w, b);
}

void Device::layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy,
                                const Tensor& x, const Tensor& w, const Tensor& mean,
                                const Tensor& rstd) {
  checks::check_layernorm_backward(*this, dx, dw, db, dy, x, w, mean, rstd);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "layernorm_backward");
  run_layernorm_backward(dx, dw, db, dy, x, w, mean, rstd);
}

void Device::run_layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy,
                                    const Tensor& x, const Tensor& w, const Tensor& mean,
                                    const Tensor& rstd) {
  run_kernel(
      *this, "layernorm_backward",
      [&](Tensor& dx_, Tensor& dw_, Tensor& db_, const Tensor& dy_, const Tensor& x_,
          const Tensor& w_, const Tensor& mean_, const Tensor& rstd_) {
    do_layernorm_backward(dx_, dw_, db_, dy_, x_, w_, mean_, rstd_);
      },
      dx, dw, db, dy, x, w, mean, rstd);
}

void Device::rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, float eps) {
  checks::check_rmsnorm_forward(*this, y, rstd, x, w);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "rmsnorm_forward");
  run_rmsnorm_forward(y, rstd, x, w, eps);
}

void Device::run_rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w,
                                 float eps) {
  run_kernel(
      *this, "rmsnorm_forward",
      [&](Tensor& y_, Tensor& rstd_, const Tensor& x_, const Tensor& w_) {
    do_rmsnorm_forward(y_, rstd_, x_, w_, eps);
      },
      y, rstd, x, w);
}

void Device::rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x,
                              const Tensor& w, const Tensor& rstd) {
  checks::check_rmsnorm_backward(*this, dx, dw, dy, x, w, rstd);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "rmsnorm_backward");
  run_rmsnorm_backward(dx, dw, dy, x, w, rstd);
}

void Device::run_rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x,
                                  const Tensor& w, const Tensor& rstd) {
  run_kernel(
      *this, "rmsnorm_backward",
      [&](Tensor& dx_, Tensor& dw_, const Tensor& dy_, const Tensor& x_, const Tensor& w_,
          const Tensor& rstd_) { do_rmsnorm_backward(dx_, dw_, dy_, x_, w_, rstd_); },
      dx, dw, dy, x, w, rstd);
}

// ---- residual add + norm, fused -----------------------------------------------------------------

// The checks of the add (x, r and s on this device, one shape; axpy's dtypes) and of the norm on
// s. An f32 call runs the backend's do_* (its one pass, or the default below); a call with a bf16
// tensor runs the default, Device's own whatever the backend, whose steps round as unfused.
void Device::add_layernorm_forward(Tensor& s, Tensor& y, Tensor& mean, Tensor& rstd,
                                   const Tensor& x, const Tensor& r, const Tensor& w,
                                   const Tensor& b, float eps) {
  checks::check_add_norm(*this, "add_layernorm_forward", s, x, r);
  checks::check_axpy(*this, r, s);
  checks::check_layernorm_forward(*this, y, mean, rstd, s, w, b);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "add_layernorm_forward");
  if (any_bf16(s, y, x, r, w, b))
    Device::do_add_layernorm_forward(s, y, mean, rstd, x, r, w, b, eps);
  else
    do_add_layernorm_forward(s, y, mean, rstd, x, r, w, b, eps);
}

void Device::add_rmsnorm_forward(Tensor& s, Tensor& y, Tensor& rstd, const Tensor& x,
                                 const Tensor& r, const Tensor& w, float eps) {
  checks::check_add_norm(*this, "add_rmsnorm_forward", s, x, r);
  checks::check_axpy(*this, r, s);
  checks::check_rmsnorm_forward(*this, y, rstd, s, w);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "add_rmsnorm_forward");
  if (any_bf16(s, y, x, r, w))
    Device::do_add_rmsnorm_forward(s, y, rstd, x, r, w, eps);
  else
    do_add_rmsnorm_forward(s, y, rstd, x, r, w, eps);
}

// The norm's backward added to the residual's gradient: the checks of the norm's backward and of
// the add (dx, dres: one shape, on this device; axpy's dtypes for dy's t into dx). The do_* as
// the forward's: the default for a call with a bf16 tensor.
void Device::layernorm_backward_add(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dres,
                                    const Tensor& dy, const Tensor& x, const Tensor& w,
                                    const Tensor& mean, const Tensor& rstd) {
  checks::check_add_norm(*this, "layernorm_backward_add", dx, dres, dy);
  checks::check_axpy(*this, dy, dx);
  checks::check_layernorm_backward(*this, dx, dw, db, dy, x, w, mean, rstd);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "layernorm_backward_add");
  if (any_bf16(dx, dw, db, dres, dy, x, w))
    Device::do_layernorm_backward_add(dx, dw, db, dres, dy, x, w, mean, rstd);
  else
    do_layernorm_backward_add(dx, dw, db, dres, dy, x, w, mean, rstd);
}

void Device::rmsnorm_backward_add(Tensor& dx, Tensor& dw, const Tensor& dres, const Tensor& dy,
                                  const Tensor& x, const Tensor& w, const Tensor& rstd) {
  checks::check_add_norm(*this, "rmsnorm_backward_add", dx, dres, dy);
  checks::check_axpy(*this, dy, dx);
  checks::check_rmsnorm_backward(*this, dx, dw, dy, x, w, rstd);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "rmsnorm_backward_add");
  if (any_bf16(dx, dw, dres, dy, x, w))
    Device::do_rmsnorm_backward_add(dx, dw, dres, dy, x, w, rstd);
  else
    do_rmsnorm_backward_add(dx, dw, dres, dy, x, w, rstd);
}

// The fused kernels' default, the unfused kernels in turn, each through its run_* (run_kernel on
// the do_*, with no second check or span): on f32 tensors each step is the do_* itself; with a
// bf16 tensor each step widens and rounds as its public kernel does, so s (or the norm's dx t) is
// rounded to bf16 before the next step reads it — the unfused pair's bits on either dtype.
void Device::do_add_layernorm_forward(Tensor& s, Tensor& y, Tensor& mean, Tensor& rstd,
                                      const Tensor& x, const Tensor& r, const Tensor& w,
                                      const Tensor& b, float eps) {
  s.copy_from(x);
  run_axpy(1.0f, r, s);
  run_layernorm_forward(y, mean, rstd, s, w, b, eps);
}

void Device::do_add_rmsnorm_forward(Tensor& s, Tensor& y, Tensor& rstd, const Tensor& x,
                                    const Tensor& r, const Tensor& w, float eps) {
  s.copy_from(x);
  run_axpy(1.0f, r, s);
  run_rmsnorm_forward(y, rstd, s, w, eps);
}

void Device::do_layernorm_backward_add(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dres,
                                       const Tensor& dy, const Tensor& x, const Tensor& w,
                                       const Tensor& mean, const Tensor& rstd) {
  Tensor t(*this, dy.shape(), dy.dtype());
  run_layernorm_backward(t, dw, db, dy, x, w, mean, rstd);
  dx.copy_from(dres);
  run_axpy(1.0f, t, dx);
}

void Device::do_rmsnorm_backward_add(Tensor& dx, Tensor& dw, const Tensor& dres, const Tensor& dy,
                                     const Tensor& x, const Tensor& w, const Tensor& rstd) {
  Tensor t(*this, dy.shape(), dy.dtype());
  run_rmsnorm_backward(t, dw, dy, x, w, rstd);
  dx.copy_from(dres);
  run_axpy(1.0f, t, dx);
}

// ---- attention ----------------------------------------------------------------------------------

void Device::attention_forward(Tensor& out, Tensor& probs, const Tensor& q, const Tensor& k,
                               const Tensor& v, const AttentionShape& shape) {
  checks::check_attention_forward(*this, out, probs, q, k, v, shape);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "attention_forward");
  run_kernel(
      *this, "attention_forward",
      [&](Tensor& out_, Tensor& probs_, const Tensor& q_, const Tensor& k_, const Tensor& v_) {
    do_attention_forward(out_, probs_, q_, k_, v_, shape);
      },
      out, probs, q, k, v);
}

void Device::attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout,
                                const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& probs, const AttentionShape& shape) {
  checks::check_attention_backward(*this, dq, dk, dv, dout, q, k, v, probs, shape);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "attention_backward");
  run_kernel(
      *this, "attention_backward",
      [&](Tensor& dq_, Tensor& dk_, Tensor& dv_, const Tensor& dout_, const Tensor& q_,
          const Tensor& k_, const Tensor& v_, const Tensor& probs_) {
    do_attention_backward(dq_, dk_, dv_, dout_, q_, k_, v_, probs_, shape);
      },
      dq, dk, dv, dout, q, k, v, probs);
}

void Device::attention_cached_forward(Tensor& out, const Tensor& q, const Tensor& k,
                                      const Tensor& v, int64_t past, const AttentionShape& shape) {
  checks::check_attention_cached_forward(*this, out, q, k, v, past, shape);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "attention_cached_forward");
  run_kernel(
      *this, "attention_cached_forward",
      [&](Tensor& out_, const Tensor& q_, const Tensor& k_, const Tensor& v_) {
    do_attention_cached_forward(out_, q_, k_, v_, past, shape);
      },
      out, q, k, v);
}

// ---- vocabulary-parallel embedding and loss -----------------------------------------------------

void Device::embedding_shard_forward(Tensor& out, const Tensor& ids, const Tensor& wte_shard,
                                     int64_t first_id) {
  checks::check_embedding_shard(*this, "embedding_shard_forward", out, ids, wte_shard, first_id,
                                host_values(*this, ids));
  const ScopedSpan span(timeline_, SpanKind::Kernel, "embedding_shard_forward");
  run_kernel(
      *this, "embedding_shard_forward",
      [&](Tensor& out_, const Tensor& ids_, const Tensor& wte_shard_) {
    do_embedding_shard_forward(out_, ids_, wte_shard_, first_id);
      },
      out, ids, wte_shard);
}

void Device::embedding_shard_backward(Tensor& dwte_shard, const Tensor& dout, const Tensor& ids,
                                      int64_t first_id) {
  const HostValues host_ids = checks::check_embedding_shard(
      *this, "embedding_shard_backward", dout, ids, dwte_shard, first_id, host_values(*this, ids));
  const ScopedSpan span(timeline_, SpanKind::Kernel, "embedding_shard_backward");
  run_kernel(
      *this, "embedding_shard_backward",
      [&](Tensor& dwte_shard_, const Tensor& dout_, const Tensor& ids_) {
    do_embedding_shard_backward(dwte_shard_, dout_, ids_, first_id, host_ids.data());
      },
      dwte_shard, dout, ids);
}

void Device::position_forward(Tensor& x, const Tensor& wpe, int64_t batch, int64_t row0) {
  checks::check_position(*this, "position_forward", x, wpe, batch, row0);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "position_forward");
  run_kernel(
      *this, "position_forward",
      [&](Tensor& x_, const Tensor& wpe_) { do_position_forward(x_, wpe_, batch, row0); }, x, wpe);
}

void Device::position_backward(Tensor& dwpe, const Tensor& dx, int64_t batch, int64_t row0) {
  checks::check_position(*this, "position_backward", dx, dwpe, batch, row0);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "position_backward");
  run_kernel(
      *this, "position_backward",
      [&](Tensor& dwpe_, const Tensor& dx_) { do_position_backward(dwpe_, dx_, batch, row0); },
      dwpe, dx);
}

void Device::vocab_max(Tensor& row_max, const Tensor& logits, const VocabShard& shard) {
  const int64_t real_cols = checks::check_vocab_max(*this, row_max, logits, shard);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "vocab_max");
  run_kernel(
      *this, "vocab_max",
      [&](Tensor& row_max_, const Tensor& logits_) {
    do_vocab_max(row_max_, logits_, shard, real_cols);
      },
      row_max, logits);
}

void Device::vocab_sum_exp_target(Tensor& sum_exp, Tensor& target_logit, const Tensor& logits,
                                  const Tensor& row_max, const Tensor& targets,
                                  const VocabShard& shard) {
  const int64_t real_cols = checks::check_vocab_sum_exp_target(
      *this, sum_exp, target_logit, logits, row_max, targets, shard, host_values(*this, targets));
  const ScopedSpan span(timeline_, SpanKind::Kernel, "vocab_sum_exp_target");
  run_kernel(
      *this, "vocab_sum_exp_target",
      [&](Tensor& sum_exp_, Tensor& target_logit_, const Tensor& logits_, const Tensor& row_max_,
          const Tensor& targets_) {
    do_vocab_sum_exp_target(sum_exp_, target_logit_, logits_, row_max_, targets_, shard, real_cols);
      },
      sum_exp, target_logit, logits, row_max, targets);
}

void Device::vocab_loss(Tensor& loss, const Tensor& row_max, const Tensor& sum_exp,
                        const Tensor& target_logit) {
  checks::check_vocab_loss(*this, loss, row_max, sum_exp, target_logit);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "vocab_loss");
  run_kernel(
      *this, "vocab_loss",
      [&](Tensor& loss_, const Tensor& row_max_, const Tensor& sum_exp_,
          const Tensor& target_logit_) { do_vocab_loss(loss_, row_max_, sum_exp_, target_logit_); },
      loss, row_max, sum_exp, target_logit);
}

void Device::vocab_softmax_backward(Tensor& dlogits, const Tensor& logits, const Tensor& row_max,
                                    const Tensor& sum_exp, const Tensor& targets,
                                    const VocabShard& shard, float scale) {
  const int64_t real_cols = checks::check_vocab_softmax_backward(
      *this, dlogits, logits, row_max, sum_exp, targets, shard, host_values(*this, targets));
  const ScopedSpan span(timeline_, SpanKind::Kernel, "vocab_softmax_backward");
  run_kernel(
      *this, "vocab_softmax_backward",
      [&](Tensor& dlogits_, const Tensor& logits_, const Tensor& row_max_, const Tensor& sum_exp_,
          const Tensor& targets_) {
    do_vocab_softmax_backward(dlogits_, logits_, row_max_, sum_exp_, targets_, shard, scale,
                              real_cols);
      },
      dlogits, logits, row_max, sum_exp, targets);
}

// ---- optimizer ----------------------------------------------------------------------------------

void Device::adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamWParams& h,
                        int64_t step) {
  checks::check_adamw_step(*this, p, g, m, v, step);
  const ScopedSpan span(timeline_, SpanKind::Kernel, "adamw_step");
  run_kernel(
      *this, "adamw_step",
      [&](Tensor& p_, const Tensor& g_, Tensor& m_, Tensor& v_) {
    do_adamw_step(p_, g_, m_, v_, h, step);
      },
      p, g, m, v);
}

void Device::unsupported(const char* kernel) const {
  throw Error(name() + " device: " + kernel + " not supported");
}

void Device::do_attention_cached_forward(Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                         int64_t, const AttentionShape&) {
  unsupported("attention_cached_forward");
}

}  // namespace tp
