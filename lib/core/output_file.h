// output_file.h — output files (logs, traces, plots, exported configs) whose every write is checked.
//
// Opening, each write and closing are checked; a failure throws a tp::Error at the moment it
// happens, one line naming the file and errno's text and name:
//
//   "--log-json /dev/full: write failed: No space left on device (ENOSPC)"
//   "config.json of --export-hf out/config.json: cannot create out/config.json.tmp: Read-only file
//    system (EROFS)"
//
// The error's exit code is 1 (a failure, not bad input): only the rank that writes sees it, so the
// launcher aborts the job with that line (launcher.h), and the run's exit code says it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tp {

/// errno's text and its name: "No space left on device (ENOSPC)".
std::string errno_text(int err);

/// A file written piece by piece, e.g. a log appended to once per step.
class OutputFile {
 public:
  enum class Mode { Truncate, Append };
  OutputFile() = default;
  /// Opens (creating if needed) `path`; `what` heads every message ("--log-json run.jsonl").
  OutputFile(const std::string& path, const std::string& what, Mode mode);
  ~OutputFile();  ///< closes without checking (call close() to check)
  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&& other) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  bool is_open() const { return fd_ >= 0; }
  /// Writes all of `text` (short writes are continued, EINTR retried).
  void write(const std::string& text);
  /// Closes the file; a failure reported by close (a deferred EIO or ENOSPC) throws.
  void close();

 private:
  int fd_ = -1;
  std::string what_;
};

/// Writes `text` to `path`, replacing what was there, in place (so `path` may be a device such as
/// /dev/full or /dev/stdout). `what` heads the messages; empty: the path.
void write_file(const std::string& path, const std::string& text, const std::string& what = "");

/// Writes `text` to `path` atomically: to `path`.tmp, then renamed onto `path` (replace_file), so a
/// failure leaves what was at `path` as it was (and removes the temporary file).
void write_file_atomic(const std::string& path, const std::string& text,
                       const std::string& what = "");

/// A step of replace_file, for the caller's message when it fails.
enum class ReplaceStep { Create, Write, Fsync, Close, Rename };
/// Called with the step that failed, its errno and the bytes written by then; it must throw.
using ReplaceFailure = std::function<void(ReplaceStep step, int err, int64_t written)>;

/// Replaces the file at `path` with `pieces`, written back to back, so that no one ever finds a
/// half-written file there: writes them to `tmp` (created, or truncated), fsyncs it (so a crash
/// cannot leave a renamed file with missing data), closes it and renames it onto `path` (one
/// atomic step: a reader sees the old file or the new one). Every system call is checked where it
/// happens; when one fails, `tmp` is removed, `path` is left as it was and `fail` throws the
/// caller's message. A file system that cannot sync a file (fsync's EINVAL) has nothing to lose.
/// write_file_atomic uses it, and io/durable_write.h for checkpoints (adding the lock, a
/// temporary name per process and the fsync of the folder).
void replace_file(const std::string& path, const std::string& tmp,
                  const std::vector<std::string_view>& pieces, const ReplaceFailure& fail);

}  // namespace tp
