// durable_write.h — saving a file so that neither a crash nor a second run can spoil it.
//
// A checkpoint is hours of training; a save that dies half-way (killed, out of disk, power lost)
// must leave the last good file as it was, and two runs saving to one path must not overwrite each
// other. durable::write does each step that guarantees this, and this header offers the steps a
// caller needs on their own (a run takes the lock at its start and checks the space before it
// trains):
//
//   check_save_target      the path is a file (or nothing yet), its folder writable, with room
//   SaveLock               one process at a time saves to a path ("<path>.lock", flock(2))
//   remove_dead_leftovers  what saves that were killed left: "<path>.tmp.<pid>", "<path>.lock"
//   write                  all of them, then the data to "<path>.tmp.<pid>", fsync, close, rename
//                          onto the path, fsync of its folder
//
// The file format is the caller's (io/safetensors.h lays out the bytes; this writes them). The
// messages name the file a "checkpoint": the checkpoints are what is saved this way.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tp::durable {

/// Writes `pieces`, back to back, as the file at `path`: first to `path` + ".tmp.<pid>" (written,
/// fsync'ed, closed), then std::rename onto `path` (and the folder fsync'ed), so a reader never
/// sees a half-written checkpoint. Any failed system call (open, write, fsync, close, rename) is a
/// tp::Error (exit code 1) at once, naming the call, the path, how many bytes were written and
/// errno ("No space left on device (ENOSPC)"); the temporary file is then removed and whatever was
/// at `path` is untouched.
///
/// What `path` may be: a regular file (replaced) or nothing yet (created); a symbolic link is
/// followed and the file it names is replaced the same way, so the link keeps pointing at the
/// new data; a directory, FIFO, device or socket is refused (bad input). While it writes it
/// holds a SaveLock on the path (another process saving there is refused, not silently
/// overwritten), and first removes "<path>.tmp.<pid>" files of saves that were killed (their
/// process is gone), naming each on stderr.
void write(const std::string& path, const std::vector<std::string_view>& pieces);

/// Checks, before anything is written, that a file of `bytes` bytes can be saved at `path` (0: do
/// not look at the space): the path (or the file a symbolic link names) is a regular file or does
/// not exist yet, its folder is writable, and the folder's file system has `bytes` free (statvfs;
/// the old file stays until the new one is complete, so its space does not count). Each problem
/// is a bad-input error naming the path, e.g. "cannot write checkpoint /dev/full: it is a device;
/// give the path of a file" (the caller names the flag).
void check_save_target(const std::string& path, int64_t bytes);

/// Removes what saves killed mid-write left in `folder` ("" for the working folder, else ending
/// in '/') beside the files whose names `member` accepts: "<name>.tmp.<pid>" (the partial data)
/// and "<name>.lock" (its lock, holding the pid), when that process has ended and is not this one,
/// and for a lock, when nobody holds it. Another live run's files are never touched. Returns each
/// file removed and the pid it belonged to.
struct Leftover {
  std::string path;
  long pid = 0;
};
std::vector<Leftover> remove_dead_leftovers(const std::string& folder,
                                            const std::function<bool(const std::string&)>& member);

/// An exclusive claim on a save path, for as long as the object lives: a second process that
/// tries to save to the same file (say, a second run started with the same --save) gets a
/// bad-input error naming the holder's pid instead of silently overwriting the first run's
/// result. Implemented with flock(2) on "<path>.lock" (removed again by the destructor), on the
/// file a symbolic link names. A process may take it more than once (durable::write inside a run
/// that already holds it).
class SaveLock {
 public:
  explicit SaveLock(const std::string& path);
  ~SaveLock();
  SaveLock(const SaveLock&) = delete;
  SaveLock& operator=(const SaveLock&) = delete;

 private:
  std::string target_, lock_path_;
  int fd_ = -1;
};

}  // namespace tp::durable
