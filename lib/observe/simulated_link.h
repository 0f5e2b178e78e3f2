// simulated_link.h — a Communicator that wraps another (the real one) and makes every collective
// take at least as long as it would over a chosen interconnect. A teaching tool, never the default:
// `--link ib` lets a laptop feel what an InfiniBand hop does to a tensor-parallel step.
//
// The model is the α–β ring model, α per message (observe/alpha_beta.h): a collective of N bytes
// over t ranks takes
//
//   steps · α + wire_bytes / β
//
// with steps the ring's messages per rank (all-reduce 2 (t − 1); all-gather, reduce-scatter and
// broadcast t − 1; send-recv, send and recv 1) and wire_bytes the bytes each rank sends
// (ring_wire_bytes in core/comm_ledger.h; a recv is charged its message's α + N / β, the time
// the data takes to arrive); at t = 1 it is 0. The real call runs first; then the thread sleeps until
// start + model time, so the call costs max(real, model) — over shared memory the model dominates
// for any link slower than memory. Each rank starts the clock at its own call: a rank that arrives
// early is not charged for waiting on a late one beyond what the real call makes it wait.
//
//   blocking calls   run the inner call, then sleep until start + model time
//   *_async calls    return a Work whose wait() waits for the inner Work, then sleeps until the
//                    deadline; test() is true only when both hold
//   split()          the sub-communicator is decorated with the same link
//   barrier()        passed through (it moves no data)
//
// Sleeping: std::this_thread::sleep_until wakes a thread late by the OS's timer slack and wake-up
// latency (about 15–70 µs on Linux), as much as a whole α. The link measures that lateness once
// (median of a few short sleeps), sleeps until deadline − lateness, and yields (never spins
// without yielding) for what is left. On a GPU communicator the host sleeps from the moment it
// enqueued the collective, so the kernels that follow are enqueued no earlier than the model says.
//
// Presets (`--link name`; β per direction, GB = 10⁹ bytes):
//
//   name     β            source of β                                    α      source of α
//   nvlink   450 GB/s     NVLink 4 on the H100 SXM: 900 GB/s both         3 µs   NCCL's tuning model
//                         directions together (NVIDIA H100 datasheet)            (src/graph/tuning.cc,
//                                                                                hwLat): 3.4 µs per
//                                                                                NVLink ring step,
//                                                                                Simple protocol
//   ib       50 GB/s      InfiniBand NDR, 400 Gb/s per port (NVIDIA        5 µs   order of magnitude:
//                         Quantum-2 switches, ConnectX-7 adapters)               NCCL charges 2.7 µs
//                                                                                (LL) to 14 µs
//                                                                                (Simple) per ring
//                                                                                step over a network
//   10gbe    1.25 GB/s    10 Gb/s Ethernet (IEEE 802.3ae)                 30 µs  order of magnitude:
//                                                                                one way over TCP
//                                                                                through the kernel,
//                                                                                20–50 µs
//
// and the custom form `α_us,β_GBps`: `--link 5,12.5` is α = 5 µs, β = 12.5 GB/s, with α in
// [0, 10000] µs and β in [0.1, 10⁶] GB/s (outside them a run never ends, or the delay vanishes).
// [A3]'s numbers come out of the nvlink and ib presets: its 64 MiB all-reduce at t = 8 takes
// 0.26 ms of β alone on NVLink and 2.3 ms on IB (plus 14 α).
//
// Everything that shows a simulated link says so: name() is
// "simulated ib (α 5 µs, β 50 GB/s) over mpi (MPICH 4.0.2)".
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/forwarding_communicator.h"
#include "observe/alpha_beta.h"

namespace tp {

/// A link of the α–β model with the name it goes by.
struct Link {
  std::string name;  ///< "nvlink", "ib", "10gbe", or "link" for the custom form
  AlphaBeta model;
  /// "ib (α 5 µs, β 50 GB/s)"
  std::string str() const;
};

/// Parses a --link value: "none" → no link; "nvlink", "ib", "10gbe" → the preset; "α_us,β_GBps"
/// (0 ≤ α ≤ 10000 µs, 0.1 ≤ β ≤ 10⁶ GB/s, e.g. "5,12.5") → a custom link; the bounds keep a run
/// finite (α = 1000 s would never end) and the delay real (β = 1e-300 overflows to none). Anything else is a bad-input tp::Error naming
/// the accepted forms.
std::optional<Link> parse_link(const std::string& text);

/// The Communicator `inner` as if its ranks were joined by `link` (see the top of this file).
class SimulatedLink : public ForwardingCommunicator {
 public:
  SimulatedLink(std::unique_ptr<Communicator> inner, Link link);
  /// "simulated ib (α 5 µs, β 50 GB/s) over mpi (MPICH 4.0.2)"
  std::string name() const override;
  const Link& link() const { return link_; }

 protected:
  /// The deadline from now, the inner call, then the sleep until the deadline (barrier: the call).
  void around(const Forwarded& call, const std::function<void()>& run) override;
  /// The deadline from now, and a Work that waits for the inner one, then for the deadline.
  std::unique_ptr<Work> around_async(const Forwarded& call,
                                     const std::function<std::unique_ptr<Work>()>& issue) override;
  /// A sub-group is joined by the same link.
  std::unique_ptr<Communicator> decorate(std::unique_ptr<Communicator> child) override;

 private:
  using Clock = std::chrono::steady_clock;
  SimulatedLink(std::unique_ptr<Communicator> inner, Link link, Clock::duration lateness);
  /// When `call` (of the ledger's N bytes), starting now, may complete.
  Clock::time_point deadline(const Forwarded& call) const;

  Link link_;
  Clock::duration lateness_;  ///< how late sleep_until wakes this thread, measured once
};

/// True when `comm` is a SimulatedLink (its timings are the model's, not the hardware's).
bool is_simulated(const Communicator& comm);

}  // namespace tp
