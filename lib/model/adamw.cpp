#include "model/adamw.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tp {

double global_grad_norm(Communicator& comm, Device& device, const ParamList& params) {
  double split = 0, replicated = 0;
  for (const Param& p : params)
    (p.split == Split::Replicated ? replicated : split) += device.sum_squares(p.grad);
  if (comm.size() > 1) {
    Tensor s = Tensor::from_host(device, Shape{1}, {static_cast<float>(split)});
    CommLedger::Scope scope(comm.ledger(), "grad_norm");
    comm.all_reduce(s);
    split = s.to_host()[0];
  }
  return std::sqrt(split + replicated);
}

float clip_factor(double grad_norm, float max_norm) {
  if (max_norm <= 0.0f || !(grad_norm > max_norm)) return 1.0f;
  return static_cast<float>(max_norm / grad_norm);
}

AdamW::AdamW(Device& device, const ParamList& params, const AdamWParams& hp)
    : device_(device), hp_(hp) {
  for (const Param& p : params) {
    m_.push_back(Tensor::zeros(device, p.value.shape()));
    v_.push_back(Tensor::zeros(device, p.value.shape()));
  }
}

void AdamW::step(const ParamList& params, float lr, float grad_scale) {
  TP_CHECK(params.size() == m_.size(), "AdamW::step: ", params.size(), " parameters, state for ",
           m_.size());
  ++steps_;
  for (size_t i = 0; i < params.size(); ++i) {
    AdamWParams h = hp_;
    h.lr = lr;
    h.grad_scale = grad_scale;
    if (!params[i].decay) h.weight_decay = 0.0f;
    Tensor value = params[i].value;
    device_.adamw_step(value, params[i].grad, m_[i], v_[i], h, steps_);
  }
}

}  // namespace tp
