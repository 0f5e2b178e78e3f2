#include "parallel/collective_matmul.h"

#include <memory>

#include "core/device.h"
#include "core/error.h"

namespace tp {

Overlap parse_overlap(const std::string& name) {
  if (name == "none") return Overlap::None;
  if (name == "async") return Overlap::Async;
  if (name == "ring") return Overlap::Ring;
  TP_CHECK_INPUT(false, "--overlap=", name, ": unknown; use none, async or ring");
  return Overlap::None;
}

const char* overlap_name(Overlap overlap) {
  switch (overlap) {
    case Overlap::Async:
      return "async";
    case Overlap::Ring:
      return "ring";
    default:
      return "none";
  }
}

void ring_all_gather_each(Communicator& comm, const Tensor& local,
                          const std::function<void(int, const Tensor&)>& f) {
  const int t = comm.size(), r = comm.rank();
  const int next = (r + 1) % t, prev = (r - 1 + t) % t;
  CommLedger::Scope scope(comm.ledger(), "ring all-gather");
  // Step s holds block (r − s) mod t. Received blocks alternate between two buffers: the one being
  // received into is never the one being sent or worked on.
  Tensor held = local, buffers[2];
  for (int s = 0; s < t; ++s) {
    std::unique_ptr<Work> work;
    if (s + 1 < t) {
      Tensor& into = buffers[s % 2];
      if (!into.defined()) into = Tensor(local.device(), local.shape());
      work = comm.send_recv_async(held, next, into, prev);  // block (r − s − 1) arrives meanwhile
    }
    f((r - s + t) % t, held);
    if (work) {
      work->wait();
      held = buffers[s % 2];
    }
  }
}

Tensor ring_reduce_scatter(Communicator& comm, const std::function<Tensor(int)>& partial) {
  const int t = comm.size(), r = comm.rank();
  if (t == 1) return partial(0);
  const int next = (r + 1) % t, prev = (r - 1 + t) % t;
  CommLedger::Scope scope(comm.ledger(), "ring reduce-scatter");
  // Step s works on block d = (r − s − 1) mod t: its own product, plus the running sum of that
  // block from r − 1 (s > 0), passed on to r + 1 (s < t − 1). At s = t − 1, d = r: the result.
  Tensor sending, receiving;
  std::unique_ptr<Work> work;
  for (int s = 0; s < t; ++s) {
    Tensor sum = partial((r - s - 1 + 2 * t) % t);  // overlaps the transfer of step s − 1
    if (work) {
      work->wait();
      sum.device().axpy(1.0f, receiving, sum);  // + the ranks before this one
    }
    if (s + 1 == t) return sum;
    sending = sum;  // kept alive until the transfer is waited for
    if (!receiving.defined()) receiving = Tensor(sum.device(), sum.shape());
    work = comm.send_recv_async(sending, next, receiving, prev);
  }
  return Tensor();  // not reached
}

}  // namespace tp
