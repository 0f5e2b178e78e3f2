// node_page.cpp — the node's shared page and the watchdog's small tools (node_page.h).
#include "node_page.h"

#include <fcntl.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

namespace tp::watch {

int64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kSecond + ts.tv_nsec;
}

int64_t realtime_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kSecond + ts.tv_nsec;
}

namespace {
Header g_header_fallback;
Slot g_slot_fallback;
}  // namespace

Header* g_header = &g_header_fallback;
Slot* g_slots = &g_slot_fallback;
Slot* g_slot = &g_slot_fallback;
int g_rank = 0;
int g_local = 0;

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

}  // namespace tp::watch
