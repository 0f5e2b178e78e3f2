// communicator.h — the abstract Communicator (a group of ranks moving contiguous buffers) and Work.
//
// The public calls are not virtual: each checks its shapes, records itself in the CommLedger and
// then calls the backend's protected `do_*` method. A backend therefore cannot forget the ledger,
// and the shape rules live in one place:
//
//   all_reduce(x[, op])           x: (any), summed (or max'ed) in place over the group
//   all_gather(shard, full)       full = [shard_0; shard_1; ...; shard_{t-1}] along dim 0
//                                 (full.numel() == t · shard.numel())
//   reduce_scatter(full, shard)   shard = rank's block of Σ_r full_r along dim 0
//   broadcast(x, root)            every rank gets root's x
//   send_recv(send, to, recv, from)  one ring step: send to `to` while receiving from `from`
//   send(x, to) / recv(x, from)   point to point (pipeline stages): x of any shape goes to peer
//                                 `to`; the receiver's x has the same element count
//   all_to_all_v(send, send_rows, recv, recv_rows)
//                                 send and recv are 2-D (rows, cols), one dtype, the same cols;
//                                 send's rows go in rank order, send_rows[p] consecutive rows to
//                                 rank p; recv gets recv_rows[p] rows from rank p, in rank order
//                                 (expert parallelism's dispatch and combine). Counts differ by
//                                 rank by design; exchange_counts() below tells each rank what
//                                 it will receive.
//
// all_reduce / all_gather / reduce_scatter / send_recv / send / recv / all_to_all_v also come as
// *_async: they return a Work at once, and the output may be read only after Work::wait()
// (compute may run in between).
//
// Point to point. Sends and receives between two ranks match in the order they were issued. As
// with NCCL, a send may wait until its receive is posted (and an asynchronous one may start
// only then), so each rank's sequence must be free of deadlock when every call waits for its
// match: in a pairwise exchange one side sends first and the other receives first (or use
// send_recv, which posts both at once). The peer is another rank of the group, never this rank.
//
// Optional operations. An operation not every backend has (today: send / recv, all_to_all_v) has
// a default do_* that fails with one line naming the backend and the operation ("mpi (MPICH 4.0.2)
// communicator: send not supported"), as c10d's Backend does, so adding an operation touches
// this interface, the backends that implement it and core/forwarding_communicator (which carries
// it through every decorator), not every subclass.
//
// Dtypes. Every operation takes f32 or bf16 tensors (core/dtype.h); the two buffers of one call
// have the same dtype. The ledger counts the tensor's element size (2 B for bf16), so the α–β
// prediction follows the bytes. A bf16 sum (all_reduce, reduce_scatter) adds in f32 and rounds to
// bf16 once per combine of two partial sums, as NCCL does for ncclBfloat16; each backend's header
// says how it gets there.
//
// With a flight recorder installed (core/call_recorder.h), the front also hands it every call
// (the outermost of a thread: a decorator's inner calls are not recorded twice), numbered per
// communicator, so that a dump says which call each rank reached.
//
// With a Timeline set (set_timeline), the front end also records every call as spans, handed to a
// SpanSink (core/span_sink.h): see observe/timeline.h for which, and for the exposed communication
// they add up to.
//
// Layout transforms (gathering along the last dim, splitting heads) are not here: they live in
// parallel/mappings and use Device::copy_columns around these contiguous moves.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/comm_ledger.h"
#include "core/tensor.h"

namespace tp {

class Device;
class SpanSink;

/// The reduction of all_reduce: sum (the default everywhere) or max (the vocabulary-parallel
/// cross-entropy's row maximum).
enum class ReduceOp { Sum, Max };

/// Handle of an asynchronous collective. The output buffer must not be read before wait().
class Work {
 public:
  virtual ~Work() = default;
  /// Blocks until the operation has completed (its output buffer is ready).
  virtual void wait() = 0;
  /// True when the operation has completed; never blocks.
  virtual bool test() = 0;
};

/// A Work that is already complete (for synchronous fallbacks and size-1 groups).
class CompletedWork : public Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

/// A group of ranks and the collectives among them (sum reduction, f32 or bf16 tensors).
class Communicator {
 public:
  Communicator(int rank, int size) : rank_(rank), size_(size) {}
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// "mpi (MPICH 4.0.2)", "serial", "nccl".
  virtual std::string name() const = 0;

  void all_reduce(Tensor& x, ReduceOp op = ReduceOp::Sum);
  void all_gather(const Tensor& shard, Tensor& full);
  void reduce_scatter(const Tensor& full, Tensor& shard);
  void broadcast(Tensor& x, int root);
  void send_recv(const Tensor& send, int to, Tensor& recv, int from);
  /// Sends x (any shape) to rank `to` of the group (optional: see the top of this file).
  void send(const Tensor& x, int to);
  /// Receives into x from rank `from`; x holds as many elements as the matching send.
  void recv(Tensor& x, int from);
  /// All-to-all with a row count per peer (see the top of this file; optional). Checked first:
  /// both buffers 2-D with the same cols and dtype, one count per rank of the group, none
  /// negative, Σ send_rows = send.rows() and Σ recv_rows = recv.rows(). The ledger counts
  /// send.numel() elements and, as wire bytes, only the rows that leave this rank (the block to
  /// itself is a local copy).
  void all_to_all_v(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                    const std::vector<int64_t>& recv_rows);
  /// all_to_all_v in flight: `send` must not be written and `recv` not read before wait(). The
  /// count vectors are copied where a backend needs them later.
  std::unique_ptr<Work> all_to_all_v_async(const Tensor& send,
                                           const std::vector<int64_t>& send_rows, Tensor& recv,
                                           const std::vector<int64_t>& recv_rows);
  /// Waits until every rank of the group has called barrier(). Not in the ledger (moves no data);
  /// the progress monitor (core/progress.h) sees it.
  void barrier();

  std::unique_ptr<Work> all_reduce_async(Tensor& x);
  std::unique_ptr<Work> all_gather_async(const Tensor& shard, Tensor& full);
  std::unique_ptr<Work> reduce_scatter_async(const Tensor& full, Tensor& shard);
  /// One ring step in flight: `send` must not be written and `recv` not read before wait().
  std::unique_ptr<Work> send_recv_async(const Tensor& send, int to, Tensor& recv, int from);
  /// A send in flight: x must not be written before wait().
  std::unique_ptr<Work> send_async(const Tensor& x, int to);
  /// A receive in flight: x must not be read before wait().
  std::unique_ptr<Work> recv_async(Tensor& x, int from);

  /// Sub-groups: ranks with the same `color` form one group, ordered by `key` (then by rank).
  /// The new communicator has its own ledger.
  std::unique_ptr<Communicator> split(int color, int key) { return do_split(color, key); }

  CommLedger& ledger() { return ledger_; }
  const CommLedger& ledger() const { return ledger_; }

  /// What this group is to the program ("TP group", "DP group", "PP group"; "" by default): the
  /// collective checker's one line names a sub-group by it ("the TP group of world ranks 1, 3").
  /// process_grid.cpp sets it on the sub-groups it splits.
  void set_role(std::string role) { role_ = std::move(role); }
  const std::string& role() const { return role_; }
  /// The world ranks of this group's members, in group order ("" = unknown; the launcher sets the
  /// world's, process_grid.cpp its sub-groups'): the flight recorder names groups by them.
  void set_world_ranks(std::vector<int> ranks) { world_ranks_ = std::move(ranks); }
  const std::vector<int>& world_ranks() const { return world_ranks_; }

  /// Records every collective from now on as a span of `timeline` (a SpanSink: observe/timeline.h's
  /// Timeline): a blocking
  /// call as itself; an *_async call as its issue (a Wait span), and through the Work it returns,
  /// the wait (a Wait span) and the collective from issue to completion. nullptr (the default)
  /// records nothing. A communicator from split() starts without one. The timeline must outlive
  /// the Works issued while it was set.
  void set_timeline(SpanSink* timeline) { timeline_ = timeline; }
  SpanSink* timeline() const { return timeline_; }

 protected:
  virtual void do_all_reduce(Tensor& x, ReduceOp op) = 0;
  virtual void do_all_gather(const Tensor& shard, Tensor& full) = 0;
  virtual void do_reduce_scatter(const Tensor& full, Tensor& shard) = 0;
  virtual void do_broadcast(Tensor& x, int root) = 0;
  virtual void do_send_recv(const Tensor& send, int to, Tensor& recv, int from) = 0;
  virtual void do_barrier() = 0;
  /// Asynchronous variants. The defaults run the blocking call and return a completed Work, for
  /// backends without a nonblocking path.
  virtual std::unique_ptr<Work> do_all_reduce_async(Tensor& x);
  virtual std::unique_ptr<Work> do_all_gather_async(const Tensor& shard, Tensor& full);
  virtual std::unique_ptr<Work> do_reduce_scatter_async(const Tensor& full, Tensor& shard);
  virtual std::unique_ptr<Work> do_send_recv_async(const Tensor& send, int to, Tensor& recv,
                                                   int from);
  virtual std::unique_ptr<Communicator> do_split(int color, int key) = 0;
  /// Optional operations: the defaults throw unsupported(op).
  virtual void do_send(const Tensor& x, int to);
  virtual void do_recv(Tensor& x, int from);
  virtual std::unique_ptr<Work> do_send_async(const Tensor& x, int to);
  virtual std::unique_ptr<Work> do_recv_async(Tensor& x, int from);
  /// Shapes and counts are checked; a backend moves the blocks.
  virtual void do_all_to_all_v(const Tensor& send, const std::vector<int64_t>& send_rows,
                               Tensor& recv, const std::vector<int64_t>& recv_rows);
  /// The default runs do_all_to_all_v and returns a completed Work.
  virtual std::unique_ptr<Work> do_all_to_all_v_async(const Tensor& send,
                                                      const std::vector<int64_t>& send_rows,
                                                      Tensor& recv,
                                                      const std::vector<int64_t>& recv_rows);
  /// Throws "<name()> communicator: <op> not supported".
  [[noreturn]] void unsupported(const char* op) const;

 private:
  void check_gather_shapes(const char* op, const Tensor& shard, const Tensor& full) const;
  void check_peer(const char* op, int peer) const;
  /// The two buffers of one call (shard and full, send and recv) have the same dtype.
  void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) const;
  /// A point-to-point peer: another rank of the group, and a defined tensor.
  void check_p2p(const char* op, const Tensor& x, int peer) const;
  /// all_to_all_v's buffers and counts (see all_to_all_v).
  void check_all_to_all_v(const Tensor& send, const std::vector<int64_t>& send_rows,
                          const Tensor& recv, const std::vector<int64_t>& recv_rows) const;
  /// Its ledger record (wire bytes: the rows sent to other ranks); returns the index.
  size_t record_all_to_all_v(const Tensor& send, const std::vector<int64_t>& send_rows, bool async);
  /// Hands ledger record `index` to the flight recorder (core/call_recorder.h) when this is the
  /// thread's outermost call; returns its token (0: not recorded).
  uint64_t flight(size_t index, int peer, Dtype dtype);
  /// The same for a call the ledger does not hold (barrier).
  uint64_t flight(const char* op, int64_t count, bool async, const std::string& label, int peer,
                  Dtype dtype);

  int rank_;
  int size_;
  CommLedger ledger_;
  std::string role_;
  std::vector<int> world_ranks_;
  SpanSink* timeline_ = nullptr;
  int flight_group_ = -1;        // the flight recorder's id of this group (-1: none yet)
  int64_t flight_sequence_ = 0;  // calls recorded on this communicator
};

/// The communicator of a single rank (t = 1): every collective is a copy or nothing.
class SerialCommunicator : public Communicator {
 public:
  SerialCommunicator() : Communicator(0, 1) {}
  std::string name() const override { return "serial"; }

 protected:
  void do_all_reduce(Tensor&, ReduceOp) override {}
  void do_all_gather(const Tensor& shard, Tensor& full) override;
  void do_reduce_scatter(const Tensor& full, Tensor& shard) override;
  void do_broadcast(Tensor&, int) override {}
  void do_send_recv(const Tensor& send, int to, Tensor& recv, int from) override;
  void do_barrier() override {}
  std::unique_ptr<Communicator> do_split(int color, int key) override;
  void do_all_to_all_v(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                       const std::vector<int64_t>& recv_rows) override;
};

/// Expert parallelism's first step: rank r says how many rows it will send to each rank
/// (send_counts[p], one per rank of `comm`), and learns how many each will send it: the result's
/// [p] is send_counts[r] of rank p. With w counts per peer (send_counts of t·w: [p·w + i] for
/// peer p, e.g. one per expert that p holds), the result's [p·w + i] is send_counts[r·w + i] of
/// rank p. A free function over all_to_all_v (one row per peer), so every backend and decorator
/// that carries all_to_all_v carries it, with its ledger row and span, and no backend needs more
/// code. Each count travels exactly as four 16-bit pieces in f32 (f32 holds integers exactly
/// only up to 2^24). Negative counts are refused.
std::vector<int64_t> exchange_counts(Communicator& comm, Device& device,
                                     const std::vector<int64_t>& send_counts);

}  // namespace tp
