// life_line.h — how the node's watchdog learns which rank died first (launcher/watchdog.h).
//
// When one rank is killed, the launcher kills the others: MPICH's proxy as soon as the dead rank's
// connection to it closes. So the first death must be told from the bystanders' by when each
// was seen, and a pidfd (readable when a process has wholly ended) does not tell it: a killed
// process closes its files before it has ended, the proxy sees that and kills the others, and on a
// busy node a bystander can end before the rank that was killed (seen: 7 of 16 kills at np 4 on 2
// cores named a bystander). Its sockets tell it: each rank holds a connection, its life line, to
// the watchdog, and sends nothing on it after its index; the line reaches its end of file when the
// rank's files close, which is before the proxy can notice anything, and a bystander's closes only
// after the proxy has killed it. So the order in which the life lines end is the order of the
// deaths, every time; two seen ending at the same moment (a watchdog that woke late) are a tie the
// watchdog breaks by what the ranks were doing.
//
// Linux only (abstract UNIX sockets, /proc); each call is best effort: without a life line a
// rank's death is seen through its pidfd, as before.
#pragma once

#include <poll.h>

#include <cstddef>

namespace tp::life_line {

/// Local rank 0, before the watchdog forks: a listening socket for `ranks` life lines, its name
/// (in the abstract namespace: nothing on disk) written to `name` (`size` bytes). -1 on failure.
int listen_for(int ranks, char* name, size_t size);

/// Every rank of the node: connects to `name` and sends `local` (its local rank). The socket is
/// kept open (and closed on exec) until the process ends; -1 on failure.
int connect_to(const char* name, int local);

/// The watchdog, once every rank has connected: accepts the queued life lines of `listener` and
/// puts each into lines[its local rank] (`ranks` entries, POLLIN), then closes `listener`.
/// Allocates nothing (the watchdog is the child of a threaded process). Returns how many came.
int accept_all(int listener, pollfd* lines, int ranks);

/// The end of a life line whose poll said it is readable: true at end of file or an error (the
/// rank's files have closed), false for data (which is read and dropped).
bool ended(int fd);

/// In a fatal-signal handler (async-signal-safe): whether process `pid` has ended or is ending
/// (gone, a zombie, or exiting: /proc/PID/stat).
bool process_ending(int pid);

}  // namespace tp::life_line
