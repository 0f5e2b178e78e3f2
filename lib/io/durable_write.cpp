#include "io/durable_write.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/output_file.h"

namespace tp::durable {

namespace {

// The file a save to `path` really replaces: `path` itself, or, when it is a symbolic link (a
// chain of them), the file the last link names, so the link survives and points at the new data.
std::string save_target(const std::string& path) {
  std::string p = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::vector<char> buf(PATH_MAX + 1);
    const ssize_t n = ::readlink(p.c_str(), buf.data(), buf.size() - 1);
    TP_CHECK_INPUT(n > 0, "cannot write checkpoint ", path, ": cannot read the symbolic link ", p,
                   ": ", std::strerror(errno));
    const std::string link(buf.data(), static_cast<size_t>(n));
    const size_t slash = p.rfind('/');
    p = link[0] == '/' || slash == std::string::npos ? link : p.substr(0, slash + 1) + link;
  }
  TP_CHECK_INPUT(false, "cannot write checkpoint ", path, ": too many levels of symbolic links");
  return p;
}

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Paths this process holds a SaveLock on (flock locks belong to an open file, so a second lock
// from the same process on a new descriptor would refuse itself).
std::vector<std::string>& held_locks() {
  static std::vector<std::string> held;
  return held;
}

}  // namespace

SaveLock::SaveLock(const std::string& path) : target_(save_target(path)) {
  auto& held = held_locks();
  if (std::find(held.begin(), held.end(), target_) != held.end()) return;  // already ours
  lock_path_ = target_ + ".lock";
  for (int attempt = 0; attempt < 5; ++attempt) {
    const int fd = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    TP_CHECK_INPUT(fd >= 0, "cannot write checkpoint ", path, ": cannot create its lock file ",
                   lock_path_, ": ", std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      char owner[32] = {0};
      const ssize_t n = ::pread(fd, owner, sizeof owner - 1, 0);
      ::close(fd);
      TP_CHECK_INPUT(false, "another process (pid ", n > 0 ? owner : "?", ") is saving to ",
                     target_, " right now; give this run another --save path");
    }
    // The lock file may have been unlinked by its previous holder between our open and flock:
    // then we hold a lock nobody else sees. Retry until the locked file is the one at the path.
    struct stat mine {
    }, named{};
    if (::fstat(fd, &mine) == 0 && ::stat(lock_path_.c_str(), &named) == 0 &&
        mine.st_ino == named.st_ino && mine.st_dev == named.st_dev) {
      const std::string pid = std::to_string(static_cast<long>(::getpid()));
      if (::ftruncate(fd, 0) == 0 && ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
        // the pid is only for the message of a refused process; nothing depends on it
      }
      fd_ = fd;
      held.push_back(target_);
      return;
    }
    ::close(fd);
  }
  TP_CHECK_INPUT(false, "cannot lock ", lock_path_, " (it keeps being replaced)");
}

SaveLock::~SaveLock() {
  if (fd_ < 0) return;
  ::unlink(lock_path_.c_str());  // while still locked: a waiting process then retries
  ::close(fd_);
  auto& held = held_locks();
  held.erase(std::remove(held.begin(), held.end(), target_), held.end());
}

namespace {
// The pid of a leftover's name ("….tmp.<pid>") or lock file (it holds its pid, perhaps with a
// newline when a person wrote it), or -1.
long pid_in(std::string digits) {
  while (!digits.empty() && (digits.back() == '\n' || digits.back() == ' ')) digits.pop_back();
  if (digits.empty() || digits.size() > 9 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::strtol(digits.c_str(), nullptr, 10);
}

// True when process `pid` has ended (and is not this one): its leftovers may go.
bool ended(long pid) {
  return pid > 0 && pid != static_cast<long>(::getpid()) &&
         ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

// Removes lock file `path` when nobody holds its lock and the process it names has ended; unlinked
// while locked, as SaveLock's destructor does, so a process that opens it meanwhile retries.
bool remove_dead_lock(const std::string& path, long* pid) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  bool removed = false;
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
    char owner[16] = {0};
    const ssize_t n = ::pread(fd, owner, sizeof owner - 1, 0);
    *pid = pid_in(n > 0 ? std::string(owner, static_cast<size_t>(n)) : "");
    removed = ended(*pid) && ::unlink(path.c_str()) == 0;
  }
  ::close(fd);  // also releases the lock
  return removed;
}
}  // namespace

std::vector<Leftover> remove_dead_leftovers(const std::string& folder,
                                            const std::function<bool(const std::string&)>& member) {
  std::vector<Leftover> removed;
  DIR* d = ::opendir(folder.empty() ? "." : folder.c_str());
  if (d == nullptr) return removed;
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) names.push_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string path = folder + name;
    long pid = -1;
    const size_t tmp = name.rfind(".tmp.");
    if (tmp != std::string::npos && member(name.substr(0, tmp))) {
      pid = pid_in(name.substr(tmp + 5));
      if (ended(pid) && std::remove(path.c_str()) == 0) removed.push_back({path, pid});
    } else if (name.size() > 5 && name.compare(name.size() - 5, 5, ".lock") == 0 &&
               member(name.substr(0, name.size() - 5)) && remove_dead_lock(path, &pid)) {
      removed.push_back({path, pid});
    }
  }
  return removed;
}

namespace {

// The folder of `target`, as a path that opendir/statvfs take ("." for a bare name).
std::string folder_of(const std::string& target) {
  const size_t slash = target.rfind('/');
  return slash == std::string::npos ? "." : target.substr(0, slash + 1);
}

// "1.23 GiB", "456 KiB": a byte count for a message.
std::string human_bytes(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.3g %s", bytes, units[u]);
  return buf;
}

// "" when the file system of `dir` has room for `bytes` more (statvfs: the blocks an unprivileged
// process may use), else what is missing, for a message.
std::string space_problem(const std::string& dir, int64_t bytes) {
  struct statvfs vfs {};
  if (bytes <= 0 || ::statvfs(dir.c_str(), &vfs) != 0) return "";  // unknown: the write will tell
  const double avail = static_cast<double>(vfs.f_bavail) * static_cast<double>(vfs.f_frsize);
  if (static_cast<double>(bytes) <= avail) return "";
  return "it needs " + human_bytes(static_cast<double>(bytes)) + " but its folder " + dir +
         " has " + human_bytes(avail) + " free";
}

}  // namespace

void check_save_target(const std::string& path, int64_t bytes) {
  const std::string target = save_target(path);
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0)
    TP_CHECK_INPUT(S_ISREG(st.st_mode), "cannot write checkpoint ", path, ": ",
                   target == path ? "it" : target, " is ", file_kind(st.st_mode),
                   "; give the path of a file");
  const std::string dir = folder_of(target);
  errno = 0;
  TP_CHECK_INPUT(::access(dir.c_str(), W_OK | X_OK) == 0, "cannot write checkpoint ", path,
                 ": its folder ", dir, ": ", errno_text(errno ? errno : EACCES));
  const std::string full = space_problem(dir, bytes);
  TP_CHECK_INPUT(full.empty(), "cannot write checkpoint ", path, ": ", full,
                 "; free some space or give a path on another file system");
}

void write(const std::string& path, const std::vector<std::string_view>& pieces) {
  check_save_target(path, 0);
  const std::string target = save_target(path);
  const SaveLock lock(target);
  const size_t slash = target.rfind('/');
  const std::string name = slash == std::string::npos ? target : target.substr(slash + 1);
  const std::vector<Leftover> gone =
      remove_dead_leftovers(slash == std::string::npos ? "" : target.substr(0, slash + 1),
                            [&](const std::string& file) { return file == name; });
  for (const Leftover& g : gone)
    std::fprintf(stderr, "note: removed %s, left behind by a save that was killed (pid %ld)\n",
                 g.path.c_str(), g.pid);

  // Every system call is checked where it happens (core/output_file.h's replace_file), and its
  // failure is one line naming the call, the file, how far the write got and errno; the temporary
  // file is then removed and `path` is untouched. fsync before the rename, so a crash cannot leave
  // a renamed file with missing data. The temporary name carries the pid: a leftover of a killed
  // save names its process, so remove_dead_leftovers knows when it may go.
  const std::string tmp = target + ".tmp." + std::to_string(static_cast<long>(::getpid()));
  int64_t total = 0;
  for (const std::string_view& piece : pieces) total += static_cast<int64_t>(piece.size());
  replace_file(target, tmp, pieces, [&](ReplaceStep step, int err, int64_t written) {
    const char* const kCalls[] = {"creating", "write to", "fsync of", "close of", "renaming"};
    TP_CHECK(false, "cannot write checkpoint ", path, ": ", kCalls[static_cast<int>(step)], " ",
             tmp, " failed",
             step == ReplaceStep::Write
                 ? " after " + std::to_string(written) + " of " + std::to_string(total) + " bytes"
                 : std::string(),
             ": ", errno_text(err));
  });
  // The rename is durable once the folder is synced; a file system that cannot sync a folder
  // (EINVAL) has nothing to lose here.
  const int dir_fd = ::open(folder_of(target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    const bool synced = ::fsync(dir_fd) == 0 || errno == EINVAL || errno == ENOTSUP;
    const int err = errno;
    ::close(dir_fd);
    TP_CHECK(synced, "checkpoint ", path, " was written but fsync of its folder ",
             folder_of(target), " failed: ", errno_text(err));
  }
}

}  // namespace tp::durable
