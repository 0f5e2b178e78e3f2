// watchdog_peers.cpp — the watchdogs of a job on several nodes share what they see
// (watchdog_peers.h).
#include "watchdog_peers.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>

namespace tp::watch {

Watch* g_watch = nullptr;

void send_peers(Watch& w, const Report& r, size_t except) {
  for (size_t i = static_cast<size_t>(w.peer_begin); i < w.fds.size(); ++i) {
    if (i == except || (w.hub && i == static_cast<size_t>(w.peer_begin)) || w.fds[i].fd < 0)
      continue;
    // MSG_NOSIGNAL: a peer that is gone is no reason to die here.
    if (::send(w.fds[i].fd, &r, sizeof r, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof r)) {
    }
  }
}

void tell_quiet(Watch& w) {
  if (w.told_quiet) return;
  w.told_quiet = true;
  Report r;
  r.kind = kQuiet;
  send_peers(w, r, w.fds.size());
}

[[noreturn]] void quiet_exit(Watch& w) {
  tell_quiet(w);
  ::_exit(0);
}

void announce_local_deaths(Watch& w) {
  for (int i = 0; i < g_header->local_size; ++i) {
    if (w.died_ns[static_cast<size_t>(i)] == 0 || w.reported[static_cast<size_t>(i)]) continue;
    w.reported[static_cast<size_t>(i)] = 1;
    Report r;
    r.kind = kDeath;
    r.rank = g_slots[i].rank;
    r.pid = g_slots[i].pid;
    r.crashed = g_slots[i].crashed;
    r.died_ns = w.died_ns[static_cast<size_t>(i)];
    r.step = g_slots[i].step;
    copy_field(r.host, sizeof r.host, g_header->host);
    send_peers(w, r, w.fds.size());
  }
}

void serve_peers(Watch& w) {
  const size_t begin = static_cast<size_t>(w.peer_begin);
  for (size_t i = begin; i < w.fds.size(); ++i) {
    if (w.fds[i].fd < 0 || w.fds[i].revents == 0) continue;
    if (w.hub && i == begin) {  // the listening socket: the next node
      const int c = ::accept(w.fds[i].fd, nullptr, nullptr);
      for (size_t j = begin + 1; c >= 0 && j < w.fds.size(); ++j)
        if (w.fds[j].fd < 0) {
          w.fds[j] = {c, POLLIN, 0};
          break;
        }
      continue;
    }
    Report r;
    if (::recv(w.fds[i].fd, &r, sizeof r, MSG_WAITALL) != static_cast<ssize_t>(sizeof r)) {
      ::close(w.fds[i].fd);  // end of file: that watchdog is gone
      w.fds[i].fd = -1;
      continue;
    }
    if (w.hub) send_peers(w, r, i);
    if (r.kind == kQuiet) w.peer_quiet = true;
    if (r.kind == kDeath && w.ndeaths < w.deaths.size()) w.deaths[w.ndeaths++] = r;
    if (r.kind == kDeath) g_header->peer_node_death = 1;  // for the ranks' on_fatal_signal
  }
}

void connect_watchdogs(MPI_Comm comm, Watch& w) {
  char where[96] = {};  // "host port"
  if (g_rank == 0) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof addr;
    if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::listen(fd, 256) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      std::snprintf(where, sizeof where, "%s %d", g_header->host, ntohs(addr.sin_port));
      w.fds[static_cast<size_t>(w.peer_begin)] = {fd, POLLIN, 0};
    } else if (fd >= 0) {
      ::close(fd);
    }
  }
  MPI_Bcast(where, sizeof where, MPI_CHAR, 0, comm);
  if (g_local != 0 || g_rank == 0 || where[0] == '\0') return;
  char host[80] = {}, port[16] = {};
  if (std::sscanf(where, "%79s %15s", host, port) != 2) return;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host, port, &hints, &found) != 0) return;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      w.fds[static_cast<size_t>(w.peer_begin)] = {fd, POLLIN, 0};
      break;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
}

}  // namespace tp::watch
