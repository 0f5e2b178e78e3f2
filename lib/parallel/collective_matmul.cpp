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

Tensor ring_gather_each_reduce_scatter(Communicator& comm, const Tensor& local,
                                       const std::function<Tensor()>& whole,
                                       const std::function<void(int, const Tensor&)>& f,
                                       const Tensor& x_whole) {
  const int t = comm.size(), r = comm.rank();
  const int64_t rows = local.ndim() >= 1 ? local.dim(0) : 1;
  if (x_whole.defined()) {
    TP_CHECK(x_whole.dtype() == local.dtype() && x_whole.numel() == t * local.numel() &&
                 x_whole.ndim() >= 1 && x_whole.dim(0) == t * rows,
             "ring_gather_each_reduce_scatter: x_whole ", x_whole.shape().str(), " is not ", t,
             " blocks of ", local.shape().str());
    Tensor mine = x_whole.view(r * rows, (r + 1) * rows);
    if (local.numel() > 0) local.device().copy(mine.raw(), local.raw(), local.bytes());
  }
  // X's block c arrives into block c of x_whole, or (none given) into one of two buffers in turn:
  // the one being received into is never the one being sent or worked on.
  Tensor gathered[2];
  auto into = [&](int s, int c) -> Tensor {
    if (x_whole.defined()) return x_whole.view(c * rows, (c + 1) * rows);
    Tensor& b = gathered[s % 2];
    if (!b.defined()) b = Tensor(local.device(), local.shape(), local.dtype());
    return b;
  };
  if (t == 1) {
    Tensor p = whole();
    f(0, x_whole.defined() ? x_whole : local);
    return p;
  }
  const int next = (r + 1) % t, prev = (r - 1 + t) % t;
  auto start = [&](const char* label, const Tensor& send, Tensor& recv) {
    CommLedger::Scope scope(comm.ledger(), label);
    return comm.send_recv_async(send, next, recv, prev);
  };
  // The all-gather as in ring_all_gather_each: step s passes on block (r − s) mod t and receives
  // block (r − s − 1) mod t.
  Tensor held = local, arrived = into(0, (r - 1 + t) % t);
  std::unique_ptr<Work> gather = start("ring all-gather", held, arrived);
  const Tensor p = whole();  // (t·n, …): under the first block's transfer
  TP_CHECK(p.ndim() >= 1 && p.dim(0) % t == 0, "ring_gather_each_reduce_scatter: P ",
           p.shape().str(), " does not split into ", t, " blocks of rows");
  const int64_t n = p.dim(0) / t;
  f(r, x_whole.defined() ? x_whole.view(r * rows, (r + 1) * rows) : local);
  // The reduce-scatter as in ring_reduce_scatter: step s sends the running sum of block
  // d = (r − s − 1) mod t (at s = 0 P's own; after that P's plus what arrived, added in place) and
  // receives that of block d − 1; after step t − 2 the sum of block r is P's plus what arrived.
  Tensor arriving(p.device(), p.shape().with(0, n), p.dtype());
  std::unique_ptr<Work> reduce;
  for (int s = 0; s + 1 < t; ++s) {
    gather->wait();
    held = arrived;
    if (s + 2 < t) {
      arrived = into(s + 1, (r - s - 2 + 2 * t) % t);
      gather = start("ring all-gather", held, arrived);  // block (r − s − 2) arrives meanwhile
    } else {
      gather.reset();
    }
    const int d = (r - s - 1 + t) % t;
    Tensor sum = p.view(d * n, (d + 1) * n);
    if (reduce) {
      reduce->wait();
      p.device().axpy(1.0f, arriving, sum);  // + the ranks before this one
    }
    reduce = start("ring reduce-scatter", sum, arriving);
    f((r - s - 1 + t) % t, held);  // under both transfers
  }
  reduce->wait();
  p.device().axpy(1.0f, p.view(r * n, (r + 1) * n), arriving);  // + my own partial sums
  return arriving;
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
