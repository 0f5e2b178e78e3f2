// timer.h — wall-clock seconds and the median of timings, for the programs that time steps.
#pragma once

#include <vector>

namespace tp {

/// Seconds on a steady clock (an arbitrary origin: only differences mean something).
double now();

/// The median of `v` (the upper one of an even count); 0 for none. Taken by value: it sorts.
double median(std::vector<double> v);

}  // namespace tp
