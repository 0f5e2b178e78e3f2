// watchdog.cpp — fatal-signal lines, the per-node watchdog process, the stall detector, graceful
// SIGINT/SIGTERM (see watchdog.h). Everything a signal handler or the forked watchdog runs is
// async-signal-safe: system calls (write, poll, read, kill, clock_gettime, _exit) and the number
// formatting below, no allocation and no stdio.
#include "watchdog.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
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
#include "launcher.h"
#include "mpi_util.h"
#include "mpi_wait.h"

namespace tp {

namespace {

constexpr int64_t kSecond = 1000000000;
// A stop signal while this rank waits for a peer that makes no progress: after this long, the wait
// is given up (rank 0; the others a second later, in case rank 0 is the one that is stuck).
constexpr int64_t kStopGrace = 2 * kSecond;
// The default --stall-timeout: the larger of kMinStall and kStallSteps × the slowest step so far.
constexpr int64_t kMinStall = 60 * kSecond;
constexpr int64_t kStallSteps = 10;

int64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kSecond + ts.tv_nsec;
}

// What one rank shows its node: written by that rank only, read by the watchdog and by the other
// ranks of the node (plain stores: a torn read matters only for a moment, and the readers act on
// states that have lasted seconds).
struct Slot {
  int32_t rank = 0, pid = 0;
  int32_t depth = 0;        // > 0: inside a collective
  int32_t group_size = 0;   // of the collective entered last
  int64_t progress_ns = 0;  // CLOCK_MONOTONIC of the last call entered or left, or step
  int64_t step = -1;
  int64_t step_start_ns = 0;
  int64_t slowest_step_ns = 0;
  char op[32] = {};
  char label[64] = {};
};

// The node's page: a header, then one Slot per local rank.
struct Header {
  int64_t stall_timeout_ns = -1;  // > 0: fixed; 0: off; < 0: the default rule
  int32_t quiet = 0;  // the job is ending with its own message: the watchdog says nothing
  int32_t local_size = 1;
  int32_t nodes = 1;  // nodes of the job
  char host[64] = {};
};

Header g_header_fallback;
Slot g_slot_fallback;
Header* g_header = &g_header_fallback;
Slot* g_slots = &g_slot_fallback;  // the node's slots (local_size of them)
Slot* g_slot = &g_slot_fallback;   // this rank's
int g_rank = 0;
int g_local = 0;
volatile sig_atomic_t g_stop_signal = 0;  // SIGINT/SIGTERM seen (graceful stop enabled)
int64_t g_stop_seen_ns = 0;               // when a wait first saw g_stop_signal
int g_watchdog_sock = -1;                 // local rank 0: our end of the socket to the watchdog
pid_t g_watchdog_pid = -1;                // local rank 0: the watchdog process
bool g_watchdog_warned = false;
int64_t g_watchdog_checked_ns = 0;

// A line built without allocation: text and decimal numbers.
struct Line {
  char buf[512];
  size_t n = 0;
  Line& operator<<(const char* s) {
    while (*s && n < sizeof buf - 1) buf[n++] = *s++;
    return *this;
  }
  Line& operator<<(int64_t v) {
    char tmp[24];
    int k = 0;
    const bool neg = v < 0;
    uint64_t u = neg ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    do tmp[k++] = static_cast<char>('0' + u % 10);
    while ((u /= 10) != 0);
    if (neg) tmp[k++] = '-';
    while (k > 0 && n < sizeof buf - 1) buf[n++] = tmp[--k];
    return *this;
  }
  Line& operator<<(int v) { return *this << static_cast<int64_t>(v); }
  /// Nanoseconds as seconds with one decimal: "3.1 s".
  Line& seconds(int64_t ns) {
    const int64_t tenths = (ns + kSecond / 20) / (kSecond / 10);
    return *this << tenths / 10 << "." << tenths % 10 << " s";
  }
  /// A fixed-size field of the shared page, up to its first NUL.
  Line& field(const char* s, size_t size) {
    for (size_t i = 0; i < size && s[i] && n < sizeof buf - 1; ++i) buf[n++] = s[i];
    return *this;
  }
  void write_to(int fd) {
    buf[n++] = '\n';
    for (size_t done = 0; done < n;) {
      const ssize_t w = ::write(fd, buf + done, n - done);
      if (w <= 0) break;
      done += static_cast<size_t>(w);
    }
  }
};

void copy_field(char* dst, size_t size, const char* src) {
  size_t i = 0;
  for (; i + 1 < size && src[i]; ++i) dst[i] = src[i];
  dst[i] = '\0';
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV (segmentation fault)";
    case SIGBUS:
      return "SIGBUS (bus error)";
    case SIGFPE:
      return "SIGFPE (arithmetic exception)";
    case SIGILL:
      return "SIGILL (illegal instruction)";
    case SIGABRT:
      return "SIGABRT (abort)";
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGKILL:
      return "SIGKILL";
    default:
      return "a signal";
  }
}

void sleep_ms(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

// The state letter of process `pid` in /proc/PID/stat ('R', 'S', 'T' stopped, 't' traced, 'Z'),
// or 0 when it cannot be read.
char process_state(int pid) {
  char path[40];
  Line p;
  p << "/proc/" << static_cast<int64_t>(pid) << "/stat";
  p.buf[p.n] = '\0';
  std::memcpy(path, p.buf, std::min(sizeof path, p.n + 1));
  path[sizeof path - 1] = '\0';
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[512];
  const ssize_t got = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (got <= 0) return 0;
  buf[got] = '\0';
  const char* close_paren = std::strrchr(buf, ')');  // the command name may hold spaces
  return close_paren != nullptr && close_paren[1] == ' ' ? close_paren[2] : 0;
}

bool is_stopped(int pid) {
  const char s = process_state(pid);
  return s == 'T' || s == 't';
}

// The ranks of the node that hold the others up (a stall, or a stop signal that cannot be agreed
// on): stopped processes and ranks outside any collective while others wait in one; when every
// rank is inside a collective, the one that moved last the longest ago. Sets `stalled[i]`; returns
// how many, and the index of a rank that waits (for the collective it waits in), or -1.
int find_stalled(const Slot* slots, int count, bool* stalled, int* waiter) {
  int found = 0;
  *waiter = -1;
  for (int i = 0; i < count; ++i) {
    stalled[i] = is_stopped(slots[i].pid) || slots[i].depth <= 0;
    found += stalled[i] ? 1 : 0;
    if (!stalled[i] && *waiter < 0) *waiter = i;
  }
  if (*waiter < 0) return 0;  // nobody waits: nothing holds anyone up on this node
  if (found == 0) {
    int oldest = 0;
    for (int i = 1; i < count; ++i)
      if (slots[i].progress_ns < slots[oldest].progress_ns) oldest = i;
    stalled[oldest] = true;
    found = 1;
    if (*waiter == oldest) *waiter = oldest == 0 ? (count > 1 ? 1 : -1) : 0;
  }
  return found;
}

// "rank 1 (pid 42, host h, stopped by a signal, at step 3, outside any collective)", for each
// stalled rank, then "; ranks 0, 2 wait for it in all_reduce (3 ranks, 'label')".
void describe_stall(Line& line, const Slot* slots, int count, const bool* stalled, int waiter) {
  bool first = true;
  for (int i = 0; i < count; ++i) {
    if (!stalled[i]) continue;
    const Slot& s = slots[i];
    line << (first ? "rank " : ", rank ") << s.rank << " (pid " << s.pid << ", host ";
    line.field(g_header->host, sizeof g_header->host);
    if (is_stopped(s.pid)) line << ", stopped by a signal";
    if (s.step >= 0) line << ", at step " << s.step;
    if (s.depth <= 0) {
      line << ", outside any collective";
    } else {
      line << ", in ";
      line.field(s.op, sizeof s.op);
    }
    line << ")";
    first = false;
  }
  if (waiter < 0) return;
  int waiting = 0;
  for (int i = 0; i < count; ++i) waiting += stalled[i] ? 0 : 1;
  line << (waiting == 1 ? "; rank " : "; ranks ");
  first = true;
  for (int i = 0; i < count; ++i) {
    if (stalled[i]) continue;
    line << (first ? "" : ", ") << slots[i].rank;
    first = false;
  }
  const Slot& w = slots[waiter];
  line << (waiting == 1 ? " waits" : " wait") << " in ";
  line.field(w.op, sizeof w.op);
  line << " (a group of " << w.group_size << " ranks";
  if (w.label[0] != '\0') {
    line << ", '";
    line.field(w.label, sizeof w.label) << "'";
  }
  line << ")";
}

void on_fatal_signal(int sig) {
  Line line;
  line << "rank " << g_rank << " (pid " << static_cast<int64_t>(::getpid()) << "): fatal signal "
       << signal_name(sig);
  if (g_slot->step >= 0) line << " at step " << g_slot->step;
  line << "; the job ends";
  line.write_to(2);
  sleep_ms(300);  // the launcher forwards stderr asynchronously; let the line out before dying
  std::signal(sig, SIG_DFL);
  ::raise(sig);
}

void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {  // the second one: stop now
    std::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_stop_signal = sig;
  if (g_rank == 0) {
    Line line;
    line << "rank 0: " << signal_name(sig)
         << " received: stopping at the next step boundary (send it again to stop now)";
    line.write_to(2);
  }
}

// ---- the watchdog process ------------------------------------------------------------------------

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
void report_stall(const Slot* slots, int count, int64_t stale, int64_t limit, bool* stalled) {
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
  line << "error: no progress for ";
  line.seconds(stale) << ": ";
  if (g_header->nodes > 1 && all_wait && !stopped) {
    line << "every rank of host ";
    line.field(g_header->host, sizeof g_header->host)
        << " waits (the stalled rank is elsewhere?): ";
  }
  describe_stall(line, slots, count, stalled, waiter);
  line << "; the job ends (--stall-timeout ";
  line.seconds(limit) << "; 0 turns the check off)";
  g_header->quiet = 1;
  line.write_to(2);
  sleep_ms(300);  // let the launcher forward the line before the ranks go
  for (int i = 0; i < count; ++i)
    if (stalled[i]) ::kill(slots[i].pid, SIGKILL);
  ::_exit(0);
}

// Names the ranks of the node that ended before the job finished, the first to end first; the
// others the launcher ended afterwards (MPICH kills the survivors within ~0.1 s of a death).
[[noreturn]] void report_deaths(const Slot* slots, int count, const int64_t* died_ns) {
  if (g_header->quiet) ::_exit(0);
  int first = -1;
  for (int i = 0; i < count; ++i)
    if (died_ns[i] != 0 && (first < 0 || died_ns[i] < died_ns[first])) first = i;
  if (first < 0) ::_exit(0);
  Line line;
  const Slot& s = slots[first];
  line << "rank " << s.rank << " (pid " << s.pid << ", host ";
  line.field(g_header->host, sizeof g_header->host)
      << ") ended before the job finished (killed or crashed)";
  if (s.step >= 0) line << " at step " << s.step;
  int later = 0;
  for (int i = 0; i < count; ++i) later += died_ns[i] != 0 && i != first ? 1 : 0;
  if (later > 0) {
    line << (later == 1 ? "; rank " : "; ranks ");
    bool comma = false;
    for (int i = 0; i < count; ++i) {
      if (died_ns[i] == 0 || i == first) continue;
      line << (comma ? ", " : "") << slots[i].rank;
      comma = true;
    }
    line << " ended by the launcher afterwards";
  }
  line << "; the job ends";
  line.write_to(2);
  ::_exit(0);
}

// The watchdog process: polls the socket from local rank 0 (fds[0]) and a pidfd per rank of the
// node, every 250 ms looks for a stall. `fds`, `died_ns` and `stalled` are allocated before the
// fork: the child of a threaded process must not allocate.
[[noreturn]] void watchdog_main(int sock, std::vector<pollfd>& fds, std::vector<int64_t>& died_ns,
                                std::vector<char>& stalled) {
  ::setsid();  // out of the rank's process group: signals meant for the ranks miss it
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT}) std::signal(s, SIG_IGN);
  for (int fd = 0; fd < 4096; ++fd)
    if (fd != 2 && fd != sock) ::close(fd);
  const int count = g_header->local_size;
  fds[0] = {sock, POLLIN, 0};
  for (int i = 0; i < count; ++i) {
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, g_slots[i].pid, 0));
    fds[static_cast<size_t>(i) + 1] = {fd, static_cast<short>(fd >= 0 ? POLLIN : 0), 0};
  }
  int64_t first_death = 0;
  bool rank0_gone = false;
  for (;;) {
    const int ready = ::poll(fds.data(), fds.size(), 250);
    if (ready < 0 && errno != EINTR) ::_exit(0);
    const int64_t now = now_ns();
    if (ready > 0 && fds[0].revents != 0) {
      char c = 0;
      if (::read(sock, &c, 1) == 1) ::_exit(0);  // told: a normal end or an abort
      fds[0].fd = -1;                            // end of file: local rank 0 is gone
      rank0_gone = true;
    }
    for (int i = 0; ready > 0 && i < count; ++i) {
      pollfd& p = fds[static_cast<size_t>(i) + 1];
      if (p.fd < 0 || p.revents == 0) continue;
      died_ns[static_cast<size_t>(i)] = now;
      p.fd = -1;  // poll ignores it from now on
    }
    for (int i = 0; i < count; ++i)
      if (died_ns[static_cast<size_t>(i)] != 0 && first_death == 0) first_death = now;
    if (first_death != 0) {
      // At a normal end local rank 0 says so within moments of the others' exit (after its
      // barrier; 5 s leaves room for a loaded machine); when it is gone too, the deaths are in.
      // The launcher's kills follow a death within ~0.1 s: collect them for 0.3 s more.
      if (g_header->quiet) ::_exit(0);
      if ((rank0_gone && now - first_death > kSecond * 3 / 10) || now - first_death > 5 * kSecond)
        report_deaths(g_slots, count, died_ns.data());
      continue;
    }
    const int64_t limit = stall_limit(g_slots, count);
    if (limit <= 0 || g_header->quiet) continue;
    int64_t newest = 0;
    bool anyone_waits = false;
    for (int i = 0; i < count; ++i) {
      newest = std::max<int64_t>(newest, g_slots[i].progress_ns);
      anyone_waits = anyone_waits || g_slots[i].depth > 0;
    }
    if (anyone_waits && now - newest > limit)
      report_stall(g_slots, count, now - newest, limit, reinterpret_cast<bool*>(stalled.data()));
  }
}

// ---- the ranks' side -----------------------------------------------------------------------------

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

// A stop signal arrived while this rank waits for a peer that does not come: the step boundary
// where every rank would agree on it is never reached. One line (rank 0; another rank only when
// rank 0 has not ended the job a second later), then the job ends with 128 + the signal.
[[noreturn]] void stop_while_waiting(int sig, int64_t waited) {
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
  void waiting() override {
    const int sig = g_stop_signal;
    if (sig == 0) return;
    const int64_t now = now_ns();
    if (g_stop_seen_ns == 0) g_stop_seen_ns = now;
    const int64_t grace = g_rank == 0 ? kStopGrace : kStopGrace + kSecond;
    if (now - g_stop_seen_ns > grace && now - waiting_since_ > grace)
      stop_while_waiting(sig, now - waiting_since_);
  }

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
  if (g_local == 0) check_watchdog(now);
}

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
  return sig;
}

void set_stall_timeout(double seconds, bool automatic) {
  g_header->stall_timeout_ns = automatic ? -1 : static_cast<int64_t>(seconds * kSecond);
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
  // The node's page: local rank 0 creates a shared memory object, the others map it by name;
  // the name is removed once every rank has it mapped (nothing is left behind).
  const size_t bytes = sizeof(Header) + sizeof(Slot) * static_cast<size_t>(local_size);
  char name[64] = {};
  if (g_local == 0)
    std::snprintf(name, sizeof name, "/tp-watchdog-%d-%ld", static_cast<int>(::getpid()),
                  static_cast<long>(now_ns() % 1000000007));
  MPI_Bcast(name, sizeof name, MPI_CHAR, 0, node);
  void* page = MAP_FAILED;
  const int fd = ::shm_open(name, g_local == 0 ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600);
  if (fd >= 0 && (g_local != 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) == 0)) {
    MPI_Barrier(node);  // the object has its size before anyone maps it
    page = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  } else {
    MPI_Barrier(node);
  }
  if (fd >= 0) ::close(fd);
  int mapped = page != MAP_FAILED ? 1 : 0, all_mapped = 0;
  MPI_Allreduce(&mapped, &all_mapped, 1, MPI_INT, MPI_MIN, node);
  if (g_local == 0) ::shm_unlink(name);
  if (!all_mapped) {  // best effort: no page, no watchdog
    if (mapped) ::munmap(page, bytes);
    MPI_Comm_free(&node);
    return;
  }
  Header* header = static_cast<Header*>(page);
  Slot* slots = reinterpret_cast<Slot*>(header + 1);
  if (g_local == 0) {
    new (header) Header();
    header->local_size = local_size;
    header->nodes = nodes;
    header->stall_timeout_ns = g_header->stall_timeout_ns;
    if (::gethostname(header->host, sizeof header->host - 1) != 0)
      copy_field(header->host, sizeof header->host, "?");
  }
  MPI_Barrier(node);  // the header is written before the slots
  slots[g_local] = *g_slot;
  g_header = header;
  g_slots = slots;
  g_slot = &slots[g_local];
  MPI_Barrier(node);  // every slot is written before the watchdog starts
  MPI_Comm_free(&node);
  set_progress_monitor(&g_monitor);
  if (g_local != 0) return;

  std::vector<pollfd> poll_fds(static_cast<size_t>(local_size) + 1);
  std::vector<int64_t> died_ns(static_cast<size_t>(local_size), 0);
  std::vector<char> stalled(static_cast<size_t>(local_size), 0);
  int socks[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, socks) != 0) return;
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(socks[1]);
    watchdog_main(socks[0], poll_fds, died_ns, stalled);
  }
  ::close(socks[0]);
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
