// agreement.h — the ranks agree on the outcome of something only some of them did (a checkpoint
// that one rank writes, a check that one rank makes), so that a failure ends every rank with the
// same line instead of one rank alone while the others wait in the next collective.
//
// Why it is needed: a bad-input error ends a job cleanly only when every rank raises it
// (core/error.h); the launcher's "every rank agrees" is a barrier on the whole job, which a rank
// still inside the program's own barrier would match, and then walk on into a collective that
// nobody ever joins. So a rank that failed must first take part in what its peers wait in
// (DeferredError), then every rank hears the failure in one more collective (agree_on_problem),
// and throws it.
//
// The agreement is two or three ordinary collectives of the Communicator: a rank that never
// arrives (stopped, stuck in a write) is seen by the stall detector like any other wait
// (core/progress.h, launcher/watchdog.h), which names it and ends the job; nothing here waits
// without that bound.
#pragma once

#include <exception>
#include <functional>
#include <string>

#include "core/communicator.h"
#include "core/device.h"

namespace tp {

/// Every rank passes its own problem, "" when it has none; every rank gets the same answer: the
/// problem of the lowest rank that has one, or "" when none has (collective over `comm`: an
/// all-reduce of one value, then, only when some rank has a problem, two broadcasts from it).
std::string agree_on_problem(Communicator& comm, Device& device, const std::string& mine);

/// Runs `action` on the ranks where `take_part` is set, catching what it throws, then agrees on
/// the outcome over `comm`: the lowest failing rank's message, or "" when it succeeded everywhere
/// (collective over `comm`, whatever `take_part`).
std::string agree_on_outcome(Communicator& comm, Device& device, bool take_part,
                             const std::function<void()>& action);

/// What a rank's part of a collective operation threw, held until the rank has also joined the
/// collectives its peers wait in:
///   DeferredError write;
///   if (comm.rank() == 0) write.run([&] { write_file(...); });
///   comm.barrier();  // the peers wait here whether or not the write failed
///   write.rethrow();
class DeferredError {
 public:
  /// Runs `action`; whatever it throws is kept for rethrow().
  void run(const std::function<void()>& action) {
    try {
      action();
    } catch (...) {
      held_ = std::current_exception();
    }
  }
  /// Throws what run() kept, if anything.
  void rethrow() const {
    if (held_) std::rethrow_exception(held_);
  }

 private:
  std::exception_ptr held_;
};

}  // namespace tp
