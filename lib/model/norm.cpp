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
  const bool keep = keep_mode == Keep::ForBackward;
  Tensor y(device_, x.shape(), x.dtype());
  const Tensor &w = compute_tensor(weight, weight_copy_), &b = compute_tensor(bias, bias_copy_);
  Tensor rstd(device_, Shape{x.rows()});
  if (keep)
    saved_.keep(x_, x);
  else
    for (SavedTensor* slot : {&x_, &mean_, &rstd_}) slot->reset();
  if (rms_) {
    device_.rmsnorm_forward(y, rstd, x, w, eps_);
  } else {
    Tensor mean(device_, Shape{x.rows()});
    device_.layernorm_forward(y, mean, rstd, x, w, b, eps_);
    if (keep) saved_.keep(mean_, mean);
  }
  if (keep) saved_.keep(rstd_, rstd);
  return y;
}

Tensor Norm::forward_add(const Tensor& x, const Tensor& r, Tensor& sum, Keep keep_mode) {
  const bool keep = keep_mode == Keep::ForBackward;
  sum = Tensor(device_, x.shape(), x.dtype());
  Tensor y(device_, x.shape(), x.dtype());
  const Tensor &w = compute_tensor(weight, weight_copy_), &b = compute_tensor(bias, bias_copy_);
  Tensor rstd(device_, Shape{x.rows()});
  if (keep)
    saved_.keep(x_, sum);  // a handle: the kernel below fills it
  else
    for (SavedTensor* slot : {&x_, &mean_, &rstd_}) slot->reset();
  if (rms_) {
    device_.add_rmsnorm_forward(sum, y, rstd, x, r, w, eps_);
  } else {
    Tensor mean(device_, Shape{x.rows()});
    device_.add_layernorm_forward(sum, y, mean, rstd, x, r, w, b, eps_);
    if (keep) saved_.keep(mean_, mean);
  }
  if (keep) saved_.keep(rstd_, rstd);
  return y;
}

Tensor Norm::backward(const Tensor& dy) {
  Tensor dx(device_, dy.shape(), dy.dtype());
  const Tensor& w = compute_tensor(weight, weight_copy_);
  if (rms_)
    device_.rmsnorm_backward(dx, dweight, dy, x_.get(), w, rstd_.get());
  else
    device_.layernorm_backward(dx, dweight, dbias, dy, x_.get(), w, mean_.get(), rstd_.get());
  return dx;
}

Tensor Norm::backward_add(const Tensor& dres, const Tensor& dy) {
  Tensor dx(device_, dres.shape(), dres.dtype());
  const Tensor& w = compute_tensor(weight, weight_copy_);
  if (rms_)
    device_.rmsnorm_backward_add(dx, dweight, dres, dy, x_.get(), w, rstd_.get());
  else
    device_.layernorm_backward_add(dx, dweight, dbias, dres, dy, x_.get(), w, mean_.get(),
                                   rstd_.get());
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
