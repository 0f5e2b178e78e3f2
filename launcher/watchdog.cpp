// watchdog.cpp — fatal-signal lines, the per-node watchdog process and the stall detector (see
// watchdog.h; the shared page: node_page.h, several nodes: watchdog_peers.h, SIGINT/SIGTERM:
// graceful_stop.h). Everything a signal handler or the forked watchdog runs is
// async-signal-safe: system calls (write, poll, read, kill, clock_gettime, _exit) and the number
// formatting below, no allocation and no stdio.
#include "watchdog.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <new>
#include <string>
#include <vector>

#include "core/progress.h"
#include "flight_dumps.h"
#include "graceful_stop.h"
#include "launcher.h"
#include "life_line.h"
#include "mpi_util.h"
#include "mpi_wait.h"
#include "node_page.h"
#include "watchdog_peers.h"

namespace tp {

using namespace watch;

namespace {

// Two ends of ranks of one node closer than this are ordered by what the ranks were doing, when
// some rank has no life line (life_line.h); with every rank's, only ends seen at the same moment.
constexpr int64_t kTie = kSecond / 20;
int64_t g_tie_ns = kTie;
// The default --stall-timeout: the larger of kMinStall and kStallSteps × the slowest step so far.
constexpr int64_t kMinStall = 60 * kSecond;
constexpr int64_t kStallSteps = 10;

int g_life_line = -1;  // this rank's connection to the watchdog, open until the end (life_line.h)
int g_watchdog_sock = -1;   // local rank 0: our end of the socket to the watchdog
pid_t g_watchdog_pid = -1;  // local rank 0: the watchdog process
bool g_watchdog_warned = false;
int64_t g_watchdog_checked_ns = 0;

// Whether a rank of this node (or, with several nodes, of another: its watchdog's report reaches
// ours within milliseconds; wait up to kPeerWaitMs for it) has begun to end.
bool peer_ending() {
  constexpr int kPeerWaitMs = 250;
  for (int waited = 0;; waited += 10) {
    for (int i = 0; i < g_header->local_size; ++i)
      if (&g_slots[i] != g_slot && g_slots[i].pid > 0 && life_line::process_ending(g_slots[i].pid))
        return true;
    if (g_header->peer_node_death != 0) return true;
    if (g_header->nodes <= 1 || waited >= kPeerWaitMs) return false;
    sleep_ms(10);
  }
}

void on_fatal_signal(int sig) {
  // A transport that aborts because a peer died (UCX raises SIGABRT, with its own backtrace, when
  // the connection to a killed rank breaks; it can notice before that rank's files close, and
  // before another node's watchdog has seen the death) is not the death to name: this rank says
  // nothing and marks itself a consequence (kAfterPeer), which the watchdog passes over when it
  // names the first death.
  if (peer_ending()) {
    g_slot->crashed = kAfterPeer;
    std::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_slot->crashed = kNamedItself;
  Line line;
  line << "rank " << g_rank << " (pid " << static_cast<int64_t>(::getpid()) << "): fatal signal "
       << signal_name(sig);
  if (g_slot->step >= 0) line << " at step " << g_slot->step;
  line << "; the job ends";
  line.write_to(2);
  request_flight_dump("fatal signal");  // the dumper thread writes while this handler waits
  sleep_ms(300);  // the launcher forwards stderr asynchronously; let the line out before dying
  std::signal(sig, SIG_DFL);
  ::raise(sig);
}

// ---- the watchdog process ------------------------------------------------------------------------

// Asks every rank of the node that can answer (not stopped, not ended) for a flight dump
// (flight_dumps.h): the reason goes in its slot, then SIGUSR1. With `wait_ms`, waits that long at
// most for their dumps to be written.
void ask_for_flight_dumps(Slot* slots, int count, int32_t why, const int64_t* died, long wait_ms) {
  int32_t before[256] = {};
  bool asked[256] = {};
  for (int i = 0; i < count && i < 256; ++i) {
    if (!slots[i].flight_on || (died != nullptr && died[i] != 0) || is_stopped(slots[i].pid))
      continue;
    before[i] = __atomic_load_n(&slots[i].flight_dumps, __ATOMIC_ACQUIRE);
    __atomic_store_n(&slots[i].flight_request, why, __ATOMIC_RELEASE);
    asked[i] = ::kill(slots[i].pid, SIGUSR1) == 0;
  }
  for (long waited = 0; waited < wait_ms; waited += 10) {
    bool all = true;
    for (int i = 0; i < count && i < 256; ++i)
      all = all &&
            (!asked[i] || __atomic_load_n(&slots[i].flight_dumps, __ATOMIC_ACQUIRE) != before[i]);
    if (all) return;
    sleep_ms(10);
  }
}

// The stall rule: the timeout now in force (0: off).
int64_t stall_limit(const Slot* slots, int count) {
  const int64_t fixed = g_header->stall_timeout_ns;
  if (fixed >= 0) return fixed;
  int64_t slowest = 0;
  for (int i = 0; i < count; ++i) slowest = std::max<int64_t>(slowest, slots[i].slowest_step_ns);
  return std::max(kMinStall, kStallSteps * slowest);
}

// One line naming what holds the job up, then the stalled ranks are killed (the launcher ends the
// others). Returns without a word when nobody on this node waits in a collective.
void report_stall(const Slot* slots, int count, int64_t stale, int64_t limit, bool* stalled,
                  int stop_signal) {
  int waiter = -1;
  if (find_stalled(slots, count, stalled, &waiter) == 0) return;
  // Every rank of this node waits in a collective and none is stopped: with other nodes, the
  // stalled rank is likely there, and its node's watchdog names it; wait longer before acting.
  bool stopped = false;
  for (int i = 0; i < count; ++i) stopped = stopped || is_stopped(slots[i].pid);
  bool all_wait = true;
  for (int i = 0; i < count; ++i) all_wait = all_wait && slots[i].depth > 0;
  if (g_header->nodes > 1 && all_wait && !stopped && stale < 2 * limit) return;
  Line line;
  if (stop_signal != 0)
    line << "stopped by " << signal_name(stop_signal) << ", but no rank has moved for ";
  else
    line << "error: no progress for ";
  line.seconds(stale) << ": ";
  if (g_header->nodes > 1 && all_wait && !stopped) {
    line << "every rank of host ";
    line.field(g_header->host, sizeof g_header->host)
        << " waits (the stalled rank is elsewhere?): ";
  }
  if (stop_signal != 0) line << "held up by ";
  describe_stall(line, slots, count, stalled, waiter);
  if (stop_signal != 0) {
    line << "; no checkpoint written (an emergency checkpoint needs every rank); the job ends";
  } else {
    line << "; the job ends (--stall-timeout ";
    line.seconds(limit) << "; 0 turns the check off)";
  }
  g_header->quiet = 1;
  line.write_to(2);
  // The flight dumps are on disk before anybody is killed (flight_dumps.h); this also lets the
  // launcher forward the line before the ranks go.
  ask_for_flight_dumps(const_cast<Slot*>(slots), count, kFlightStall, nullptr, kDumpWaitMs);
  sleep_ms(100);
  for (int i = 0; i < count; ++i)
    if (stalled[i]) ::kill(slots[i].pid, SIGKILL);
  quiet_exit(*g_watch);
}

// Whether rank slot `a` died before rank slot `b` by what the watchdog saw: the earlier end, when
// they are more than g_tie_ns apart (with every rank's life line, any two ends seen apart are in
// their true order: life_line.h); else, without life lines, where a SIGKILLed rank with much
// memory can end after the bystander the launcher kills as soon as its sockets close, and for
// two ends seen at once: the one outside any collective (the others wait in one for it when the
// launcher kills them), then the one that moved last the longest ago.
bool died_before(const Slot* slots, const int64_t* died_ns, int a, int b) {
  const int64_t apart = died_ns[a] - died_ns[b];
  if (apart > g_tie_ns || apart < -g_tie_ns) return apart < 0;
  if ((slots[a].depth <= 0) != (slots[b].depth <= 0)) return slots[a].depth <= 0;
  return slots[a].progress_ns < slots[b].progress_ns;
}

// This node's deaths into w.deaths, in died_before's order: the first keeps the time it was seen,
// the others within the tie (g_tie_ns) of it follow it by a nanosecond each.
void collect_local_deaths(Watch& w) {
  const int count = g_header->local_size;
  const int64_t* died = w.died_ns.data();
  int64_t earliest = 0;
  for (int i = 0; i < count; ++i)
    if (died[i] != 0 && (earliest == 0 || died[i] < earliest)) earliest = died[i];
  for (int i = 0; i < count; ++i) {
    if (died[i] == 0 || w.ndeaths >= w.deaths.size()) continue;
    int64_t before = 0;
    for (int j = 0; j < count; ++j)
      before += j != i && died[j] != 0 && died_before(g_slots, died, j, i) ? 1 : 0;
    Report& r = w.deaths[w.ndeaths++];
    r.kind = kDeath;
    r.rank = g_slots[i].rank;
    r.pid = g_slots[i].pid;
    r.crashed = g_slots[i].crashed;
    r.died_ns = died[i] - earliest <= g_tie_ns ? earliest + before : died[i];
    r.step = g_slots[i].step;
    copy_field(r.host, sizeof r.host, g_header->host);
  }
}

// The one line, from the node whose death came first: that rank, and the ones the launcher ended
// afterwards (MPICH kills the survivors within ~0.1 s of a death). A crash has been named by the
// rank itself: then nothing more is said.
[[noreturn]] void report_deaths(Watch& w) {
  // A crashed rank has named itself (it dumps core before its end is visible, and the launcher
  // may kill the others, who end sooner: it is the first whatever the times say).
  const Report* first = nullptr;
  for (size_t i = 0; i < w.ndeaths; ++i) {
    if (w.deaths[i].crashed == kNamedItself) ::_exit(0);
    if (w.deaths[i].crashed == kAfterPeer) continue;  // a consequence, not the cause
    if (first == nullptr || w.deaths[i].died_ns < first->died_ns) first = &w.deaths[i];
  }
  if (first == nullptr) ::_exit(0);
  bool mine = false;
  for (int i = 0; i < g_header->local_size; ++i) mine = mine || g_slots[i].pid == first->pid;
  if (!mine) ::_exit(0);  // another node's watchdog names it
  Line line;
  line << "rank " << first->rank << " (pid " << first->pid << ", host ";
  line.field(first->host, sizeof first->host)
      << ") ended before the job finished (killed or crashed)";
  if (first->step >= 0) line << " at step " << first->step;
  if (w.ndeaths > 1) {
    line << (w.ndeaths == 2 ? "; rank " : "; ranks ");
    int last = -1;  // the others in rank order
    for (size_t k = 1; k < w.ndeaths; ++k) {
      int next = -1;
      for (size_t i = 0; i < w.ndeaths; ++i) {
        const int r = w.deaths[i].rank;
        if (&w.deaths[i] != first && r > last && (next < 0 || r < next)) next = r;
      }
      if (next < 0) break;
      line << (last >= 0 ? ", " : "") << next;
      last = next;
    }
    line << " ended by the launcher afterwards";
  }
  line << "; the job ends";
  line.write_to(2);
  ::_exit(0);
}

// The life lines order deaths by when the watchdog sees them end, so it should see them when they
// end: on a busy node (ranks on every core) a watchdog of normal priority may wake late and see
// two ends at once, a tie. It asks to run first: round-robin real-time priority where it may (it
// sleeps in poll nearly always and takes no time from the ranks), else the highest nice it may
// have; unprivileged, neither is granted, and nothing changes.
void run_first() {
  sched_param param{};
  param.sched_priority = sched_get_priority_min(SCHED_RR);
  if (::sched_setscheduler(0, SCHED_RR, &param) == 0) return;
  for (int nice = -20; nice < 0; ++nice)
    if (::setpriority(PRIO_PROCESS, 0, nice) == 0) return;
}

// The watchdog process: polls the socket from local rank 0, a pidfd per rank of the node and the
// other nodes' sockets; every 100 ms looks for a stall.
[[noreturn]] void watchdog_main(int sock, Watch& w) {
  ::setsid();  // out of the rank's process group: signals meant for the ranks miss it
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT}) std::signal(s, SIG_IGN);
  for (int fd = 0; fd < 4096; ++fd) {
    bool keep = fd == 2 || fd == sock || fd == w.life_listener;
    for (size_t i = static_cast<size_t>(w.peer_begin); i < w.fds.size(); ++i)
      keep = keep || w.fds[i].fd == fd;
    if (!keep) ::close(fd);
  }
  g_watch = &w;
  const int count = g_header->local_size;
  w.fds[0] = {sock, POLLIN, 0};
  for (int i = 0; i < count; ++i) {
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, g_slots[i].pid, 0));
    w.fds[static_cast<size_t>(i) + 1] = {fd, static_cast<short>(fd >= 0 ? POLLIN : 0), 0};
  }
  pollfd* lines = &w.fds[static_cast<size_t>(count) + 1];
  if (w.life_listener >= 0 && life_line::accept_all(w.life_listener, lines, count) == count)
    g_tie_ns = 0;
  run_first();
  int64_t first_death = 0;  // CLOCK_MONOTONIC: when a rank of this node was first seen ended
  for (;;) {
    for (pollfd& p : w.fds) p.revents = 0;
    const int ready = ::poll(w.fds.data(), w.fds.size(), first_death != 0 ? 5 : 100);
    if (ready < 0 && errno != EINTR) ::_exit(0);
    const int64_t now = now_ns(), real = realtime_ns();
    if (ready > 0 && w.fds[0].revents != 0) {
      char c = 0;
      if (::read(sock, &c, 1) == 1) quiet_exit(w);  // told: a normal end or an abort
      w.fds[0].fd = -1;                             // end of file: local rank 0 is gone
    }
    // Every rank sets `quiet` before a normal exit (after the final barrier) and before ending
    // the job with its own message: a death after that is no news.
    // A rank that crashed names itself (and sleeps 0.3 s before dying): nobody else speaks.
    bool crashed = false;
    for (int i = 0; i < count; ++i) crashed = crashed || g_slots[i].crashed == kNamedItself;
    if (g_header->quiet || crashed) tell_quiet(w);
    if (ready > 0) serve_peers(w);
    // A rank's end: its life line's end of file, or its pidfd (whichever is seen first).
    for (int i = 0; ready > 0 && i < count; ++i)
      for (pollfd* p : {&w.fds[static_cast<size_t>(i) + 1], &lines[i]}) {
        if (p->fd < 0 || p->revents == 0) continue;
        if (p == &lines[i] && !life_line::ended(p->fd)) continue;
        p->fd = -1;  // poll ignores it from now on
        if (w.died_ns[static_cast<size_t>(i)] == 0) w.died_ns[static_cast<size_t>(i)] = real;
        if (first_death == 0) {
          first_death = now;
          // The launcher kills the others within ~0.1 s: ask for their dumps at once.
          if (!g_header->quiet)
            ask_for_flight_dumps(g_slots, count, kFlightDeath, w.died_ns.data(), 0);
        }
      }
    if (first_death != 0) {
      if (g_header->quiet || w.peer_quiet || crashed) quiet_exit(w);
      announce_local_deaths(w);
      // On one node whose every rank has a life line, the first end seen is the death
      // (life_line.h): say it at once, before the launcher's proxy that forwards the line exits
      // (waiting for the bystanders' ends lost the line about once in 30 kills of rank 0). With
      // several nodes, the other watchdogs' reports are awaited.
      // Only consequences seen so far (a transport aborting after a peer it saw dying): the
      // peer's own end is moments away; wait for it (at most kDecide).
      bool cause = false;
      for (int i = 0; i < count; ++i)
        cause =
            cause || (w.died_ns[static_cast<size_t>(i)] != 0 && g_slots[i].crashed != kAfterPeer);
      const int64_t decide = g_header->nodes == 1 && g_tie_ns == 0 && cause ? 0 : kDecide;
      if (now - first_death >= decide) {
        collect_local_deaths(w);
        report_deaths(w);
      }
      continue;
    }
    if (g_header->quiet || w.peer_quiet) continue;
    int64_t newest = 0;
    bool anyone_waits = false;
    for (int i = 0; i < count; ++i) {
      newest = std::max<int64_t>(newest, g_slots[i].progress_ns);
      anyone_waits = anyone_waits || g_slots[i].depth > 0;
    }
    bool* stalled = reinterpret_cast<bool*>(w.stalled.data());
    const int64_t limit = stall_limit(g_slots, count);
    if (limit > 0 && anyone_waits && now - newest > limit)
      report_stall(g_slots, count, now - newest, limit, stalled, 0);
    // A stop signal that the ranks have not agreed on kStopBackstop later, with nobody moving:
    // the ranks' own check (NodeMonitor::waiting) did not end the job (a rank blocked where it
    // does not run): end it from here, whatever --stall-timeout says.
    int64_t slowest = 0;  // a long step may legitimately keep everybody still for a while
    for (int i = 0; i < count; ++i)
      slowest = std::max<int64_t>(slowest, g_slots[i].slowest_step_ns);
    const int64_t still = std::max(kStopGrace, 2 * slowest);
    if (g_header->stop_ns != 0 && !g_header->stop_agreed && anyone_waits &&
        now - g_header->stop_ns > kStopBackstop && now - newest > still)
      report_stall(g_slots, count, now - newest, still, stalled, g_header->stop_signal);
  }
}

// Local rank 0: one warning line when the watchdog has gone or stopped (at most once a second).
void check_watchdog(int64_t now) {
  if (g_watchdog_pid <= 0 || g_watchdog_warned || now - g_watchdog_checked_ns < kSecond) return;
  g_watchdog_checked_ns = now;
  int status = 0;
  const pid_t gone = ::waitpid(g_watchdog_pid, &status, WNOHANG);
  const bool stopped = gone == 0 && is_stopped(g_watchdog_pid);
  if (gone == 0 && !stopped) return;
  g_watchdog_warned = true;
  std::string how = stopped ? "is stopped (SIGSTOP?)"
                    : gone == g_watchdog_pid && WIFSIGNALED(status)
                        ? std::string("was killed (") + signal_name(WTERMSIG(status)) + ")"
                        : "has ended";
  if (gone == g_watchdog_pid) g_watchdog_pid = -1;  // reaped
  std::fprintf(stderr,
               "warning: the watchdog of host %s (ranks %d..%d) %s: the run goes on unwatched (a "
               "rank there that dies or stalls will not be named)\n",
               g_header->host, g_slots[0].rank, g_slots[g_header->local_size - 1].rank,
               how.c_str());
  std::fflush(stderr);
}

// The progress monitor of this process: this rank's slot of the node's page.
class NodeMonitor : public ProgressMonitor {
 public:
  void enter(const char* op, int group_size, const std::string& label) override {
    const int64_t now = now_ns();
    if (g_slot->depth++ == 0) {
      copy_field(g_slot->op, sizeof g_slot->op, op);
      copy_field(g_slot->label, sizeof g_slot->label, label.c_str());
      g_slot->group_size = group_size;
      waiting_since_ = now;
    }
    g_slot->progress_ns = now;
    if (g_local == 0) check_watchdog(now);
  }
  void leave() override {
    if (g_slot->depth > 0) --g_slot->depth;
    g_slot->progress_ns = now_ns();
  }
  void waiting() override { stop_if_hopeless(waiting_since_); }

 private:
  int64_t waiting_since_ = 0;
};

NodeMonitor g_monitor;

}  // namespace

void set_current_step(int64_t step) {
  const int64_t now = now_ns();
  if (g_slot->step_start_ns != 0 && step != g_slot->step)
    g_slot->slowest_step_ns =
        std::max<int64_t>(g_slot->slowest_step_ns, now - g_slot->step_start_ns);
  if (step != g_slot->step) g_slot->step_start_ns = now;
  g_slot->step = step;
  g_slot->progress_ns = now;
  set_flight_step(step);
  if (g_local == 0) check_watchdog(now);
}

void set_stall_timeout(double seconds, bool automatic) {
  // Beyond ~292 years the nanoseconds do not fit an int64_t: that long is "never".
  const double ns = std::min(seconds * static_cast<double>(kSecond), 9.0e18);
  g_header->stall_timeout_ns = automatic ? -1 : static_cast<int64_t>(ns);
}

void start_watchdog(MPI_Comm comm) {
  MPI_Comm_rank(comm, &g_rank);
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::sigaction(s, &sa, nullptr);
  g_slot->rank = g_rank;
  g_slot->pid = static_cast<int32_t>(::getpid());
  g_slot->progress_ns = now_ns();

  MPI_Comm node;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node);
  int local_size = 1, is_leader = 0, nodes = 1;
  MPI_Comm_rank(node, &g_local);
  MPI_Comm_size(node, &local_size);
  is_leader = g_local == 0 ? 1 : 0;
  MPI_Allreduce(&is_leader, &nodes, 1, MPI_INT, MPI_SUM, comm);
  // The node's page: local rank 0 creates a shared memory object and gives it its size, then
  // tells the others its name (empty: it failed) and they map it; the name is removed once every
  // rank has it mapped (nothing is left behind).
  const size_t bytes = sizeof(Header) + sizeof(Slot) * static_cast<size_t>(local_size);
  char name[64] = {};
  int fd = -1;
  if (g_local == 0) {
    std::snprintf(name, sizeof name, "/tp-watchdog-%d-%ld", static_cast<int>(::getpid()),
                  static_cast<long>(now_ns() % 1000000007));
    fd = ::shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      ::close(fd);
      ::shm_unlink(name);
      fd = -1;
    }
    if (fd < 0) name[0] = '\0';
  }
  MPI_Bcast(name, sizeof name, MPI_CHAR, 0, node);
  if (g_local != 0 && name[0] != '\0') fd = ::shm_open(name, O_RDWR, 0600);
  void* page = MAP_FAILED;
  if (fd >= 0) {
    page = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
  }
  int mapped = page != MAP_FAILED ? 1 : 0, all_mapped = 0;
  MPI_Allreduce(&mapped, &all_mapped, 1, MPI_INT, MPI_MIN, comm);  // every node, or none
  if (g_local == 0 && name[0] != '\0') ::shm_unlink(name);
  if (!all_mapped) {  // best effort: no page, no watchdog
    if (mapped) ::munmap(page, bytes);
    MPI_Comm_free(&node);
    return;
  }
  Header* header = static_cast<Header*>(page);
  Slot* slots = reinterpret_cast<Slot*>(header + 1);
  int life_listener = -1;
  if (g_local == 0) {
    new (header) Header();
    header->local_size = local_size;
    header->nodes = nodes;
    header->stall_timeout_ns = g_header->stall_timeout_ns;
    if (::gethostname(header->host, sizeof header->host - 1) != 0)
      copy_field(header->host, sizeof header->host, "?");
    life_listener = life_line::listen_for(local_size, header->life_name, sizeof header->life_name);
  }
  MPI_Barrier(node);  // the header is written before the slots
  slots[g_local] = *g_slot;
  g_header = header;
  g_slots = slots;
  g_slot = &slots[g_local];
  MPI_Barrier(node);  // every slot is written before the watchdog starts
  g_life_line = life_line::connect_to(g_header->life_name, g_local);
  MPI_Barrier(node);  // every life line waits to be accepted before the watchdog starts
  MPI_Comm_free(&node);
  set_progress_monitor(&g_monitor);

  // The watchdog's state, and with several nodes its sockets: the hub (world rank 0's watchdog)
  // listens, the other nodes' watchdogs connect now (the kernel queues them until it accepts).
  Watch* w = new Watch();
  int world_size = 1;
  MPI_Comm_size(comm, &world_size);
  w->hub = g_rank == 0;
  w->peer_begin = 2 * local_size + 1;
  w->fds.assign(static_cast<size_t>(w->peer_begin) + (nodes > 1 ? (w->hub ? nodes : 1) : 0),
                pollfd{-1, POLLIN, 0});
  w->life_listener = life_listener;
  w->died_ns.assign(static_cast<size_t>(local_size), 0);
  w->reported.assign(static_cast<size_t>(local_size), 0);
  w->stalled.assign(static_cast<size_t>(local_size), 0);
  w->deaths.resize(static_cast<size_t>(world_size));
  if (nodes > 1) connect_watchdogs(comm, *w);
  if (g_local != 0) {
    delete w;
    return;
  }
  int socks[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, socks) != 0) return;
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(socks[1]);
    watchdog_main(socks[0], *w);
  }
  ::close(socks[0]);
  if (life_listener >= 0) ::close(life_listener);  // the watchdog's now
  for (size_t i = static_cast<size_t>(w->peer_begin); i < w->fds.size(); ++i)
    if (w->fds[i].fd >= 0) ::close(w->fds[i].fd);  // the watchdog's now
  delete w;
  if (child < 0) {
    ::close(socks[1]);
    return;
  }
  ::fcntl(socks[1], F_SETFD, FD_CLOEXEC);
  g_watchdog_sock = socks[1];
  g_watchdog_pid = child;
}

void finish_watchdog(MPI_Comm comm, bool barrier) {
  if (barrier) {
    int size = 1;
    MPI_Comm_size(comm, &size);
    ProgressScope scope("the final barrier", size, "");
    MPI_Request req = MPI_REQUEST_NULL;
    if (MPI_Ibarrier(comm, &req) == MPI_SUCCESS) mpi::wait_all(1, &req, "MPI_Ibarrier");
  }
  silence_watchdog();
}

void silence_watchdog() {
  g_header->quiet = 1;
  if (g_watchdog_sock < 0) return;
  // Never SIGPIPE (a killed watchdog): MSG_NOSIGNAL, and a failed send only means it is gone.
  const char done = 'd';
  const bool told = ::send(g_watchdog_sock, &done, 1, MSG_NOSIGNAL) == 1;
  ::close(g_watchdog_sock);
  g_watchdog_sock = -1;
  if (g_watchdog_pid <= 0) return;
  // It exits at once when told; one that is stopped (or did not hear) would hold the launcher's
  // output pipe open and keep the job from ending: after 0.5 s it is killed.
  for (int i = 0; told && i < 50; ++i) {
    if (::waitpid(g_watchdog_pid, nullptr, WNOHANG) == g_watchdog_pid) {
      g_watchdog_pid = -1;
      return;
    }
    sleep_ms(10);
  }
  ::kill(g_watchdog_pid, SIGKILL);
  ::waitpid(g_watchdog_pid, nullptr, 0);
  g_watchdog_pid = -1;
}

}  // namespace tp
