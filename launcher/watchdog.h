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
//   - the ranks of a node share a page (POSIX shared memory, named only while it is set up): each
//     rank's slot holds its step, the collective it is in (op, group size, the ledger's label,
//     through core/progress.h) and when it last moved (entered or left a collective, or began a
//     step);
//   - on each node, local rank 0 forks a small watchdog process (outside the launcher's process
//     list, so nobody kills it) that holds a pidfd and a life line (a socket whose end of file
//     comes when the rank's files close: launcher/life_line.h, which says why this orders deaths
//     truly) of every rank of the node, and reads the page; it runs at real-time priority where
//     it may, to see each end when it happens. When one ends before the job has finished it
//     waits for the launcher's kills, then prints one line "rank R (pid P, host H) ended before the job finished (killed or crashed)
//     at step N; ranks 0, 2 ended by the launcher afterwards" (first death first) and exits.
//     Normal ends tell it first (finish_watchdog), and a rank that ends the job with its own
//     message silences it (silence_watchdog).
//   - stalls: when no rank of the node has moved for --stall-timeout while one waits in a
//     collective, the watchdog prints one line naming the rank(s) holding the others up (stopped
//     processes, /proc/PID/stat state T, and ranks outside any collective; else the one that moved
//     last the longest ago), their pid, host, step, and the collective the others wait in, then
//     SIGKILLs them: the launcher ends the rest. The default timeout is the larger of 60 s and 10 ×
//     the slowest step so far; 0 turns the check off. The waiting ranks sleep meanwhile
//     (mpi/mpi_wait.h), they do not spin a core.
//   - SIGINT/SIGTERM (which both launchers forward to every rank) kill the rank as usual, unless
//     the program called enable_graceful_stop(): then they set a flag that agreed_stop_signal()
//     turns into one decision of every rank at a step boundary (a second signal kills). A rank
//     that waits in a collective when the signal comes, and still waits 2 s later (a peer is
//     stuck: the boundary is never reached), ends the job itself with one line naming who holds it
//     up and "no checkpoint written", exit 128 + the signal.
//   - the watchdog can be killed or stopped without harm: local rank 0 writes to it with
//     MSG_NOSIGNAL (no SIGPIPE), warns once when it has gone or stopped (the run goes on
//     unwatched), and at the end kills one that does not exit when told.
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

/// --stall-timeout: `seconds` without progress before the watchdog names the stalled rank (0: no
/// stall check); `automatic`: the default rule instead (see above).
void set_stall_timeout(double seconds, bool automatic);

}  // namespace tp
