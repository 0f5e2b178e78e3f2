// sleeping_waits.h — waiting for collectives without spinning, for lessons that run more ranks
// than the machine has cores (lesson 13 trains at t = 1, 2, 4 on sub-communicators while the
// other ranks wait).
#pragma once

#include <memory>

#include "core/device.h"
#include "core/forwarding_communicator.h"
#include "core/tensor.h"

namespace tp::lesson {

// A barrier that does not spin: one all-reduce of a single number, tested every millisecond with
// a sleep in between. A rank waiting in a blocking MPI call polls its core at 100 %, and on a
// 2-core laptop two waiting ranks would take the cores from the ones training; here the waiting
// costs only the communicator's progress thread, which tests the request every ~50 µs and sleeps.
void quiet_barrier(Device& dev, Communicator& sync);

// The group's communicator, waiting without spinning: each blocking collective (and each send and
// receive: lesson 15's pipeline stages wait at their boundaries) is issued in its
// asynchronous form and tested with short sleeps in between (10 µs, doubling up to 200 µs). A rank
// in a blocking MPI call polls its core at 100 %; with more ranks than cores (4 on this 2-core
// laptop) the pollers take the cores from the ranks that still compute, and every collective
// costs the OS's scheduling slices. Sleeping gives the core back. The numbers are the same (the
// same collectives, recorded in this communicator's ledger); only the waiting changes.
class SleepingWaits : public ForwardingCommunicator {
 public:
  explicit SleepingWaits(std::unique_ptr<Communicator> inner)
      : ForwardingCommunicator(std::move(inner)) {}

 protected:
  // The blocking calls that have an asynchronous form wait by napping; the rest (broadcast,
  // all-reduce max, barrier, the *_async calls) are forwarded as they are.
  void do_all_reduce(Tensor& x, ReduceOp op) override {
    if (op == ReduceOp::Max || size() == 1) return ForwardingCommunicator::do_all_reduce(x, op);
    nap(inner().all_reduce_async(x));
  }
  void do_all_gather(const Tensor& shard, Tensor& full) override {
    nap(inner().all_gather_async(shard, full));
  }
  void do_reduce_scatter(const Tensor& full, Tensor& shard) override {
    nap(inner().reduce_scatter_async(full, shard));
  }
  void do_send_recv(const Tensor& send, int to, Tensor& recv, int from) override {
    nap(inner().send_recv_async(send, to, recv, from));
  }
  void do_send(const Tensor& x, int to) override { nap(inner().send_async(x, to)); }
  void do_recv(Tensor& x, int from) override { nap(inner().recv_async(x, from)); }
  std::unique_ptr<Communicator> decorate(std::unique_ptr<Communicator> child) override {
    return std::make_unique<SleepingWaits>(std::move(child));
  }

 private:
  /// Waits for `work`, testing it with sleeps of 10 µs doubling up to 200 µs in between.
  static void nap(std::unique_ptr<Work> work);
};

}  // namespace tp::lesson
