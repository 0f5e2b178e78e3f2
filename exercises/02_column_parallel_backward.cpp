// Exercise 02 — the column-parallel linear's backward (lesson 02).
//
// Y = X A, A = [A_0, …, A_{t−1}] split along its columns: rank r holds A_r (in, out/t) and computes
// Y_r = X A_r. Backward, given dY_r (its own columns of dY):
//   dA_r += Xᵀ dY_r      complete on this rank: A_r's gradient needs only A_r's columns of dY
//   db_r += Σ_rows dY_r  (when the layer adds its bias)
//   dX    = dY_r A_rᵀ    only a partial sum: every rank used all of X. The caller
//                        (backward_shared) sums the partials with f's backward (an all-reduce).
// Write the two member functions. Shapes: dy_in (N, out/t), input X (N, in), dx (N, in).
// Hint: const Tensor dy = local_dy(dy_in) (this rank's columns, checked); compute_weight() is A_r;
// device_.gemm(trans_a, trans_b, alpha, a, b, beta, c) computes c = alpha·op(a)·op(b) + beta·c;
// device_.add_bias_backward(dbias, dy) adds the column sums; adds_bias() says whether to.
//
// solution: lib/parallel/linear.cpp
// grader: test_mpi 2 --gtest_filter=*ColumnParallel.*:ColumnThenRow.*:ParallelLinear.*
// if it fails: dA differs by the previous step's value: dA accumulates (beta = 1), it is not overwritten.
// if it fails: dX differs on every rank by a factor of t: is it summed here and again by f's backward?
// if it fails: a shape check fails: Xᵀ dY_r is (in, N)·(N, out/t); dY_r A_rᵀ is (N, in).
#include "core/exercise.h"
#include "parallel/linear.h"

namespace tp {

// dX's term from this rank: dx (N, in) = dY_r (N, out/t) · A_rᵀ (out/t, in), overwritten.
void ColumnParallelLinear::input_grad_into(const Tensor& dy_in, Tensor& dx) {
  TP_EXERCISE_TODO("exercises/02_column_parallel_backward.cpp");
}

// dA_r (in, out/t) += Xᵀ (in, N) · dY_r (N, out/t); and db_r (out/t) += Σ_rows dY_r when
// adds_bias() && with_bias.
void ColumnParallelLinear::weight_grad(const Tensor& dy_in, const Tensor& input, bool with_bias) {
  TP_EXERCISE_TODO("exercises/02_column_parallel_backward.cpp");
}

}  // namespace tp
