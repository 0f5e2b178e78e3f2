// graceful_stop.cpp — SIGINT/SIGTERM stop the job at a step boundary every rank agrees on
// (graceful_stop.h).
#include "graceful_stop.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "core/progress.h"
#include "launcher.h"
#include "mpi_util.h"
#include "mpi_wait.h"

namespace tp {
namespace watch {

volatile sig_atomic_t g_stop_signal = 0;

namespace {

int64_t g_stop_seen_ns = 0;  // when a wait first saw g_stop_signal

void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {  // the second one: stop now
    std::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_stop_signal = sig;
  if (g_header->stop_ns == 0) g_header->stop_ns = now_ns();
  g_header->stop_signal = sig;
  if (g_rank == 0) {
    Line line;
    line << "rank 0: " << signal_name(sig)
         << " received: stopping at the next step boundary (send it again to stop now)";
    line.write_to(2);
  }
}

// A stop signal arrived while this rank waits for a peer that does not come: the step boundary
// where every rank would agree on it is never reached. One line (rank 0 after kStopGrace; rank r
// r seconds later, in case rank 0 is the one that is stuck), then the job ends with 128 + the
// signal.
[[noreturn]] void stop_while_waiting(int sig, int64_t waited) {
  if (g_header->quiet) {  // another rank of the node has said why, and is ending the job
    sleep_ms(2000);
    MPI_Abort(MPI_COMM_WORLD, 128 + sig);
    ::_exit(128 + sig);
  }
  Line line;
  line << "rank " << g_rank << ": stopped by " << signal_name(sig) << " while waiting in ";
  line.field(g_slot->op, sizeof g_slot->op) << " for ";
  line.seconds(waited) << "; ";
  std::vector<char> stalled(static_cast<size_t>(g_header->local_size));
  int waiter = -1;
  if (find_stalled(g_slots, g_header->local_size, reinterpret_cast<bool*>(stalled.data()),
                   &waiter) > 0) {
    line << "held up by ";
    describe_stall(line, g_slots, g_header->local_size, reinterpret_cast<bool*>(stalled.data()),
                   -1);
    line << "; ";
  } else {
    line << "a rank on another node makes no progress; ";
  }
  line << "no checkpoint written (an emergency checkpoint needs every rank); the job ends";
  g_header->quiet = 1;
  line.write_to(2);
  sleep_ms(200);  // let the launcher forward the line
  MPI_Abort(MPI_COMM_WORLD, 128 + sig);
  ::_exit(128 + sig);
}

}  // namespace

void stop_if_hopeless(int64_t waiting_since) {
  const int sig = g_stop_signal;
  if (sig == 0) return;
  const int64_t now = now_ns();
  if (g_stop_seen_ns == 0) g_stop_seen_ns = now;
  // Rank 0 speaks first; the others later by rank (rank 0 may be the one that is stuck).
  const int64_t grace = kStopGrace + std::min(g_rank, 4) * kSecond;
  if (now - g_stop_seen_ns > grace && now - waiting_since > grace)
    stop_while_waiting(sig, now - waiting_since);
}

}  // namespace watch

using namespace watch;

void enable_graceful_stop() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGINT, SIGTERM}) ::sigaction(s, &sa, nullptr);
}

int agreed_stop_signal() {
  int sig = g_stop_signal, size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ProgressScope scope("the stop-signal agreement", size, "");
  MPI_Request req = MPI_REQUEST_NULL;
  mpi::check(MPI_Iallreduce(MPI_IN_PLACE, &sig, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &req),
             "MPI_Iallreduce");
  mpi::wait_all(1, &req, "MPI_Iallreduce");
  if (sig != 0) g_header->stop_agreed = 1;
  return sig;
}

}  // namespace tp
