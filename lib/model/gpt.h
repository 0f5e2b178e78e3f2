// gpt.h — TransformerBlock (pre-norm) and Gpt, the whole model under tensor parallelism.
//
// Block:   x1 = x  + dropout(attn(ln_1(x)))
//          x2 = x1 + dropout(mlp(ln_2(x1)))
// Model:   x = dropout(wte[ids] + wpe[pos]); x = block_L(… block_1(x)); logits = ln_f(x) wteᵀ
//          (or lm_headᵀ when untied); loss = mean over the B·S positions of −log softmax(logits)[target]
//
// Under plain TP the embedding, the norms and the head are replicated (every rank holds all of
// them and computes the same numbers); attention and MLP are split, with one all-reduce each
// forward and backward. Activations are sequence-major (S·B, h): token (s, b) is row s·B + b.
#pragma once

#include <memory>
#include <vector>

#include "model/config.h"
#include "model/layers.h"

namespace tp {

class TransformerBlock {
 public:
  TransformerBlock(Device& device, Communicator& comm, const GptConfig& cfg, int64_t layer);
  /// x: (S·B, h) → (S·B, h). `seed` and `step` key the dropout masks.
  Tensor forward(const Tensor& x, int64_t seq, int64_t batch, uint64_t seed, int64_t step);
  Tensor backward(const Tensor& dy);
  void collect_params(ParamList& out, float std, float proj_std) const;

 private:
  Device& device_;
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
  void zero_grad();

  const GptConfig& config() const { return cfg_; }
  ParamList& params() { return params_; }
  const ParamList& params() const { return params_; }

 private:
  Device& device_;
  Communicator& comm_;
  GptConfig cfg_;
  Tensor wte_, dwte_, wpe_, dwpe_, lm_head_, dlm_head_;
  std::vector<std::unique_ptr<TransformerBlock>> blocks_;
  std::unique_ptr<Norm> ln_f_;
  Dropout drop_embd_;
  ParamList params_;
  // saved for backward
  Tensor ids_, xf_, dlogits_;
  int64_t batch_ = 0;
};

}  // namespace tp
