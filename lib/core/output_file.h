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

#include <string>

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

/// Writes `text` to `path` atomically: to `path`.tmp, then renamed onto `path`, so a failure leaves
/// what was at `path` as it was (and removes the temporary file).
void write_file_atomic(const std::string& path, const std::string& text,
                       const std::string& what = "");

}  // namespace tp
