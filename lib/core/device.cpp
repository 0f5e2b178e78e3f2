// device.cpp — the public Device kernels: each runs its argument check (core/kernel_checks.h)
// once, then the backend's do_* with what the check worked out (GEMM sizes, real vocabulary
// columns, host ids), as a span of the timeline when one is set (core/span_sink.h; the check is
// not in the span). The only place the checks are called from. Each kernel names itself once
// (a Kernel of core/kernel.h, in a Launch below) for its checks, its span and its bf16 rule.
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

// fn(tensors...) — one do_* — on f32 stand-ins: widen every bf16 tensor, compute in f32, round
// each output once. This is the rounding-point contract of a bf16 kernel (docs/model.md,
// "Precision"), written here only: a backend's native bf16 kernel gives its bits in one pass.
template <class Fn, class... Ts>
void on_stand_ins(Device& dev, Fn&& fn, Ts&... tensors) {
  std::tuple<StandIn<Ts>...> wide{StandIn<Ts>(dev, tensors)...};
  std::apply([&](auto&... w) { fn(w.get()...); }, wide);
  std::apply([&](auto&... w) { (w.finish(dev), ...); }, wide);
}

// Runs fn(tensors...) directly when every tensor is f32 or the backend's do_* takes bf16
// natively (Device::native_bf16), else on stand-ins.
template <class Fn, class... Ts>
void run_kernel(Device& dev, Kernel kernel, Fn&& fn, Ts&... tensors) {
  if (!any_bf16(tensors...) || dev.native_bf16(kernel))
    fn(tensors...);
  else
    on_stand_ins(dev, fn, tensors...);
}

// One public kernel, named once: `const Launch kernel(*this, Kernel::fill);`, then its checks
// (`kernel` is its Kernel for the checks that name it), then kernel.run(fn, tensors...): fn, the
// do_* call, as a span named after the kernel on the timeline when one is set (the checks are not
// in it), through run_kernel on `tensors`, handed to fn in order (stand-ins where run_kernel
// widened them). With no tensors fn runs as it is: a kernel whose bf16 rule is inside fn.
class Launch {
 public:
  Launch(Device& dev, Kernel kernel) : dev_(dev), kernel_(kernel) {}
  operator Kernel() const { return kernel_; }  // NOLINT: the checks take the Kernel

  template <class Fn, class... Ts>
  void run(Fn&& fn, Ts&... tensors) const {
    const ScopedSpan span(dev_.timeline(), SpanKind::Kernel, kernel_name(kernel_));
    run_kernel(dev_, kernel_, fn, tensors...);
  }

 private:
  Device& dev_;
  Kernel kernel_;
};
}  // namespace

// ---- dtypes --------------------------------------------------------------------------------------

std::string Device::backend() const {
  const std::string n = name();
  return n.substr(0, n.find_first_of(" ("));
}

bool Device::takes_bf16(Kernel) const { return false; }
bool Device::native_bf16(Kernel) const { return false; }

void Device::convert(const Tensor& src, Tensor& dst) {
  const Launch kernel(*this, Kernel::convert);
  checks::check_convert(*this, src, dst);
  kernel.run([&] {
    if (src.dtype() != dst.dtype())
      do_convert(src, dst);
    else if (src.numel() > 0)
      copy(dst.raw(), src.raw(), src.bytes());
  });
}

void Device::do_convert(const Tensor&, Tensor&) { unsupported(Kernel::convert); }

// ---- elementwise, GEMM, bias, layout, initialisation --------------------------------------------

void Device::fill(Tensor& x, float value) {
  const Launch kernel(*this, Kernel::fill);
  checks::check_on(*this, x, kernel);
  kernel.run([&](auto& x_) { do_fill(x_, value); }, x);
}

void Device::scale(Tensor& x, float alpha) {
  const Launch kernel(*this, Kernel::scale);
  checks::check_on(*this, x, kernel);
  kernel.run([&](auto& x_) { do_scale(x_, alpha); }, x);
}

void Device::axpy(float alpha, const Tensor& x, Tensor& y) {
  const Launch kernel(*this, Kernel::axpy);
  checks::check_axpy(*this, x, y);
  kernel.run([&] { run_axpy(alpha, x, y); });
}

void Device::run_axpy(float alpha, const Tensor& x, Tensor& y) {
  run_kernel(
      *this, Kernel::axpy, [&](auto& x_, auto& y_) { do_axpy(alpha, x_, y_); }, x, y);
}

void Device::gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
                  float beta, Tensor& c) {
  const Launch kernel(*this, Kernel::gemm);
  const GemmDims dims = checks::check_gemm(*this, trans_a, trans_b, a, b, c);
  kernel.run([&](auto& a_, auto& b_,
                 auto& c_) { do_gemm(trans_a, trans_b, alpha, a_, b_, beta, c_, dims); },
             a, b, c);
}

void Device::gemm_on_stand_ins(bool trans_a, bool trans_b, float alpha, const Tensor& a,
                               const Tensor& b, float beta, Tensor& c, const GemmDims& dims) {
  on_stand_ins(
      *this,
      [&](auto& a_, auto& b_, auto& c_) {
    do_gemm(trans_a, trans_b, alpha, a_, b_, beta, c_, dims);
      },
      a, b, c);
}

std::shared_ptr<const PackedGemmB> Device::pack_gemm_b(const Tensor& b, bool trans_b, int64_t m) {
  const Launch kernel(*this, Kernel::pack_gemm_b);
  checks::check_on(*this, b, kernel);
  TP_CHECK(m >= 0, "pack_gemm_b: m=", m, " rows must not be negative");
  if (b.dtype() != Dtype::f32) return std::make_shared<const PackedGemmB>(b, trans_b, m);
  std::shared_ptr<const PackedGemmB> packed;
  kernel.run([&] { packed = do_pack_gemm_b(b, trans_b, m); });
  return packed;
}

// A packed GEMM is recorded as the GEMM it is (Kernel::gemm: its checks, its span).
void Device::gemm_packed(bool trans_a, float alpha, const Tensor& a, const PackedGemmB& b,
                         float beta, Tensor& c) {
  if (!b.packed() || any_bf16(a, b.b(), c)) {
    gemm(trans_a, b.trans_b(), alpha, a, b.b(), beta, c);
    return;
  }
  const Launch kernel(*this, Kernel::gemm);
  const GemmDims dims = checks::check_gemm(*this, trans_a, b.trans_b(), a, b.b(), c);
  kernel.run([&] { do_gemm_packed(trans_a, alpha, a, b, beta, c, dims); });
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
  const Launch kernel(*this, Kernel::add_bias);
  checks::check_add_bias(*this, y, bias);
  kernel.run([&](auto& y_, auto& bias_) { do_add_bias(y_, bias_); }, y, bias);
}

void Device::add_bias_backward(Tensor& dbias, const Tensor& dy) {
  const Launch kernel(*this, Kernel::add_bias_backward);
  checks::check_add_bias_backward(*this, dbias, dy);
  kernel.run([&](auto& dbias_, auto& dy_) { do_add_bias_backward(dbias_, dy_); }, dbias, dy);
}

void Device::copy_columns(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col,
                          int64_t ncols) {
  const Launch kernel(*this, Kernel::copy_columns);
  checks::check_copy_columns(*this, src, src_col, dst, dst_col, ncols);
  kernel.run([&](auto& src_, auto& dst_) { do_copy_columns(src_, src_col, dst_, dst_col, ncols); },
             src, dst);
}

void Device::fill_random(Tensor& x, const RngKey& key, const GlobalIndex& index,
                         const Distribution& dist) {
  const Launch kernel(*this, Kernel::fill_random);
  checks::check_on(*this, x, kernel);
  kernel.run([&](auto& x_) { do_fill_random(x_, key, index, dist); }, x);
}

void Device::mul(const Tensor& x, const Tensor& m, Tensor& y) {
  const Launch kernel(*this, Kernel::mul);
  checks::check_mul(*this, x, m, y);
  kernel.run([&](auto& x_, auto& m_, auto& y_) { do_mul(x_, m_, y_); }, x, m, y);
}

double Device::sum_squares(const Tensor& x) {
  const Launch kernel(*this, Kernel::sum_squares);
  checks::check_on(*this, x, kernel);
  double result = 0;
  kernel.run([&](auto& x_) { result = do_sum_squares(x_); }, x);
  return result;
}

void Device::dropout_mask(Tensor& mask, const RngKey& key, const GlobalIndex& index, float p) {
  const Launch kernel(*this, Kernel::dropout_mask);
  checks::check_dropout_mask(*this, mask, p);
  kernel.run([&](auto& mask_) { do_dropout_mask(mask_, key, index, p); }, mask);
}

// ---- activations and norms ----------------------------------------------------------------------

void Device::gelu_forward(Tensor& y, const Tensor& x) {
  const Launch kernel(*this, Kernel::gelu_forward);
  checks::check_gelu_forward(*this, y, x);
  kernel.run([&](auto& y_, auto& x_) { do_gelu_forward(y_, x_); }, y, x);
}

void Device::gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x) {
  const Launch kernel(*this, Kernel::gelu_backward);
  checks::check_gelu_backward(*this, dx, dy, x);
  kernel.run([&](auto& dx_, auto& dy_, auto& x_) { do_gelu_backward(dx_, dy_, x_); }, dx, dy, x);
}

void Device::bias_gelu_forward(Tensor& y, const Tensor& x, const Tensor& bias) {
  const Launch kernel(*this, Kernel::bias_gelu_forward);
  checks::check_bias_gelu_forward(*this, y, x, bias);
  kernel.run([&](auto& y_, auto& x_, auto& bias_) { do_bias_gelu_forward(y_, x_, bias_); }, y, x,
             bias);
}

void Device::bias_gelu_backward(Tensor& dx, Tensor& dbias, const Tensor& dy, const Tensor& x,
                                const Tensor& bias) {
  const Launch kernel(*this, Kernel::bias_gelu_backward);
  checks::check_bias_gelu_backward(*this, dx, dbias, dy, x, bias);
  kernel.run([&](auto& dx_, auto& dbias_, auto& dy_, auto& x_,
                 auto& bias_) { do_bias_gelu_backward(dx_, dbias_, dy_, x_, bias_); },
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
  const Launch kernel(*this, Kernel::swiglu_forward);
  checks::check_swiglu_forward(*this, y, g, u);
  kernel.run([&](auto& y_, auto& g_, auto& u_) { do_swiglu_forward(y_, g_, u_); }, y, g, u);
}

void Device::swiglu_backward(Tensor& dg, Tensor& du, const Tensor& dy, const Tensor& g,
                             const Tensor& u) {
  const Launch kernel(*this, Kernel::swiglu_backward);
  checks::check_swiglu_backward(*this, dg, du, dy, g, u);
  kernel.run([&](auto& dg_, auto& du_, auto& dy_, auto& g_,
                 auto& u_) { do_swiglu_backward(dg_, du_, dy_, g_, u_); },
             dg, du, dy, g, u);
}

void Device::layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x,
                               const Tensor& w, const Tensor& b, float eps) {
  const Launch kernel(*this, Kernel::layernorm_forward);
  checks::check_layernorm_forward(*this, y, mean, rstd, x, w, b);
  kernel.run([&] { run_layernorm_forward(y, mean, rstd, x, w, b, eps); });
}

void Device::run_layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x,
                                   const Tensor& w, const Tensor& b, float eps) {
  run_kernel(
      *this, Kernel::layernorm_forward,
      [&](auto& y_, auto& mean_, auto& rstd_, auto& x_, auto& w_, auto& b_) {
    do_layernorm_forward(y_, mean_, rstd_, x_, w_, b_, eps);
      },
      y, mean, rstd, x, w, b);
}

void Device::layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy,
                                const Tensor& x, const Tensor& w, const Tensor& mean,
                                const Tensor& rstd) {
  const Launch kernel(*this, Kernel::layernorm_backward);
  checks::check_layernorm_backward(*this, dx, dw, db, dy, x, w, mean, rstd);
  kernel.run([&] { run_layernorm_backward(dx, dw, db, dy, x, w, mean, rstd); });
}

void Device::run_layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy,
                                    const Tensor& x, const Tensor& w, const Tensor& mean,
                                    const Tensor& rstd) {
  run_kernel(
      *this, Kernel::layernorm_backward,
      [&](auto& dx_, auto& dw_, auto& db_, auto& dy_, auto& x_, auto& w_, auto& mean_,
          auto& rstd_) { do_layernorm_backward(dx_, dw_, db_, dy_, x_, w_, mean_, rstd_); },
      dx, dw, db, dy, x, w, mean, rstd);
}

void Device::rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, float eps) {
  const Launch kernel(*this, Kernel::rmsnorm_forward);
  checks::check_rmsnorm_forward(*this, y, rstd, x, w);
  kernel.run([&] { run_rmsnorm_forward(y, rstd, x, w, eps); });
}

void Device::run_rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w,
                                 float eps) {
  run_kernel(
      *this, Kernel::rmsnorm_forward,
      [&](auto& y_, auto& rstd_, auto& x_, auto& w_) {
    do_rmsnorm_forward(y_, rstd_, x_, w_, eps);
      },
      y, rstd, x, w);
}

void Device::rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x,
                              const Tensor& w, const Tensor& rstd) {
  const Launch kernel(*this, Kernel::rmsnorm_backward);
  checks::check_rmsnorm_backward(*this, dx, dw, dy, x, w, rstd);
  kernel.run([&] { run_rmsnorm_backward(dx, dw, dy, x, w, rstd); });
}

void Device::run_rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x,
                                  const Tensor& w, const Tensor& rstd) {
  run_kernel(
      *this, Kernel::rmsnorm_backward,
      [&](auto& dx_, auto& dw_, auto& dy_, auto& x_, auto& w_, auto& rstd_) {
    do_rmsnorm_backward(dx_, dw_, dy_, x_, w_, rstd_);
      },
      dx, dw, dy, x, w, rstd);
}

// ---- residual add + norm, fused -----------------------------------------------------------------

// The checks of the add (x, r and s on this device, one shape; axpy's dtypes) and of the norm on
// s. An f32 call runs the backend's do_* (its one pass, or the default below); a call with a bf16
// tensor runs the default, Device's own whatever the backend, whose steps round as unfused.
void Device::add_layernorm_forward(Tensor& s, Tensor& y, Tensor& mean, Tensor& rstd,
                                   const Tensor& x, const Tensor& r, const Tensor& w,
                                   const Tensor& b, float eps) {
  const Launch kernel(*this, Kernel::add_layernorm_forward);
  checks::check_add_norm(*this, kernel, s, x, r);
  checks::check_axpy(*this, r, s);
  checks::check_layernorm_forward(*this, y, mean, rstd, s, w, b);
  kernel.run([&] {
    if (any_bf16(s, y, x, r, w, b))
      Device::do_add_layernorm_forward(s, y, mean, rstd, x, r, w, b, eps);
    else
      do_add_layernorm_forward(s, y, mean, rstd, x, r, w, b, eps);
  });
}

void Device::add_rmsnorm_forward(Tensor& s, Tensor& y, Tensor& rstd, const Tensor& x,
                                 const Tensor& r, const Tensor& w, float eps) {
  const Launch kernel(*this, Kernel::add_rmsnorm_forward);
  checks::check_add_norm(*this, kernel, s, x, r);
  checks::check_axpy(*this, r, s);
  checks::check_rmsnorm_forward(*this, y, rstd, s, w);
  kernel.run([&] {
    if (any_bf16(s, y, x, r, w))
      Device::do_add_rmsnorm_forward(s, y, rstd, x, r, w, eps);
    else
      do_add_rmsnorm_forward(s, y, rstd, x, r, w, eps);
  });
}

// The norm's backward added to the residual's gradient: the checks of the norm's backward and of
// the add (dx, dres: one shape, on this device; axpy's dtypes for dy's t into dx). The do_* as
// the forward's: the default for a call with a bf16 tensor.
void Device::layernorm_backward_add(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dres,
                                    const Tensor& dy, const Tensor& x, const Tensor& w,
                                    const Tensor& mean, const Tensor& rstd) {
  const Launch kernel(*this, Kernel::layernorm_backward_add);
  checks::check_add_norm(*this, kernel, dx, dres, dy);
  checks::check_axpy(*this, dy, dx);
  checks::check_layernorm_backward(*this, dx, dw, db, dy, x, w, mean, rstd);
  kernel.run([&] {
    if (any_bf16(dx, dw, db, dres, dy, x, w))
      Device::do_layernorm_backward_add(dx, dw, db, dres, dy, x, w, mean, rstd);
    else
      do_layernorm_backward_add(dx, dw, db, dres, dy, x, w, mean, rstd);
  });
}

void Device::rmsnorm_backward_add(Tensor& dx, Tensor& dw, const Tensor& dres, const Tensor& dy,
                                  const Tensor& x, const Tensor& w, const Tensor& rstd) {
  const Launch kernel(*this, Kernel::rmsnorm_backward_add);
  checks::check_add_norm(*this, kernel, dx, dres, dy);
  checks::check_axpy(*this, dy, dx);
  checks::check_rmsnorm_backward(*this, dx, dw, dy, x, w, rstd);
  kernel.run([&] {
    if (any_bf16(dx, dw, dres, dy, x, w))
      Device::do_rmsnorm_backward_add(dx, dw, dres, dy, x, w, rstd);
    else
      do_rmsnorm_backward_add(dx, dw, dres, dy, x, w, rstd);
  });
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

void Device::attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,
                               const Tensor& v, const AttentionShape& shape) {
  const Launch kernel(*this, Kernel::attention_forward);
  checks::check_attention_forward(*this, out, lse, q, k, v, shape);
  kernel.run([&](auto& out_, auto& lse_, auto& q_, auto& k_,
                 auto& v_) { do_attention_forward(out_, lse_, q_, k_, v_, shape); },
             out, lse, q, k, v);
}

void Device::attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout,
                                const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& out, const Tensor& lse, const AttentionShape& shape) {
  const Launch kernel(*this, Kernel::attention_backward);
  checks::check_attention_backward(*this, dq, dk, dv, dout, q, k, v, out, lse, shape);
  kernel.run(
      [&](auto& dq_, auto& dk_, auto& dv_, auto& dout_, auto& q_, auto& k_, auto& v_, auto& out_,
          auto& lse_) {
    do_attention_backward(dq_, dk_, dv_, dout_, q_, k_, v_, out_, lse_, shape);
      },
      dq, dk, dv, dout, q, k, v, out, lse);
}

void Device::attention_merge(Tensor& out, Tensor& lse, const Tensor& out_part,
                             const Tensor& lse_part, const AttentionShape& shape) {
  const Launch kernel(*this, Kernel::attention_merge);
  checks::check_attention_merge(*this, out, lse, out_part, lse_part, shape);
  kernel.run([&](auto& out_, auto& lse_, auto& op_,
                 auto& lp_) { do_attention_merge(out_, lse_, op_, lp_, shape); },
             out, lse, out_part, lse_part);
}

void Device::attention_cached_forward(Tensor& out, const Tensor& q, const Tensor& k,
                                      const Tensor& v, int64_t past, const AttentionShape& shape) {
  const Launch kernel(*this, Kernel::attention_cached_forward);
  checks::check_attention_cached_forward(*this, out, q, k, v, past, shape);
  kernel.run([&](auto& out_, auto& q_, auto& k_,
                 auto& v_) { do_attention_cached_forward(out_, q_, k_, v_, past, shape); },
             out, q, k, v);
}

// ---- vocabulary-parallel embedding and loss -----------------------------------------------------

void Device::embedding_shard_forward(Tensor& out, const Tensor& ids, const Tensor& wte_shard,
                                     int64_t first_id) {
  const Launch kernel(*this, Kernel::embedding_shard_forward);
  checks::check_embedding_shard(*this, kernel, out, ids, wte_shard, first_id,
                                host_values(*this, ids));
  kernel.run(
      [&](auto& out_, auto& ids_, auto& wte_shard_) {
    do_embedding_shard_forward(out_, ids_, wte_shard_, first_id);
      },
      out, ids, wte_shard);
}

void Device::embedding_shard_backward(Tensor& dwte_shard, const Tensor& dout, const Tensor& ids,
                                      int64_t first_id) {
  const Launch kernel(*this, Kernel::embedding_shard_backward);
  const HostValues host_ids = checks::check_embedding_shard(*this, kernel, dout, ids, dwte_shard,
                                                            first_id, host_values(*this, ids));
  kernel.run(
      [&](auto& dwte_shard_, auto& dout_, auto& ids_) {
    do_embedding_shard_backward(dwte_shard_, dout_, ids_, first_id, host_ids.data());
      },
      dwte_shard, dout, ids);
}

void Device::position_forward(Tensor& x, const Tensor& wpe, int64_t batch, int64_t row0) {
  const Launch kernel(*this, Kernel::position_forward);
  checks::check_position(*this, kernel, x, wpe, batch, row0);
  kernel.run([&](auto& x_, auto& wpe_) { do_position_forward(x_, wpe_, batch, row0); }, x, wpe);
}

void Device::position_backward(Tensor& dwpe, const Tensor& dx, int64_t batch, int64_t row0) {
  const Launch kernel(*this, Kernel::position_backward);
  checks::check_position(*this, kernel, dx, dwpe, batch, row0);
  kernel.run([&](auto& dwpe_, auto& dx_) { do_position_backward(dwpe_, dx_, batch, row0); }, dwpe,
             dx);
}

void Device::vocab_max(Tensor& row_max, const Tensor& logits, const VocabShard& shard) {
  const Launch kernel(*this, Kernel::vocab_max);
  const int64_t real_cols = checks::check_vocab_max(*this, row_max, logits, shard);
  kernel.run(
      [&](auto& row_max_, auto& logits_) { do_vocab_max(row_max_, logits_, shard, real_cols); },
      row_max, logits);
}

void Device::vocab_sum_exp_target(Tensor& sum_exp, Tensor& target_logit, const Tensor& logits,
                                  const Tensor& row_max, const Tensor& targets,
                                  const VocabShard& shard) {
  const Launch kernel(*this, Kernel::vocab_sum_exp_target);
  const int64_t real_cols = checks::check_vocab_sum_exp_target(
      *this, sum_exp, target_logit, logits, row_max, targets, shard, host_values(*this, targets));
  kernel.run(
      [&](auto& sum_exp_, auto& target_logit_, auto& logits_, auto& row_max_, auto& targets_) {
    do_vocab_sum_exp_target(sum_exp_, target_logit_, logits_, row_max_, targets_, shard, real_cols);
      },
      sum_exp, target_logit, logits, row_max, targets);
}

void Device::vocab_loss(Tensor& loss, const Tensor& row_max, const Tensor& sum_exp,
                        const Tensor& target_logit) {
  const Launch kernel(*this, Kernel::vocab_loss);
  checks::check_vocab_loss(*this, loss, row_max, sum_exp, target_logit);
  kernel.run([&](auto& loss_, auto& row_max_, auto& sum_exp_,
                 auto& target_logit_) { do_vocab_loss(loss_, row_max_, sum_exp_, target_logit_); },
             loss, row_max, sum_exp, target_logit);
}

void Device::vocab_softmax_backward(Tensor& dlogits, const Tensor& logits, const Tensor& row_max,
                                    const Tensor& sum_exp, const Tensor& targets,
                                    const VocabShard& shard, float scale) {
  const Launch kernel(*this, Kernel::vocab_softmax_backward);
  const int64_t real_cols = checks::check_vocab_softmax_backward(
      *this, dlogits, logits, row_max, sum_exp, targets, shard, host_values(*this, targets));
  kernel.run(
      [&](auto& dlogits_, auto& logits_, auto& row_max_, auto& sum_exp_, auto& targets_) {
    do_vocab_softmax_backward(dlogits_, logits_, row_max_, sum_exp_, targets_, shard, scale,
                              real_cols);
      },
      dlogits, logits, row_max, sum_exp, targets);
}

// ---- optimizer ----------------------------------------------------------------------------------

void Device::adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamWParams& h,
                        int64_t step) {
  const Launch kernel(*this, Kernel::adamw_step);
  checks::check_adamw_step(*this, p, g, m, v, step);
  kernel.run(
      [&](auto& p_, auto& g_, auto& m_, auto& v_) { do_adamw_step(p_, g_, m_, v_, h, step); }, p, g,
      m, v);
}

void Device::unsupported(Kernel kernel) const {
  throw Error(name() + " device: " + kernel_name(kernel) + " not supported");
}

void Device::do_attention_cached_forward(Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                         int64_t, const AttentionShape&) {
  unsupported(Kernel::attention_cached_forward);
}

}  // namespace tp
