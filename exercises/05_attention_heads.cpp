// Exercise 05 — attention split by heads, with GQA's KV heads (lesson 05).
//
// Heads are independent, so attention splits without communication inside: rank r owns nh/t
// query heads and nkv/t key/value heads (GQA: nkv < nh, each KV head shared by nh/nkv query
// heads; t must divide both). q_, k_, v_ are column-parallel (their output columns are this rank's
// heads, hd each), proj_ is row-parallel (g's all-reduce sums the heads' contributions).
// Write forward. Shapes: x_in (N, h), N = seq·batch → q (N, nh/t·hd), k and v (N, nkv/t·hd) →
// ctx (N, nh/t·hd), lse (batch, nh/t, seq) → (N, h).
// Hint: shape_ = AttentionShape{seq, batch, heads_ / t, kv_heads_ / t, head_dim_, 1/sqrt(hd)};
// qkv = ColumnParallelLinear::forward_shared({&q_, &k_, &v_}, x_in); keep q, k, v for backward
// with saved_.keep(q_out_, qkv[0]) (k_out_, v_out_); device_.attention_forward(ctx, lse, q, k, v,
// shape_) (lse: an f32 Tensor of Shape{batch, heads_ / t, seq}); y = proj_.forward(ctx); keep ctx
// in ctx_ and lse in lse_ (backward recomputes the probabilities from them); return y.
//
// solution: lib/model/attention.cpp
// grader: lesson_05_parallel_attention 2
// if it fails: a shape check fails: this rank has heads_/t query heads and kv_heads_/t KV heads.
// if it fails: the output differs: the scale is 1/sqrt(head_dim_), the head size, not of h.
// if it fails: dX differs but Y agrees: backward needs q, k, v, ctx and lse kept (saved_.keep).
#include <cmath>

#include "core/exercise.h"
#include "model/attention.h"

namespace tp {

// x_in (seq·batch, h) → (seq·batch, h)
Tensor ParallelAttention::forward(const Tensor& x_in, int64_t seq, int64_t batch) {
  TP_EXERCISE_TODO("exercises/05_attention_heads.cpp");
}

}  // namespace tp
