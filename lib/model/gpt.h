// gpt.h — Gpt, the whole model under tensor parallelism (its blocks: model/block.h).
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
//
// Inference (forward_cached, for text generation): each rank keeps a key/value cache of its own
// heads (KvCache), so a new token runs one position through the blocks — the same collectives as
// training's forward, each on one row per sequence — and attends over the cached positions. No
// position is computed twice. The head gives this rank's V'/t logits of the last position; the
// sampler (parallel/vocab_sampling.h) picks the token from the shards without gathering them.
//
// Shape legend: S = sequence, B = batch, h = hidden, V = vocabulary (V' padded), t = TP size;
// ids and targets are (S·B) in the same row order.
// The project's full legend (S, B, h, nh, nkv, hd, ffn, V, t): core/device.h.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "model/attention.h"
#include "model/block.h"
#include "model/config.h"
#include "model/dropout.h"
#include "model/norm.h"
#include "observe/activation_stash.h"
#include "observe/memory_ledger.h"
#include "parallel/vocab_parallel.h"

namespace tp {

/// One batch of token ids, sequence-major: position (s, b) at index s·B + b.
struct Batch {
  int64_t seq = 0, batch = 0;
  std::vector<int32_t> ids, targets;  ///< (S·B) each; targets[i] is the token after ids[i]
};

/// Pipeline parallelism (parallel/pipeline_parallel.h): the part of the model one stage holds.
/// The default is the whole model.
struct StageLayout {
  int64_t first_layer = 0;  ///< blocks [first_layer, end_layer)
  int64_t end_layer = -1;   ///< −1: up to L
  bool embedding = true;    ///< wte's lookup, wpe and the embedding dropout (the first stage)
  bool head = true;  ///< ln_f, the head and the loss (the last stage); a tied head holds wte too
  /// The whole model of `layers` blocks (pipeline parallelism off).
  bool whole(int64_t layers) const {
    return embedding && head && first_layer == 0 && (end_layer < 0 || end_layer == layers);
  }
};

/// The key/value caches of every block on this rank (Gpt::make_kv_cache): for B sequences, up to
/// `capacity` positions each (at most the position table, GptConfig::seq).
struct KvCache {
  int64_t batch = 1;     ///< B
  int64_t capacity = 0;  ///< positions the cache can hold
  int64_t length = 0;    ///< positions decoded so far (the next position's index)
  std::vector<LayerKvCache> layers;
  /// Bytes this rank holds: 2 · L · capacity · B · (nkv/t) · hd · (4, or 2 in bf16) — a 1/t share
  /// of the whole.
  int64_t bytes() const;
};

class Gpt {
 public:
  /// The kernels a --precision bf16 step (and generation) hands bf16 tensors; the optimizer, the
  /// gradient norm and initialisation see f32 only. The constructor refuses bf16 on a backend that
  /// does not take each of them (Device::takes_bf16).
  static KernelSet bf16_kernels();
  /// Validates cfg for t = comm.size() first (a bad-input error listing every problem).
  Gpt(Device& device, Communicator& comm, const GptConfig& cfg);
  /// One pipeline stage's part of the model: the parameters it holds and nothing else (their
  /// names and initial values are the whole model's).
  Gpt(Device& device, Communicator& comm, const GptConfig& cfg, const StageLayout& stage);
  /// Initialises every parameter from (seed, name, global index): the same model for every t.
  void init(uint64_t seed);
  /// Forward and the loss gradient; returns the mean loss (the same on every rank).
  float forward(const Batch& batch, uint64_t seed, int64_t step);
  /// Pipeline parallelism: this stage's forward of one micro-batch. The first stage starts from
  /// the ids of `batch`, any other from `input`, the previous stage's output (S·B, h) (under SP
  /// this rank's (S·B/t, h)). Returns the output for the next stage, of the same shape; the last
  /// stage computes the loss (batch.targets needed), keeps its gradient for backward_stage, sets
  /// *loss and returns an empty tensor; another stage sets *loss to its blocks' balancing losses
  /// (mixture of experts, training; else 0). With the whole model, forward() is this.
  Tensor forward_stage(const Batch& batch, const Tensor& input, uint64_t seed, int64_t step,
                       float* loss);
  /// This stage's backward: from the kept loss gradient (last stage) or `dout`, the gradient of
  /// this stage's output. Returns the gradient of the stage's input (empty on the first stage).
  Tensor backward_stage(const Tensor& dout);
  const StageLayout& stage() const { return stage_; }
  int tp_size() const { return comm_.size(); }
  /// Pipeline parallelism keeps several micro-batches in flight on one stage: this moves what
  /// the last forward kept out of the layers (their slots are empty afterwards), and
  /// restore_activations puts it back before that micro-batch's backward.
  KeptActivations take_activations() { return memory_.take(); }
  void restore_activations(KeptActivations kept) { memory_.restore(std::move(kept)); }
  /// bf16: whether forward / forward_stage remake the compute copies from the masters (the
  /// default). train_step remakes them once per step and turns this off for its micro-batches:
  /// the weights do not change between them, so the bits are the same.
  void set_refresh_per_forward(bool on) { refresh_per_forward_ = on; }
  /// The tied embedding's gradient on this stage (pipeline: the first and last stage each hold
  /// wte, and their gradients are summed between the two); undefined when the stage has no wte.
  Tensor wte_grad() { return wte_ ? wte_->dweight : Tensor(); }
  /// The forward up to the head: this rank's logits (S·B, V'/t), columns [first_vocab_id(),
  /// + V'/t) of the logits (padding columns, ids ≥ V, are zero). batch.targets may be empty.
  /// Dropout as in training (none when cfg.dropout = 0). forward() is this plus the loss.
  Tensor forward_logits(const Batch& batch, uint64_t seed, int64_t step);
  /// Backward from the loss; parameter gradients accumulate into Param::grad.
  void backward();

  /// An empty cache for `batch` sequences of up to `capacity` positions (0: the position table).
  KvCache make_kv_cache(int64_t batch = 1, int64_t capacity = 0) const;
  /// Inference over a key/value cache: ids are the next n positions of the cache's B sequences,
  /// sequence-major (n·B ids, position cache.length + s of sequence b at s·B + b). Runs them
  /// through the blocks, appends their keys and values to the cache (cache.length grows by n) and
  /// returns this rank's logits (B, V'/t) of the last new position, or (n·B, V'/t) of every new
  /// position with all_positions. Needs cfg.sp off; nothing is kept for backward.
  Tensor forward_cached(const std::vector<int32_t>& ids, KvCache& cache,
                        bool all_positions = false);
  /// Completes the gradients after backward(): under sequence parallelism, sums the partial
  /// gradients of the replicated parameters over the group (one all-reduce of all of them
  /// packed together). Without SP there is nothing to do. Forgetting this step leaves every
  /// rank with a different, partial gradient; audit_replicated_gradients() catches that.
  void finish_gradients();
  void zero_grad();
  /// Context parallelism (parallel/context_parallel.h): every forward takes the whole batch and
  /// runs this rank's S/cp positions of each sequence (cp.rank()'s chunks of `layout`): the
  /// embedding of its ids at their global positions, attention as a ring over `cp`
  /// (parallel/ring_attention.h), the loss of its targets — the mean over its S/cp · B tokens, so
  /// the whole batch's loss and gradients are the average over the CP group (train_step takes
  /// it). Dropout masks stay keyed by global rows. cp.size() = 1: nothing changes. Not for
  /// generation (forward_cached refuses it: a key/value cache holds every position anyway).
  void set_context_parallel(Communicator& cp, CpLayout layout);
  /// The part of `b` this rank runs: b itself without CP, else its S/cp positions of every
  /// sequence (ids and targets), seq = S/cp.
  Batch local_batch(const Batch& b) const;
  int cp_size() const { return cp_ ? cp_->size() : 1; }
  /// Mixture of experts (cfg.experts > 0, model/moe.h): every MoE block's router statistics are
  /// reduced by `reducer` (their sums over the ranks holding the batch's other tokens: the global
  /// batch's balancing loss), and the balancing losses' gradients are scaled by `grad_scale` (the
  /// count of ranks whose gradients are averaged, dp · cp, so the average keeps their sum).
  /// train_step sets both from the grid.
  void set_moe_reduction(const RouterStatsReducer& reducer, float grad_scale);
  /// Expert parallelism (parallel/expert_parallel.h): every MoE block keeps only the experts
  /// its rank of `ep` holds, and the other experts' parameters leave params() (call it after
  /// constructing, before init, loading and the optimizer). ep.size() = 1: nothing changes.
  /// Refuses E not divisible by ep.size() (bad input).
  void set_expert_parallel(Communicator& ep);
  int ep_size() const { return ep_ ? ep_->size() : 1; }
  /// The blocks' mixture-of-experts layers on this stage (empty for a dense model).
  std::vector<const MoeLayer*> moe_layers() const;
  /// Σ over this stage's MoE blocks of the last forward's balancing loss and z-loss (part of the
  /// loss forward returns).
  double moe_loss() const;
  /// Dropout on (training, the default) or off (evaluation: model/evaluate.h); forward only.
  void set_training(bool on);
  /// Padded vocabulary V' (a multiple of t) and this rank's first id.
  int64_t padded_vocab() const { return cfg_.padded_vocab(comm_.size()); }
  int64_t first_vocab_id() const { return comm_.rank() * (padded_vocab() / comm_.size()); }
  /// What the last forward kept for backward: the blocks' tensors under their index, the
  /// embedding's, the final norm's and the head's under −1.
  const MemoryLedger& memory() const { return memory_; }

  const GptConfig& config() const { return cfg_; }
  ParamList& params() { return params_; }
  const ParamList& params() const { return params_; }

 private:
  bool refresh_per_forward_ = true;
  Device& device_;
  Communicator& comm_;
  GptConfig cfg_;
  StageLayout stage_;
  std::unique_ptr<VocabParallelEmbedding> wte_;  // (V'/t, h) vocabulary shard
  Tensor wpe_, dwpe_, lm_head_, dlm_head_;       // lm_head_: (V'/t, h), untied head only
  Tensor wpe_copy_, lm_head_copy_;               // bf16 compute copies; undefined in fp32
  std::vector<std::unique_ptr<TransformerBlock>> blocks_;
  std::unique_ptr<Norm> ln_f_;
  /// The head's weight as the GEMMs read it: wte's (tied) or lm_head's compute copy or master.
  const Tensor& head() const {
    return cfg_.tied ? wte_->compute_weight() : compute_tensor(lm_head_, lm_head_copy_);
  }
  Dropout drop_embd_;
  ParamList params_;
  MemoryLedger memory_;
  // saved for backward (the ids are kept by wte_)
  ActivationStash saved_;
  SavedTensor xf_{"lm_head.input"};         // ln_f's output, all tokens: (N, h)
  SavedTensor dlogits_{"lm_head.dlogits"};  // the loss gradient on my logits: (N, V'/t)
  int64_t batch_ = 0;
  std::vector<RowRun> rows_;  // my token rows as runs of global rows (positions, dropout masks)
  Communicator* cp_ = nullptr;
  Communicator* ep_ = nullptr;
  bool training_ = true;
  CpLayout cp_layout_ = CpLayout::Zigzag;

  void check_batch(const Batch& b, bool targets) const;
  Tensor embed(const Batch& b, uint64_t seed, int64_t step);
  Tensor head_logits(const Tensor& x, int64_t n);
  float loss_and_gradient(Tensor& logits, const Batch& b);
};

}  // namespace tp
