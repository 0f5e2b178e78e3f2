// node_page.h — what the ranks of one node and their watchdog share (launcher/watchdog.h): the
// page of shared memory (a header, then a slot per rank: its step, the collective it is in, when
// it last moved), and the small tools every part of the watchdog uses. Everything here is
// async-signal-safe: a signal handler and the forked watchdog call it (no allocation, no stdio).
// Internal to launcher/: watchdog.cpp (the watchdog process and the ranks' side),
// watchdog_peers.cpp (the watchdogs of several nodes), graceful_stop.cpp (SIGINT/SIGTERM).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

namespace tp::watch {

constexpr int64_t kSecond = 1000000000;

/// CLOCK_MONOTONIC and CLOCK_REALTIME in nanoseconds.
int64_t now_ns();
int64_t realtime_ns();

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
  int32_t crashed = 0;  // set by the fatal-signal handler: kNamedItself or kAfterPeer
  char op[32] = {};
  char label[64] = {};
  // The flight recorder (launcher/flight_dumps.h): why the watchdog asks this rank for a dump
  // (kFlightStall, kFlightDeath; set before its SIGUSR1), the dumps the rank has written, and
  // whether it records at all.
  int32_t flight_request = 0;
  int32_t flight_dumps = 0;
  int32_t flight_on =
      0;  // the rank has a recorder and its SIGUSR1 handler (not --flight-records 0)
};

// The node's page: a header, then one Slot per local rank.
struct Header {
  int64_t stall_timeout_ns = -1;  // > 0: fixed; 0: off; < 0: the default rule
  int32_t quiet = 0;  // the job is ending with its own message: the watchdog says nothing
  int32_t local_size = 1;
  int32_t nodes = 1;  // nodes of the job
  // SIGINT/SIGTERM (graceful stop enabled) seen by a rank of the node, and when; `stop_agreed`:
  // the ranks have agreed on it at a step boundary (agreed_stop_signal), and stop by themselves.
  int32_t stop_signal = 0, stop_agreed = 0;
  int64_t stop_ns = 0;
  char host[64] = {};
  char life_name[48] = {};  // the watchdog's socket for the ranks' life lines (life_line.h)
  // Set by the watchdog when another node's watchdog reports a death (watchdog_peers.h): a rank
  // whose transport aborts on the broken connection to that node is a consequence, not the cause.
  int32_t peer_node_death = 0;
};

/// Slot::crashed: the fatal-signal handler named the rank itself (the watchdog says nothing), or
/// the rank died of a fatal signal after a peer of its node began to exit (a transport's abort on
/// the broken connection: not the death to name).
constexpr int32_t kNamedItself = 1;
constexpr int32_t kAfterPeer = 2;
// Slot::flight_request: why a SIGUSR1 came (0: a live snapshot somebody asked for).
constexpr int32_t kFlightStall = 1;
constexpr int32_t kFlightDeath = 2;

/// The node's page (a fallback of one slot until start_watchdog maps the shared one), this rank's
/// slot, and this rank's world and node-local rank.
extern Header* g_header;
extern Slot* g_slots;  // the node's slots (local_size of them)
extern Slot* g_slot;   // this rank's
extern int g_rank;
extern int g_local;

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

/// Copies `src` into the fixed-size field `dst` (NUL-terminated, cut to fit).
void copy_field(char* dst, size_t size, const char* src);
/// "SIGSEGV (segmentation fault)", "SIGTERM", ….
const char* signal_name(int sig);
void sleep_ms(long ms);
/// The state letter of process `pid` in /proc/PID/stat ('R', 'S', 'T' stopped, 't' traced, 'Z'),
/// or 0 when it cannot be read.
char process_state(int pid);
bool is_stopped(int pid);
/// The ranks of the node that hold the others up (a stall, or a stop signal that cannot be agreed
/// on): stopped processes and ranks outside any collective while others wait in one; when every
/// rank is inside a collective, the one that moved last the longest ago. Sets `stalled[i]`;
/// returns how many, and the index of a rank that waits (for the collective it waits in), or -1.
int find_stalled(const Slot* slots, int count, bool* stalled, int* waiter);
/// "rank 1 (pid 42, host h, stopped by a signal, at step 3, outside any collective)", for each
/// stalled rank, then "; ranks 0, 2 wait for it in all_reduce (3 ranks, 'label')".
void describe_stall(Line& line, const Slot* slots, int count, const bool* stalled, int waiter);

}  // namespace tp::watch
