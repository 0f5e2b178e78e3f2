#include "model/layers.h"

#include <cmath>

#include "core/error.h"

namespace tp {

// ---- Norm ---------------------------------------------------------------------------------------

Norm::Norm(Device& device, std::string name, int64_t hidden, const std::string& kind, float eps,
           bool sequence_parallel)
    : device_(device),
      name_(std::move(name)),
      rms_(kind == "rmsnorm"),
      eps_(eps),
      sp_(sequence_parallel),
      x_(name_ + ".input"),
      mean_(name_ + ".mean"),
      rstd_(name_ + ".rstd") {
  TP_CHECK(kind == "layernorm" || kind == "rmsnorm", "unknown norm '", kind, "'");
  weight = Tensor(device, Shape{hidden});
  dweight = Tensor::zeros(device, Shape{hidden});
  device.fill(weight, 1.0f);
  if (!rms_) {
    bias = Tensor::zeros(device, Shape{hidden});
    dbias = Tensor::zeros(device, Shape{hidden});
  }
}

Tensor Norm::forward(const Tensor& x, bool keep) {
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

// ---- Dropout ------------------------------------------------------------------------------------

Dropout::Dropout(Device& device, std::string site, float p)
    : device_(device), site_(std::move(site)), p_(p), mask_(site_ + ".dropout_mask") {}

Tensor Dropout::forward(const Tensor& x, uint64_t seed, int64_t step, int64_t row_offset) {
  if (p_ == 0.0f) return x;
  Tensor mask(device_, x.shape());
  const RngKey key = RngKey::from(seed, "dropout/" + std::to_string(step) + "/" + site_);
  device_.dropout_mask(mask, key, GlobalIndex::rows(x.cols(), row_offset), p_);
  saved_.keep(mask_, mask);
  Tensor y(device_, x.shape());
  device_.mul(x, mask, y);
  return y;
}

Tensor Dropout::backward(const Tensor& dy) {
  if (p_ == 0.0f) return dy;
  Tensor dx(device_, dy.shape());
  device_.mul(dy, mask_.get(), dx);
  return dx;
}

// ---- ParallelMLP --------------------------------------------------------------------------------

ParallelMLP::ParallelMLP(Device& device, Communicator& comm, const std::string& prefix,
                         const GptConfig& cfg)
    : device_(device),
      comm_(comm),
      swiglu_(cfg.act == "swiglu"),
      overlap_(parse_overlap(cfg.overlap)),
      fc1_(device, comm, prefix + ".c_fc", cfg.hidden, cfg.inner(), true, false, cfg.sp),
      gate_(device, comm, prefix + ".c_gate", cfg.hidden, swiglu_ ? cfg.inner() : comm.size(),
            swiglu_, false, cfg.sp),
      fc2_(device, comm, prefix + ".c_proj", cfg.inner(), cfg.hidden, true, true, cfg.sp),
      up_(fc1_.name() + ".output"),
      gate_out_(gate_.name() + ".output") {
  for (ParallelLinearBase* l :
       {static_cast<ParallelLinearBase*>(&fc1_), static_cast<ParallelLinearBase*>(&gate_),
        static_cast<ParallelLinearBase*>(&fc2_)})
    l->set_overlap(overlap_);
}

void ParallelMLP::observe(MemoryLedger* ledger, int64_t layer) {
  saved_.attach(ledger, layer);
  fc1_.observe(ledger, layer);
  gate_.observe(ledger, layer);
  fc2_.observe(ledger, layer);
}

Tensor ParallelMLP::forward(const Tensor& x_in) {
  // X U_r, X G_r: (N, ffn/t), no communication (SP: X all-gathered once for both; the layers keep
  // my s/t tokens only).
  const std::vector<Tensor> outs = swiglu_
                                       ? ColumnParallelLinear::forward_shared({&fc1_, &gate_}, x_in)
                                       : std::vector<Tensor>{fc1_.forward(x_in)};
  const Tensor& up = saved_.keep(up_, outs[0]);
  Tensor act(device_, up.shape());
  if (swiglu_) {
    const Tensor& gate = saved_.keep(gate_out_, outs[1]);
    device_.swiglu_forward(act, gate, up);  // silu(X G_r) ⊙ X U_r, local
  } else {
    device_.gelu_forward(act, up);  // GeLU(X U_r), local: elementwise
  }
  return fc2_.forward(act);  // Σ_r act_r B_r: g's all-reduce (SP: reduce-scatter)
}

Tensor ParallelMLP::backward(const Tensor& dy) {
  fc1_.prefetch_input();  // SP + async: X's re-gather runs under fc2's and the activation's backward
  Tensor dact = fc2_.backward(dy);  // local (g backward is the identity; SP: all-gather dY)
  const Tensor& up = up_.get();
  Tensor dup(device_, up.shape());
  Tensor dgate;
  if (swiglu_) {
    dgate = Tensor(device_, up.shape());
    device_.swiglu_backward(dgate, dup, dact, gate_out_.get(), up);
  } else {
    device_.gelu_backward(dup, dact, up);
  }
  // f backward (SP: reduce-scatter) once for fc1 and the gate together.
  if (swiglu_) return ColumnParallelLinear::backward_shared({&fc1_, &gate_}, {dup, dgate});
  return fc1_.backward(dup);
}

Tensor ParallelMLP::forward_inference(const Tensor& x) {
  const Tensor up = fc1_.forward(x, false);  // X U_r: (N, ffn/t), no communication
  Tensor act(device_, up.shape());
  if (swiglu_)
    device_.swiglu_forward(act, gate_.forward(x, false), up);  // silu(X G_r) ⊙ X U_r
  else
    device_.gelu_forward(act, up);  // GeLU(X U_r)
  return fc2_.forward(act, false);  // Σ_r act_r B_r: g's all-reduce
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
      overlap_(parse_overlap(cfg.overlap)),
      hidden_(cfg.hidden),
      heads_(cfg.heads),
      kv_heads_(cfg.kv()),
      head_dim_(cfg.head_dim()),
      q_(device, comm, prefix + ".q", cfg.hidden, cfg.heads * cfg.head_dim(), true, false, cfg.sp),
      k_(device, comm, prefix + ".k", cfg.hidden, cfg.kv() * cfg.head_dim(), true, false, cfg.sp),
      v_(device, comm, prefix + ".v", cfg.hidden, cfg.kv() * cfg.head_dim(), true, false, cfg.sp),
      proj_(device, comm, prefix + ".c_proj", cfg.heads * cfg.head_dim(), cfg.hidden, true, true,
            cfg.sp),
      q_out_(prefix + ".q"),
      k_out_(prefix + ".k"),
      v_out_(prefix + ".v"),
      probs_(prefix + ".probs") {
  for (ParallelLinearBase* l :
       {static_cast<ParallelLinearBase*>(&q_), static_cast<ParallelLinearBase*>(&k_),
        static_cast<ParallelLinearBase*>(&v_), static_cast<ParallelLinearBase*>(&proj_)})
    l->set_overlap(overlap_);
  q_.set_input_shard_name(prefix + ".input_shard");  // the group's: q, k and v read one input
}

void ParallelAttention::observe(MemoryLedger* ledger, int64_t layer) {
  saved_.attach(ledger, layer);
  for (ParallelLinearBase* l :
       {static_cast<ParallelLinearBase*>(&q_), static_cast<ParallelLinearBase*>(&k_),
        static_cast<ParallelLinearBase*>(&v_), static_cast<ParallelLinearBase*>(&proj_)})
    l->observe(ledger, layer);
}

Tensor ParallelAttention::forward(const Tensor& x_in, int64_t seq, int64_t batch) {
  const int t = comm_.size();
  shape_ =
      AttentionShape{seq,           batch,     heads_ / t,
                     kv_heads_ / t, head_dim_, 1.0f / std::sqrt(static_cast<float>(head_dim_))};
  // This rank's query heads (N, nh/t · hd) and key/value heads (N, nkv/t · hd), from the whole
  // sequence (SP: gathered once for the three, or block by block around the ring; the layers keep
  // my s/t tokens only).
  const std::vector<Tensor> qkv = ColumnParallelLinear::forward_shared({&q_, &k_, &v_}, x_in);
  const Tensor& q = saved_.keep(q_out_, qkv[0]);
  const Tensor& k = saved_.keep(k_out_, qkv[1]);
  const Tensor& v = saved_.keep(v_out_, qkv[2]);
  Tensor ctx(device_, q.shape());
  Tensor probs(device_, Shape{batch, heads_ / t, seq, seq});
  device_.attention_forward(ctx, probs, q, k, v, shape_);  // local: whole heads
  saved_.keep(probs_, probs);
  return proj_.forward(ctx);  // Σ_r ctx_r P_r: g's all-reduce (SP: reduce-scatter)
}

Tensor ParallelAttention::backward(const Tensor& dy) {
  q_.prefetch_input();  // SP + async: X's re-gather runs under the projection's and attention's
  Tensor dctx = proj_.backward(dy);
  const Tensor &q = q_out_.get(), &k = k_out_.get(), &v = v_out_.get();
  Tensor dq(device_, q.shape()), dk(device_, k.shape()), dv(device_, v.shape());
  device_.attention_backward(dq, dk, dv, dctx, q, k, v, probs_.get(), shape_);
  // f backward (SP: reduce-scatter) once for q, k and v.
  return ColumnParallelLinear::backward_shared({&q_, &k_, &v_}, {dq, dk, dv});
}

Tensor ParallelAttention::forward_cached(const Tensor& x, LayerKvCache& cache, int64_t past,
                                         int64_t batch) {
  TP_CHECK(!sp_, prefix_, ".forward_cached: no sequence parallelism in inference");
  TP_CHECK(x.rows() % batch == 0, prefix_, ".forward_cached: ", x.rows(), " rows for batch ",
           batch);
  const int t = comm_.size();
  const int64_t n = x.rows() / batch, rows = (past + n) * batch;
  TP_CHECK(past >= 0 && cache.k.defined() && cache.k.rows() >= rows, prefix_,
           ".forward_cached: the cache holds ", cache.k.defined() ? cache.k.rows() / batch : 0,
           " positions, need ", past + n);
  // 1. This rank's heads for the new positions only: q (n·B, nh/t · hd), k, v (n·B, nkv/t · hd).
  const Tensor q = q_.forward(x, false);
  // 2. Append k and v to the cache: rows [past·B, (past + n)·B).
  Tensor k_new = cache.k.view(past * batch, rows), v_new = cache.v.view(past * batch, rows);
  k_new.copy_from(k_.forward(x, false));
  v_new.copy_from(v_.forward(x, false));
  // 3. The new queries over every cached position, local: whole heads.
  const AttentionShape shape{n,          batch,
                             heads_ / t, kv_heads_ / t,
                             head_dim_,  1.0f / std::sqrt(static_cast<float>(head_dim_))};
  Tensor ctx(device_, q.shape());
  device_.attention_cached_forward(ctx, q, cache.k.view(0, rows), cache.v.view(0, rows), past,
                                   shape);
  return proj_.forward(ctx, false);  // Σ_r ctx_r P_r: g's all-reduce
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
