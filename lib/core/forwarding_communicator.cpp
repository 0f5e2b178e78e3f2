#include "core/forwarding_communicator.h"

namespace tp {

ForwardingCommunicator::ForwardingCommunicator(std::unique_ptr<Communicator> inner)
    : Communicator(inner->rank(), inner->size()), inner_(std::move(inner)) {}

void ForwardingCommunicator::around(const Forwarded&, const std::function<void()>& run) { run(); }

std::unique_ptr<Work> ForwardingCommunicator::around_async(
    const Forwarded&, const std::function<std::unique_ptr<Work>()>& issue) {
  return issue();
}

std::unique_ptr<Communicator> ForwardingCommunicator::do_split(int color, int key) {
  return decorate(inner_->split(color, key));
}

// Each operation: what the hooks see, and the inner communicator's public call.

void ForwardingCommunicator::do_all_reduce(Tensor& x, ReduceOp op) {
  around({op == ReduceOp::Max ? "all_reduce_max" : "all_reduce", &x},
         [&] { inner_->all_reduce(x, op); });
}

void ForwardingCommunicator::do_all_gather(const Tensor& shard, Tensor& full) {
  around({"all_gather", &full}, [&] { inner_->all_gather(shard, full); });
}

void ForwardingCommunicator::do_reduce_scatter(const Tensor& full, Tensor& shard) {
  around({"reduce_scatter", &full}, [&] { inner_->reduce_scatter(full, shard); });
}

void ForwardingCommunicator::do_broadcast(Tensor& x, int root) {
  around({"broadcast", &x, root}, [&] { inner_->broadcast(x, root); });
}

void ForwardingCommunicator::do_barrier() {
  around({"barrier", nullptr}, [&] { inner_->barrier(); });
}

void ForwardingCommunicator::do_send_recv(const Tensor& send, int to, Tensor& recv, int from) {
  around({"send_recv", &send, -1, true}, [&] { inner_->send_recv(send, to, recv, from); });
}

void ForwardingCommunicator::do_send(const Tensor& x, int to) {
  around({"send", &x, -1, true}, [&] { inner_->send(x, to); });
}

void ForwardingCommunicator::do_recv(Tensor& x, int from) {
  around({"recv", &x, -1, true}, [&] { inner_->recv(x, from); });
}

namespace {
Forwarded all_to_all_v_call(const Tensor& send, const Tensor& recv) {
  Forwarded call{"all_to_all_v", &send};
  call.rows_sent = send.rows();
  call.rows_received = recv.rows();
  return call;
}
}  // namespace

void ForwardingCommunicator::do_all_to_all_v(const Tensor& send,
                                             const std::vector<int64_t>& send_rows, Tensor& recv,
                                             const std::vector<int64_t>& recv_rows) {
  around(all_to_all_v_call(send, recv),
         [&] { inner_->all_to_all_v(send, send_rows, recv, recv_rows); });
}

std::unique_ptr<Work> ForwardingCommunicator::do_all_to_all_v_async(
    const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
    const std::vector<int64_t>& recv_rows) {
  return around_async(all_to_all_v_call(send, recv),
                      [&] { return inner_->all_to_all_v_async(send, send_rows, recv, recv_rows); });
}

std::unique_ptr<Work> ForwardingCommunicator::do_all_reduce_async(Tensor& x) {
  return around_async({"all_reduce", &x}, [&] { return inner_->all_reduce_async(x); });
}

std::unique_ptr<Work> ForwardingCommunicator::do_all_gather_async(const Tensor& shard,
                                                                  Tensor& full) {
  return around_async({"all_gather", &full}, [&] { return inner_->all_gather_async(shard, full); });
}

std::unique_ptr<Work> ForwardingCommunicator::do_reduce_scatter_async(const Tensor& full,
                                                                      Tensor& shard) {
  return around_async({"reduce_scatter", &full},
                      [&] { return inner_->reduce_scatter_async(full, shard); });
}

std::unique_ptr<Work> ForwardingCommunicator::do_send_recv_async(const Tensor& send, int to,
                                                                 Tensor& recv, int from) {
  return around_async({"send_recv", &send, -1, true},
                      [&] { return inner_->send_recv_async(send, to, recv, from); });
}

std::unique_ptr<Work> ForwardingCommunicator::do_send_async(const Tensor& x, int to) {
  return around_async({"send", &x, -1, true}, [&] { return inner_->send_async(x, to); });
}

std::unique_ptr<Work> ForwardingCommunicator::do_recv_async(Tensor& x, int from) {
  return around_async({"recv", &x, -1, true}, [&] { return inner_->recv_async(x, from); });
}

}  // namespace tp
