#include "parallel/vocab_parallel.h"

#include <algorithm>

#include "core/error.h"
#include "core/exercise.h"
#include "core/host.h"
#include "parallel/mappings.h"

namespace tp {

// ---- VocabParallelEmbedding ---------------------------------------------------------------------

VocabParallelEmbedding::VocabParallelEmbedding(Device& device, Communicator& comm, std::string name,
                                               int64_t vocab, int64_t padded_vocab, int64_t hidden,
                                               bool sequence_parallel)
    : device_(device),
      comm_(comm),
      name_(std::move(name)),
      vocab_(vocab),
      padded_(padded_vocab),
      hidden_(hidden),
      rows_(padded_vocab / comm.size()),
      first_(comm.rank() * (padded_vocab / comm.size())),
      sp_(sequence_parallel),
      ids_(name_ + ".ids") {
  const int t = comm.size();
  TP_CHECK_INPUT(vocab > 0 && hidden > 0, name_, ": vocab=", vocab, " and hidden=", hidden,
                 " must be positive");
  TP_CHECK_INPUT(padded_vocab >= vocab && padded_vocab % t == 0, name_, ": padded vocabulary ",
                 padded_vocab, " must be at least vocab=", vocab, " and a multiple of t=", t,
                 "; use GptConfig::padded_vocab(t) = ", (vocab + t - 1) / t * t);
  weight = Tensor::zeros(device, Shape{rows_, hidden});
  dweight = Tensor::zeros(device, Shape{rows_, hidden});
}

int64_t VocabParallelEmbedding::padding_rows() const {
  return rows_ - std::clamp<int64_t>(vocab_ - first_, 0, rows_);
}

void VocabParallelEmbedding::load_global(const std::vector<float>& table) {
  TP_CHECK(static_cast<int64_t>(table.size()) == vocab_ * hidden_, name_,
           ".load_global: table has ", table.size(), " values, expected ", vocab_, "x", hidden_);
  std::vector<float> padded = table;
  padded.resize(static_cast<size_t>(padded_ * hidden_), 0.0f);  // the padding rows: zero
  weight.copy_from_host(host_block(padded, hidden_, first_, rows_, 0, hidden_));
}

void VocabParallelEmbedding::zero_padding(Tensor& w) const {
  TP_CHECK(w.rows() == rows_, name_, ".zero_padding: ", w.shape().str(), " is not split like (",
           rows_, ", h)");
  const int64_t pad = padding_rows();
  if (pad == 0) return;
  Tensor rows = w.view(rows_ - pad, rows_);
  device_.fill(rows, 0.0f);
}

Tensor VocabParallelEmbedding::forward_partial(const Tensor& ids) const {
  TP_CHECK(ids.ndim() == 1, name_, ".forward: ids ", ids.shape().str(), " should be (N)");
  Tensor e(device_, Shape{ids.numel(), hidden_}, compute_weight().dtype());
  device_.embedding_shard_forward(e, ids, compute_weight(),
                                  first_);  // my rows, zeros for the other ranks' ids
  return e;
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids) {
  saved_.keep(ids_, ids);
  const Tensor e = forward_partial(ids);
  return sp_ ? reduce_scatter_to_sp_region_forward(comm_, e)  // Σ over ranks, my s/t tokens
             : reduce_from_tp_region_forward(comm_, e);       // g: Σ over ranks, all tokens
}

void VocabParallelEmbedding::backward(const Tensor& dy) {
  const Tensor de = sp_ ? reduce_scatter_to_sp_region_backward(comm_, dy)  // all-gather: all tokens
                        : reduce_from_tp_region_backward(comm_, dy);       // g backward: identity
  device_.embedding_shard_backward(dweight, de, ids_.get(), first_);  // dW_r[id − first] += dE
}

Param VocabParallelEmbedding::vocab_param(std::string name, const Tensor& value, const Tensor& grad,
                                          float std) const {
  Param p;
  p.name = std::move(name);
  p.shape = Shape{padded_, hidden_};
  p.split = Split::Rows;
  p.offset = first_;
  p.value = value;
  p.grad = grad;
  p.init_std = std;
  p.decay = true;
  p.ckpt_rows = vocab_;  // the file holds the real V rows only
  return p;
}

void VocabParallelEmbedding::collect_params(ParamList& out, float std) const {
  out.push_back(vocab_param(name_ + ".weight", weight, dweight, std));
  out.back().compute = weight_copy_;
}

// ---- vocabulary-parallel cross-entropy ----------------------------------------------------------

#if TP_EXERCISE != 8  // exercises/08_vocab_cross_entropy.cpp
CrossEntropyStats vocab_parallel_cross_entropy_forward(Device& device, Communicator& comm,
                                                       const Tensor& logits, const Tensor& targets,
                                                       const VocabShard& shard,
                                                       const CrossEntropyWatch& watch) {
  const int64_t n = logits.rows();
  TP_CHECK(logits.ndim() == 2 && targets.numel() == n,
           "vocab_parallel_cross_entropy_forward: logits ", logits.shape().str(), " and targets ",
           targets.shape().str(), " should be (N, V'/t) and (N)");
  const bool split = comm.size() > 1;
  auto stage = [&](CrossEntropyStage s, const CrossEntropyStats& st) {
    if (watch) watch(s, st);
  };
  CrossEntropyStats st{Tensor(device, Shape{n}), Tensor(device, Shape{n}), Tensor(device, Shape{n}),
                       Tensor(device, Shape{n})};
  device.vocab_max(st.row_max, logits, shard);  // max over my real columns
  stage(CrossEntropyStage::LocalMax, st);
  {
    CommLedger::Scope scope(comm.ledger(), "cross_entropy");
    if (split) comm.all_reduce(st.row_max, ReduceOp::Max);  // ① the max over all V logits
    stage(CrossEntropyStage::Max, st);
    device.vocab_sum_exp_target(st.sum_exp, st.target_logit, logits, st.row_max, targets, shard);
    stage(CrossEntropyStage::LocalSums, st);
    if (split) comm.all_reduce(st.sum_exp);  // ② Σ exp over all V logits
    stage(CrossEntropyStage::SumExp, st);
    if (split) comm.all_reduce(st.target_logit);  // ③ from the rank that owns the target
    stage(CrossEntropyStage::TargetLogit, st);
  }
  device.vocab_loss(st.loss, st.row_max, st.sum_exp, st.target_logit);  // log Σ + m − x_target
  stage(CrossEntropyStage::Loss, st);
  return st;
}
#endif

void vocab_parallel_cross_entropy_backward(Device& device, Tensor& dlogits, const Tensor& logits,
                                           const Tensor& targets, const CrossEntropyStats& stats,
                                           const VocabShard& shard, float scale) {
  TP_CHECK(dlogits.shape() == logits.shape() && stats.row_max.defined() && stats.sum_exp.defined(),
           "vocab_parallel_cross_entropy_backward: dlogits ", dlogits.shape().str(),
           " should be like logits ", logits.shape().str(),
           ", with the forward's row_max and sum_exp");
  device.vocab_softmax_backward(dlogits, logits, stats.row_max, stats.sum_exp, targets, shard,
                                scale);
}

}  // namespace tp
