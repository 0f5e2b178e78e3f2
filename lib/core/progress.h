// progress.h — where a rank's progress is recorded: the collective it is in, and the waits inside.
//
// The communicator's front (communicator.h) calls enter() when a collective starts on this rank and
// leave() when it returns; a backend that waits for its peers calls waiting() every few
// milliseconds while it waits. The launcher installs the one monitor of the process
// (launcher/watchdog.h: it records the calls where the node's watchdog reads them, so that a rank
// that stops making progress is named, and ends a wait that a stop signal made hopeless). Without
// one (unit tests, a program not started by run_program) nothing is recorded.
#pragma once

#include <string>

namespace tp {

class ProgressMonitor {
 public:
  virtual ~ProgressMonitor() = default;
  /// A collective starts on this rank: `op` ("all_reduce", "barrier", "wait all_gather"), the
  /// size of its group, and the ledger's label ("" when none). Calls may nest (a wrapper's call
  /// around the inner communicator's); the outermost one is the one recorded.
  virtual void enter(const char* op, int group_size, const std::string& label) = 0;
  /// The collective entered last has returned.
  virtual void leave() = 0;
  /// The backend is still waiting for its peers: may end the job (it does not return then).
  virtual void waiting() = 0;
};

/// The process's monitor, or nullptr.
ProgressMonitor* progress_monitor();
/// Installs `monitor` (nullptr: none). It must outlive every collective issued while installed.
void set_progress_monitor(ProgressMonitor* monitor);

/// enter() on construction and leave() on destruction, when a monitor is installed.
class ProgressScope {
 public:
  ProgressScope(const char* op, int group_size, const std::string& label)
      : monitor_(progress_monitor()) {
    if (monitor_ != nullptr) monitor_->enter(op, group_size, label);
  }
  ~ProgressScope() {
    if (monitor_ != nullptr) monitor_->leave();
  }
  ProgressScope(const ProgressScope&) = delete;
  ProgressScope& operator=(const ProgressScope&) = delete;

 private:
  ProgressMonitor* monitor_;
};

}  // namespace tp
