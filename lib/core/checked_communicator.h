// checked_communicator.h — a Communicator that wraps another and, before each collective, makes the
// ranks of the group agree that they are all calling the same one. A debugging tool, off by
// default: `--check-collectives` or TP_CHECK_COLLECTIVES=1 (launcher/launcher.h) puts it under
// every program's world communicator, and split() carries it to every sub-group.
//
// Why. The first bug in a hand-written tensor-parallel layer is usually a hang: one rank skips a
// collective (a forgotten g all-reduce), calls it with another size, or calls another one, and the
// others wait forever (or, worse, a backend matches the wrong calls and computes garbage). PyTorch's
// TORCH_DISTRIBUTED_DEBUG=DETAIL checks collective fingerprints across ranks for this; so does this.
//
// How. Each checked call first all-gathers, over the inner communicator, one fixed-size record per
// rank (the fingerprint):
//
//   sequence number   the call's index on this communicator (1, 2, ...), the same on every rank
//   operation         all_reduce, all_reduce_max, all_gather, reduce_scatter, broadcast, barrier,
//                     all_to_all_v
//   element count     the ledger's N (all_gather, reduce_scatter: the full buffer); for
//                     all_to_all_v the row width (cols): its counts differ by rank by design, so
//                     they cannot be required equal. Instead each rank adds the rows it sends and
//                     receives in all, and the group's two sums must agree (a rank expecting
//                     rows nobody sends is caught; two swapped counts are not)
//   dtype             f32 | bf16
//   root              broadcast's root (else -1)
//   ledger label      the label of the call (CommLedger::Scope), cut to 63 bytes
//   world rank        to name the group by its world ranks
//
// encoded one byte per float (0..255, exact in f32, so no bit pattern can be altered on the way),
// so the check itself is an ordinary f32 all_gather that every backend has: MPI, NCCL (on a GPU
// or the CUDA emulator), host-staged. Then every rank compares the records; when they agree the real
// call runs on the inner communicator. A skipped call shows up as a different operation (or label)
// at the same sequence number, since the skipping rank's next collective meets the others' check.
//
// On a mismatch every rank of the group has the same records, so each builds the same line:
//
//   collective #57 on the world (2 ranks): rank 1 called all_gather(4096 floats, 'attn qkv'),
//   rank 0 called all_reduce(4096 floats, 'mlp fc2')
//
// (ranks are the group's; groups of agreeing ranks are listed smallest first) and throws it as a
// bad-input tp::Error, exit 2. When the group is the whole world every rank throws it: rank 0 prints
// the line, every rank exits 2. On a sub-group the ranks outside it know nothing and may wait for
// the group's ranks in another collective, so the group's rank 0 throws it as this rank's error
// (Error::ThisRankOnly: the launcher prints it once and aborts the job with exit 2) and the others
// of the group wait kOthersWait seconds before doing the same, which the abort overtakes.
//
// What it does not check: point-to-point calls (send, recv, send_recv and their *_async: only two
// ranks take part, and a send meets a recv, a different op by design) are passed through; split()
// is passed through (the new group is checked from its first collective). A collective that one
// rank never reaches (it hangs elsewhere, or has ended) leaves the others waiting in the check's
// all-gather, inside the checked call: the stall detector (launcher/watchdog.h) names that rank and
// the collective the others wait in. Asynchronous calls are checked when issued (the check is
// blocking), then issued on the inner communicator; their Work is the inner one's. So under the
// check an *_async call waits at its issue until every rank of the group has issued it, inside the
// call, where the stall detector sees it: a program whose ranks issue an asynchronous collective
// and then wait for a peer that computes alone for longer than --stall-timeout (lesson 13's idle
// ranks while t = 1 trains, 60 s here) is named as stalled; give it a larger --stall-timeout (or
// 0). (A check that completed inside the Work instead would let the real calls be issued before
// a mismatch is known, which no backend survives.)
//
// Cost: one extra all-gather of size · 128 floats (and on a GPU a host round trip) per collective;
// its ledger records go to the inner communicator's ledger, so this one's ledger and the α–β
// numbers are those of the program's own calls.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/forwarding_communicator.h"

namespace tp {

class Device;

/// `inner` with every collective's fingerprint agreed first (see the top of this file).
class CheckedCommunicator : public ForwardingCommunicator {
 public:
  /// Seconds a rank other than the group's rank 0 waits before throwing a sub-group's mismatch.
  static constexpr double kOthersWait = 5.0;

  /// Over the world communicator: world ranks are its ranks. Check tensors live on `device`.
  CheckedCommunicator(std::unique_ptr<Communicator> inner, Device& device);
  /// "checked mpi (MPICH 4.0.2)"
  std::string name() const override;
  /// The collectives checked so far.
  int64_t checked() const { return sequence_; }

 protected:
  /// A collective: agree, then run it; point to point: run it.
  void around(const Forwarded& call, const std::function<void()>& run) override;
  /// The same, at the issue; the Work is the inner one's.
  std::unique_ptr<Work> around_async(const Forwarded& call,
                                     const std::function<std::unique_ptr<Work>()>& issue) override;
  /// A sub-group is checked too, its mismatches named by world ranks.
  std::unique_ptr<Communicator> decorate(std::unique_ptr<Communicator> child) override;

 private:
  CheckedCommunicator(std::unique_ptr<Communicator> inner, Device& device, int world_rank,
                      int world_size);
  /// The ranks agree on `call` (op, N, dtype, root; the label is the last ledger record's, except
  /// for a barrier), or every rank of the group throws the mismatch line.
  void agree(const Forwarded& call);

  Device& device_;
  int world_rank_;
  int world_size_;
  int64_t sequence_ = 0;
};

/// True when TP_CHECK_COLLECTIVES asks for checking: "1" (or "true", "yes", "on"); unset, "",
/// "0", "false", "no", "off": no. Anything else is a bad-input tp::Error naming the variable.
bool check_collectives_from_environment();

}  // namespace tp
