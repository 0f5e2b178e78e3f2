#include "model/gpt.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/exercise.h"
#include "parallel/mappings.h"

namespace tp {

namespace {
std::vector<float> as_float(const std::vector<int32_t>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// Bad input before anything runs: a backend without a bf16 kernel the step needs is named in one
// line (the same on every rank: the backend comes from the command line).
void check_bf16_kernels(const Device& device) {
  std::string missing;
  for (const Kernel k : kAllKernels)
    if (Gpt::bf16_kernels().contains(k) && !device.takes_bf16(k))
      missing += (missing.empty() ? "" : ", ") + std::string(kernel_name(k));
  TP_CHECK_INPUT(missing.empty(), device.backend(),
                 ": --precision bf16 needs bf16 kernels this backend lacks (", missing,
                 "); use --precision fp32");
}
}  // namespace

KernelSet Gpt::bf16_kernels() {
  return {Kernel::gemm,
          Kernel::add_bias,
          Kernel::add_bias_backward,
          Kernel::axpy,
          Kernel::mul,
          Kernel::gelu_forward,
          Kernel::gelu_backward,
          Kernel::swiglu_forward,
          Kernel::swiglu_backward,
          Kernel::layernorm_forward,
          Kernel::layernorm_backward,
          Kernel::rmsnorm_forward,
          Kernel::rmsnorm_backward,
          Kernel::attention_forward,
          Kernel::attention_backward,
          Kernel::attention_merge,
          Kernel::embedding_shard_forward,
          Kernel::embedding_shard_backward,
          Kernel::position_forward,
          Kernel::position_backward,
          Kernel::vocab_max,
          Kernel::vocab_sum_exp_target,
          Kernel::vocab_softmax_backward};
}

Gpt::Gpt(Device& device, Communicator& comm, const GptConfig& cfg)
    : Gpt(device, comm, cfg, StageLayout{}) {}

Gpt::Gpt(Device& device, Communicator& comm, const GptConfig& cfg, const StageLayout& stage)
    : device_(device),
      comm_(comm),
      cfg_(cfg),
      stage_(stage),
      drop_embd_(device, "embd", cfg.dropout) {
  cfg.validate(comm.size());
  if (stage_.end_layer < 0) stage_.end_layer = cfg.layers;
  TP_CHECK(0 <= stage_.first_layer && stage_.first_layer <= stage_.end_layer &&
               stage_.end_layer <= cfg.layers,
           "stage blocks [", stage_.first_layer, ", ", stage_.end_layer, ") outside 0..",
           cfg.layers);
  if (cfg.precision == Precision::Bf16) check_bf16_kernels(device);
  const int t = comm.size();
  const int64_t h = cfg.hidden;
  // wte: the lookup on the first stage, the tied head on the last (both when they are one).
  if (stage_.embedding || (stage_.head && cfg.tied))
    wte_ = std::make_unique<VocabParallelEmbedding>(device, comm, "transformer.wte", cfg.vocab,
                                                    cfg.padded_vocab(t), h, cfg.sp);
  if (stage_.embedding) {
    wpe_ = Tensor::zeros(device, Shape{cfg.seq, h});
    dwpe_ = Tensor::zeros(device, Shape{cfg.seq, h});
  }
  for (int64_t l = stage_.first_layer; l < stage_.end_layer; ++l) {
    blocks_.push_back(std::make_unique<TransformerBlock>(device, comm, cfg, l));
    blocks_.back()->observe(&memory_);
  }
  if (stage_.head)
    ln_f_ = std::make_unique<Norm>(device, "transformer.ln_f", h, cfg.norm_kind(), cfg.eps, cfg.sp);
  // Mixed precision: every layer computes with bf16 copies of its parameters (the fp32 masters
  // stay in params_[i].value for the optimizer and checkpoints).
  if (wte_) wte_->set_compute_dtype(cfg.compute_dtype());
  if (ln_f_) ln_f_->set_compute_dtype(cfg.compute_dtype());
  // What the model keeps outside the blocks is recorded too, under layer −1.
  if (wte_) wte_->observe(&memory_, -1);
  drop_embd_.observe(&memory_, -1);
  if (ln_f_) ln_f_->observe(&memory_, -1);
  saved_.attach(&memory_, -1);

  // wte (and an untied head): split by vocabulary rows; the file holds the real V rows only.
  if (wte_) wte_->collect_params(params_, cfg.init_std);
  if (stage_.embedding) {
    Param pos;
    pos.name = "transformer.wpe.weight";
    pos.shape = wpe_.shape();
    pos.value = wpe_;
    pos.grad = dwpe_;
    pos.compute = wpe_copy_ = make_compute_copy(wpe_, cfg.compute_dtype());
    pos.init_std = cfg.init_std;
    pos.decay = true;
    pos.sequence_parallel_grad = cfg.sp;  // each rank adds positions to its own tokens only
    params_.push_back(pos);
  }
  // GPT-2's scaled init: projections that write into the residual stream get std / sqrt(2L).
  const float proj_std = cfg.init_std / std::sqrt(2.0f * static_cast<float>(cfg.layers));
  for (const auto& b : blocks_) b->collect_params(params_, cfg.init_std, proj_std);
  if (ln_f_) ln_f_->collect_params(params_);
  if (stage_.head && !cfg.tied) {
    // The vocabulary split of the head: as wte's (an untied last stage has no wte of its own).
    VocabParallelEmbedding split(device, comm, "transformer.wte", cfg.vocab, cfg.padded_vocab(t), h,
                                 cfg.sp);
    lm_head_ = Tensor::zeros(device, Shape{split.local_rows(), h});
    dlm_head_ = Tensor::zeros(device, Shape{split.local_rows(), h});
    params_.push_back(split.vocab_param("lm_head.weight", lm_head_, dlm_head_, cfg.init_std));
    params_.back().compute = lm_head_copy_ = make_compute_copy(lm_head_, cfg.compute_dtype());
  }
}

void Gpt::init(uint64_t seed) {
  init_params(device_, params_, seed);
  // Padding rows are zero, never looked up and excluded from the softmax, so they stay zero.
  if (wte_) wte_->zero_padding(wte_->weight);
  if (lm_head_.defined()) {
    VocabParallelEmbedding split(device_, comm_, "transformer.wte", cfg_.vocab,
                                 cfg_.padded_vocab(comm_.size()), cfg_.hidden, cfg_.sp);
    split.zero_padding(lm_head_);
  }
}

void Gpt::zero_grad() { zero_grads(device_, params_); }

void Gpt::check_batch(const Batch& b, bool targets) const {
  const int t = comm_.size();
  TP_CHECK_INPUT(b.seq >= 1 && b.seq <= cfg_.seq, "a batch of sequence length ", b.seq,
                 " does not fit the position table of ", cfg_.seq, " (--seq)");
  const int cp = cp_size();
  const std::vector<std::string> split = cp_problems(b.seq, cp, cp_layout_);
  TP_CHECK_INPUT(split.empty(), split.empty() ? "" : split.front());
  TP_CHECK_INPUT(!cfg_.sp || b.seq / cp % t == 0, "sequence parallelism needs the sequence length ",
                 cp > 1 ? "per CP rank " : "", b.seq / cp, " to be divisible by t=", t);
  const int64_t n = b.seq * b.batch;
  TP_CHECK(static_cast<int64_t>(b.ids.size()) == n, "batch holds ", b.ids.size(), " ids for ",
           b.seq, "x", b.batch);
  for (int32_t id : b.ids)
    TP_CHECK_INPUT(id >= 0 && id < cfg_.vocab, "token id ", id, " outside the vocabulary of ",
                   cfg_.vocab);
  if (!targets) return;
  TP_CHECK(static_cast<int64_t>(b.targets.size()) == n, "batch holds ", b.targets.size(),
           " targets for ", b.seq, "x", b.batch);
  for (int32_t id : b.targets)
    TP_CHECK_INPUT(id >= 0 && id < cfg_.vocab, "target id ", id, " outside the vocabulary of ",
                   cfg_.vocab);
}

Tensor Gpt::embed(const Batch& b, uint64_t seed, int64_t step) {
  // 1. Embedding: my vocabulary rows (zeros for the ids other ranks own), summed over ranks
  //    (under SP: reduce-scattered, my s/t tokens).
  const int64_t n = b.seq * b.batch;
  Tensor x = wte_->forward(Tensor::from_host(device_, Shape{n}, as_float(b.ids)));
  // My rows as runs of global rows: under SP from my first row, under CP chunk by chunk; the
  // position rows and the dropout masks follow the global rows.
  const int cp = cp_size();
  rows_ = cp_row_runs(b.seq * cp, b.batch, cp, cp_ ? cp_->rank() : 0, cp_layout_,
                      cfg_.sp ? comm_.rank() * x.rows() : 0, x.rows());
  for (const RowRun& run : rows_) {
    Tensor part = x.view(run.local_row, run.local_row + run.rows);
    device_.position_forward(part, compute_tensor(wpe_, wpe_copy_), b.batch, run.global_row);
  }
  return drop_embd_.forward(x, seed, step, rows_);
}

Tensor Gpt::head_logits(const Tensor& x, int64_t n) {
  // 3. Final norm, then the head over my vocabulary rows: logits (N, V'/t).
  const Tensor xf_local = ln_f_->forward(x);
  const Tensor& xf = saved_.keep(xf_, cfg_.sp ? gather_from_sp_region_forward(comm_, xf_local)
                                              : copy_to_tp_region_forward(comm_, xf_local));
  const Tensor& head = this->head();
  Tensor logits =
      saved_.keep(dlogits_, Tensor(device_, Shape{n, head.rows()}, xf.dtype()));  // (N, V'/t)
  device_.gemm(false, true, 1.0f, xf, head, 0.0f, logits);
  return logits;
}

Tensor Gpt::forward_logits(const Batch& b_whole, uint64_t seed, int64_t step) {
  TP_CHECK(stage_.whole(cfg_.layers),
           "Gpt::forward_logits needs the whole model, not a pipeline stage");
  check_batch(b_whole, false);
  const Batch b = local_batch(b_whole);
  memory_.clear();
  batch_ = b.batch;
  // bf16: the compute copies from the fp32 masters, one rounding per weight (after each update;
  // remade with the same bits when several forwards share an update).
  refresh_compute_copies(device_, params_);
  Tensor x = embed(b, seed, step);
  // 2. The blocks.
  for (auto& block : blocks_) x = block->forward(x, b.seq, b.batch, seed, step);
  return head_logits(x, b.seq * b.batch);
}

float Gpt::loss_and_gradient(Tensor& logits, const Batch& b) {
  // 4. Cross-entropy over the vocabulary split: three all-reduces of one number per token.
  const int64_t n = b.seq * b.batch;
  const VocabShard shard{comm_.rank() * logits.cols(), cfg_.vocab};  // as wte_->shard()
  const Tensor targets = Tensor::from_host(device_, Shape{n}, as_float(b.targets));
  const CrossEntropyStats ce =
      vocab_parallel_cross_entropy_forward(device_, comm_, logits, targets, shard);
  // In place: my logits become dloss/dlogits = (softmax − onehot) / N on my columns.
  vocab_parallel_cross_entropy_backward(device_, logits, logits, targets, ce, shard,
                                        1.0f / static_cast<float>(n));
  double sum = 0;
  for (float l : ce.loss.to_host()) sum += l;
  return static_cast<float>(sum / static_cast<double>(n));
}

float Gpt::forward(const Batch& b, uint64_t seed, int64_t step) {
  float loss = 0;
  forward_stage(b, Tensor(), seed, step, &loss);
  return loss;
}

Tensor Gpt::forward_stage(const Batch& b_whole, const Tensor& input, uint64_t seed, int64_t step,
                          float* loss) {
  check_batch(b_whole, stage_.head);
  const Batch b = local_batch(b_whole);  // CP: my S/cp positions
  memory_.clear();
  batch_ = b.batch;
  // bf16: the compute copies from the fp32 masters, one rounding per weight (after each update;
  // remade with the same bits when several forwards share an update; train_step's micro-batches
  // share the one it makes per step).
  if (refresh_per_forward_) refresh_compute_copies(device_, params_);
  Tensor x = stage_.embedding ? embed(b, seed, step) : input;
  TP_CHECK(x.defined(), "Gpt::forward_stage: a stage after the first needs its input");
  for (auto& block : blocks_) x = block->forward(x, b.seq, b.batch, seed, step);
  // The experts' balancing losses of this stage's blocks (their gradients come in backward), part
  // of the training loss; a held-out loss is the cross-entropy alone.
  const float moe = training_ ? static_cast<float>(moe_loss()) : 0.0f;
  if (!stage_.head) {
    if (loss) *loss = moe;  // a pipeline sums the stages' shares (train_step)
    return x;
  }
  Tensor logits = head_logits(x, b.seq * b.batch);  // (N, V'/t), kept as the dlogits slot
  const float l = loss_and_gradient(logits, b) + moe;
  if (loss) *loss = l;
  return Tensor();
}

int64_t KvCache::bytes() const {
  int64_t total = 0;
  for (const LayerKvCache& l : layers) total += static_cast<int64_t>(l.k.bytes() + l.v.bytes());
  return total;
}

KvCache Gpt::make_kv_cache(int64_t batch, int64_t capacity) const {
  if (capacity == 0) capacity = cfg_.seq;
  TP_CHECK_INPUT(batch >= 1 && capacity >= 1 && capacity <= cfg_.seq, "a key/value cache of ",
                 capacity, " positions x batch ", batch, " does not fit the position table of ",
                 cfg_.seq);
  KvCache cache;
  cache.batch = batch;
  cache.capacity = capacity;
  const int64_t cols = cfg_.kv() / comm_.size() * cfg_.head_dim();  // my kv heads
  const Dtype dt = cfg_.compute_dtype();
  for (int64_t l = 0; l < cfg_.layers; ++l)
    cache.layers.push_back({Tensor::zeros(device_, Shape{capacity * batch, cols}, dt),
                            Tensor::zeros(device_, Shape{capacity * batch, cols}, dt)});
  return cache;
}

Tensor Gpt::forward_cached(const std::vector<int32_t>& ids, KvCache& cache, bool all_positions) {
  TP_CHECK_INPUT(cfg_.experts == 0,
                 "generation with --experts is not implemented yet (the mixture of experts runs "
                 "in training only)");
  TP_CHECK_INPUT(cp_size() == 1,
                 "generation runs at cp 1: a key/value cache holds every position anyway; build "
                 "the model without --cp (it changes no weight)");
  TP_CHECK_INPUT(!cfg_.sp,
                 "generation runs without sequence parallelism; build the model "
                 "without --sp (it changes no weight)");
  const int64_t batch = cache.batch, past = cache.length;
  const int64_t n = static_cast<int64_t>(ids.size()) / batch;
  TP_CHECK(n >= 1 && n * batch == static_cast<int64_t>(ids.size()), "forward_cached: ", ids.size(),
           " ids for batch ", batch);
  TP_CHECK(static_cast<int64_t>(cache.layers.size()) == cfg_.layers,
           "forward_cached: the cache has ", cache.layers.size(), " layers, the model ",
           cfg_.layers);
  TP_CHECK_INPUT(past + n <= cache.capacity, "positions ", past, "..", past + n - 1,
                 " do not fit the key/value cache of ", cache.capacity,
                 " positions (the position table holds ", cfg_.seq, ")");
  for (int32_t id : ids)
    TP_CHECK_INPUT(id >= 0 && id < cfg_.vocab, "token id ", id, " outside the vocabulary of ",
                   cfg_.vocab);

  // bf16: the compute copies from the fp32 masters, once per cache (the weights do not change
  // while it fills).
  if (past == 0) refresh_compute_copies(device_, params_);
  // 1. Embedding of the new positions (one all-reduce), plus their position rows past, past + 1…
  Tensor x = wte_->forward_partial(Tensor::from_host(device_, Shape{n * batch}, as_float(ids)));
  x = reduce_from_tp_region_forward(comm_, x);
  device_.position_forward(x, compute_tensor(wpe_, wpe_copy_), batch, past * batch);

  // 2. The blocks, each attending over its cache (two all-reduces per block).
  for (size_t l = 0; l < blocks_.size(); ++l)
    x = blocks_[l]->forward_cached(x, cache.layers[l], past, batch);
  cache.length = past + n;

  // 3. Final norm and the head over my vocabulary rows, for the rows asked for: (rows, V'/t).
  const Tensor rows = all_positions ? x : x.view((n - 1) * batch, n * batch);
  const Tensor xf = ln_f_->forward(rows, Keep::Nothing);
  const Tensor& head = this->head();
  Tensor logits(device_, Shape{rows.rows(), wte_->local_rows()}, xf.dtype());
  device_.gemm(false, true, 1.0f, xf, head, 0.0f, logits);
  return logits;
}

void Gpt::backward() { backward_stage(Tensor()); }

Tensor Gpt::backward_stage(const Tensor& dout) {
  Tensor dx = dout;
  if (stage_.head) {
    TP_CHECK(dlogits_.has_value(), "Gpt::backward called before forward");
    const Tensor &dlogits = dlogits_.get(), &xf = xf_.get();
    const Tensor& head = this->head();
    Tensor& dhead = cfg_.tied ? wte_->dweight : dlm_head_;
    Tensor dxf(device_, xf.shape(), dlogits.dtype());
    device_.gemm(false, false, 1.0f, dlogits, head, 0.0f, dxf);  // my vocabulary's part of dxf
    device_.gemm(true, false, 1.0f, dlogits, xf, 1.0f, dhead);   // dhead += dlogitsᵀ xf
    dx = cfg_.sp ? gather_from_sp_region_backward(comm_, dxf)    // Σ over ranks, my tokens
                 : copy_to_tp_region_backward(comm_, dxf);       // Σ over ranks
    dx = ln_f_->backward(dx);
  }
  TP_CHECK(dx.defined(), "Gpt::backward_stage: a stage before the last needs dout");
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) dx = (*it)->backward(dx);
  if (!stage_.embedding) return dx;
  dx = drop_embd_.backward(dx);
  for (const RowRun& run : rows_)
    device_.position_backward(dwpe_, dx.view(run.local_row, run.local_row + run.rows), batch_,
                              run.global_row);
  wte_->backward(dx);  // SP: all-gather to all tokens; dwte += dE on my ids
  return Tensor();
}

#if TP_EXERCISE != 6  // exercises/06_sp_norm_gradients.cpp
void Gpt::finish_gradients() {
  if (!cfg_.sp || comm_.size() == 1) return;
  std::vector<const Param*> partial;
  int64_t total = 0;
  for (const Param& p : params_)
    if (p.sequence_parallel_grad) {
      partial.push_back(&p);
      total += p.grad.numel();
    }
  if (partial.empty()) return;
  // One all-reduce for all of them: pack, sum over the group, unpack.
  Tensor packed(device_, Shape{total});
  int64_t at = 0;
  for (const Param* p : partial) {
    packed.view(at, at + p->grad.numel()).copy_from(p->grad);
    at += p->grad.numel();
  }
  {
    CommLedger::Scope scope(comm_.ledger(), "sequence_parallel_grads");
    comm_.all_reduce(packed);
  }
  at = 0;
  for (const Param* p : partial) {
    Tensor g = p->grad;
    g.copy_from(packed.view(at, at + g.numel()));
    at += g.numel();
  }
}
#endif

void Gpt::set_moe_reduction(const RouterStatsReducer& reducer, float grad_scale) {
  for (auto& b : blocks_) b->set_moe_reduction(reducer, grad_scale);
}

void Gpt::set_expert_parallel(Communicator& ep) {
  if (ep.size() == 1) return;
  TP_CHECK(!ep_, "Gpt::set_expert_parallel: called twice");
  ep_ = &ep;
  ExpertPlacement place;
  for (auto& b : blocks_)
    if (b->moe()) {
      b->moe()->set_expert_group(&ep);
      place = b->moe()->dispatch().placement();
    }
  // The experts this rank no longer holds leave the parameter list (their tensors with them).
  params_.erase(
      std::remove_if(params_.begin(), params_.end(),
                     [&](const Param& p) { return p.expert >= 0 && !place.holds(p.expert); }),
      params_.end());
}

std::vector<const MoeLayer*> Gpt::moe_layers() const {
  std::vector<const MoeLayer*> out;
  for (const auto& b : blocks_)
    if (b->moe()) out.push_back(b->moe());
  return out;
}

double Gpt::moe_loss() const {
  double sum = 0;
  for (const MoeLayer* m : moe_layers()) sum += m->losses().aux + m->losses().z_loss;
  return sum;
}

void Gpt::set_context_parallel(Communicator& cp, CpLayout layout) {
  cp_ = &cp;
  cp_layout_ = layout;
  for (auto& b : blocks_) b->set_context_parallel(&cp, layout);
}

Batch Gpt::local_batch(const Batch& b) const {
  const int cp = cp_size();
  if (cp == 1) return b;
  Batch mine;
  mine.seq = b.seq / cp;
  mine.batch = b.batch;
  for (int64_t p : cp_positions(b.seq, cp, cp_->rank(), cp_layout_))
    for (int64_t j = 0; j < b.batch; ++j) {
      mine.ids.push_back(b.ids[p * b.batch + j]);
      if (!b.targets.empty()) mine.targets.push_back(b.targets[p * b.batch + j]);
    }
  return mine;
}

void Gpt::set_training(bool on) {
  training_ = on;
  drop_embd_.set_enabled(on);
  for (auto& b : blocks_) b->set_training(on);
}

}  // namespace tp
