// Exercise 09 — the 1F1B order of one pipeline stage (lesson 15).
//
// A pipeline of N stages runs m micro-batches. AFAB (all forward, all backward) keeps all m
// micro-batches' activations alive. 1F1B keeps at most N − s on stage s: a warm-up of
// min(N − s − 1, m) forwards fills the pipe below it; then each forward is followed by the
// backward of the oldest micro-batch in flight; a cool-down runs the backwards left.
//   N = 4, m = 8, stage 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7
//   N = 4, m = 8, stage 3: F0 B0 F1 B1 F2 B2 … F7 B7
// Write schedule_ops for both schedules. Result: 2·m ops, each {forward, micro}.
// Hint: ops.push_back({true, k}) is Fk, {false, k} is Bk; schedule == Schedule::Afab for AFAB.
//
// solution: lib/parallel/pipeline_parallel.cpp
// grader: test_mpi 1 --gtest_filter=PipelineSchedule.*
// if it fails: in flight exceeds min(N − s, m): the warm-up is N − s − 1 forwards, not N − s.
// if it fails: a backward runs before its forward: the last stage (s = N − 1) has no warm-up at all.
#include "core/exercise.h"
#include "parallel/pipeline_parallel.h"

namespace tp {

// The order of this stage's forwards and backwards: `stages` = N, `stage` = s, `m` micro-batches.
std::vector<PipelineOp> schedule_ops(Schedule schedule, int stages, int stage, int m) {
  TP_EXERCISE_TODO("exercises/09_one_f_one_b.cpp");
}

}  // namespace tp
