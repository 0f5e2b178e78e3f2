// Exercise 13 — the expert-major reorder of expert parallelism's dispatch (lesson 12c).
//
// After the dispatch all-to-all, a rank holding El = E/ep experts has received R rows in the
// order the all-to-all delivers them, source-major: source rank 0's rows first, and inside each
// source's block its rows for local expert 0, then for local expert 1, …:
//   recv_counts[s·El + i] = the rows source s sent for local expert i   (ep·El entries)
//   source-major row r: blocks (s = 0, i = 0), (0, 1), …, (0, El − 1), (1, 0), … back to back
// Each expert runs one GEMM on contiguous rows, so the rows must be put expert-major: local expert
// 0's rows from source 0, then from source 1, …, then expert 1's rows from source 0, …, each
// block's rows in the order they arrived. Return `order` with order[j] = the source-major row that
// becomes expert-major row j (R entries, a permutation of 0 … R − 1). The combine uses its inverse.
//
// Example: ep = 2, El = 2, recv_counts = {1, 2, 3, 1} (source 0: 1 row for expert 0, 2 for
// expert 1; source 1: 3 and 1). Source-major rows: 0 | 1 2 | 3 4 5 | 6. Expert-major: expert 0's
// rows 0, 3, 4, 5, then expert 1's 1, 2, 6: order = {0, 3, 4, 5, 1, 2, 6}.
// Hint: first the offset where each (s, i) block starts (a running sum of recv_counts), then
// loop over i outside and s inside.
//
// solution: lib/parallel/expert_parallel.cpp
// grader: lesson_12c_expert_parallel 4
// if it fails: "expert-major order" differs: the outer loop is over local experts, the inner over sources (source-major is the order the rows arrive in, not the one the experts need).
// if it fails: the order is right but the layer's output differs: each block keeps its rows in arrival order; order[j] names where row j comes from (not where row r goes).
// if it fails: "every row once" fails: the offsets of block (s, i) are the sum of recv_counts before s·El + i.
#include "core/exercise.h"
#include "parallel/expert_parallel.h"

namespace tp {

std::vector<int64_t> expert_major_order(const std::vector<int64_t>& recv_counts, int ep,
                                        int local) {
  TP_EXERCISE_TODO("exercises/13_expert_major_order.cpp");
}

}  // namespace tp
