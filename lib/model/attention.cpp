#include "model/attention.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/exercise.h"

namespace tp {

ParallelAttention::ParallelAttention(Device& device, Communicator& comm, const std::string& prefix,
                                     const GptConfig& cfg)
    : device_(device),
      comm_(comm),
      prefix_(prefix),
      sp_(cfg.sp),
      overlap_(cfg.overlap),
      hidden_(cfg.hidden),
      heads_(cfg.heads),
      kv_heads_(cfg.kv()),
      head_dim_(cfg.head_dim()),
      q_(device, comm, prefix + ".q", cfg.hidden, cfg.heads * cfg.head_dim(), Bias::With,
         ColumnOutput::Split, cfg.sp),
      k_(device, comm, prefix + ".k", cfg.hidden, cfg.kv() * cfg.head_dim(), Bias::With,
         ColumnOutput::Split, cfg.sp),
      v_(device, comm, prefix + ".v", cfg.hidden, cfg.kv() * cfg.head_dim(), Bias::With,
         ColumnOutput::Split, cfg.sp),
      proj_(device, comm, prefix + ".c_proj", cfg.heads * cfg.head_dim(), cfg.hidden, Bias::With,
            RowInput::Split, cfg.sp),
      q_out_(prefix + ".q"),
      k_out_(prefix + ".k"),
      v_out_(prefix + ".v"),
      ctx_(prefix + ".ctx"),
      lse_(prefix + ".lse") {
  for (ParallelLinearBase* l :
       {static_cast<ParallelLinearBase*>(&q_), static_cast<ParallelLinearBase*>(&k_),
        static_cast<ParallelLinearBase*>(&v_), static_cast<ParallelLinearBase*>(&proj_)})
    l->set_overlap(overlap_);
  q_.set_input_shard_name(prefix + ".input_shard");  // the group's: q, k and v read one input
  for (ParallelLinearBase* l :
       {static_cast<ParallelLinearBase*>(&q_), static_cast<ParallelLinearBase*>(&k_),
        static_cast<ParallelLinearBase*>(&v_), static_cast<ParallelLinearBase*>(&proj_)})
    l->set_compute_dtype(cfg.compute_dtype());
}

void ParallelAttention::observe(MemoryLedger* ledger, int64_t layer) {
  saved_.attach(ledger, layer);
  for (ParallelLinearBase* l :
       {static_cast<ParallelLinearBase*>(&q_), static_cast<ParallelLinearBase*>(&k_),
        static_cast<ParallelLinearBase*>(&v_), static_cast<ParallelLinearBase*>(&proj_)})
    l->observe(ledger, layer);
}

#if TP_EXERCISE != 5  // exercises/05_attention_heads.cpp
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
  Tensor ctx(device_, q.shape(), q.dtype());
  Tensor lse;    // f32: one log-sum-exp per query row
  if (ring()) {  // CP: my S/cp positions' queries meet every key around the ring
    global_seq_ = seq * cp_->size();
    RingAttention ring(device_, *cp_, global_seq_, cp_layout_);
    lse = Tensor(device_, ring.lse_shape(batch, heads_ / t));
    ring.forward(ctx, lse, q, k, v, shape_);
  } else {
    lse = Tensor(device_, Shape{batch, heads_ / t, seq});
    device_.attention_forward(ctx, lse, q, k, v, shape_);  // local: whole heads
  }
  Tensor y = proj_.forward(ctx);  // Σ_r ctx_r P_r: g's all-reduce (SP: reduce-scatter)
  // Backward recomputes the probabilities from q, k and lse, and needs ctx (the output projection
  // keeps it already: the ledger counts it once) for the softmax backward's row sums. Nothing of
  // size S × S is kept, whatever the recomputation mode (model/recompute.h).
  saved_.keep(ctx_, ctx);
  saved_.keep(lse_, lse);
  return y;
}
#endif

Tensor ParallelAttention::backward(const Tensor& dy) {
  q_.prefetch_input();  // SP + async: X's re-gather runs under the projection's and attention's
  Tensor dctx = proj_.backward(dy);
  const Tensor &q = q_out_.get(), &k = k_out_.get(), &v = v_out_.get();
  Tensor dq(device_, q.shape(), dctx.dtype()), dk(device_, k.shape(), dctx.dtype()),
      dv(device_, v.shape(), dctx.dtype());
  if (ring()) {  // dK, dV travel the ring home (parallel/ring_attention.h)
    RingAttention ring(device_, *cp_, global_seq_, cp_layout_);
    ring.backward(dq, dk, dv, dctx, q, k, v, ctx_.get(), lse_.get(), shape_);
  } else {
    device_.attention_backward(dq, dk, dv, dctx, q, k, v, ctx_.get(), lse_.get(), shape_);
  }
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
  const Tensor q = q_.forward(x, Keep::Nothing);
  // 2. Append k and v to the cache: rows [past·B, (past + n)·B).
  Tensor k_new = cache.k.view(past * batch, rows), v_new = cache.v.view(past * batch, rows);
  k_new.copy_from(k_.forward(x, Keep::Nothing));
  v_new.copy_from(v_.forward(x, Keep::Nothing));
  // 3. The new queries over every cached position, local: whole heads.
  const AttentionShape shape{n,          batch,
                             heads_ / t, kv_heads_ / t,
                             head_dim_,  1.0f / std::sqrt(static_cast<float>(head_dim_))};
  Tensor ctx(device_, q.shape(), q.dtype());
  device_.attention_cached_forward(ctx, q, cache.k.view(0, rows), cache.v.view(0, rows), past,
                                   shape);
  return proj_.forward(ctx, Keep::Nothing);  // Σ_r ctx_r P_r: g's all-reduce
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
