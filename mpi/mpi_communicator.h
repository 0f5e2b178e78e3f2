// mpi_communicator.h — the Communicator on MPI (MPICH or Open MPI).
//
//   all_reduce      → MPI_Iallreduce(MPI_IN_PLACE, SUM | MAX) all_reduce_async  → MPI_Iallreduce
//   all_gather      → MPI_Iallgather                        all_gather_async     → MPI_Iallgather
//   reduce_scatter  → MPI_Ireduce_scatter_block (SUM)       reduce_scatter_async → MPI_Ireduce_scatter_block
//                     (under MPICH with its pairwise algorithm, the blocking call's; under Open
//                     MPI MPI_Iallreduce with libnbc's ring: mpi_tuning.h)
//   send_recv       → MPI_Irecv + MPI_Isend                 send_recv_async      → MPI_Irecv + MPI_Isend
//   broadcast       → MPI_Ibcast                            split                → MPI_Comm_split
//   send / recv     → MPI_Isend / MPI_Irecv (tag 1)         send_async / recv_async → MPI_Isend / MPI_Irecv
//   barrier         → MPI_Ibarrier
//   all_to_all_v    → MPI_Ialltoallv (counts and displacements in elements, as int: a buffer over
//                     INT_MAX elements is refused with a line)
//                                                           all_to_all_v_async   → MPI_Ialltoallv
//
// The blocking calls wait for their nonblocking call in mpi::wait_all (mpi_wait.h): a tight test
// loop for 2 ms, then growing sleeps, so that a rank waiting for a stopped peer does not spin a
// core (MPICH's blocking calls would, forever), and the progress monitor hears it waiting
// (core/progress.h). Measured at np 2 (MPICH 4.0.2, ch4:ucx): the same time as the blocking call
// for 1 KiB, 64 KiB and 4 MiB all-reduces, within this machine's noise.
//
// Tensors on a device the host cannot address (a GPU) are staged through host buffers, so this
// communicator also serves several ranks sharing one GPU.
//
// bf16. MPI has no bf16 type: a bf16 tensor travels as MPI_UINT16_T (its bits unchanged), and its
// sum (and max) is a user-defined MPI_Op that widens both operands to f32, adds and rounds to bf16
// once per combine of two partial results, the rounding NCCL's ncclBfloat16 does per ring step.
// Chosen over widening to f32 around an f32 collective (one rounding, but twice the bytes) by
// measurement, MPICH 4.0.2 on 2 shared cores, median of 5-50 (docs/model.md, "Precision"):
//
//   bf16 buffer   np 2: user op / convert + f32     np 4 (oversubscribed): user op / convert + f32
//   128 KiB       0.10 / 0.10 ms                    19 / 37 ms
//   2 MiB         6.7 / 28 ms                       35 / 73 ms
//   16 MiB        73 / 148 ms                       201 / 202 ms
//
// The ledger counts what travels: 2 B per element.
//
// Progress. A nonblocking MPI call only *starts* a transfer: on shared memory the data moves when
// some thread of the rank is inside MPI (its progress engine copies and sums chunk by chunk). If the
// rank computes and calls nothing, the transfer waits, and `all_reduce_async` + compute + `wait()`
// runs the whole transfer inside wait(), overlapping nothing. So each communicator has a progress
// thread, like a CUDA stream, started at its first asynchronous call:
//
//   caller:    MPI_Iallreduce ─ hand over ─ compute ............................ wait() ─ write back
//                                  │                                              ▲
//   progress:                      └ MPI_Test ─ sleep ─ MPI_Test ─ ... ─ MPI_Test ┘ done
//
//   - The caller issues every MPI call itself, so collectives start in program order on every rank
//     (MPI matches collectives by their order) and blocking calls run on the caller, with no
//     hand-off. The progress thread only tests the outstanding requests (MPI_Testall per Work) and
//     sleeps kPollInterval = 50 µs between tests; with nothing outstanding it sleeps on a condition
//     variable. It tests again at once, without sleeping, after a test that did work (took > 2 µs:
//     MPI copied or summed a chunk, and the next one is likely ready; a test with nothing to do
//     takes 0.05 µs) and while the caller is blocked in wait() (its core is idle then). After 2 ms
//     in which MPI had nothing to do (a late peer), the sleeps grow to an eighth of that time, up
//     to 2 ms, and a waiting caller no longer makes it hurry: a stopped peer costs ~1% of a core.
//   - When every request of a Work has completed, it marks the Work done. test() reads that flag
//     and wait() sleeps until it is set: neither calls MPI. A staged result is copied back to the
//     device by the caller, in wait() or in the test() that first sees the flag (device calls stay
//     on the thread that owns the device: its stream, the current CUDA device, the emulator).
//   - A Work destroyed without wait() still completes: its destructor waits for the flag, so MPI
//     never writes freed memory. The communicator's destructor lets the thread finish what is
//     outstanding, then joins it.
//
// Measured at np 2 on 2 cores, 64 MiB all-reduce (29 ms blocking), MPICH 4.0.2: all_reduce_async +
// 100 ms of compute + wait() takes 100.3 ms (131 ms without the thread: compute, then transfer);
// with the caller idle, the thread alone finishes it in 30-33 ms. Its CPU share (read from
// /proc/self/task/<tid>/schedstat) while the all-reduce is in flight is ~27 ms of the 100, MPI
// copying and summing, the work the blocking call does too; while it only waits for a late peer,
// ~15% of a core for the first 2 ms, the cost of waking every ~120 µs (50 µs asked, plus the
// timer's slack; a sleep and wake-up costs ~15 µs of CPU on this virtual machine), then ~1% as the
// sleeps grow (above); with nothing outstanding, nothing. A
// 1 KiB all_reduce_async + wait() takes ~17 µs against 2 µs blocking (two thread wake-ups): the
// asynchronous calls are for transfers long enough to hide. Open MPI 4.1 does ~30 ms of the 64 MiB
// all-reduce inside MPI_Iallreduce itself (libnbc, on the caller); the rest overlaps: 127 ms in
// all, 153 ms without the thread.
//
// This needs MPI_THREAD_MULTIPLE (two threads inside MPI at once); tp::run_program and the test
// main ask for it with MPI_Init_thread, and MPICH and Open MPI provide it. When MPI was started
// with less (a program's own MPI_Init), there is no thread: the asynchronous calls still give the
// right result, completing in wait() by MPI_Waitall as before, and rank 0 says so once. A fallback,
// not an error, because only the overlap is lost, never correctness.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/communicator.h"

namespace tp {

class ProgressThread;

class MpiCommunicator : public Communicator {
 public:
  /// Wraps `comm`. With `owned`, MPI_Comm_free is called on destruction (for split() results).
  MpiCommunicator(MPI_Comm comm, bool owned);
  ~MpiCommunicator() override;
  std::string name() const override;
  MPI_Comm handle() const { return comm_; }

 protected:
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
  /// The progress thread (started on the first call), or null without MPI_THREAD_MULTIPLE.
  ProgressThread* progress();

  MPI_Comm comm_;
  bool owned_;
  bool thread_multiple_;
  std::unique_ptr<ProgressThread> progress_;
};

/// The MPI library's own version line, e.g. "MPICH Version: 4.0.2".
std::string mpi_library_version();

/// The collective algorithms the communicator chose (mpi_tuning.h), e.g.
/// "MPIR_CVAR_IREDUCE_SCATTER_BLOCK_INTRA_ALGORITHM=sched_pairwise" (MPICH) or
/// "coll_libnbc_iallreduce_algorithm=ring" (Open MPI); "" when none (the user set them).
std::string mpi_collective_tuning();

}  // namespace tp
