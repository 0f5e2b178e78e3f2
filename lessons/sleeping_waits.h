// sleeping_waits.h — waiting for collectives without spinning, for lessons that run more ranks
// than the machine has cores (lesson 13 trains at t = 1, 2, 4 on sub-communicators while the
// other ranks wait).
#pragma once

#include <memory>
#include <string>

#include "core/communicator.h"
#include "core/device.h"
#include "core/tensor.h"

namespace tp::lesson {

// A barrier that does not spin: one all-reduce of a single number, tested every millisecond with
// a sleep in between. A rank waiting in a blocking MPI call polls its core at 100 %, and on a
// 2-core laptop two waiting ranks would take the cores from the ones training; here the waiting
// costs only the communicator's progress thread, which tests the request every ~50 µs and sleeps.
void quiet_barrier(Device& dev, Communicator& sync);

// The group's communicator, waiting without spinning: each blocking collective is issued in its
// asynchronous form and tested with short sleeps in between (10 µs, doubling up to 200 µs). A rank
// in a blocking MPI call polls its core at 100 %; with more ranks than cores (4 on this 2-core
// laptop) the pollers take the cores from the ranks that still compute, and every collective
// costs the OS's scheduling slices. Sleeping gives the core back. The numbers are the same (the
// same collectives, recorded in this communicator's ledger); only the waiting changes.
class SleepingWaits : public Communicator {
 public:
  explicit SleepingWaits(std::unique_ptr<Communicator> inner)
      : Communicator(inner->rank(), inner->size()), inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }

 protected:
  void do_all_reduce(Tensor& x, ReduceOp op) override {
    if (op == ReduceOp::Max || size() == 1) return inner_->all_reduce(x, op);  // no async max
    nap(inner_->all_reduce_async(x));
  }
  void do_all_gather(const Tensor& shard, Tensor& full) override {
    nap(inner_->all_gather_async(shard, full));
  }
  void do_reduce_scatter(const Tensor& full, Tensor& shard) override {
    nap(inner_->reduce_scatter_async(full, shard));
  }
  void do_broadcast(Tensor& x, int root) override { inner_->broadcast(x, root); }
  void do_send_recv(const Tensor& send, int to, Tensor& recv, int from) override {
    nap(inner_->send_recv_async(send, to, recv, from));
  }
  void do_barrier() override { inner_->barrier(); }
  std::unique_ptr<Work> do_all_reduce_async(Tensor& x) override {
    return inner_->all_reduce_async(x);
  }
  std::unique_ptr<Work> do_all_gather_async(const Tensor& shard, Tensor& full) override {
    return inner_->all_gather_async(shard, full);
  }
  std::unique_ptr<Work> do_reduce_scatter_async(const Tensor& full, Tensor& shard) override {
    return inner_->reduce_scatter_async(full, shard);
  }
  std::unique_ptr<Work> do_send_recv_async(const Tensor& send, int to, Tensor& recv,
                                           int from) override {
    return inner_->send_recv_async(send, to, recv, from);
  }
  std::unique_ptr<Communicator> do_split(int color, int key) override {
    return std::make_unique<SleepingWaits>(inner_->split(color, key));
  }

 private:
  /// Waits for `work`, testing it with sleeps of 10 µs doubling up to 200 µs in between.
  static void nap(std::unique_ptr<Work> work);
  std::unique_ptr<Communicator> inner_;
};

}  // namespace tp::lesson
