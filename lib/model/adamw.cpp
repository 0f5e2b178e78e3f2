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

namespace {
// The parameters a ZeRO-1 partition covers, in ParamList order (Params share their tensors).
ParamList pick(const ParamList& params, const std::vector<size_t>& index) {
  ParamList out;
  for (size_t i : index) out.push_back(params[i]);
  return out;
}
}  // namespace

void AdamW::shard_over(Communicator& dp, const ParamList& params) {
  shard_groups({{&dp, false}}, params);
}

void AdamW::shard_over(Communicator& dp, Communicator& edp, const ParamList& params) {
  shard_groups({{&dp, false}, {&edp, true}}, params);
}

void AdamW::reshard(const ParamList& params) { shard_groups(plan_, params); }

// plan: (group, experts): with one entry every parameter goes to its group; with two, the
// experts (Param::expert ≥ 0) to the entry marked true and the rest to the other.
void AdamW::shard_groups(const std::vector<std::pair<Communicator*, bool>>& plan,
                         const ParamList& params) {
  TP_CHECK(!sharded() && params.size() == m_.size() && !plan.empty(),
           "AdamW::shard_over: already sharded or ", params.size(), " parameters for state of ",
           m_.size());
  plan_ = plan;
  for (const auto& [group, experts] : plan) {
    Shard sh;
    sh.group = group;
    for (size_t i = 0; i < params.size(); ++i)
      if (plan.size() == 1 || (params[i].expert >= 0) == experts) sh.index.push_back(i);
    if (sh.index.empty()) {  // (a pipeline stage without experts)
      shards_.push_back(std::move(sh));
      continue;
    }
    const ParamList mine = pick(params, sh.index);
    const ZeroPartition part(mine, group->size(), group->rank());
    sh.m = Tensor::zeros(device_, Shape{part.shard()});
    sh.v = Tensor::zeros(device_, Shape{part.shard()});
    part.for_each_segment(mine, [&](size_t j, int64_t from, int64_t at, int64_t n) {
      const size_t i = sh.index[j];
      sh.m.view(at, at + n).copy_from(m_[i].reshape(Shape{m_[i].numel()}).view(from, from + n));
      sh.v.view(at, at + n).copy_from(v_[i].reshape(Shape{v_[i].numel()}).view(from, from + n));
    });
    shards_.push_back(std::move(sh));
  }
  m_.clear();
  v_.clear();
}

void AdamW::unshard(const ParamList& params) {
  TP_CHECK(sharded(), "AdamW::unshard: the moments are not sharded");
  m_.assign(params.size(), Tensor());
  v_.assign(params.size(), Tensor());
  for (Shard& sh : shards_) {
    if (sh.index.empty()) continue;
    const ParamList mine = pick(params, sh.index);
    const ZeroPartition part(mine, sh.group->size(), sh.group->rank());
    for (Tensor* shard : {&sh.m, &sh.v}) {
      Tensor flat(device_, Shape{part.padded});
      {
        CommLedger::Scope scope(sh.group->ledger(), "zero_state");
        if (sh.group->size() == 1)
          flat.copy_from(*shard);
        else
          sh.group->all_gather(*shard, flat);
      }
      std::vector<Tensor>& out = shard == &sh.m ? m_ : v_;
      int64_t at = 0;
      for (size_t i : sh.index) {
        out[i] = Tensor(device_, params[i].value.shape());
        out[i].copy_from(flat.view(at, at + params[i].value.numel()));
        at += params[i].value.numel();
      }
    }
  }
  shards_.clear();
}

void AdamW::step_sharded(ParamList& params, const Tensor& grad_shard, float lr, float grad_scale) {
  step_sharded(params, std::vector<Tensor>{grad_shard}, lr, grad_scale);
}

void AdamW::step_sharded(ParamList& params, const std::vector<Tensor>& grad_shards, float lr,
                         float grad_scale) {
  TP_CHECK(sharded(), "AdamW::step_sharded: call shard_over first");
  TP_CHECK(grad_shards.size() == shards_.size(), "AdamW::step_sharded: ", grad_shards.size(),
           " gradient shards for ", shards_.size(), " partitions");
  ++steps_;
  for (size_t g = 0; g < shards_.size(); ++g) {
    Shard& sh = shards_[g];
    if (sh.index.empty()) continue;
    const Tensor& grad_shard = grad_shards[g];
    ParamList mine = pick(params, sh.index);
    const ZeroPartition part(mine, sh.group->size(), sh.group->rank());
    TP_CHECK(grad_shard.numel() == part.shard(), "AdamW::step_sharded: a gradient shard of ",
             grad_shard.numel(), " elements, the partition's is ", part.shard());
    Tensor values = gather_value_shard(device_, mine, part);
    // Each parameter's piece of my shard with that parameter's hyper-parameters (weight decay).
    part.for_each_segment(mine, [&](size_t j, int64_t, int64_t at, int64_t n) {
      Tensor value = values.view(at, at + n), m = sh.m.view(at, at + n), v = sh.v.view(at, at + n);
      device_.adamw_step(value, grad_shard.view(at, at + n), m, v,
                         hyper_for(mine[j], lr, grad_scale), steps_);
    });
    all_gather_parameters(*sh.group, device_, mine, values);
  }
}

int64_t AdamW::state_bytes() const {
  int64_t n = 0;
  for (const Shard& sh : shards_) n += sh.m.defined() ? sh.m.numel() : 0;
  for (const Tensor& m : m_) n += m.numel();
  return 2 * 4 * n;
}

}  // namespace tp
