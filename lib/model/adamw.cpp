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

AdamWParams AdamW::hyper_for(const Param& p, float lr, float grad_scale) const {
  AdamWParams h = hp_;
  h.lr = lr;
  h.grad_scale = grad_scale;
  if (!p.decay) h.weight_decay = 0.0f;
  return h;
}

void AdamW::step(const ParamList& params, float lr, float grad_scale) {
  TP_CHECK(!sharded(), "AdamW::step: the moments are sharded (ZeRO-1); use step_sharded");
  TP_CHECK(params.size() == m_.size(), "AdamW::step: ", params.size(), " parameters, state for ",
           m_.size());
  ++steps_;
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor value = params[i].value;
    device_.adamw_step(value, params[i].grad, m_[i], v_[i], hyper_for(params[i], lr, grad_scale),
                       steps_);
  }
}

void AdamW::shard_over(Communicator& dp, const ParamList& params) {
  TP_CHECK(!sharded() && params.size() == m_.size(), "AdamW::shard_over: already sharded or ",
           params.size(), " parameters for state of ", m_.size());
  const ZeroPartition part(params, dp.size(), dp.rank());
  m_shard_ = Tensor::zeros(device_, Shape{part.shard()});
  v_shard_ = Tensor::zeros(device_, Shape{part.shard()});
  part.for_each_segment(params, [&](size_t i, int64_t from, int64_t at, int64_t n) {
    m_shard_.view(at, at + n).copy_from(m_[i].reshape(Shape{m_[i].numel()}).view(from, from + n));
    v_shard_.view(at, at + n).copy_from(v_[i].reshape(Shape{v_[i].numel()}).view(from, from + n));
  });
  m_.clear();
  v_.clear();
  dp_ = &dp;
}

void AdamW::unshard(const ParamList& params) {
  TP_CHECK(sharded(), "AdamW::unshard: the moments are not sharded");
  const ZeroPartition part(params, dp_->size(), dp_->rank());
  for (Tensor* shard : {&m_shard_, &v_shard_}) {
    Tensor flat(device_, Shape{part.padded});
    {
      CommLedger::Scope scope(dp_->ledger(), "zero_state");
      if (dp_->size() == 1)
        flat.copy_from(*shard);
      else
        dp_->all_gather(*shard, flat);
    }
    std::vector<Tensor>& out = shard == &m_shard_ ? m_ : v_;
    int64_t at = 0;
    for (const Param& p : params) {
      out.push_back(Tensor(device_, p.value.shape()));
      out.back().copy_from(flat.view(at, at + p.value.numel()));
      at += p.value.numel();
    }
  }
  m_shard_ = Tensor();
  v_shard_ = Tensor();
  dp_ = nullptr;
}

void AdamW::step_sharded(ParamList& params, const Tensor& grad_shard, float lr, float grad_scale) {
  TP_CHECK(sharded(), "AdamW::step_sharded: call shard_over first");
  const ZeroPartition part(params, dp_->size(), dp_->rank());
  TP_CHECK(grad_shard.numel() == part.shard(), "AdamW::step_sharded: a gradient shard of ",
           grad_shard.numel(), " elements, the partition's is ", part.shard());
  ++steps_;
  Tensor values = gather_value_shard(device_, params, part);
  // Each parameter's piece of my shard with that parameter's hyper-parameters (weight decay).
  part.for_each_segment(params, [&](size_t i, int64_t, int64_t at, int64_t n) {
    Tensor value = values.view(at, at + n), m = m_shard_.view(at, at + n),
           v = v_shard_.view(at, at + n);
    device_.adamw_step(value, grad_shard.view(at, at + n), m, v,
                       hyper_for(params[i], lr, grad_scale), steps_);
  });
  all_gather_parameters(*dp_, device_, params, values);
}

int64_t AdamW::state_bytes() const {
  int64_t n = m_shard_.defined() ? m_shard_.numel() : 0;
  for (const Tensor& m : m_) n += m.numel();
  return 2 * 4 * n;
}

}  // namespace tp
