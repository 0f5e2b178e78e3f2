// graceful_stop.h — SIGINT/SIGTERM as a stop every rank agrees on at a step boundary
// (launcher.h: enable_graceful_stop, agreed_stop_signal; launcher/watchdog.h says how). Internal
// to launcher/.
#pragma once

#include <csignal>
#include <cstdint>

#include "node_page.h"

namespace tp::watch {

// A stop signal while this rank waits for a peer that makes no progress: after this long, the wait
// is given up (rank 0; the others a second later, in case rank 0 is the one that is stuck).
constexpr int64_t kStopGrace = 2 * kSecond;
// A stop signal not agreed on this long after it came, with nobody moving: the watchdog ends the
// job itself.
constexpr int64_t kStopBackstop = 5 * kSecond;

/// SIGINT/SIGTERM seen by this rank (graceful stop enabled), or 0.
extern volatile sig_atomic_t g_stop_signal;

/// Called while this rank waits in a collective it entered at `waiting_since` (CLOCK_MONOTONIC):
/// when a stop signal came and the wait has lasted past the grace, the step boundary where every
/// rank would agree on it is never reached: one line, and the job ends with 128 + the signal.
void stop_if_hopeless(int64_t waiting_since);

}  // namespace tp::watch
