// Exercise 01 — f and g, the two region ops of tensor parallelism (lessons 02 and 03).
//
// f (copy_to_tp_region) enters a tensor-parallel region, g (reduce_from_tp_region) leaves it. Each
// communicates in one pass only, and the two are each other's mirror image:
//   f: forward identity,   backward all-reduce (every rank holds a partial dX: sum them)
//   g: forward all-reduce (every rank holds a partial Y: sum them),   backward identity
// Write the four functions. Shapes: x, dy (..., h) → (..., h), the same on every rank.
// Hint: Tensor y = x shares x's memory; comm.all_reduce(y) sums it in place over the ranks. At
// t = 1 (comm.size() == 1) there is nothing to sum. Label each collective for the ledger the
// lessons print: CommLedger::Scope scope(comm.ledger(), "copy_to_tp_region.backward");
//
// solution: lib/parallel/mappings.cpp
// grader: lesson_04_parallel_mlp 2
// if it fails: a forward output differs by a factor of t: is f's forward summing (it is the identity)?
// if it fails: dX is 1/t of the one-device value, or differs per rank: f's backward must all-reduce.
// if it fails: Y is a partial sum (too small, different on each rank): g's forward must all-reduce.
#include "core/exercise.h"
#include "parallel/mappings.h"

namespace tp {

// f forward: x (..., h) → (..., h)
Tensor copy_to_tp_region_forward(Communicator& comm, const Tensor& x) {
  TP_EXERCISE_TODO("exercises/01_f_and_g.cpp");
}

// f backward: dy (..., h), this rank's partial → (..., h), the sum over the ranks
Tensor copy_to_tp_region_backward(Communicator& comm, const Tensor& dy) {
  TP_EXERCISE_TODO("exercises/01_f_and_g.cpp");
}

// g forward: x (..., h), this rank's partial sum → (..., h), the sum over the ranks
Tensor reduce_from_tp_region_forward(Communicator& comm, const Tensor& x) {
  TP_EXERCISE_TODO("exercises/01_f_and_g.cpp");
}

// g backward: dy (..., h) → (..., h)
Tensor reduce_from_tp_region_backward(Communicator& comm, const Tensor& dy) {
  TP_EXERCISE_TODO("exercises/01_f_and_g.cpp");
}

}  // namespace tp
