// Exercise 07 — sequence parallelism's region ops: all-gather and reduce-scatter (lesson 08;
// graded by lesson 08c, whose SP model runs all four ops forward and backward).
//
// Under SP the activations between the TP regions are split along the sequence (dim 0): rank r
// keeps rows [r·s/t, (r+1)·s/t). Entering a TP region all-gathers them (the GEMM needs every
// token); leaving one, the partial sums are reduce-scattered (summed, and each rank keeps its own
// rows) instead of all-reduced. Each op's backward is the other collective:
//   gather_from_sp_region         forward: all-gather      backward: reduce-scatter
//   reduce_scatter_to_sp_region   forward: reduce-scatter  backward: all-gather
// Write the four. Shapes: (s/t, …) ⇄ (s, …); s must divide by t.
// Hint: Tensor out(x.device(), x.shape().with(0, x.dim(0) * t), x.dtype()); comm.all_gather(x, out)
// (or .with(0, x.dim(0) / t) and comm.reduce_scatter(x, out)). At t = 1 return x. Label each for
// the ledger: CommLedger::Scope scope(comm.ledger(), "gather_from_sp_region.forward"), and
// "gather_from_sp_region.backward", "reduce_scatter_to_sp_region.forward" / ".backward".
// check_divisible("the sequence dimension", x.dim(0), t) refuses a bad s.
//
// solution: lib/parallel/mappings.cpp
// grader: lesson_08c_sp_gradient_audit 2
// if it fails: a gradient is off by a factor of t: an all-gather's backward is a reduce-scatter.
// if it fails: a collective count differs: each op communicates in one collective, labelled as above.
#include "core/exercise.h"
#include "parallel/mappings.h"

namespace tp {

// x (s/t, …) → (s, …)
Tensor gather_from_sp_region_forward(Communicator& comm, const Tensor& x) {
  TP_EXERCISE_TODO("exercises/07_sp_regions.cpp");
}

// dy (s, …) → (s/t, …)
Tensor gather_from_sp_region_backward(Communicator& comm, const Tensor& dy) {
  TP_EXERCISE_TODO("exercises/07_sp_regions.cpp");
}

// x (s, …), a partial sum → (s/t, …), summed
Tensor reduce_scatter_to_sp_region_forward(Communicator& comm, const Tensor& x) {
  TP_EXERCISE_TODO("exercises/07_sp_regions.cpp");
}

// dy (s/t, …) → (s, …)
Tensor reduce_scatter_to_sp_region_backward(Communicator& comm, const Tensor& dy) {
  TP_EXERCISE_TODO("exercises/07_sp_regions.cpp");
}

}  // namespace tp
