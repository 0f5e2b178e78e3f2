// Exercise 11 — the ring all-reduce from send_recv alone (lesson 10).
//
// buf (t, c) holds t chunks of c floats on every rank; the ring sums it over the t ranks of comm.
// The ranks stand in a circle: rank r sends to (r + 1) mod t and receives from (r − 1) mod t, one
// chunk per step, with comm.send_recv(send, to, recv, from) (both at once: no rank waits on another).
//   reduce-scatter, steps s = 0 … t − 2: send chunk (r − s) mod t; receive chunk (r − s − 1) mod t
//       into scratch (1, c) and add it to this rank's copy of that chunk. Afterwards rank r holds
//       the finished sum of chunk (r + 1) mod t.
//   all-gather, steps s = 0 … t − 2: send the finished chunk (r + 1 − s) mod t; receive the
//       finished chunk (r − s) mod t straight into its place in buf.
// Call after_step(s), when it is set, after every step of both: the lesson checks the buffers there.
// Hint: ring_chunk(buf, c) is chunk c mod t, a view (1, c) you can send or write into; dev.axpy(1,
// scratch, mine) adds; label the records: CommLedger::Scope scope(comm.ledger(), "ring reduce-scatter")
// (and "ring all-gather"): the lesson reads the ledger by these labels.
//
// solution: lib/parallel/ring_all_reduce.cpp
// grader: lesson_10_ring_allreduce 3
// if it fails: a chunk holds one rank's input too few or too many: count the steps (t − 1 each half).
// if it fails: the sums are right but on the wrong chunk: check which chunk is sent and which received.
// if it fails: the ledger's bytes differ: each step sends one chunk of N/t, never the whole buffer.
#include "core/comm_ledger.h"
#include "core/exercise.h"
#include "parallel/ring_all_reduce.h"

namespace tp {

// buf (t, c), scratch (1, c) → buf: rank r's chunk (r + 1) mod t summed over the ranks
void ring_reduce_scatter(Communicator& comm, Device& dev, Tensor& buf, Tensor& scratch,
                         const RingObserver& after_step) {
  TP_EXERCISE_TODO("exercises/11_ring_all_reduce.cpp");
}

// buf (t, c) with chunk (r + 1) mod t finished → buf: every chunk finished
void ring_all_gather(Communicator& comm, Tensor& buf, const RingObserver& after_step) {
  TP_EXERCISE_TODO("exercises/11_ring_all_reduce.cpp");
}

}  // namespace tp
