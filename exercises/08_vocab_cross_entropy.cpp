// Exercise 08 — the vocabulary-parallel cross-entropy's three numbers (lesson 09).
//
// The logits are split by vocabulary: rank r holds (N, V/t) columns and never the whole row. The
// loss log Σ_j exp(x_j) − x_target needs, per row, only three numbers from all V columns:
//   ① m = max_j x_j                 (for a stable exp)       all-reduce MAX
//   ② Σ_j exp(x_j − m)                                        all-reduce SUM
//   ③ x_target, which one rank owns (the others hold 0)     all-reduce SUM
// Then loss = log ② + m − x_target, on every rank. Three collectives of N floats each, instead of
// gathering N·V logits.
// Write the forward. Shapes: logits (N, V'/t), targets (N) → row_max, sum_exp, target_logit, loss (N).
// Hint: CrossEntropyStats st{Tensor(device, Shape{n}) ×4}; device.vocab_max(st.row_max, logits,
// shard); comm.all_reduce(st.row_max, ReduceOp::Max); device.vocab_sum_exp_target(st.sum_exp,
// st.target_logit, logits, st.row_max, targets, shard); the two sums; device.vocab_loss(st.loss,
// st.row_max, st.sum_exp, st.target_logit). At t = 1 skip the collectives. After each stage call
// watch (if set) — watch(CrossEntropyStage::LocalMax, st), Max, LocalSums, SumExp, TargetLogit, Loss
// — the lesson prints the numbers through it. Collectives inside
// CommLedger::Scope scope(comm.ledger(), "cross_entropy").
//
// solution: lib/parallel/vocab_parallel.cpp
// grader: lesson_09_vocab_parallel 3
// if it fails: the loss is off on every rank: ② needs the global max ① (all-reduce MAX first).
// if it fails: the loss is huge on the ranks that do not own the target: ③ is a SUM of x_target and zeros.
#include "core/exercise.h"
#include "parallel/vocab_parallel.h"

namespace tp {

CrossEntropyStats vocab_parallel_cross_entropy_forward(Device& device, Communicator& comm,
                                                       const Tensor& logits, const Tensor& targets,
                                                       const VocabShard& shard,
                                                       const CrossEntropyWatch& watch) {
  TP_EXERCISE_TODO("exercises/08_vocab_cross_entropy.cpp");
}

}  // namespace tp
