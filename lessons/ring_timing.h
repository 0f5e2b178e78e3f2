// ring_timing.h — how long each step of a ring attention forward computed and waited, read from
// the timeline (observe/timeline.h), and lesson 08d's α–β check of when a K, V transfer hides
// under a step's compute over a simulated link (observe/simulated_link.h).
//
// RingAttention::forward issues each step's send_recv_async (a Wait span "issue send_recv"),
// computes on the block it holds, then waits for the next block (a Wait span "wait send_recv").
// So for each step with a transfer (0 … cp − 2):
//   window   = wait's start − issue's start: the compute the transfer could hide under
//   exposed  = the wait itself: what the compute did not hide
//   ready    = wait's end − issue's start: when the next block was there (≥ α + bytes/β over a
//              simulated link, observe/simulated_link.h)
#pragma once

#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/device.h"
#include "core/tensor.h"
#include "parallel/ring_attention.h"

namespace tp::lesson {

/// Seconds per step with a transfer, over every timed forward, in order.
struct RingStepTimes {
  std::vector<double> window, exposed, ready;
};

/// Runs `ring` (over `comm`) forward 1 + `repeats` times on q, k, v (the first a warm-up, not
/// timed), each after a barrier, with a timeline on `dev` and `comm`; returns the steps' times and
/// leaves the last output in `out_host`.
RingStepTimes time_ring(Device& dev, Communicator& comm, RingAttention& ring, const Tensor& q,
                        const Tensor& k, const Tensor& v, const AttentionShape& sh, int repeats,
                        std::vector<float>& out_host);

// What one link's timed forwards gave on one rank of the timing pair (medians over the forwards;
// lo, hi: the measured hidden share's spread).
struct LinkTimes {
  std::string link;  // "fast (α 5 µs, β … GB/s)"
  double transfer = 0, ready = 0, earliest = 0, window = 0, predicted = 0, hidden = 0;
  double lo = 0, hi = 0;
};

/// Lesson 08d's step 5 on `pair` (two ranks): the zigzag ring forward (S = 1024, B = 1, 4 heads of
/// 64) timed on the real transport, then over two simulated links whose K, V transfer α + bytes/β
/// is ½ and 2× the slower rank's median compute (`compute`, seconds). Per link: medians over the
/// timed forwards, the prediction min(1, compute / transfer) forward by forward, and the measured
/// hidden share 1 − wait / transfer. same_numbers: every link's output equals the real one's.
std::vector<LinkTimes> time_links(Device& dev, Communicator& pair, int repeats, double& compute,
                                  bool& same_numbers);

}  // namespace tp::lesson
