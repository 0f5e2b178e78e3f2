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

// Writes all `size` bytes to `fd` (write(2) may write fewer, or be interrupted), adding what it
// wrote to `written`; false with errno set when it fails.
bool write_all(int fd, const char* data, size_t size, int64_t& written) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;  // no progress: treat as an I/O error
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
    written += n;
  }
  return true;
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
  int64_t written = 0;
  if (!write_all(fd_, text.data(), text.size(), written)) fail(what_, "write", errno);
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
  replace_file(path, tmp, {text}, [&](ReplaceStep step, int err, int64_t) {
    switch (step) {
      case ReplaceStep::Create:
        fail(w, "opening " + tmp, err);
      case ReplaceStep::Write:
        fail(w, "write", err);
      case ReplaceStep::Fsync:
        fail(w, "fsync of " + tmp, err);
      case ReplaceStep::Close:
        fail(w, "close", err);
      case ReplaceStep::Rename:
        fail(w, "renaming " + tmp + " onto " + path, err);
    }
  });
}

void replace_file(const std::string& path, const std::string& tmp,
                  const std::vector<std::string_view>& pieces, const ReplaceFailure& fail) {
  int fd = -1;
  int64_t written = 0;
  auto failed = [&](ReplaceStep step) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    fail(step, err, written);
    throw Error(detail::str_cat("replacing ", path, " failed: ", errno_text(err)), 1);  // unreached
  };
  do {
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) failed(ReplaceStep::Create);
  for (const std::string_view& piece : pieces)
    if (!write_all(fd, piece.data(), piece.size(), written)) failed(ReplaceStep::Write);
  if (::fsync(fd) != 0 && errno != EINVAL) failed(ReplaceStep::Fsync);
  // close() is not retried after EINTR on Linux: the descriptor is released either way.
  if (::close(std::exchange(fd, -1)) != 0 && errno != EINTR) failed(ReplaceStep::Close);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) failed(ReplaceStep::Rename);
}

}  // namespace tp
