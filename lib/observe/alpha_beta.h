// alpha_beta.h — the α–β model of a link: measured on a live communicator, used to predict what
// each collective of a training step should cost, and set against what the CommLedger measured.
//
// One message of n bytes costs α + n / β: α the per-message latency (seconds), β the bandwidth of
// one direction (bytes per second). A ring collective over t ranks is a chain of steps, one message
// per rank and step, all ranks sending at once (N = the ledger's logical bytes, comm_ledger.h):
//
//   op                          steps        bytes each rank sends (CommRecord::wire_bytes)
//   all-reduce (sum or max)     2 (t − 1)    2 (t − 1) / t · N   (reduce-scatter, then all-gather)
//   all-gather, reduce-scatter  t − 1        (t − 1) / t · N
//   broadcast                   t − 1        N                   (pipelined chain)
//   send-recv                   1            N
//   send / recv (point to point) 1           N / 0               (the sender counts the message)
//   all-to-all-v                t − 1        the rows sent to other ranks (the record's
//                                            wire_bytes; (t − 1) / t · N for an even split)
//   any op at t = 1             0            0
//
//   seconds = steps · α + wire_bytes / β
//
// e.g. all-reduce: 2 (t − 1) α + 2 (t − 1) / t · N / β. [A3]'s 64 MiB all-reduce at t = 8 sends
// 2 · 7/8 · 64 MiB = 112 MiB per rank: 0.26 ms at β = 450 GB/s (NVLink), 2.3 ms at 50 GB/s (IB);
// its 14 steps add 14 α on top.
//
// measure_alpha_beta() fits α and β by a ping-pong and one large transfer; predict_seconds()
// applies the table; prediction_report() prints predicted against measured per op and per label.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/comm_ledger.h"
#include "core/communicator.h"
#include "core/device.h"

namespace tp {

/// A link in the α–β model. β = 0 means "not measured" (a group of one rank).
struct AlphaBeta {
  double alpha = 0.0;  ///< seconds per message
  double beta = 0.0;   ///< bytes per second, one direction
  /// "α 5 µs, β 50 GB/s" (α in ms from 1 ms on; GB = 10⁹ bytes, as link datasheets count).
  std::string str() const;
};

/// The messages each rank sends one after another in the ring algorithm of `op` (table above).
int ring_steps(const std::string& op, int t);

/// The α–β time of `op` on a buffer of `bytes` (the ledger's N) in a group of `t`:
/// ring_steps · α + ring_wire_bytes / β. Zero at t = 1.
double predict_seconds(const std::string& op, int t, int64_t bytes, const AlphaBeta& ab);

/// Measures α and β on `comm` (collective; every rank gets the same answer). Ranks pair up
/// (0 ↔ 1, 2 ↔ 3, ...; an odd last rank sits out) and exchange with send_recv:
///   α: a ping-pong of 4-byte messages. A send_recv moves one message each way at once, so one
///      exchange is half a round trip: α = the time of one exchange.
///   β: `large_bytes` each way, a few times: β = large_bytes / (time − α).
/// Each time is the quickest of its tries: noise on a shared machine only ever adds time.
/// The slowest pair sets the pace (as in a ring): α and the transfer time are the maxima over the
/// ranks (all_reduce with ReduceOp::Max). At t = 1 there is nothing to measure: {0, 0}.
/// The calls are recorded in comm's ledger under the label "alpha_beta".
AlphaBeta measure_alpha_beta(Communicator& comm, Device& device,
                             int64_t large_bytes = int64_t{32} << 20);

/// Records [from, to) of `ledger` (e.g. one training step) set against the α–β model: one row per
/// op and message size, then one per label and op, then the total of the blocking calls; each with the calls, the bytes
/// per call, the predicted and the measured seconds (summed) and predicted / measured. An async
/// call's measured seconds are only its issue time, so its ratio is left out. Every line starts with
/// `prefix`; lines are joined by newlines (no newline at the end).
std::string prediction_report(const CommLedger& ledger, size_t from, size_t to, const AlphaBeta& ab,
                              const std::string& prefix);

}  // namespace tp
