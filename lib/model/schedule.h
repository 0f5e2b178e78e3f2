// schedule.h — the learning rate as a function of the absolute step number.
//
//   lr(step) = lr · w(step) · c(step)        step = 0, 1, …
//   w(step)  = (step + 1) / warmup           while step < warmup, else 1
//   c(step)  = 0.1 + 0.9 · ½ (1 + cos πx)    x = min(1, (step − warmup) / (decay − warmup)),
//                                            for step ≥ warmup when decay > warmup, else 1
//
// Defined by step numbers, never by the length of a run, so a resumed run continues the same
// schedule. warmup = 0: no warm-up; decay = 0 (or ≤ warmup): constant after the warm-up.
#pragma once

#include <cstdint>

namespace tp {

struct LrSchedule {
  float lr = 1e-3f;    // the peak learning rate
  int64_t warmup = 0;  // linear warm-up over steps [0, warmup)
  int64_t decay = 0;   // cosine decay to 10 % of lr, reached at step `decay`; 0 = none
};

/// The learning rate of absolute step `step` (0-based) under `s`.
float learning_rate(const LrSchedule& s, int64_t step);

}  // namespace tp
