// watchdog.h — what run_program does so that a rank that dies is named, and a signal to mpirun
// ends the job cleanly (the public side is in launcher.h: set_current_step, enable_graceful_stop,
// agreed_stop_signal).
//
// What the MPI launchers do when one rank dies (measured: one of 2 or 3 ranks SIGKILLed while the
// others wait in an all-reduce): MPICH's hydra SIGKILLs the other ranks within 0.1 s and prints a
// banner naming the dead process's PID, not its rank; Open MPI's mpirun sends them SIGTERM, then
// SIGKILL, and prints "process rank 1 with PID 0 ... exited on signal 9". A SIGKILLed rank cannot
// speak, and under MPICH neither can the others. So:
//   - a rank that crashes (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) prints
//     "rank R (pid P): fatal signal SIGSEGV at step N; the job ends" before dying of it;
//   - on each node, local rank 0 forks a small watchdog process (outside the launcher's process
//     list, so nobody kills it) that holds a pidfd of every rank of the node. When one ends before
//     the job has finished, it prints "rank R (pid P) ended before the job finished ...", naming
//     the step local rank 0 was at, and exits. Normal ends tell it first (finish_watchdog).
//   - SIGINT/SIGTERM (which both launchers forward to every rank) kill the rank as usual, unless
//     the program called enable_graceful_stop(): then they set a flag that agreed_stop_signal()
//     turns into one decision of every rank at a step boundary (a second signal kills).
#pragma once

#include <mpi.h>

namespace tp {

/// Installs the fatal-signal handlers and, on local rank 0 of each node, starts the watchdog
/// process. Collective over `comm` (all ranks of the job). Best effort: without pidfds (Linux <
/// 5.3) there is no watchdog.
void start_watchdog(MPI_Comm comm);

/// The job is ending normally on this rank (after every rank has agreed on it): stop the watchdog
/// without a report. `barrier`: first wait for every rank, so none has exited yet.
void finish_watchdog(MPI_Comm comm, bool barrier);

/// This rank is aborting the job after printing why: stop the watchdog without a report.
void silence_watchdog();

}  // namespace tp
