// vocab_parallel.h — the vocabulary split over the ranks: the embedding lookup and the
// cross-entropy of the LM head's logits, with no rank holding all V rows of the table or all V
// logits of a token.
//
// The vocabulary of V ids is padded up to V', a multiple of t (GptConfig::padded_vocab), and rank
// r owns ids [r·V'/t, (r+1)·V'/t): rows of the embedding table wte (V', h), and the same columns
// of the logits x wteᵀ (N, V'), which the head computes like a column-parallel layer. Padding ids
// (≥ V) have zero rows, are never looked up and are skipped by the loss, so they change no number.
//
// Shape legend: N = tokens, h = hidden, V = real vocabulary, V' = padded vocabulary,
// t = comm.size(), r = comm.rank().
// The project's full legend (S, B, h, nh, nkv, hd, ffn, V, t): core/device.h.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/device.h"
#include "core/tensor.h"
#include "observe/activation_stash.h"
#include "parallel/param.h"

namespace tp {

/// Embedding split by vocabulary rows, wte = [W_1; …; W_t] with W_r the rows of rank r's ids:
///
///     E = wte[ids] = Σ_r lookup_r(ids),   lookup_r(ids)_i = W_r[ids_i − r·V'/t] if rank r owns ids_i, else 0
///
/// Exactly one rank owns each id, so the sum over the ranks is the full lookup.
///   forward: masked lookup of the own rows; all-reduce (g). With sequence parallelism:
///            reduce-scatter instead, each rank keeping the sum for its s/t tokens.
///   backward: identity (SP: all-gather dE over the sequence); dW_r += dE scattered onto the rows
///            of the own ids. No communication for the weight gradient: each rank's rows are its own.
class VocabParallelEmbedding {
 public:
  /// name: e.g. "transformer.wte" (the parameter is name + ".weight", global (V', h)).
  /// padded_vocab: V' ≥ V, a multiple of t (GptConfig::padded_vocab(t)); bad input otherwise.
  VocabParallelEmbedding(Device& device, Communicator& comm, std::string name, int64_t vocab,
                         int64_t padded_vocab, int64_t hidden, bool sequence_parallel = false);

  int64_t vocab() const { return vocab_; }          ///< V, the real ids
  int64_t padded_vocab() const { return padded_; }  ///< V'
  int64_t local_rows() const { return rows_; }      ///< V'/t: rows of this rank's shard
  int64_t first_id() const { return first_; }       ///< r·V'/t: this rank's first id
  int64_t padding_rows() const;                     ///< rows of this shard at ids ≥ V
  /// This rank's columns of the logits, for the cross-entropy: ids [first_id, first_id + V'/t), real below V.
  VocabShard shard() const { return {first_, vocab_}; }

  /// Takes this rank's rows of a global table (V × h, row-major; the padding rows stay zero).
  void load_global(const std::vector<float>& table);
  /// Sets the padding rows of `w`, a (V'/t, h) shard split like this table, to zero.
  void zero_padding(Tensor& w) const;

  /// This rank's term of the lookup (before g): its own rows, zeros for the ids other ranks own.
  /// ids: (N) global ids as f32 → (N, h)
  Tensor forward_partial(const Tensor& ids) const;
  /// ids: (N) → E: (N, h), complete on every rank; with sequence parallelism (N/t, h), this
  /// rank's tokens. Keeps ids for backward.
  Tensor forward(const Tensor& ids);
  /// dy: like forward's E. Accumulates dweight += dE onto the rows of this rank's ids (ids have
  /// no gradient, so nothing is returned).
  void backward(const Tensor& dy);

  /// Appends the table as a Param: name() + ".weight", (V', h) split by rows, N(0, std) with
  /// decay, stored in checkpoints without the padding rows.
  void collect_params(ParamList& out, float std) const;
  /// The same description for another (V', h) tensor split like this table (an untied LM head).
  Param vocab_param(std::string name, const Tensor& value, const Tensor& grad, float std) const;
  /// Record the ids kept for backward in `ledger` under block `layer` (−1: outside the blocks).
  void observe(MemoryLedger* ledger, int64_t layer) { saved_.attach(ledger, layer); }
  const std::string& name() const { return name_; }
  /// Computes with a copy of the table in `dtype` (bf16: refreshed from the fp32 master by the
  /// model's refresh_compute_copies; f32: the table itself).
  void set_compute_dtype(Dtype dtype) { weight_copy_ = make_compute_copy(weight, dtype); }
  /// What the lookup (and a tied head) reads: the compute copy, or the table in fp32.
  const Tensor& compute_weight() const { return compute_tensor(weight, weight_copy_); }

  Tensor weight;   ///< this rank's rows: (V'/t, h)
  Tensor dweight;  ///< their gradient, accumulated by backward

 private:
  Device& device_;
  Communicator& comm_;
  std::string name_;
  int64_t vocab_, padded_, hidden_, rows_, first_;
  bool sp_;
  ActivationStash saved_;
  SavedTensor ids_;     // (N)
  Tensor weight_copy_;  // bf16 compute copy (set_compute_dtype), else undefined
};

/// The per-token numbers of the vocabulary-parallel cross-entropy, each (N). Before its all-reduce
/// a number covers this rank's columns only; after it, all V columns (the same on every rank).
struct CrossEntropyStats {
  Tensor row_max;       ///< m = max_j x_j                        ① all-reduce MAX
  Tensor sum_exp;       ///< Σ_j exp(x_j − m)                      ② all-reduce SUM
  Tensor target_logit;  ///< x_target (0 where the rank does not own the target)   ③ all-reduce SUM
  Tensor loss;          ///< log Σ + m − x_target
};

/// The points of vocab_parallel_cross_entropy_forward after which it calls its watcher.
enum class CrossEntropyStage {
  LocalMax,     ///< row_max over this rank's columns
  Max,          ///< ① row_max over all V (after the all-reduce MAX)
  LocalSums,    ///< sum_exp and target_logit over this rank's columns
  SumExp,       ///< ② sum_exp over all V (after its all-reduce SUM)
  TargetLogit,  ///< ③ target_logit from its owner (after its all-reduce SUM)
  Loss,         ///< loss
};

/// Called by the forward after each stage with the numbers so far (a lesson prints them).
using CrossEntropyWatch = std::function<void(CrossEntropyStage, const CrossEntropyStats&)>;

/// Cross-entropy over logits split by vocabulary columns, loss_i = log Σ_j exp(x_ij) − x_i,y_i
/// with j over all V ids, of which this rank holds the columns of `shard` (x_r = [x_1 | … | x_t]):
/// three numbers per token i, each finished by one all-reduce over the ranks r,
/// \f{align*}{
///   m_i &= \max_r \max_j x_{r,ij}
///       && \text{① all-reduce MAX (so that exp cannot overflow)}
///   \\ S_i &= \sum_r \sum_j e^{x_{r,ij} - m_i} && \text{② all-reduce SUM}
///   \\ x_{i,y_i} &= \sum_r [r \text{ owns } y_i]\, x_{r,iy_i}
///       && \text{③ all-reduce SUM (one rank contributes)}
///   \\ \mathrm{loss}_i &= \log S_i + m_i - x_{i,y_i}
/// \f}
///
///   forward: three all-reduces of one float per token (labelled "cross_entropy" in the
///            CommLedger; none at t = 1); backward: none (see vocab_parallel_cross_entropy_backward).
/// logits: (N, V'/t), targets: (N) global ids as f32 → the per-token loss (N), with m and Σ,
/// which the backward needs. `watch`, if given, sees every stage.
CrossEntropyStats vocab_parallel_cross_entropy_forward(Device& device, Communicator& comm,
                                                       const Tensor& logits, const Tensor& targets,
                                                       const VocabShard& shard,
                                                       const CrossEntropyWatch& watch = {});

/// dlogits = scale · (softmax(x) − onehot(y)) on this rank's columns, 0 on padding columns, where
/// softmax(x)_ij = exp(x_ij − m_i) / Σ_i from the forward's all-reduced m and Σ: no communication.
/// dlogits, logits: (N, V'/t) (dlogits may be logits: in place); targets: (N).
void vocab_parallel_cross_entropy_backward(Device& device, Tensor& dlogits, const Tensor& logits,
                                           const Tensor& targets, const CrossEntropyStats& stats,
                                           const VocabShard& shard, float scale);

}  // namespace tp
