#include "parallel/collective_matmul.h"

#include <algorithm>
#include <memory>

#include "core/device.h"
#include "core/error.h"

namespace tp {

Overlap parse_overlap(const std::string& name) {
  if (name == "none") return Overlap::None;
  if (name == "async") return Overlap::Async;
  if (name == "ring") return Overlap::Ring;
  if (name == "chunked") return Overlap::Chunked;
  TP_CHECK_INPUT(false, "--overlap=", name, ": unknown; use none, async, ring or chunked");
  return Overlap::None;
}

const char* overlap_name(Overlap overlap) {
  switch (overlap) {
    case Overlap::Async:
      return "async";
    case Overlap::Ring:
      return "ring";
    case Overlap::Chunked:
      return "chunked";
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
      if (!into.defined()) into = Tensor(local.device(), local.shape(), local.dtype());
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
    if (!receiving.defined()) receiving = Tensor(sum.device(), sum.shape(), sum.dtype());
    work = comm.send_recv_async(sending, next, receiving, prev);
  }
  return Tensor();  // not reached
}

void chunked_reduce_each(int64_t rows, const std::function<Tensor(int64_t, int64_t)>& compute,
                         const std::function<Pending(const Tensor&)>& start,
                         const std::function<void()>& tail) {
  const int64_t blocks = std::min<int64_t>(kChunkedBlocks, std::max<int64_t>(rows, 1));
  Pending in_flight;
  for (int64_t k = 0; k < blocks; ++k) {
    const int64_t r0 = rows * k / blocks, r1 = rows * (k + 1) / blocks;
    const Tensor block = compute(r0, r1);  // block k − 1's collective flies meanwhile
    in_flight.wait();
    in_flight = start(block);
  }
  if (tail) tail();  // under the last block's collective
  in_flight.wait();
}

}  // namespace tp
