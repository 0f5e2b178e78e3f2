// train_options.h — tp_train's flags: the option table (its names, defaults, ranges and help).
//
// Declared here rather than in tools/tp_train.cpp so that the run plan's tests
// (tests/train/test_run_plan.cpp) parse the same flags tp_train does.
#pragma once

#include <cstdint>

#include "core/options.h"

namespace tp {

// --trace records the last kTraceSteps steps, never the first (it pays for first-touch allocations
// and page faults) unless it is the only one: every kernel and collective of a step is a span, a
// few hundred per step of the default model, and a chart of more steps is no easier to read.
inline constexpr int64_t kTraceSteps = 3;

// The largest step count a flag takes (--warmup, --save-every, --eval-every, ...): 10^9 steps is
// 11 days at a millisecond a step; a larger number is a typo, not a plan.
inline constexpr int64_t kMaxSteps = 1000000000;

/// Declares every flag of tp_train on `o` (run_program adds --backend, --comm and the others of
/// the launcher).
void declare_train_options(Options& o);

}  // namespace tp
