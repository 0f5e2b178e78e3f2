#include "model/gpt.h"

#include <cmath>

#include "core/error.h"

namespace tp {

namespace {
Tensor add(Device& device, const Tensor& a, const Tensor& b) {
  Tensor y = a.clone();
  device.axpy(1.0f, b, y);
  return y;
}

std::vector<float> as_float(const std::vector<int32_t>& v) { return std::vector<float>(v.begin(), v.end()); }
}  // namespace

// ---- TransformerBlock ---------------------------------------------------------------------------

TransformerBlock::TransformerBlock(Device& device, Communicator& comm, const GptConfig& cfg, int64_t layer)
    : device_(device),
      ln_1_(device, "transformer.h." + std::to_string(layer) + ".ln_1", cfg.hidden, cfg.norm, cfg.eps),
      ln_2_(device, "transformer.h." + std::to_string(layer) + ".ln_2", cfg.hidden, cfg.norm, cfg.eps),
      attn_(device, comm, "transformer.h." + std::to_string(layer) + ".attn", cfg),
      mlp_(device, comm, "transformer.h." + std::to_string(layer) + ".mlp", cfg),
      drop_attn_(device, "h." + std::to_string(layer) + ".attn", cfg.dropout),
      drop_mlp_(device, "h." + std::to_string(layer) + ".mlp", cfg.dropout) {}

Tensor TransformerBlock::forward(const Tensor& x, int64_t seq, int64_t batch, uint64_t seed, int64_t step) {
  Tensor a = drop_attn_.forward(attn_.forward(ln_1_.forward(x), seq, batch), seed, step);
  Tensor x1 = add(device_, x, a);
  Tensor m = drop_mlp_.forward(mlp_.forward(ln_2_.forward(x1)), seed, step);
  return add(device_, x1, m);
}

Tensor TransformerBlock::backward(const Tensor& dx2) {
  Tensor dx1 = add(device_, dx2, ln_2_.backward(mlp_.backward(drop_mlp_.backward(dx2))));
  return add(device_, dx1, ln_1_.backward(attn_.backward(drop_attn_.backward(dx1))));
}

void TransformerBlock::collect_params(ParamList& out, float std, float proj_std) const {
  ln_1_.collect_params(out);
  attn_.collect_params(out, std, proj_std);
  ln_2_.collect_params(out);
  mlp_.collect_params(out, std, proj_std);
}

// ---- Gpt ----------------------------------------------------------------------------------------

Gpt::Gpt(Device& device, Communicator& comm, const GptConfig& cfg)
    : device_(device), comm_(comm), cfg_(cfg), drop_embd_(device, "embd", cfg.dropout) {
  cfg.validate(comm.size());
  const int64_t V = cfg.vocab, h = cfg.hidden;
  wte_ = Tensor::zeros(device, Shape{V, h});
  dwte_ = Tensor::zeros(device, Shape{V, h});
  wpe_ = Tensor::zeros(device, Shape{cfg.seq, h});
  dwpe_ = Tensor::zeros(device, Shape{cfg.seq, h});
  for (int64_t l = 0; l < cfg.layers; ++l) blocks_.push_back(std::make_unique<TransformerBlock>(device, comm, cfg, l));
  ln_f_ = std::make_unique<Norm>(device, "transformer.ln_f", h, cfg.norm, cfg.eps);

  auto replicated = [&](const std::string& name, Tensor& value, Tensor& grad) {
    Param p;
    p.name = name;
    p.shape = value.shape();
    p.value = value;
    p.grad = grad;
    p.init_std = cfg.init_std;
    p.decay = true;
    params_.push_back(p);
  };
  replicated("transformer.wte.weight", wte_, dwte_);
  replicated("transformer.wpe.weight", wpe_, dwpe_);
  // GPT-2's scaled init: projections that write into the residual stream get std / sqrt(2L).
  const float proj_std = cfg.init_std / std::sqrt(2.0f * static_cast<float>(cfg.layers));
  for (const auto& b : blocks_) b->collect_params(params_, cfg.init_std, proj_std);
  ln_f_->collect_params(params_);
  if (!cfg.tied) {
    lm_head_ = Tensor::zeros(device, Shape{V, h});
    dlm_head_ = Tensor::zeros(device, Shape{V, h});
    replicated("lm_head.weight", lm_head_, dlm_head_);
  }
}

void Gpt::init(uint64_t seed) { init_params(device_, params_, seed); }

void Gpt::zero_grad() { zero_grads(device_, params_); }

float Gpt::forward(const Batch& b, uint64_t seed, int64_t step) {
  TP_CHECK_INPUT(b.seq >= 1 && b.seq <= cfg_.seq, "a batch of sequence length ", b.seq,
                 " does not fit the position table of ", cfg_.seq, " (--seq)");
  const int64_t n = b.seq * b.batch;
  TP_CHECK(static_cast<int64_t>(b.ids.size()) == n && static_cast<int64_t>(b.targets.size()) == n,
           "batch holds ", b.ids.size(), " ids for ", b.seq, "x", b.batch);
  for (int32_t id : b.ids) TP_CHECK_INPUT(id >= 0 && id < cfg_.vocab, "token id ", id, " outside the vocabulary of ", cfg_.vocab);
  batch_ = b.batch;
  ids_ = Tensor::from_host(device_, Shape{n}, as_float(b.ids));
  Tensor x(device_, Shape{n, cfg_.hidden});
  device_.embedding_forward(x, ids_, wte_, wpe_, b.batch);
  x = drop_embd_.forward(x, seed, step);
  for (auto& block : blocks_) x = block->forward(x, b.seq, b.batch, seed, step);
  xf_ = ln_f_->forward(x);
  const Tensor& head = cfg_.tied ? wte_ : lm_head_;
  dlogits_ = Tensor(device_, Shape{n, cfg_.vocab});
  device_.gemm(false, true, 1.0f, xf_, head, 0.0f, dlogits_);  // logits = xf headᵀ: (N, V)
  Tensor loss(device_, Shape{n});
  Tensor targets = Tensor::from_host(device_, Shape{n}, as_float(b.targets));
  // In place: logits become dloss/dlogits = (softmax − onehot) / N.
  device_.softmax_cross_entropy(loss, dlogits_, dlogits_, targets, 1.0f / static_cast<float>(n));
  double sum = 0;
  for (float l : loss.to_host()) sum += l;
  return static_cast<float>(sum / static_cast<double>(n));
}

void Gpt::backward() {
  TP_CHECK(dlogits_.defined(), "Gpt::backward called before forward");
  const Tensor& head = cfg_.tied ? wte_ : lm_head_;
  Tensor& dhead = cfg_.tied ? dwte_ : dlm_head_;
  Tensor dxf(device_, xf_.shape());
  device_.gemm(false, false, 1.0f, dlogits_, head, 0.0f, dxf);   // dxf = dlogits head: (N, h)
  device_.gemm(true, false, 1.0f, dlogits_, xf_, 1.0f, dhead);   // dhead += dlogitsᵀ xf: (V, h)
  Tensor dx = ln_f_->backward(dxf);
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) dx = (*it)->backward(dx);
  dx = drop_embd_.backward(dx);
  device_.embedding_backward(dwte_, dwpe_, dx, ids_, batch_);
}

}  // namespace tp
