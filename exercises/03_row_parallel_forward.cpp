// Exercise 03 — the row-parallel linear's forward, with the bias added once (lesson 03).
//
// Y = X A + b, A = [A_0; …; A_{t−1}] split along its rows and X = [X_0, …, X_{t−1}] along its
// columns: rank r holds X_r and A_r, and X_r A_r is a full-shape *partial* sum. g's forward (an
// all-reduce) sums the t partials; under sequence parallelism a reduce-scatter sums them and keeps
// this rank's block of the sequence. The bias is replicated: added on every rank before the sum
// it would be counted t times, so it goes in once, after.
// Shapes: x_r (N, in/t), a_r (in/t, out), bias (out) or null → (N, out); SP: (N/t, out).
// Hint: Tensor partial(device, Shape{…}, x_r.dtype()); device.gemm(false, false, 1, x_r, a_r, 0,
// partial); then reduce_from_tp_region_forward or reduce_scatter_to_sp_region_forward
// (parallel/mappings.h); device.add_bias(y, *bias).
//
// solution: lib/parallel/linear.cpp
// grader: lesson_03_row_parallel 2
// if it fails: Y differs by (t − 1)·b: the bias was added before the sum, so t times.
// if it fails: Y differs on every rank and is smaller: the partial sums were never summed (g).
#include "core/exercise.h"
#include "parallel/linear_passes.h"
#include "parallel/mappings.h"

namespace tp {

Tensor row_parallel_forward(Device& device, Communicator& comm, const Tensor& x_r,
                            const Tensor& a_r, const Tensor* bias, bool sequence_parallel) {
  TP_EXERCISE_TODO("exercises/03_row_parallel_forward.cpp");
}

}  // namespace tp
