#include "model/memory.h"

#include <algorithm>

#include "model/recompute.h"

namespace tp {

namespace {
// The values a block keeps, counted in elements: those stored in the compute dtype (activations)
// and those that are f32 in either precision (the norms' statistics, the dropout masks).
struct KeptValues {
  int64_t activations = 0, f32 = 0;
};

KeptValues kept_values(const GptConfig& c, int64_t seq, int64_t batch, int t) {
  const int64_t N = seq * batch, n = c.sp ? N / t : N, h = c.hidden, hd = c.head_dim();
  const Recompute recompute = c.recompute;
  if (recompute == Recompute::Full) return {n * h, 0};  // the block's input only
  const int64_t lse = batch * (c.heads / t) * seq;      // attention's log-sum-exp per row, f32
  const int64_t stats = c.norm_kind() == NormKind::LayerNorm ? 2 * n : n;
  const int64_t mask = c.dropout > 0.0f ? n * h : 0;
  const int64_t mlp_saved = (c.activation() == Activation::SwiGlu ? 3 : 2) * N * c.inner() / t;
  KeptValues k;
  k.activations = n * h                                  // ln_1 input
                  + n * h                                // attention input
                  + N * (c.heads + 2 * c.kv()) * hd / t  // q, k, v
                  + N * c.heads * hd / t                 // attention output
                  + n * h                                // ln_2 input
                  + n * h                                // MLP input
                  + mlp_saved;                           // up (+ gate), activation
  k.f32 = 2 * stats                                      // ln_1's and ln_2's statistics
          + lse        // attention's log-sum-exp (what backward recomputes P from)
          + 2 * mask;  // the dropout masks after attention and the MLP
  return k;
}
}  // namespace

int64_t block_activation_bytes(const GptConfig& c, int64_t seq, int64_t batch, int t) {
  return block_activation_bytes(c, seq, batch, t, Dtype::f32) +
         block_activation_bytes(c, seq, batch, t, Dtype::bf16);
}

int64_t block_activation_bytes(const GptConfig& c, int64_t seq, int64_t batch, int t, Dtype dtype) {
  const KeptValues k = kept_values(c, seq, batch, t);
  const Dtype compute = c.compute_dtype();
  return (dtype == compute ? dtype_size(compute) * k.activations : 0) +
         (dtype == Dtype::f32 ? 4 * k.f32 : 0);
}

int64_t head_activation_bytes(const GptConfig& c, int64_t seq, int64_t batch, int t) {
  const int64_t N = seq * batch, n = c.sp ? N / t : N, h = c.hidden;
  const int64_t stats = c.norm_kind() == NormKind::LayerNorm ? 2 * n : n;
  const int64_t f32 = N                                       // token ids
                      + (c.dropout > 0.0f ? n * h : 0)        // the embedding's dropout mask
                      + stats;                                // ln_f's statistics
  const int64_t activations = n * h                           // ln_f input
                              + N * h                         // ln_f output for the head
                              + N * (c.padded_vocab(t) / t);  // logits
  return 4 * f32 + dtype_size(c.compute_dtype()) * activations;
}

int64_t recompute_rerun_bytes(const GptConfig& c, int64_t seq, int64_t batch, int t) {
  const Recompute mode = c.recompute;
  if (mode == Recompute::None) return 0;
  GptConfig none = c;
  none.recompute = Recompute::None;
  return block_activation_bytes(none, seq, batch, t) - block_activation_bytes(c, seq, batch, t);
}

const char* MemoryPeak::largest() const {
  const int64_t most = std::max({weights, grads, optimizer, activations});
  return most == activations ? "activations"
         : most == optimizer ? "optimizer state"
         : most == weights   ? "weights"
                             : "gradients";
}

MemoryPeak memory_peak(const GptConfig& c, int64_t seq, int64_t micro_batch, int t, int64_t params,
                       int64_t zero_dp) {
  MemoryPeak m;
  // The fp32 master, and under bf16 its 2-byte compute copy: 4 + 2 B per parameter.
  m.weights = 4 * params + (c.precision == Precision::Bf16 ? 2 * params : 0);
  m.grads = 4 * params;  // fp32 in either precision
  const int64_t dp = std::max<int64_t>(1, zero_dp);
  m.optimizer = 8 * ((params + dp - 1) / dp);
  m.activations = c.layers * block_activation_bytes(c, seq, micro_batch, t) +
                  head_activation_bytes(c, seq, micro_batch, t) +
                  recompute_rerun_bytes(c, seq, micro_batch, t);
  return m;
}

}  // namespace tp
