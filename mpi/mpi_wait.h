// mpi_wait.h — waiting for MPI requests without spinning a core while a peer is late.
//
// MPICH's blocking calls poll in a tight loop until they complete: a rank waiting for a peer that
// is stopped (SIGSTOP, a debugger, a swapped-out process) burns a whole core forever and cannot be
// interrupted. The MPI communicator therefore starts every collective as its nonblocking variant
// and waits here:
//
//   0 ... kSpin (+ 4 ns per byte the call moves)
//                        MPI_Testall in a tight loop (what the blocking call does: a collective
//                        that completes in this time pays nothing)
//   kSpin ...            sleep between tests, 1/16 of the time waited so far (at least 50 µs, at
//                        most 1 ms): a wait of T costs at most ~T/16 extra latency, and a core is
//                        woken every 1 ms (about 1% of a core) while a peer is late
//
// Between sleeps it calls the progress monitor's waiting() (core/progress.h), which may end the job
// (a SIGINT/SIGTERM while a peer makes no progress: launcher/watchdog.h).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <functional>

namespace tp::mpi {

/// MPI_Waitall of `requests[0..n)`, backing off as above; throws tp::Error naming `call` when MPI
/// reports an error.
void wait_all(int n, MPI_Request* requests, const char* call, size_t bytes = 0);

/// Calls `done` until it returns true, backing off as above (wait_all is this with MPI_Testall;
/// a receive of unknown size probes with it).
void wait_until(const std::function<bool()>& done, size_t bytes = 0);

}  // namespace tp::mpi
