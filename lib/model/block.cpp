#include "model/block.h"

#include <string>

namespace tp {

namespace {
Tensor add(Device& device, const Tensor& a, const Tensor& b) {
  Tensor y = a.clone();
  device.axpy(1.0f, b, y);
  return y;
}
}  // namespace

TransformerBlock::TransformerBlock(Device& device, Communicator& comm, const GptConfig& cfg,
                                   int64_t layer)
    : device_(device),
      comm_(comm),
      sp_(cfg.sp),
      layer_(layer),
      ln_1_(device, "transformer.h." + std::to_string(layer) + ".ln_1", cfg.hidden, cfg.norm,
            cfg.eps, cfg.sp),
      ln_2_(device, "transformer.h." + std::to_string(layer) + ".ln_2", cfg.hidden, cfg.norm,
            cfg.eps, cfg.sp),
      attn_(device, comm, "transformer.h." + std::to_string(layer) + ".attn", cfg),
      mlp_(device, comm, "transformer.h." + std::to_string(layer) + ".mlp", cfg),
      drop_attn_(device, "h." + std::to_string(layer) + ".attn", cfg.dropout),
      drop_mlp_(device, "h." + std::to_string(layer) + ".mlp", cfg.dropout) {}

Tensor TransformerBlock::forward(const Tensor& x, int64_t seq, int64_t batch, uint64_t seed,
                                 int64_t step) {
  const int64_t row0 = sp_ ? comm_.rank() * x.rows() : 0;  // my first token row, for the masks
  Tensor a = drop_attn_.forward(attn_.forward(ln_1_.forward(x), seq, batch), seed, step, row0);
  Tensor x1 = add(device_, x, a);
  Tensor m = drop_mlp_.forward(mlp_.forward(ln_2_.forward(x1)), seed, step, row0);
  return add(device_, x1, m);
}

Tensor TransformerBlock::forward_cached(const Tensor& x, LayerKvCache& cache, int64_t past,
                                        int64_t batch) {
  Tensor x1 = add(device_, x, attn_.forward_cached(ln_1_.forward(x, false), cache, past, batch));
  return add(device_, x1, mlp_.forward_inference(ln_2_.forward(x1, false)));
}

void TransformerBlock::observe(MemoryLedger* ledger) {
  ln_1_.observe(ledger, layer_);
  ln_2_.observe(ledger, layer_);
  attn_.observe(ledger, layer_);
  mlp_.observe(ledger, layer_);
  drop_attn_.observe(ledger, layer_);
  drop_mlp_.observe(ledger, layer_);
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

}  // namespace tp
