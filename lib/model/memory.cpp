#include "model/memory.h"

#include "model/recompute.h"

namespace tp {

int64_t block_activation_bytes(const GptConfig& c, int64_t seq, int64_t batch, int t) {
  const int64_t N = seq * batch, n = c.sp ? N / t : N, h = c.hidden, hd = c.head_dim();
  const Recompute recompute = c.recompute;
  if (recompute == Recompute::Full) return 4 * n * h;  // the block's input only
  const int64_t probs = recompute == Recompute::Selective ? 0 : batch * (c.heads / t) * seq * seq;
  const int64_t stats = c.norm_kind() == NormKind::LayerNorm ? 2 * n : n;
  const int64_t mask = c.dropout > 0.0f ? n * h : 0;
  const int64_t mlp_saved = (c.activation() == Activation::SwiGlu ? 3 : 2) * N * c.inner() / t;
  const int64_t floats = (n * h + stats)                        // ln_1 input and statistics
                         + n * h                                // attention input
                         + N * (c.heads + 2 * c.kv()) * hd / t  // q, k, v
                         + probs                                // probabilities
                         + N * c.heads * hd / t                 // attention output
                         + mask                                 // dropout after attention
                         + (n * h + stats)                      // ln_2 input and statistics
                         + n * h                                // MLP input
                         + mlp_saved                            // up (+ gate), activation
                         + mask;                                // dropout after the MLP
  return 4 * floats;
}

}  // namespace tp
