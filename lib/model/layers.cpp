#include "model/layers.h"

#include <cmath>

#include "core/error.h"
#include "parallel/mappings.h"

namespace tp {

// ---- Norm ---------------------------------------------------------------------------------------

Norm::Norm(Device& device, std::string name, int64_t hidden, const std::string& kind, float eps,
           bool sequence_parallel)
    : device_(device), name_(std::move(name)), rms_(kind == "rmsnorm"), eps_(eps), sp_(sequence_parallel) {
  TP_CHECK(kind == "layernorm" || kind == "rmsnorm", "unknown norm '", kind, "'");
  weight = Tensor(device, Shape{hidden});
  dweight = Tensor::zeros(device, Shape{hidden});
  device.fill(weight, 1.0f);
  if (!rms_) {
    bias = Tensor::zeros(device, Shape{hidden});
    dbias = Tensor::zeros(device, Shape{hidden});
  }
}

Tensor Norm::forward(const Tensor& x) {
  x_ = x;
  Tensor y(device_, x.shape());
  rstd_ = Tensor(device_, Shape{x.rows()});
  if (rms_) {
    device_.rmsnorm_forward(y, rstd_, x, weight, eps_);
  } else {
    mean_ = Tensor(device_, Shape{x.rows()});
    device_.layernorm_forward(y, mean_, rstd_, x, weight, bias, eps_);
  }
  if (memory_) {
    memory_->save(name_ + ".input", layer_, x_);
    memory_->save(name_ + ".mean", layer_, mean_);
    memory_->save(name_ + ".rstd", layer_, rstd_);
  }
  return y;
}

Tensor Norm::backward(const Tensor& dy) {
  Tensor dx(device_, dy.shape());
  if (rms_) device_.rmsnorm_backward(dx, dweight, dy, x_, weight, rstd_);
  else device_.layernorm_backward(dx, dweight, dbias, dy, x_, weight, mean_, rstd_);
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

// ---- Dropout ------------------------------------------------------------------------------------

Dropout::Dropout(Device& device, std::string site, float p) : device_(device), site_(std::move(site)), p_(p) {}

Tensor Dropout::forward(const Tensor& x, uint64_t seed, int64_t step, int64_t row_offset) {
  if (p_ == 0.0f) return x;
  mask_ = Tensor(device_, x.shape());
  const RngKey key = RngKey::from(seed, "dropout/" + std::to_string(step) + "/" + site_);
  device_.dropout_mask(mask_, key, GlobalIndex::rows(x.cols(), row_offset), p_);
  if (memory_) memory_->save(site_ + ".dropout_mask", layer_, mask_);
  Tensor y(device_, x.shape());
  device_.mul(x, mask_, y);
  return y;
}

Tensor Dropout::backward(const Tensor& dy) {
  if (p_ == 0.0f) return dy;
  Tensor dx(device_, dy.shape());
  device_.mul(dy, mask_, dx);
  return dx;
}

// ---- ParallelMLP --------------------------------------------------------------------------------

ParallelMLP::ParallelMLP(Device& device, Communicator& comm, const std::string& prefix, const GptConfig& cfg)
    : device_(device),
      comm_(comm),
      swiglu_(cfg.act == "swiglu"),
      sp_(cfg.sp),
      fc1_(device, comm, prefix + ".c_fc", cfg.hidden, cfg.inner(), true, false),
      gate_(device, comm, prefix + ".c_gate", cfg.hidden, swiglu_ ? cfg.inner() : comm.size(), swiglu_, false),
      fc2_(device, comm, prefix + ".c_proj", cfg.inner(), cfg.hidden, true, true, cfg.sp) {}

void ParallelMLP::observe(MemoryLedger* ledger, int64_t layer) {
  memory_ = ledger;
  layer_ = layer;
  fc1_.observe(ledger, layer);
  gate_.observe(ledger, layer);
  fc2_.observe(ledger, layer);
}

Tensor ParallelMLP::forward(const Tensor& x_in) {
  // SP: all-gather my s/t tokens into the whole sequence; keep only the shard.
  const Tensor x = sp_ ? gather_from_sp_region_forward(comm_, x_in) : x_in;
  if (sp_) {
    x_local_ = x_in;
    if (memory_) memory_->save(fc1_.name() + ".input_shard", layer_, x_local_);
  }
  up_ = fc1_.forward(x, !sp_);                     // X U_r: (N, ffn/t), no communication
  if (memory_) memory_->save(fc1_.name() + ".output", layer_, up_);
  Tensor act(device_, up_.shape());
  if (swiglu_) {
    gate_out_ = gate_.forward(x, !sp_);            // X G_r
    if (memory_) memory_->save(gate_.name() + ".output", layer_, gate_out_);
    device_.swiglu_forward(act, gate_out_, up_);   // silu(X G_r) ⊙ X U_r, local
  } else {
    device_.gelu_forward(act, up_);                // GeLU(X U_r), local: elementwise
  }
  return fc2_.forward(act);                        // Σ_r act_r B_r: g's all-reduce (SP: reduce-scatter)
}

Tensor ParallelMLP::backward(const Tensor& dy) {
  Tensor dact = fc2_.backward(dy);                 // local (g backward is the identity; SP: all-gather dY)
  Tensor dup(device_, up_.shape());
  Tensor dgate;
  if (swiglu_) {
    dgate = Tensor(device_, up_.shape());
    device_.swiglu_backward(dgate, dup, dact, gate_out_, up_);
  } else {
    device_.gelu_backward(dup, dact, up_);
  }
  // SP: the whole-sequence input again, for the weight gradients (recomputed, not kept).
  const Tensor x = sp_ ? gather_from_sp_region_forward(comm_, x_local_) : Tensor();
  Tensor dx = sp_ ? fc1_.backward_partial(dup, x) : fc1_.backward_partial(dup);
  if (swiglu_) device_.axpy(1.0f, sp_ ? gate_.backward_partial(dgate, x) : gate_.backward_partial(dgate), dx);
  return sp_ ? gather_from_sp_region_backward(comm_, dx)   // reduce-scatter to my tokens
             : copy_to_tp_region_backward(comm_, dx);      // f backward: one all-reduce
}

void ParallelMLP::collect_params(ParamList& out, float std, float proj_std) const {
  fc1_.collect_params(out, std);
  if (swiglu_) gate_.collect_params(out, std);
  fc2_.collect_params(out, proj_std);
}

// ---- ParallelAttention --------------------------------------------------------------------------

ParallelAttention::ParallelAttention(Device& device, Communicator& comm, const std::string& prefix,
                                     const GptConfig& cfg)
    : device_(device),
      comm_(comm),
      prefix_(prefix),
      sp_(cfg.sp),
      hidden_(cfg.hidden),
      heads_(cfg.heads),
      kv_heads_(cfg.kv()),
      head_dim_(cfg.head_dim()),
      q_(device, comm, prefix + ".q", cfg.hidden, cfg.heads * cfg.head_dim(), true, false),
      k_(device, comm, prefix + ".k", cfg.hidden, cfg.kv() * cfg.head_dim(), true, false),
      v_(device, comm, prefix + ".v", cfg.hidden, cfg.kv() * cfg.head_dim(), true, false),
      proj_(device, comm, prefix + ".c_proj", cfg.heads * cfg.head_dim(), cfg.hidden, true, true, cfg.sp) {}

void ParallelAttention::observe(MemoryLedger* ledger, int64_t layer) {
  memory_ = ledger;
  layer_ = layer;
  for (ParallelLinearBase* l : {static_cast<ParallelLinearBase*>(&q_), static_cast<ParallelLinearBase*>(&k_),
                                static_cast<ParallelLinearBase*>(&v_), static_cast<ParallelLinearBase*>(&proj_)})
    l->observe(ledger, layer);
}

Tensor ParallelAttention::forward(const Tensor& x_in, int64_t seq, int64_t batch) {
  // SP: all-gather my s/t tokens into the whole sequence; keep only the shard.
  const Tensor x = sp_ ? gather_from_sp_region_forward(comm_, x_in) : x_in;
  if (sp_) {
    x_local_ = x_in;
    if (memory_) memory_->save(prefix_ + ".input_shard", layer_, x_local_);
  }
  const int t = comm_.size();
  shape_ = AttentionShape{seq, batch, heads_ / t, kv_heads_ / t, head_dim_,
                          1.0f / std::sqrt(static_cast<float>(head_dim_))};
  q_out_ = q_.forward(x, !sp_);  // this rank's query heads: (N, nh/t · hd)
  k_out_ = k_.forward(x, !sp_);  // this rank's key/value heads: (N, nkv/t · hd)
  v_out_ = v_.forward(x, !sp_);
  Tensor ctx(device_, q_out_.shape());
  probs_ = Tensor(device_, Shape{batch, heads_ / t, seq, seq});
  device_.attention_forward(ctx, probs_, q_out_, k_out_, v_out_, shape_);  // local: whole heads
  if (memory_) {
    memory_->save(prefix_ + ".q", layer_, q_out_);
    memory_->save(prefix_ + ".k", layer_, k_out_);
    memory_->save(prefix_ + ".v", layer_, v_out_);
    memory_->save(prefix_ + ".probs", layer_, probs_);
  }
  return proj_.forward(ctx);  // Σ_r ctx_r P_r: g's all-reduce (SP: reduce-scatter)
}

Tensor ParallelAttention::backward(const Tensor& dy) {
  Tensor dctx = proj_.backward(dy);
  Tensor dq(device_, q_out_.shape()), dk(device_, k_out_.shape()), dv(device_, v_out_.shape());
  device_.attention_backward(dq, dk, dv, dctx, q_out_, k_out_, v_out_, probs_, shape_);
  if (sp_) {
    const Tensor x = gather_from_sp_region_forward(comm_, x_local_);  // the whole input again
    Tensor dx = q_.backward_partial(dq, x);
    device_.axpy(1.0f, k_.backward_partial(dk, x), dx);
    device_.axpy(1.0f, v_.backward_partial(dv, x), dx);
    return gather_from_sp_region_backward(comm_, dx);  // reduce-scatter to my tokens
  }
  Tensor dx = q_.backward_partial(dq);
  device_.axpy(1.0f, k_.backward_partial(dk), dx);
  device_.axpy(1.0f, v_.backward_partial(dv), dx);
  return copy_to_tp_region_backward(comm_, dx);  // f backward: one all-reduce for q, k and v
}

void ParallelAttention::collect_params(ParamList& out, float std, float proj_std) const {
  // q, k, v are stored side by side in c_attn: columns [0, nh·hd) | [nh·hd, (nh+nkv)·hd) | ...
  const int64_t qd = heads_ * head_dim_, kd = kv_heads_ * head_dim_, total = qd + 2 * kd;
  const ColumnParallelLinear* parts[] = {&q_, &k_, &v_};
  const int64_t col0[] = {0, qd, qd + kd};
  for (int i = 0; i < 3; ++i) {
    const size_t first = out.size();
    parts[i]->collect_params(out, std);
    for (size_t j = first; j < out.size(); ++j) {
      const bool is_bias = out[j].shape.ndim() == 1;
      out[j].ckpt_name = prefix_ + (is_bias ? ".c_attn.bias" : ".c_attn.weight");
      out[j].ckpt_col0 = col0[i];
      out[j].ckpt_cols = total;
    }
  }
  proj_.collect_params(out, proj_std);
}

}  // namespace tp
