// life_line.cpp — the ranks' connections to the node's watchdog (life_line.h).
#include "life_line.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace tp::life_line {

namespace {

// The address of `name` in the abstract namespace (sun_path starts with a NUL).
socklen_t address(const char* name, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  const size_t n = std::min(std::strlen(name), sizeof addr->sun_path - 2);
  std::memcpy(addr->sun_path + 1, name, n);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

}  // namespace

int listen_for(int ranks, char* name, size_t size) {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  std::snprintf(name, size, "tp-life-%d-%ld", static_cast<int>(::getpid()),
                static_cast<long>(ts.tv_nsec));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  const socklen_t len = address(name, &addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd, ranks + 1) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int connect_to(const char* name, int local) {
  if (name[0] == '\0') return -1;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  const socklen_t len = address(name, &addr);
  const int32_t index = local;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::send(fd, &index, sizeof index, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof index)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int accept_all(int listener, pollfd* lines, int ranks) {
  int accepted = 0;
  // Every rank connected before the watchdog started: the connections are queued, and a
  // non-blocking accept takes them all.
  ::fcntl(listener, F_SETFL, O_NONBLOCK);
  for (int k = 0; k < ranks; ++k) {
    const int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) break;
    int32_t index = -1;
    if (::recv(fd, &index, sizeof index, MSG_DONTWAIT) != static_cast<ssize_t>(sizeof index) ||
        index < 0 || index >= ranks || lines[index].fd >= 0) {
      ::close(fd);
      continue;
    }
    lines[index] = {fd, POLLIN, 0};
    ++accepted;
  }
  ::close(listener);
  return accepted;
}

bool ended(int fd) {
  char buf[64];
  const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
}

bool process_ending(int pid) {
  // "/proc/<pid>/stat", written by hand: snprintf is not async-signal-safe.
  char path[48] = "/proc/";
  char digits[16];
  int k = 0;
  for (unsigned u = static_cast<unsigned>(pid); k == 0 || u != 0; u /= 10)
    digits[k++] = static_cast<char>('0' + u % 10);
  size_t at = 6;
  while (k > 0) path[at++] = digits[--k];
  std::memcpy(path + at, "/stat", 6);
  const int fd = ::open(path, O_RDONLY);
  if (fd < 0) return true;  // reaped already
  char buf[512];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return true;
  buf[n] = '\0';
  // "pid (comm) S ppid pgrp session tty tpgid flags ...": the state after the last ')', the flags
  // six fields on; PF_EXITING (0x4) is set from the moment the process starts to exit.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ') return false;
  const char state = p[2];
  if (state == 'Z' || state == 'X' || state == 'x') return true;
  int field = 0;
  for (p += 2; *p != '\0' && field < 6; ++p)
    if (*p == ' ') ++field;
  unsigned long flags = 0;
  for (; *p >= '0' && *p <= '9'; ++p) flags = flags * 10 + static_cast<unsigned long>(*p - '0');
  return (flags & 0x4UL) != 0;
}

}  // namespace tp::life_line
