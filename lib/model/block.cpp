#include "model/block.h"

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"

namespace tp {

namespace {
Tensor add(Device& device, const Tensor& a, const Tensor& b) {
  Tensor y = a.clone();
  device.axpy(1.0f, b, y);
  return y;
}
}  // namespace

TransformerBlock::TransformerBlock(Device& device, Communicator& comm, const GptConfig& cfg,
                                   int64_t layer)
    : device_(device),
      comm_(comm),
      sp_(cfg.sp),
      layer_(layer),
      ln_1_(device, "transformer.h." + std::to_string(layer) + ".ln_1", cfg.hidden, cfg.norm_kind(),
            cfg.eps, cfg.sp),
      ln_2_(device, "transformer.h." + std::to_string(layer) + ".ln_2", cfg.hidden, cfg.norm_kind(),
            cfg.eps, cfg.sp),
      attn_(device, comm, "transformer.h." + std::to_string(layer) + ".attn", cfg),

      drop_attn_(device, "h." + std::to_string(layer) + ".attn", cfg.dropout),
      drop_mlp_(device, "h." + std::to_string(layer) + ".mlp", cfg.dropout),
      recompute_(cfg.recompute),
      input_("transformer.h." + std::to_string(layer) + ".input") {
  const std::string mlp = "transformer.h." + std::to_string(layer) + ".mlp";
  if (cfg.is_moe_block(layer)) {
    MoeConfig m;
    m.hidden = cfg.hidden;
    m.ffn = cfg.inner();
    m.experts = cfg.experts;
    m.top_k = cfg.top_k;
    m.aux_loss_coef = cfg.aux_loss_coef;
    m.z_loss_coef = cfg.z_loss_coef;
    m.capacity_factor = cfg.capacity_factor;
    m.act = cfg.act;
    m.compute = cfg.compute_dtype();
    moe_ = std::make_unique<MoeLayer>(device, mlp, m);
  } else {
    mlp_ = std::make_unique<ParallelMLP>(device, comm, mlp, cfg);
  }
  if (recompute_ == Recompute::Full) observe(nullptr);  // the parts keep through inner_
  ln_1_.set_compute_dtype(cfg.compute_dtype());
  ln_2_.set_compute_dtype(cfg.compute_dtype());
}

Tensor TransformerBlock::forward(const Tensor& x, int64_t seq, int64_t batch, uint64_t seed,
                                 int64_t step) {
  if (recompute_ != Recompute::Full) return forward_parts(x, seq, batch, seed, step);
  // Full recomputation: keep the input only; the parts run without keeping anything.
  saved_.keep(input_, x);
  seq_ = seq;
  batch_ = batch;
  seed_ = seed;
  step_ = step;
  inner_.release();
  inner_.set_keeping(false);
  Tensor y = forward_parts(x, seq, batch, seed, step);
  inner_.set_keeping(true);
  return y;
}

Tensor TransformerBlock::forward_parts(const Tensor& x, int64_t seq, int64_t batch, uint64_t seed,
                                       int64_t step) {
  // My token rows as runs of global rows, for the masks: under SP from my first row; under CP
  // chunk by chunk (one run without CP).
  const int cp = cp_ ? cp_->size() : 1;
  const std::vector<RowRun> rows =
      cp_row_runs(seq * cp, batch, cp, cp_ ? cp_->rank() : 0, cp_layout_,
                  sp_ ? comm_.rank() * x.rows() : 0, x.rows());
  Tensor a = drop_attn_.forward(attn_.forward(ln_1_.forward(x), seq, batch), seed, step, rows);
  Tensor x1;  // x + a, written by ln_2's fused residual add (the norm reads it while in cache)
  const Tensor n2 = ln_2_.forward_add(x, a, x1);
  // The experts run on the tokens this rank holds (whole under plain TP: every rank computes the
  // same; under SP its s/t tokens) and need no collective but the router statistics' sums.
  Tensor m = drop_mlp_.forward(moe_ ? moe_->forward(n2) : mlp_->forward(n2), seed, step, rows);
  return add(device_, x1, m);
}

Tensor TransformerBlock::forward_cached(const Tensor& x, LayerKvCache& cache, int64_t past,
                                        int64_t batch) {
  Tensor x1;
  const Tensor n2 = ln_2_.forward_add(
      x, attn_.forward_cached(ln_1_.forward(x, Keep::Nothing), cache, past, batch), x1,
      Keep::Nothing);
  TP_CHECK(!moe_, "TransformerBlock::forward_cached: no mixture of experts in generation yet");
  return add(device_, x1, mlp_->forward_inference(n2));
}

void TransformerBlock::observe(MemoryLedger* ledger) {
  if (recompute_ == Recompute::Full) {
    saved_.attach(ledger, layer_);
    ledger = &inner_;  // what the parts keep is the rerun's, inside backward
  }
  ln_1_.observe(ledger, layer_);
  ln_2_.observe(ledger, layer_);
  attn_.observe(ledger, layer_);
  if (moe_)
    moe_->observe(ledger, layer_);
  else
    mlp_->observe(ledger, layer_);
  drop_attn_.observe(ledger, layer_);
  drop_mlp_.observe(ledger, layer_);
}

Tensor TransformerBlock::backward(const Tensor& dx2) {
  if (recompute_ == Recompute::Full) {
    // Rerun the forward from the kept input: the same kernels and dropout keys, so the parts keep
    // bitwise what `none` kept (the output is not needed).
    inner_.release();
    forward_parts(input_.get(), seq_, batch_, seed_, step_);
  }
  // dx1 = dx2 + ln_2's dx, dx = dx1 + ln_1's dx: each residual add joined to the norm's backward
  const Tensor dm = drop_mlp_.backward(dx2);
  Tensor dx1 =
      ln_2_.backward_add(dx2, moe_ ? moe_->backward(dm, moe_grad_scale_) : mlp_->backward(dm));
  Tensor dx = ln_1_.backward_add(dx1, attn_.backward(drop_attn_.backward(dx1)));
  if (recompute_ == Recompute::Full) {
    inner_.release();  // the rerun's activations are freed block by block
    input_.reset();
  }
  return dx;
}

void TransformerBlock::collect_params(ParamList& out, float std, float proj_std) const {
  ln_1_.collect_params(out);
  attn_.collect_params(out, std, proj_std);
  ln_2_.collect_params(out);
  if (!moe_) {
    mlp_->collect_params(out, std, proj_std);
    return;
  }
  const size_t first = out.size();
  moe_->collect_params(out, std, proj_std);
  // Under SP each rank's experts see its own tokens only: partial gradients, summed over the TP
  // group by Gpt::finish_gradients as the norms' are.
  for (size_t i = first; i < out.size(); ++i) out[i].sequence_parallel_grad = sp_;
}

}  // namespace tp
