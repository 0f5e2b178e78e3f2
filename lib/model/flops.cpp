#include "model/flops.h"

#include "model/recompute.h"

namespace tp {

TokenFlops token_flops(const GptConfig& cfg, int64_t seq) {
  const int64_t h = cfg.hidden, f = cfg.inner(), kv_dim = cfg.kv() * cfg.head_dim();
  const bool swiglu = cfg.activation() == Activation::SwiGlu;
  const int64_t norm = cfg.norm_kind() == NormKind::LayerNorm ? 2 * h : h;   // weight (+ bias)
  const int64_t attn = h * (h + 2 * kv_dim) + (h + 2 * kv_dim) + h * h + h;  // c_attn, c_proj
  const int64_t mlp = (swiglu ? 2 : 1) * (h * f + f) + f * h + h;  // c_fc (c_gate), c_proj
  TokenFlops out;
  out.n_blocks = cfg.layers * (2 * norm + attn + mlp);
  out.n = out.n_blocks + norm + cfg.vocab * h;  // + ln_f + the head (wte when tied)
  const double attention = 4.0 * static_cast<double>(cfg.layers) * static_cast<double>(h) *
                           static_cast<double>(seq);  // QKᵀ and PV forward, per token
  out.model = 6.0 * static_cast<double>(out.n) + 3.0 * attention;
  // What the hardware runs besides: the attention backward recomputes its scores QKᵀ from q, k
  // and the kept log-sum-exp (half of `attention`), in every mode; full recomputation reruns each
  // block's forward as well. Selective has nothing left to rerun (attention keeps no S × S).
  const Recompute rc = cfg.recompute;
  out.hardware =
      out.model + 0.5 * attention +
      (rc == Recompute::Full ? 2.0 * static_cast<double>(out.n_blocks) + attention : 0.0);
  return out;
}

double flops_per_rank(double flops_per_token, double tokens, double seconds, int ranks) {
  return seconds > 0 && ranks > 0 ? flops_per_token * tokens / seconds / ranks : 0.0;
}

}  // namespace tp
