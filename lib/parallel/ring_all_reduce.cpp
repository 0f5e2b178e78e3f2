// ring_all_reduce.cpp — the two halves of the ring all-reduce (ring_all_reduce.h).
#include "parallel/ring_all_reduce.h"

#include "core/comm_ledger.h"
#include "core/exercise.h"

namespace tp {

namespace {
int mod(int a, int t) { return ((a % t) + t) % t; }
}  // namespace

Tensor ring_chunk(const Tensor& buf, int c) {
  const int t = static_cast<int>(buf.dim(0));
  return buf.view(mod(c, t), mod(c, t) + 1);
}

#if TP_EXERCISE != 11  // exercises/11_ring_all_reduce.cpp
void ring_reduce_scatter(Communicator& comm, Device& dev, Tensor& buf, Tensor& scratch,
                         const RingObserver& after_step) {
  const int t = comm.size(), r = comm.rank();
  CommLedger::Scope scope(comm.ledger(), "ring reduce-scatter");  // the label of its records
  for (int s = 0; s < t - 1; ++s) {
    comm.send_recv(ring_chunk(buf, r - s), mod(r + 1, t), scratch, mod(r - 1, t));
    Tensor mine = ring_chunk(buf, r - s - 1);
    dev.axpy(1.0f, scratch, mine);
    if (after_step) after_step(s);
  }
}

void ring_all_gather(Communicator& comm, Tensor& buf, const RingObserver& after_step) {
  const int t = comm.size(), r = comm.rank();
  CommLedger::Scope scope(comm.ledger(), "ring all-gather");
  for (int s = 0; s < t - 1; ++s) {
    Tensor arriving = ring_chunk(buf, r - s);
    comm.send_recv(ring_chunk(buf, r + 1 - s), mod(r + 1, t), arriving, mod(r - 1, t));
    if (after_step) after_step(s);
  }
}
#endif

void ring_all_reduce(Communicator& comm, Device& dev, Tensor& buf, Tensor& scratch) {
  ring_reduce_scatter(comm, dev, buf, scratch);
  ring_all_gather(comm, buf);
}

}  // namespace tp
