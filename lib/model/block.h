// block.h — TransformerBlock, one pre-norm block of the GPT under tensor parallelism:
//
//   x1 = x  + dropout(attn(ln_1(x)))
//   x2 = x1 + dropout(mlp(ln_2(x1)))
//
// Forward beside backward (dx accumulates the residual path and the branch). Its parts are one
// file each: model/norm.h, model/attention.h, model/mlp.h, model/dropout.h. Under full
// recomputation (model/recompute.h) the block keeps only its input and reruns its forward at the
// start of backward.
//
// Shape legend: N = S·B tokens (sequence-major rows, token (s, b) is row s·B + b), h = hidden,
// t = TP size.
// The project's full legend (S, B, h, nh, nkv, hd, ffn, V, t): core/device.h.
#pragma once

#include <cstdint>

#include "core/communicator.h"
#include "core/device.h"
#include "model/attention.h"
#include "model/config.h"
#include "model/dropout.h"
#include "model/mlp.h"
#include "model/moe.h"
#include "model/norm.h"
#include "model/recompute.h"
#include "observe/activation_stash.h"
#include "observe/memory_ledger.h"
#include "parallel/param.h"

namespace tp {

class TransformerBlock {
 public:
  TransformerBlock(Device& device, Communicator& comm, const GptConfig& cfg, int64_t layer);
  /// x: (S·B, h) → (S·B, h); under SP this rank's (S·B/t, h). `seed` and `step` key the dropout
  /// masks.
  Tensor forward(const Tensor& x, int64_t seq, int64_t batch, uint64_t seed, int64_t step);
  Tensor backward(const Tensor& dy);
  /// Inference: x: the n new positions of B sequences (n·B, h) → (n·B, h), attending over the
  /// cache (ParallelAttention::forward_cached); no dropout, nothing kept for backward.
  Tensor forward_cached(const Tensor& x, LayerKvCache& cache, int64_t past, int64_t batch);
  void collect_params(ParamList& out, float std, float proj_std) const;
  /// Record every tensor the block keeps for backward in `ledger` (under this block's index).
  /// Under full recomputation that is the block's input only; its parts record into the block's
  /// own ledger, which keeps nothing during forward and is released after backward.
  void observe(MemoryLedger* ledger);
  /// Context parallelism (parallel/context_parallel.h): x holds this rank's S/cp positions of
  /// every sequence (seq in forward is S/cp), attention runs as a ring over `cp`
  /// (ParallelAttention::set_context_parallel) and the dropout masks are keyed by global rows.
  void set_context_parallel(Communicator* cp, CpLayout layout) {
    cp_ = cp;
    cp_layout_ = layout;
    attn_.set_context_parallel(cp, layout);
  }
  /// The block's mixture of experts, or null when its MLP is dense.
  MoeLayer* moe() { return moe_.get(); }
  const MoeLayer* moe() const { return moe_.get(); }
  /// Mixture of experts: the router statistics' reduction over the ranks that hold other tokens
  /// of the batch, and the factor on the balancing losses' gradients that the gradient averages
  /// over those ranks take back out (train_step sets them; model/moe.h).
  void set_moe_reduction(const RouterStatsReducer& reducer, float grad_scale) {
    if (!moe_) return;
    moe_->set_stats_reducer(reducer);
    moe_grad_scale_ = grad_scale;
  }
  /// Dropout on (training) or off (evaluation).
  void set_training(bool on) {
    drop_attn_.set_enabled(on);
    drop_mlp_.set_enabled(on);
  }

 private:
  Device& device_;
  Communicator& comm_;
  bool sp_;
  int64_t layer_;
  Norm ln_1_, ln_2_;
  ParallelAttention attn_;
  std::unique_ptr<ParallelMLP> mlp_;  // the dense MLP, or
  std::unique_ptr<MoeLayer> moe_;     // the experts (cfg.is_moe_block(layer): model/moe.h)
  float moe_grad_scale_ = 1.0f;
  Dropout drop_attn_, drop_mlp_;
  Recompute recompute_;
  // Full recomputation: the input and the forward's arguments, and the parts' own ledger.
  MemoryLedger inner_;
  ActivationStash saved_;
  SavedTensor input_;  // (S·B, h); under SP this rank's (S·B/t, h)
  int64_t seq_ = 0, batch_ = 0, step_ = 0;
  uint64_t seed_ = 0;
  Communicator* cp_ = nullptr;
  CpLayout cp_layout_ = CpLayout::Zigzag;

  Tensor forward_parts(const Tensor& x, int64_t seq, int64_t batch, uint64_t seed, int64_t step);
};

}  // namespace tp
