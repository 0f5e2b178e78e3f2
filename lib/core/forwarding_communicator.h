// forwarding_communicator.h — the base of every Communicator that wraps another (a decorator): it
// holds the inner communicator and forwards each operation to it, so that a decorator overrides
// only what it changes. Three derive from it: CheckedCommunicator (core/checked_communicator.h:
// the ranks agree on each collective first), SimulatedLink (observe/simulated_link.h: each call takes
// as long as a chosen interconnect would) and the lessons' SleepingWaits (lessons/sleeping_waits.h:
// blocking calls wait by sleeping).
//
// A call goes through two fronts: this communicator's public call checks it and records it in this
// ledger (and timeline), then the forwarded do_* calls the inner communicator's public call, which
// records it in the inner ledger. Each ledger therefore holds each call once, and a decorator's own
// traffic (the checker's fingerprint all-gather) goes on the inner ledger only.
//
// A decorator changes a call in one of two ways:
//   - around each forwarded call: `around` (blocking) and `around_async` (*_async) see a
//     Forwarded (the ledger's operation, the buffer it counts, the root) and run the inner call
//     when they choose; the defaults just run it. The checker and the simulated link use these.
//   - by overriding a do_* itself (SleepingWaits turns blocking calls into tested async ones);
//     ForwardingCommunicator::do_<op> is then the forwarded call.
// A new operation is forwarded here, once, and every decorator sees it through `around`.
//
//   split()   the inner communicator splits, and `decorate` wraps each child the same way, so a
//             sub-group is checked, simulated or sleeping as its parent is
//   name()    the inner's, unless a decorator says more ("checked mpi (MPICH 4.0.2)")
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/communicator.h"

namespace tp {

/// One call a ForwardingCommunicator forwards, as a decorator's hook sees it.
struct Forwarded {
  /// The ledger's operation: "all_reduce", "all_reduce_max", "all_gather", "reduce_scatter",
  /// "broadcast", "send_recv", "send", "recv", "barrier", "all_to_all_v".
  const char* op;
  /// The buffer the ledger counts: x; all_gather / reduce_scatter: the full buffer; send_recv:
  /// the send buffer; all_to_all_v: the send buffer. nullptr for barrier (it moves no data).
  const Tensor* buffer;
  /// broadcast's root, else -1.
  int root = -1;
  /// send_recv, send, recv (and their *_async): only two ranks of the group take part.
  bool point_to_point = false;
  /// all_to_all_v: the rows this rank sends in all and receives in all, else -1.
  int64_t rows_sent = -1;
  int64_t rows_received = -1;
};

/// A Communicator over `inner` that forwards every operation to it (see the top of this file).
class ForwardingCommunicator : public Communicator {
 public:
  explicit ForwardingCommunicator(std::unique_ptr<Communicator> inner);
  /// The inner communicator's name.
  std::string name() const override { return inner_->name(); }
  /// The communicator underneath (it keeps its own ledger).
  Communicator& inner() { return *inner_; }
  const Communicator& inner() const { return *inner_; }

 protected:
  /// Runs a forwarded blocking call: `run` is the inner call. The default runs it.
  virtual void around(const Forwarded& call, const std::function<void()>& run);
  /// Issues a forwarded *_async call: `issue` issues the inner call and returns its Work. The
  /// default returns that Work.
  virtual std::unique_ptr<Work> around_async(const Forwarded& call,
                                             const std::function<std::unique_ptr<Work>()>& issue);
  /// Wraps a child of split() (the inner communicator's child) as this decorator wraps its inner.
  virtual std::unique_ptr<Communicator> decorate(std::unique_ptr<Communicator> child) = 0;

  void do_all_reduce(Tensor& x, ReduceOp op) override;
  void do_all_gather(const Tensor& shard, Tensor& full) override;
  void do_reduce_scatter(const Tensor& full, Tensor& shard) override;
  void do_broadcast(Tensor& x, int root) override;
  void do_send_recv(const Tensor& send, int to, Tensor& recv, int from) override;
  void do_barrier() override;
  std::unique_ptr<Work> do_all_reduce_async(Tensor& x) override;
  std::unique_ptr<Work> do_all_gather_async(const Tensor& shard, Tensor& full) override;
  std::unique_ptr<Work> do_reduce_scatter_async(const Tensor& full, Tensor& shard) override;
  std::unique_ptr<Work> do_send_recv_async(const Tensor& send, int to, Tensor& recv,
                                           int from) override;
  std::unique_ptr<Communicator> do_split(int color, int key) override;
  void do_send(const Tensor& x, int to) override;
  void do_recv(Tensor& x, int from) override;
  std::unique_ptr<Work> do_send_async(const Tensor& x, int to) override;
  std::unique_ptr<Work> do_recv_async(Tensor& x, int from) override;
  void do_all_to_all_v(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                       const std::vector<int64_t>& recv_rows) override;
  std::unique_ptr<Work> do_all_to_all_v_async(const Tensor& send,
                                              const std::vector<int64_t>& send_rows, Tensor& recv,
                                              const std::vector<int64_t>& recv_rows) override;

 private:
  std::unique_ptr<Communicator> inner_;
};

}  // namespace tp
