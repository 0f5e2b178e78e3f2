// gpt.h — TransformerBlock (pre-norm) and Gpt, the whole model under tensor parallelism.
//
// Block:   x1 = x  + dropout(attn(ln_1(x)))
//          x2 = x1 + dropout(mlp(ln_2(x1)))
// Model:   x = dropout(wte[ids] + wpe[pos]); x = block_L(… block_1(x)); logits = ln_f(x) wteᵀ
//          (or lm_headᵀ when untied); loss = mean over the B·S positions of −log softmax(logits)[target]
//
// Under TP, attention and MLP are split (one all-reduce each, forward and backward); the norms are
// replicated; the embedding and the LM head are split by vocabulary rows: rank r owns token ids
// [r·V'/t, (r+1)·V'/t) of the padded vocabulary V' (V rounded up to a multiple of t). The lookup
// writes zeros for ids another rank owns and an all-reduce completes it (VocabParallelEmbedding);
// the head computes logits for the rank's own ids only, and the cross-entropy needs three
// all-reduces of one number per token (row max, sum of exponentials, target logit;
// vocab_parallel_cross_entropy_forward). No rank holds the full (tokens, V) logits.
//
// With sequence parallelism (cfg.sp) the activations between the TP regions hold s/t tokens per
// rank: the embedding's all-reduce becomes a reduce-scatter, each region all-gathers on entry and
// reduce-scatters on exit, and the head all-gathers ln_f's output. Replicated parameters that see
// only local tokens (norms, row-parallel biases, wpe) get partial gradients, summed by
// finish_gradients(). Activations are sequence-major (S·B, h): token (s, b) is row s·B + b.
#pragma once

#include <memory>
#include <vector>

#include "model/config.h"
#include "model/layers.h"
#include "observe/activation_stash.h"
#include "observe/memory_ledger.h"
#include "parallel/vocab_parallel.h"

namespace tp {

class TransformerBlock {
 public:
  TransformerBlock(Device& device, Communicator& comm, const GptConfig& cfg, int64_t layer);
  /// x: (S·B, h) → (S·B, h); under SP this rank's (S·B/t, h). `seed` and `step` key the dropout
  /// masks.
  Tensor forward(const Tensor& x, int64_t seq, int64_t batch, uint64_t seed, int64_t step);
  Tensor backward(const Tensor& dy);
  void collect_params(ParamList& out, float std, float proj_std) const;
  /// Record every tensor the block keeps for backward in `ledger` (under this block's index).
  void observe(MemoryLedger* ledger);

 private:
  Device& device_;
  Communicator& comm_;
  bool sp_;
  int64_t layer_;
  Norm ln_1_, ln_2_;
  ParallelAttention attn_;
  ParallelMLP mlp_;
  Dropout drop_attn_, drop_mlp_;
};

/// One batch of token ids, sequence-major: position (s, b) at index s·B + b.
struct Batch {
  int64_t seq = 0, batch = 0;
  std::vector<int32_t> ids, targets;  ///< (S·B) each; targets[i] is the token after ids[i]
};

class Gpt {
 public:
  /// Validates cfg for t = comm.size() first (a bad-input error listing every problem).
  Gpt(Device& device, Communicator& comm, const GptConfig& cfg);
  /// Initialises every parameter from (seed, name, global index): the same model for every t.
  void init(uint64_t seed);
  /// Forward and the loss gradient; returns the mean loss (the same on every rank).
  float forward(const Batch& batch, uint64_t seed, int64_t step);
  /// Backward from the loss; parameter gradients accumulate into Param::grad.
  void backward();
  /// Completes the gradients after backward(): under sequence parallelism, sums the partial
  /// gradients of the replicated parameters over the group (one all-reduce of all of them
  /// packed together). Without SP there is nothing to do. Forgetting this step leaves every
  /// rank with a different, partial gradient; audit_replicated_gradients() catches that.
  void finish_gradients();
  void zero_grad();
  /// Padded vocabulary V' (a multiple of t) and this rank's first id.
  int64_t padded_vocab() const { return wte_->padded_vocab(); }
  int64_t first_vocab_id() const { return wte_->first_id(); }
  /// What the last forward kept for backward: the blocks' tensors under their index, the
  /// embedding's, the final norm's and the head's under −1.
  const MemoryLedger& memory() const { return memory_; }

  const GptConfig& config() const { return cfg_; }
  ParamList& params() { return params_; }
  const ParamList& params() const { return params_; }

 private:
  Device& device_;
  Communicator& comm_;
  GptConfig cfg_;
  std::unique_ptr<VocabParallelEmbedding> wte_;  // (V'/t, h) vocabulary shard
  Tensor wpe_, dwpe_, lm_head_, dlm_head_;       // lm_head_: (V'/t, h), untied head only
  std::vector<std::unique_ptr<TransformerBlock>> blocks_;
  std::unique_ptr<Norm> ln_f_;
  Dropout drop_embd_;
  ParamList params_;
  MemoryLedger memory_;
  // saved for backward (the ids are kept by wte_)
  ActivationStash saved_;
  SavedTensor xf_{"lm_head.input"};         // ln_f's output, all tokens: (N, h)
  SavedTensor dlogits_{"lm_head.dlogits"};  // the loss gradient on my logits: (N, V'/t)
  int64_t batch_ = 0, row0_ = 0;
};

}  // namespace tp
