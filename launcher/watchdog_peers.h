// watchdog_peers.h — the watchdogs of a job on several nodes, and the watchdog's state
// (launcher/watchdog.h). Internal to launcher/.
#pragma once

#include <mpi.h>
#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "node_page.h"

namespace tp::watch {

// The watchdogs of a job on several nodes share what they see over TCP: the hub (world rank 0's
// node's watchdog) accepts one connection from every other node's watchdog and forwards what each
// sends to the others. A death is reported at once, with the time it was seen; each watchdog
// that saw a death waits kDecide for the others' reports, and only the one whose death came first
// prints the line (the others' ranks were ended by the launcher). The line must be out quickly:
// MPICH's proxies, which forward each node's output, are gone soon after the launcher's kills.
constexpr int32_t kDeath = 1;  // a rank of the sender's node ended
constexpr int32_t kQuiet = 2;  // the job ends normally or with its own message: say nothing
constexpr int64_t kDecide = kSecond / 20;
struct Report {
  int32_t kind = 0;
  int32_t rank = 0, pid = 0, crashed = 0;
  int64_t died_ns = 0;  // CLOCK_REALTIME; ties within one node already broken (died_before)
  int64_t step = -1;
  char host[64] = {};
};

// The watchdog's state, allocated before the fork (the child of a threaded process must not
// allocate). fds: [0] the socket from local rank 0, [1, count] a pidfd per rank of the node,
// [count + 1, 2 count] their life lines (life_line.h), then on the hub its listening socket and one
// connection per other node, elsewhere the hub's.
struct Watch {
  std::vector<pollfd> fds;
  std::vector<int64_t> died_ns;  // per rank of the node: CLOCK_REALTIME of its end, 0: alive
  std::vector<char> reported;    // per rank of the node: in `deaths` already
  std::vector<char> stalled;
  std::vector<Report> deaths;  // every node's deaths heard of (world size)
  size_t ndeaths = 0;
  bool hub = false;         // this is world rank 0's node
  int peer_begin = 0;       // first index of the peer sockets in fds
  bool told_quiet = false;  // kQuiet sent
  bool peer_quiet = false;  // kQuiet heard
  int life_listener = -1;   // where the life lines wait to be accepted
};
extern Watch* g_watch;  // the watchdog process's state (set by watchdog_main)

/// Sends `r` to every peer socket but `except` (the hub's listening socket is never written).
void send_peers(Watch& w, const Report& r, size_t except);
/// Tells the other nodes' watchdogs to say nothing (once).
void tell_quiet(Watch& w);
/// tell_quiet, then the watchdog exits.
[[noreturn]] void quiet_exit(Watch& w);
/// Tells the peers of this node's new deaths at once, with the times they were seen (for their
/// decision; this node's own is made from its slots).
void announce_local_deaths(Watch& w);
/// The other nodes' sockets: the hub accepts connections and forwards what it reads; every
/// watchdog keeps the deaths and notes "quiet".
void serve_peers(Watch& w);
/// Collective over `comm` (the ranks, before the watchdog forks): world rank 0 opens a listening
/// TCP socket for its watchdog (the hub) and tells every rank where; local rank 0 of every other
/// node connects to it. Best effort: a node that cannot connect prints its own lines, as on one.
void connect_watchdogs(MPI_Comm comm, Watch& w);

}  // namespace tp::watch
