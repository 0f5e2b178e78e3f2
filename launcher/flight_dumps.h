// flight_dumps.h — the flight recorder's place in a run (observe/flight_recorder.h has the ring,
// tools/tp_flight reads the dumps): --flight-dir, the recorder every rank installs, and the
// dumper thread that writes a dump when one is asked for.
//
// When a rank dumps (one file per rank, DIR/flight-rank-R.jsonl, replaced by the next dump):
//   - the stall detector fires: the node's watchdog (watchdog.h) sends SIGUSR1 to every rank of
//     its node that is not stopped and waits up to kDumpWait for their dumps before it SIGKILLs
//     the stalled ones (a stopped rank writes none: tp_flight says so);
//   - a rank of the node dies: the watchdog sends SIGUSR1 to the others at once (best effort: the
//     MPI launcher kills them within about 0.1 s);
//   - a fatal signal on this rank (best effort, while its handler waits before dying);
//   - a collective mismatch (--check-collectives) and the non-finite stop: the rank that throws
//     writes it itself (core/call_recorder.h: dump_flight_record);
//   - SIGUSR1 to any rank from anybody: a live snapshot, the run goes on.
// Besides, the ring itself lives in DIR/flight-rank-R.ring (a shared file mapping: what a
// SIGKILLed or stopped rank stored there stays readable), removed when run_program returns.
// A signal handler only posts a semaphore; the dumper thread formats and writes (no allocation or
// stdio in the handler).
#pragma once

#include <mpi.h>

#include "core/options.h"

namespace tp {

/// How long the watchdog waits for the ranks' dumps before it kills a stalled rank (ms).
constexpr long kDumpWaitMs = 2000;

/// Declares --flight-dir and --flight-records (the ring's size; 0: no recorder, no ring file,
/// and SIGUSR1 is ignored).
void add_flight_options(Options& options);

/// After parsing: the folder (--flight-dir, else the folder of --save when the program has one,
/// it is given and the folder exists, else the working folder) is checked writable on every rank (a bad-input
/// error naming it otherwise), the job id agreed on, and the recorder, its SIGUSR1 handler and
/// the dumper thread installed (SIGUSR1 is blocked in the calling thread, so call it before the
/// threads that should not be woken by it are started). Collective over `comm`.
void start_flight_recorder(MPI_Comm comm, const Options& options);

/// run_program returns: the ring file (observe/flight_recorder.h) is removed; only a rank that is
/// killed or stopped leaves one.
void finish_flight_recorder();

/// From a signal handler (async-signal-safe): asks the dumper thread for a dump, `reason` a
/// string literal.
void request_flight_dump(const char* reason);

/// The step the next calls belong to (launcher.h: set_current_step).
void set_flight_step(int64_t step);

}  // namespace tp
