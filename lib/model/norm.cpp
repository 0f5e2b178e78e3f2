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

Tensor Norm::forward(const Tensor& x, Keep keep_mode) {
  const bool keep = keep_mode == Keep::ForBackward;
  Tensor y(device_, x.shape());
  Tensor rstd(device_, Shape{x.rows()});
  if (keep)
    saved_.keep(x_, x);
  else
    for (SavedTensor* slot : {&x_, &mean_, &rstd_}) slot->reset();
  if (rms_) {
    device_.rmsnorm_forward(y, rstd, x, weight, eps_);
  } else {
    Tensor mean(device_, Shape{x.rows()});
    device_.layernorm_forward(y, mean, rstd, x, weight, bias, eps_);
    if (keep) saved_.keep(mean_, mean);
  }
  if (keep) saved_.keep(rstd_, rstd);
  return y;
}

Tensor Norm::backward(const Tensor& dy) {
  Tensor dx(device_, dy.shape());
  if (rms_)
    device_.rmsnorm_backward(dx, dweight, dy, x_.get(), weight, rstd_.get());
  else
    device_.layernorm_backward(dx, dweight, dbias, dy, x_.get(), weight, mean_.get(), rstd_.get());
  return dx;
}

void Norm::collect_params(ParamList& out) const {
  Param w;
  w.name = name_ + ".weight";
  w.shape = Shape{weight.numel()};
  w.value = weight;
  w.grad = dweight;
  w.init = Init::Ones;
  w.sequence_parallel_grad = sp_;
  out.push_back(w);
  if (rms_) return;
  Param b = w;
  b.name = name_ + ".bias";
  b.value = bias;
  b.grad = dbias;
  b.init = Init::Zeros;
  out.push_back(b);
}

}  // namespace tp
