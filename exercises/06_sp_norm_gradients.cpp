// Exercise 06 — the norms' weight gradients under sequence parallelism (lessons 08, 08c).
//
// Under SP each rank runs LayerNorm (and the row-parallel biases, the position table) on its own
// s/t tokens only. Their weights are replicated, so each rank's gradient is a *partial* sum over
// its tokens: without one more sum over the ranks, every replica steps with a different gradient
// and they drift apart (lesson 08c's step 1 audits exactly this). The parameters that need it say so
// with Param::sequence_parallel_grad.
// Write finish_gradients: one all-reduce for all of them (pack, sum, unpack). Shapes: each such
// grad is (h) or (S, h); packed: (Σ numel).
// Hint: nothing to do unless cfg_.sp and comm_.size() > 1. Loop over params_; Tensor packed(device_,
// Shape{total}); packed.view(at, at + n).copy_from(p.grad); comm_.all_reduce(packed) inside
// CommLedger::Scope scope(comm_.ledger(), "sequence_parallel_grads"); then copy back
// (Tensor g = p.grad; g.copy_from(packed.view(at, at + n))).
//
// solution: lib/model/gpt.cpp
// grader: lesson_08c_sp_gradient_audit 2
// if it fails: the norms' dγ, dβ are about 1/t of the one-device values: the all-reduce is missing.
// if it fails: the split weights' gradients doubled: only params with sequence_parallel_grad are summed.
#include "core/exercise.h"
#include "model/gpt.h"

namespace tp {

// Sums over the ranks the gradient of every parameter with sequence_parallel_grad.
void Gpt::finish_gradients() { TP_EXERCISE_TODO("exercises/06_sp_norm_gradients.cpp"); }

}  // namespace tp
