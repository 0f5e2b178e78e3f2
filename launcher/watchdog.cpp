// watchdog.cpp — fatal-signal lines, the per-node watchdog process, graceful SIGINT/SIGTERM (see
// watchdog.h). Everything a signal handler or the forked watchdog runs is async-signal-safe:
// write(2), poll(2), _exit(2) and the number formatting below, no allocation and no stdio.
#include "watchdog.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <vector>

#include "launcher.h"

namespace tp {

namespace {

int g_rank = 0;
// The step this rank is at: in a page shared with the watchdog (local rank 0 forks it after the
// page is mapped), a plain variable until then.
int64_t g_step_fallback = -1;
volatile int64_t* g_step = &g_step_fallback;
volatile sig_atomic_t g_stop_signal = 0;  // SIGINT/SIGTERM seen (graceful stop enabled)
int g_watchdog_pipe = -1;                 // write end, local rank 0 only

// A line built without allocation: text and decimal numbers.
struct Line {
  char buf[256];
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
  void write_to(int fd) {
    buf[n++] = '\n';
    for (size_t done = 0; done < n;) {
      const ssize_t w = ::write(fd, buf + done, n - done);
      if (w <= 0) break;
      done += static_cast<size_t>(w);
    }
  }
};

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
    default:
      return "a signal";
  }
}

void sleep_ms(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

void on_fatal_signal(int sig) {
  Line line;
  line << "rank " << static_cast<int64_t>(g_rank) << " (pid " << static_cast<int64_t>(::getpid())
       << "): fatal signal " << signal_name(sig);
  if (*g_step >= 0) line << " at step " << *g_step;
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

// The watchdog process: polls the pipe from local rank 0 (fds[0]) and a pidfd per rank of the
// node. `fds` is allocated before the fork: the child of a threaded process must not allocate.
[[noreturn]] void watchdog_main(int pipe_fd, const std::vector<int>& ranks,
                                const std::vector<int>& pids, std::vector<pollfd>& fds) {
  ::setsid();  // out of the rank's process group: signals meant for the ranks miss it
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT}) std::signal(s, SIG_IGN);
  for (int fd = 0; fd < 4096; ++fd)
    if (fd != 2 && fd != pipe_fd) ::close(fd);
  fds[0] = {pipe_fd, POLLIN, 0};
  for (size_t i = 0; i < pids.size(); ++i) {
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pids[i], 0));
    fds[i + 1] = {fd, static_cast<short>(fd >= 0 ? POLLIN : 0), 0};
  }
  // Wait for the first event: the pipe (a byte: the job ends normally, or aborts with its own
  // message; end of file: local rank 0 is gone) or a rank of the node that ended.
  while (::poll(fds.data(), fds.size(), -1) < 0 && errno == EINTR) {
  }
  bool any_gone = false;
  for (size_t i = 1; i < fds.size(); ++i) any_gone = any_gone || fds[i].revents != 0;
  char c = 0;
  if (fds[0].revents != 0) {
    if (::read(pipe_fd, &c, 1) == 1) ::_exit(0);  // told: a normal end or an abort
    if (!any_gone) fds[1].revents = POLLIN;       // end of file alone: local rank 0 is gone
  } else {
    // A rank ended; at a normal end local rank 0 says so within moments (after its barrier; 5 s
    // leaves room for a loaded machine). If local rank 0 is killed too, end of file comes first.
    pollfd p{pipe_fd, POLLIN, 0};
    if (::poll(&p, 1, 5000) > 0 && ::read(pipe_fd, &c, 1) == 1) ::_exit(0);
  }
  for (size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    Line line;
    line << "rank " << static_cast<int64_t>(ranks[i - 1]) << " (pid "
         << static_cast<int64_t>(pids[i - 1])
         << ") ended before the job finished (killed or crashed)";
    if (*g_step >= 0)
      line << "; rank " << static_cast<int64_t>(ranks[0]) << " was at step " << *g_step;
    line << "; the job ends";
    line.write_to(2);
  }
  ::_exit(0);
}

}  // namespace

void set_current_step(int64_t step) { *g_step = step; }

void enable_graceful_stop() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGINT, SIGTERM}) ::sigaction(s, &sa, nullptr);
}

int agreed_stop_signal() {
  int sig = g_stop_signal;
  MPI_Allreduce(MPI_IN_PLACE, &sig, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return sig;
}

void start_watchdog(MPI_Comm comm) {
  MPI_Comm_rank(comm, &g_rank);
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::sigaction(s, &sa, nullptr);

  MPI_Comm node;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node);
  int local = 0, local_size = 1;
  MPI_Comm_rank(node, &local);
  MPI_Comm_size(node, &local_size);
  const int mine[2] = {g_rank, static_cast<int>(::getpid())};
  std::vector<int> all(2 * static_cast<size_t>(local_size));
  MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, node);
  MPI_Comm_free(&node);
  if (local != 0) return;
  void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return;
  g_step = static_cast<volatile int64_t*>(page);
  *g_step = g_step_fallback;
  std::vector<int> ranks, pids;
  for (int i = 0; i < local_size; ++i) {
    ranks.push_back(all[2 * static_cast<size_t>(i)]);
    pids.push_back(all[2 * static_cast<size_t>(i) + 1]);
  }
  std::vector<pollfd> poll_fds(pids.size() + 1);
  int fds[2];
  if (::pipe(fds) != 0) return;
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[1]);
    watchdog_main(fds[0], ranks, pids, poll_fds);
  }
  ::close(fds[0]);
  if (child < 0) {
    ::close(fds[1]);
    return;
  }
  ::fcntl(fds[1], F_SETFD, FD_CLOEXEC);
  g_watchdog_pipe = fds[1];
}

void finish_watchdog(MPI_Comm comm, bool barrier) {
  if (barrier) MPI_Barrier(comm);
  silence_watchdog();
}

void silence_watchdog() {
  if (g_watchdog_pipe < 0) return;
  const char done = 'd';
  if (::write(g_watchdog_pipe, &done, 1) != 1) {
  }
  ::close(g_watchdog_pipe);
  g_watchdog_pipe = -1;
}

}  // namespace tp
