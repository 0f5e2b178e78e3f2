// block.h — TransformerBlock, one pre-norm block of the GPT under tensor parallelism:
//
//   x1 = x  + dropout(attn(ln_1(x)))
//   x2 = x1 + dropout(mlp(ln_2(x1)))
//
// Forward beside backward (dx accumulates the residual path and the branch). Its parts are one
// file each: model/norm.h, model/attention.h, model/mlp.h, model/dropout.h.
//
// Shape legend: N = S·B tokens (sequence-major rows, token (s, b) is row s·B + b), h = hidden,
// t = TP size.
#pragma once

#include <cstdint>

#include "core/communicator.h"
#include "core/device.h"
#include "model/attention.h"
#include "model/config.h"
#include "model/dropout.h"
#include "model/mlp.h"
#include "model/norm.h"
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

}  // namespace tp
