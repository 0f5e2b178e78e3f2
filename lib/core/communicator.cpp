#include "core/communicator.h"

#include <chrono>

#include "core/error.h"

namespace tp {

namespace {
// Times one call and stores the wall time in its ledger record.
class CallTimer {
 public:
  CallTimer(CommLedger& ledger, size_t index)
      : ledger_(ledger), index_(index), start_(std::chrono::steady_clock::now()) {}
  ~CallTimer() {
    ledger_.set_seconds(
        index_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }

 private:
  CommLedger& ledger_;
  size_t index_;
  std::chrono::steady_clock::time_point start_;
};
}  // namespace

void Communicator::check_gather_shapes(const char* op, const Tensor& shard,
                                       const Tensor& full) const {
  TP_CHECK(shard.defined() && full.defined(), op, ": undefined tensor");
  TP_CHECK(full.numel() == shard.numel() * size_, op, ": the full buffer ", full.shape().str(),
           " must hold t=", size_, " shards of ", shard.shape().str());
}

void Communicator::check_peer(const char* op, int peer) const {
  TP_CHECK(peer >= 0 && peer < size_, op, ": peer rank ", peer, " outside the group of ", size_);
}

void Communicator::all_reduce(Tensor& x, ReduceOp op) {
  TP_CHECK(x.defined(), "all_reduce: undefined tensor");
  CallTimer timer(ledger_, ledger_.record(op == ReduceOp::Max ? "all_reduce_max" : "all_reduce",
                                          size_, x.numel()));
  do_all_reduce(x, op);
}

void Communicator::all_gather(const Tensor& shard, Tensor& full) {
  check_gather_shapes("all_gather", shard, full);
  CallTimer timer(ledger_, ledger_.record("all_gather", size_, full.numel()));
  do_all_gather(shard, full);
}

void Communicator::reduce_scatter(const Tensor& full, Tensor& shard) {
  check_gather_shapes("reduce_scatter", shard, full);
  CallTimer timer(ledger_, ledger_.record("reduce_scatter", size_, full.numel()));
  do_reduce_scatter(full, shard);
}

void Communicator::broadcast(Tensor& x, int root) {
  check_peer("broadcast", root);
  CallTimer timer(ledger_, ledger_.record("broadcast", size_, x.numel()));
  do_broadcast(x, root);
}

void Communicator::send_recv(const Tensor& send, int to, Tensor& recv, int from) {
  check_peer("send_recv", to);
  check_peer("send_recv", from);
  TP_CHECK(send.defined() && recv.defined(), "send_recv: undefined tensor");
  CallTimer timer(ledger_, ledger_.record("send_recv", size_, send.numel()));
  do_send_recv(send, to, recv, from);
}

std::unique_ptr<Work> Communicator::all_reduce_async(Tensor& x) {
  TP_CHECK(x.defined(), "all_reduce_async: undefined tensor");
  CallTimer timer(ledger_, ledger_.record("all_reduce", size_, x.numel(), true));
  return do_all_reduce_async(x);
}

std::unique_ptr<Work> Communicator::all_gather_async(const Tensor& shard, Tensor& full) {
  check_gather_shapes("all_gather_async", shard, full);
  CallTimer timer(ledger_, ledger_.record("all_gather", size_, full.numel(), true));
  return do_all_gather_async(shard, full);
}

std::unique_ptr<Work> Communicator::reduce_scatter_async(const Tensor& full, Tensor& shard) {
  check_gather_shapes("reduce_scatter_async", shard, full);
  CallTimer timer(ledger_, ledger_.record("reduce_scatter", size_, full.numel(), true));
  return do_reduce_scatter_async(full, shard);
}

std::unique_ptr<Work> Communicator::send_recv_async(const Tensor& send, int to, Tensor& recv,
                                                    int from) {
  check_peer("send_recv_async", to);
  check_peer("send_recv_async", from);
  TP_CHECK(send.defined() && recv.defined(), "send_recv_async: undefined tensor");
  CallTimer timer(ledger_, ledger_.record("send_recv", size_, send.numel(), true));
  return do_send_recv_async(send, to, recv, from);
}

std::unique_ptr<Work> Communicator::do_all_reduce_async(Tensor& x) {
  do_all_reduce(x, ReduceOp::Sum);
  return std::make_unique<CompletedWork>();
}

std::unique_ptr<Work> Communicator::do_all_gather_async(const Tensor& shard, Tensor& full) {
  do_all_gather(shard, full);
  return std::make_unique<CompletedWork>();
}

std::unique_ptr<Work> Communicator::do_reduce_scatter_async(const Tensor& full, Tensor& shard) {
  do_reduce_scatter(full, shard);
  return std::make_unique<CompletedWork>();
}

std::unique_ptr<Work> Communicator::do_send_recv_async(const Tensor& send, int to, Tensor& recv,
                                                       int from) {
  do_send_recv(send, to, recv, from);
  return std::make_unique<CompletedWork>();
}

// ---- SerialCommunicator --------------------------------------------------------------------------

void SerialCommunicator::do_all_gather(const Tensor& shard, Tensor& full) { full.copy_from(shard); }

void SerialCommunicator::do_reduce_scatter(const Tensor& full, Tensor& shard) {
  shard.copy_from(full);
}

void SerialCommunicator::do_send_recv(const Tensor& send, int, Tensor& recv, int) {
  recv.copy_from(send);
}

std::unique_ptr<Communicator> SerialCommunicator::do_split(int, int) {
  return std::make_unique<SerialCommunicator>();
}

}  // namespace tp
