// layers.h — the parts of a transformer block under tensor parallelism: norms, dropout, the
// parallel MLP and the parallel attention. Each has forward (saving what backward needs) and
// backward (returning dX, accumulating parameter gradients with +=) side by side. What forward
// saves sits in SavedTensor slots filled through the layer's ActivationStash, so it is recorded in
// the MemoryLedger that observe() attaches (observe/activation_stash.h).
//
// Shape legend: N = S·B tokens (sequence-major rows, token (s, b) is row s·B + b), h = hidden,
// ffn = MLP inner size, nh / nkv = query / key-value heads, hd = h / nh, t = TP size.
#pragma once

#include <string>

#include "core/communicator.h"
#include "core/device.h"
#include "model/config.h"
#include "observe/activation_stash.h"
#include "parallel/collective_matmul.h"
#include "parallel/linear.h"
#include "parallel/param.h"

namespace tp {

/// LayerNorm (y = (x − μ)/σ ⊙ w + b) or RMSNorm (y = x / rms(x) ⊙ w) over the hidden dim.
/// Replicated under plain TP: its input is the whole hidden vector on every rank, because a norm
/// needs statistics of the whole vector (lesson 06).
class Norm {
 public:
  /// kind: "layernorm" or "rmsnorm". name: e.g. "transformer.h.0.ln_1". With
  /// sequence_parallel the norm sees only this rank's tokens, so its parameter gradients are
  /// partial sums (Param::sequence_parallel_grad).
  Norm(Device& device, std::string name, int64_t hidden, const std::string& kind, float eps,
       bool sequence_parallel = false);
  /// x: (N, h) → y: (N, h). Saves x and the row statistics, unless keep is false (inference).
  Tensor forward(const Tensor& x, bool keep = true);
  /// dy: (N, h) → dx: (N, h); dweight (and dbias) accumulate.
  Tensor backward(const Tensor& dy);
  void collect_params(ParamList& out) const;
  bool is_rms() const { return rms_; }
  /// Record what forward keeps in `ledger` under block `layer`.
  void observe(MemoryLedger* ledger, int64_t layer) { saved_.attach(ledger, layer); }

  Tensor weight, bias, dweight, dbias;  ///< (h); bias only for LayerNorm

 private:
  Device& device_;
  std::string name_;
  bool rms_;
  float eps_;
  bool sp_;
  ActivationStash saved_;
  SavedTensor x_, mean_, rstd_;  // input (N, h); statistics (N), the mean for LayerNorm only
};

/// One block's key/value cache on this rank, for incremental decoding: the keys and values of
/// this rank's nkv/t heads at every position decoded so far, sequence-major like the activations
/// (position s of sequence b at row s·B + b). Rows past the decoded length are not read.
struct LayerKvCache {
  Tensor k, v;  ///< (capacity·B, nkv/t · hd) each
};

/// Inverted dropout with a counter-based mask: element (token row r, feature c) of site `site` at
/// training step `step` is kept when uniform(seed, "dropout/<step>/<site>", (row_offset + r)·h + c)
/// ≥ p. The mask depends on global positions only, so it is the same for every t.
class Dropout {
 public:
  Dropout(Device& device, std::string site, float p);
  /// x: (N, h) → y = x ⊙ mask / (1 − p). p = 0: returns x.
  Tensor forward(const Tensor& x, uint64_t seed, int64_t step, int64_t row_offset = 0);
  /// dx = dy ⊙ mask / (1 − p).
  Tensor backward(const Tensor& dy);
  void observe(MemoryLedger* ledger, int64_t layer) { saved_.attach(ledger, layer); }

 private:
  Device& device_;
  std::string site_;
  float p_;
  ActivationStash saved_;
  SavedTensor mask_;  // (N, h), 0 or 1/(1 − p); not kept when p = 0
};

/// The MLP under TP: fc1 column-parallel (h → ffn), the activation local on this rank's ffn/t
/// columns, fc2 row-parallel (ffn → h):
///
///     Y = GeLU(X [A_1, …, A_t]) [B_1; …; B_t] = Σ_r GeLU(X A_r) B_r
///
/// One all-reduce forward (g, after fc2) and one backward (f, before fc1). With SwiGLU, gate and up
/// are both column-parallel, silu(X G_r) ⊙ (X U_r) is local, and their dX terms are added before
/// the single all-reduce. Checkpoint names: mlp.c_fc (up), mlp.c_gate (SwiGLU only), mlp.c_proj.
///
/// With sequence parallelism (cfg.sp) the input arrives as this rank's s/t tokens: it is
/// all-gathered on entry (gather_from_sp_region; backward: reduce-scatter) and fc2's partial sums
/// are reduce-scattered back to s/t tokens. Only the local shard of the input is kept; backward
/// all-gathers it again to form fc1's weight gradient.
///
/// cfg.overlap (parallel/collective_matmul.h): async all-reduces (SP: reduce-scatters) dX while
/// fc1's weight gradient is computed, and under SP starts the input's re-gather when backward
/// begins; ring (SP) replaces each all-gather + GEMM and GEMM + reduce-scatter by a ring of blocks.
class ParallelMLP {
 public:
  /// prefix: e.g. "transformer.h.0.mlp".
  ParallelMLP(Device& device, Communicator& comm, const std::string& prefix, const GptConfig& cfg);
  /// x: (N, h), whole on every rank → y: (N, h), whole on every rank. Under SP: (N/t, h) → (N/t, h).
  Tensor forward(const Tensor& x);
  /// dy: like y → dx: like x.
  Tensor backward(const Tensor& dy);
  /// Inference: x: (N, h), whole on every rank → y: (N, h). The same numbers as forward without
  /// sequence parallelism (one all-reduce), keeping nothing for backward.
  Tensor forward_inference(const Tensor& x);
  void collect_params(ParamList& out, float std, float proj_std) const;
  void observe(MemoryLedger* ledger, int64_t layer);

 private:
  Device& device_;
  Communicator& comm_;
  bool swiglu_;
  Overlap overlap_;
  ColumnParallelLinear fc1_;   // up: (h, ffn) split by columns
  ColumnParallelLinear gate_;  // SwiGLU gate (unused for GeLU)
  RowParallelLinear fc2_;      // down: (ffn, h) split by rows
  ActivationStash saved_;
  SavedTensor up_, gate_out_;  // pre-activations (N, ffn/t); the gate's for SwiGLU only
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
  SavedTensor probs_;                  // (B, nh/t, S, S)
};

}  // namespace tp
