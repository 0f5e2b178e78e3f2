// lse_merge.h — the merge of two partial softmax attentions by their log-sum-exps, on the host:
// the reference lesson 08d checks Device::attention_merge against at every ring step, and
// exercise 12 (exercises/12_lse_merge.cpp).
//
// Two attentions of the same query over disjoint key sets A and B, each normalised over its own
// keys (x_t = scale · q·k_t):
//   out_A = Σ_{t∈A} e^(x_t − lse_A) v_t,   lse_A = log Σ_{t∈A} e^(x_t)      (and B's alike)
// The attention over A ∪ B, without the scores of either:
//   L   = log(e^lse_A + e^lse_B) = m + log(e^(lse_A − m) + e^(lse_B − m)),  m = max(lse_A, lse_B)
//   out = e^(lse_A − L) · out_A + e^(lse_B − L) · out_B
// The two weights are the shares of the union's softmax denominator that each set holds; they add
// to 1. Subtracting m first keeps e^(·) ≤ 1 (no overflow for large scores).
//
// Shape legend (attention_forward's layouts, core/device.h): S = shape.seq queries per sequence,
// B = shape.batch, nh = shape.heads, hd = shape.head_dim.
#pragma once

#include <vector>

#include "core/device.h"

namespace tp {

/// For every row (position s, sequence b, head j): out ← the merged output, lse ← L (above).
/// out, out_part: (S·B, nh·hd) row-major, element (s·B + b, j·hd + e); lse, lse_part: (B, nh, S),
/// element (b·nh + j)·S + s. A side with lse = −inf saw no key and leaves the other as it is (both:
/// the row stays). Sizes are checked.
void lse_merge_rows(std::vector<float>& out, std::vector<float>& lse,
                    const std::vector<float>& out_part, const std::vector<float>& lse_part,
                    const AttentionShape& shape);

}  // namespace tp
