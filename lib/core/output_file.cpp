#include "core/output_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace tp {

std::string errno_text(int err) {
  static const std::pair<int, const char*> kNames[] = {
      {ENOSPC, "ENOSPC"},   {EROFS, "EROFS"},   {EIO, "EIO"},       {EDQUOT, "EDQUOT"},
      {EFBIG, "EFBIG"},     {EACCES, "EACCES"}, {EPERM, "EPERM"},   {ENOENT, "ENOENT"},
      {ENOTDIR, "ENOTDIR"}, {EISDIR, "EISDIR"}, {EEXIST, "EEXIST"}, {ENAMETOOLONG, "ENAMETOOLONG"},
      {EPIPE, "EPIPE"},     {EBADF, "EBADF"},   {EINVAL, "EINVAL"}, {ENXIO, "ENXIO"},
      {EMFILE, "EMFILE"},   {EXDEV, "EXDEV"},   {EBUSY, "EBUSY"},   {ETXTBSY, "ETXTBSY"},
      {ELOOP, "ELOOP"}};
  std::string s = std::strerror(err);
  for (const auto& [code, name] : kNames)
    if (code == err) return s + " (" + name + ")";
  return s + " (errno " + std::to_string(err) + ")";
}

namespace {
// "--log-json /dev/full: write failed: No space left on device (ENOSPC)"
[[noreturn]] void fail(const std::string& what, const std::string& step, int err) {
  throw Error(detail::str_cat(what, ": ", step, " failed: ", errno_text(err)), 1);
}

int open_for_writing(const std::string& path, const std::string& what, int flags) {
  int fd = -1;
  do {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | flags, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) fail(what, "opening " + path, errno);
  return fd;
}

void write_all(int fd, const std::string& text, const std::string& what) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(what, "write", errno);
    if (n == 0) fail(what, "write", EIO);  // no progress: treat as an I/O error
    done += static_cast<size_t>(n);
  }
}

void close_checked(int fd, const std::string& what) {
  // close() is not retried after EINTR on Linux: the descriptor is released either way.
  if (::close(fd) != 0 && errno != EINTR) fail(what, "close", errno);
}
}  // namespace

OutputFile::OutputFile(const std::string& path, const std::string& what, Mode mode)
    : fd_(open_for_writing(path, what, mode == Mode::Append ? O_APPEND : O_TRUNC)), what_(what) {}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), what_(std::move(other.what_)) {}

OutputFile& OutputFile::operator=(OutputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    what_ = std::move(other.what_);
  }
  return *this;
}

void OutputFile::write(const std::string& text) {
  TP_CHECK(fd_ >= 0, what_, ": write to a closed file");
  write_all(fd_, text, what_);
}

void OutputFile::close() {
  if (fd_ < 0) return;
  close_checked(std::exchange(fd_, -1), what_);
}

void write_file(const std::string& path, const std::string& text, const std::string& what) {
  OutputFile f(path, what.empty() ? path : what, OutputFile::Mode::Truncate);
  f.write(text);
  f.close();
}

void write_file_atomic(const std::string& path, const std::string& text, const std::string& what) {
  const std::string w = what.empty() ? path : what, tmp = path + ".tmp";
  try {
    const int fd = open_for_writing(tmp, w, O_TRUNC);
    try {
      write_all(fd, text, w);
      if (::fsync(fd) != 0 && errno != EINVAL) fail(w, "fsync of " + tmp, errno);
    } catch (...) {
      ::close(fd);
      throw;
    }
    close_checked(fd, w);
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      fail(w, "renaming " + tmp + " onto " + path, errno);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
}

}  // namespace tp
