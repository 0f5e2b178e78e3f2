// attention.h — causal self-attention under TP, split by heads, and its key/value cache.
// Forward (saving what backward needs, through the layer's ActivationStash: observe/
// activation_stash.h) beside backward (returning dX, accumulating parameter gradients with +=).
//
// Shape legend: N = S·B tokens (sequence-major rows, token (s, b) is row s·B + b), h = hidden,
// ffn = MLP inner size, nh / nkv = query / key-value heads, hd = h / nh, t = TP size.
// The project's full legend (S, B, h, nh, nkv, hd, ffn, V, t): core/device.h.
#pragma once

#include <cstdint>
#include <string>

#include "core/communicator.h"
#include "core/device.h"
#include "model/config.h"
#include "model/recompute.h"
#include "observe/activation_stash.h"
#include "parallel/collective_matmul.h"
#include "parallel/linear.h"
#include "parallel/param.h"
#include "parallel/ring_attention.h"

namespace tp {

/// One block's key/value cache on this rank, for incremental decoding: the keys and values of
/// this rank's nkv/t heads at every position decoded so far, sequence-major like the activations
/// (position s of sequence b at row s·B + b). Rows past the decoded length are not read.
struct LayerKvCache {
  Tensor k, v;  ///< (capacity·B, nkv/t · hd) each
};

/// Causal self-attention under TP, split by heads: q, k, v are column-parallel so rank r owns query
/// heads [r·nh/t, (r+1)·nh/t) and key/value heads [r·nkv/t, (r+1)·nkv/t) whole; softmax attention
/// is computed locally; the output projection is row-parallel. One all-reduce forward (g) and one
/// backward (f, after adding the dX terms of q, k and v). Query head j reads key/value head
/// j / (nh/nkv) (grouped-query attention when nkv < nh). Checkpoint: q | k | v side by side in
/// attn.c_attn, (h, (nh + 2 nkv)·hd); attn.c_proj.
///
/// With sequence parallelism (cfg.sp), as for the MLP: all-gather the s/t local tokens on entry,
/// reduce-scatter the output projection's partial sums, keep only the local input shard. The
/// overlap modes (cfg.overlap) work as for the MLP, with q, k and v in place of fc1.
class ParallelAttention {
 public:
  /// prefix: e.g. "transformer.h.0.attn".
  ParallelAttention(Device& device, Communicator& comm, const std::string& prefix,
                    const GptConfig& cfg);
  /// x: (S·B, h) → y: (S·B, h), both whole on every rank. Under SP: (S·B/t, h) → (S·B/t, h).
  Tensor forward(const Tensor& x, int64_t seq, int64_t batch);
  Tensor backward(const Tensor& dy);
  /// Inference with a key/value cache: x holds the n new positions [past, past + n) of B
  /// sequences, (n·B, h), whole on every rank → y: (n·B, h). This rank computes q, k, v of its own
  /// heads for the new positions only, appends k and v to `cache` (rows [past·B, (past + n)·B)),
  /// and its queries attend over the cached positions [0, past + n): no position before `past` is
  /// computed again. One all-reduce (the output projection's g), as in forward; nothing is kept
  /// for backward. Without SP; the cache must hold past + n positions.
  Tensor forward_cached(const Tensor& x, LayerKvCache& cache, int64_t past, int64_t batch);
  /// Context parallelism: forward's x holds this rank's S/cp positions (seq = S/cp) and the
  /// attention runs as a ring over `cp` (parallel/ring_attention.h); nullptr or size 1: off.
  void set_context_parallel(Communicator* cp, CpLayout layout) {
    cp_ = cp;
    cp_layout_ = layout;
  }
  /// Columns of this rank's k (and v): nkv/t · hd.
  int64_t kv_local_cols() const { return k_.out_local(); }
  void collect_params(ParamList& out, float std, float proj_std) const;
  void observe(MemoryLedger* ledger, int64_t layer);

 private:
  Device& device_;
  Communicator& comm_;
  std::string prefix_;
  bool sp_;
  Overlap overlap_;
  int64_t hidden_, heads_, kv_heads_, head_dim_;
  ColumnParallelLinear q_, k_, v_;
  RowParallelLinear proj_;
  AttentionShape shape_;
  ActivationStash saved_;
  SavedTensor q_out_, k_out_, v_out_;  // (N, nh/t · hd), (N, nkv/t · hd) twice
  SavedTensor ctx_;                    // (N, nh/t · hd): the output, the projection's input too
  SavedTensor lse_;                    // (B, nh/t, S), f32: what backward recomputes P from
                                       // (CP: (chunks·B, nh/t, c), RingAttention::lse_shape)
  Communicator* cp_ = nullptr;
  CpLayout cp_layout_ = CpLayout::Zigzag;
  int64_t global_seq_ = 0;  // S: seq · cp
  bool ring() const { return cp_ != nullptr && cp_->size() > 1; }
};

}  // namespace tp
