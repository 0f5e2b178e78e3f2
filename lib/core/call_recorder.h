// call_recorder.h — the hook through which the communicator front hands every call to the flight
// recorder (observe/flight_recorder.h), so that core/ names only this small interface.
//
// The front (core/communicator.cpp) is the one point every backend passes through (MPI, the NCCL
// communicator on a GPU or the CUDA emulator, the serial one) and every decorator too
// (core/forwarding_communicator.h). A decorator's call reaches the inner communicator's front
// nested inside its own; only the outermost call of a thread is recorded (the one the program
// made, with its label), and the nested ones mark it "started": the last nested entry is when the
// real call reached the backend (under --check-collectives, after the ranks agreed on it).
//
// The launcher installs the process's recorder (launcher/flight_dumps.h); without one (unit
// tests, a program not started by run_program) nothing is recorded and the front pays one atomic
// load per call.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tp {

/// One call as the front hands it over.
struct IssuedCall {
  const char* op = "";       ///< the ledger's operation ("all_reduce", "send", ...)
  int64_t count = 0;         ///< the ledger's N (elements)
  Dtype dtype = Dtype::f32;  ///< of the buffer
  int peer = -1;             ///< broadcast's root, a send's or recv's peer (group rank); else -1
  bool async = false;        ///< an *_async call (it completes when its Work does)
  const std::string* label = nullptr;  ///< the ledger's label
};

class CallRecorder {
 public:
  virtual ~CallRecorder() = default;
  /// A communicator's first recorded call: what it is, returns its group id (for issued()).
  /// `role` as Communicator::role() ("" for the world), `world_ranks` of its members in group
  /// order (empty: unknown), this rank's place in it and its size.
  virtual int add_group(const std::string& role, const std::vector<int>& world_ranks, int rank,
                        int size) = 0;
  /// Call number `sequence` (1, 2, ... per communicator) of group `group` is issued; returns a
  /// token for started() / completed() (0: not recorded).
  virtual uint64_t issued(int group, int64_t sequence, const IssuedCall& call) = 0;
  /// The call reached the backend (see the top of this file).
  virtual void started(uint64_t token) = 0;
  /// The call returned (blocking) or its Work completed (async).
  virtual void completed(uint64_t token) = 0;
  /// Writes this rank's dump now, on this thread (`reason`: "collective mismatch", ...).
  virtual void dump(const std::string& reason) = 0;
};

/// The process's recorder, or nullptr.
CallRecorder* call_recorder();
/// Installs `recorder` (nullptr: none). It must outlive every call issued while installed.
void set_call_recorder(CallRecorder* recorder);

/// Writes a dump when a recorder is installed (a no-op otherwise); never throws.
void dump_flight_record(const std::string& reason);

}  // namespace tp
