#include "model/norm.h"

namespace tp {

Norm::Norm(Device& device, std::string name, int64_t hidden, NormKind kind, float eps,
           bool sequence_parallel)
    : device_(device),
      name_(std::move(name)),
      rms_(kind == NormKind::RmsNorm),
      eps_(eps),
      sp_(sequence_parallel),
      x_(name_ + ".input"),
      mean_(name_ + ".mean"),
      rstd_(name_ + ".rstd") {
  weight = Tensor(device, Shape{hidden});
  dweight = Tensor::zeros(device, Shape{hidden});
  device.fill(weight, 1.0f);
  if (!rms_) {
    bias = Tensor::zeros(device, Shape{hidden});
    dbias = Tensor::zeros(device, Shape{hidden});
  }
}

void Norm::set_compute_dtype(Dtype dtype) {
  weight_copy_ = make_compute_copy(weight, dtype);
  bias_copy_ = rms_ ? Tensor() : make_compute_copy(bias, dtype);
}

Tensor Norm::forward(const Tensor& x, Keep keep_mode) {
  return forward_body(x, nullptr, nullptr, keep_mode);
}

Tensor Norm::forward_add(const Tensor& x, const Tensor& r, Tensor& sum, Keep keep_mode) {
  return forward_body(x, &r, &sum, keep_mode);
}

Tensor Norm::backward(const Tensor& dy) { return backward_body(nullptr, dy); }

Tensor Norm::backward_add(const Tensor& dres, const Tensor& dy) { return backward_body(&dres, dy); }

// With a residual r, the norm reads sum = x + r, which the fused kernel writes on the way, so sum
// is the input backward needs; without, x. Either way the slots hold what backward reads (input,
// mean, rstd), or are emptied for inference, so backward and backward_add follow either forward.
Tensor Norm::forward_body(const Tensor& x, const Tensor* r, Tensor* sum, Keep keep_mode) {
  const bool keep = keep_mode == Keep::ForBackward;
  if (r != nullptr) *sum = Tensor(device_, x.shape(), x.dtype());
  Tensor y(device_, x.shape(), x.dtype());
  const Tensor &w = compute_tensor(weight, weight_copy_), &b = compute_tensor(bias, bias_copy_);
  Tensor rstd(device_, Shape{x.rows()});
  if (keep)
    saved_.keep(x_, r != nullptr ? *sum : x);  // sum: a handle, the kernel below fills it
  else
    for (SavedTensor* slot : {&x_, &mean_, &rstd_}) slot->reset();
  if (rms_) {
    if (r != nullptr)
      device_.add_rmsnorm_forward(*sum, y, rstd, x, *r, w, eps_);
    else
      device_.rmsnorm_forward(y, rstd, x, w, eps_);
  } else {
    Tensor mean(device_, Shape{x.rows()});
    if (r != nullptr)
      device_.add_layernorm_forward(*sum, y, mean, rstd, x, *r, w, b, eps_);
    else
      device_.layernorm_forward(y, mean, rstd, x, w, b, eps_);
    if (keep) saved_.keep(mean_, mean);
  }
  if (keep) saved_.keep(rstd_, rstd);
  return y;
}

// With dres, the residual's gradient joins the norm's dx inside the kernel (dx = dres + the
// norm's dx), so dx takes dres's shape and dtype; without, dy's.
Tensor Norm::backward_body(const Tensor* dres, const Tensor& dy) {
  const Tensor& like = dres != nullptr ? *dres : dy;
  Tensor dx(device_, like.shape(), like.dtype());
  const Tensor& w = compute_tensor(weight, weight_copy_);
  if (rms_ && dres != nullptr)
    device_.rmsnorm_backward_add(dx, dweight, *dres, dy, x_.get(), w, rstd_.get());
  else if (rms_)
    device_.rmsnorm_backward(dx, dweight, dy, x_.get(), w, rstd_.get());
  else if (dres != nullptr)
    device_.layernorm_backward_add(dx, dweight, dbias, *dres, dy, x_.get(), w, mean_.get(),
                                   rstd_.get());
  else
    device_.layernorm_backward(dx, dweight, dbias, dy, x_.get(), w, mean_.get(), rstd_.get());
  return dx;
}

void Norm::collect_params(ParamList& out) const {
  Param w;
  w.name = name_ + ".weight";
  w.shape = Shape{weight.numel()};
  w.value = weight;
  w.grad = dweight;
  w.compute = weight_copy_;
  w.init = Init::Ones;
  w.sequence_parallel_grad = sp_;
  out.push_back(w);
  if (rms_) return;
  Param b = w;
  b.name = name_ + ".bias";
  b.value = bias;
  b.grad = dbias;
  b.compute = bias_copy_;
  b.init = Init::Zeros;
  out.push_back(b);
}

}  // namespace tp
