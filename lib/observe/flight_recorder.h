// flight_recorder.h — the flight recorder: this rank's last K collective and point-to-point calls,
// every communicator's, in a ring, written as one JSON-lines file when something goes wrong.
//
// Why. When a job hangs, the watchdog (launcher/watchdog.h) names the rank that stopped moving and
// the collective the others wait in; what it cannot say is which call each rank reached, on which
// group, and whether a rank never entered a call the others are in. PyTorch answers that with its
// flight recorder (a ring buffer per rank, dumped on a watchdog timeout and aligned across ranks by
// a tool); so does this: the communicator front hands every call here (core/call_recorder.h),
// numbered per communicator (call #N of one group is the same call on every member), and
// tools/tp_flight aligns the dumps (observe/flight_analysis.h).
//
// A record: the communicator's sequence number, its group (the grid axis: "TP group", "DP group",
// ..., "world"; the world ranks of its members), op, element count, dtype, root / peer, the
// ledger's label, the step (launcher.h: set_current_step), and three times on the real-time clock
// (seconds since 1970, so ranks of one host compare): issued (the front was entered), started (the
// call reached the backend: observe core/call_recorder.h) and completed (null while it is not).
//
// The dump, `DIR/flight-rank-R.jsonl`, written to a temporary file and renamed:
//   {"flight":1,"job":"…","rank":R,"world_size":N,"host":"…","pid":P,"step":S,"reason":"…",
//    "time":T,"capacity":K,"recorded":M}           the header; M calls recorded in all
//   {"group":G,"role":"TP group","ranks":[2,3],"rank":1,"size":2}        one per communicator
//   {"seq":…,"group":G,"op":"all_reduce","count":…,"dtype":"f32","peer":-1,"async":false,
//    "label":"mlp fc2","step":…,"issued":…,"started":…,"completed":…|null}   oldest first
//   {"end":true,"records":n}                         so that a cut file is seen as one
//
// The ring file. A SIGKILLed rank writes nothing, and under MPICH the others are killed within
// ~0.1 s of its death, before they can answer the watchdog. So the ring itself can live in a file
// mapping (launcher/flight_dumps.h maps DIR/flight-rank-R.ring, MAP_SHARED): the kernel keeps
// what a killed or stopped process stored there, and tp_flight reads the ring file of a rank
// without a dump (FlightRingHeader, then the entries; the same build reads what it writes). The
// launcher removes it when run_program returns.
//
// Cost: one uncontended lock, a few stores and two clock reads per call (docs/performance.md has
// the measured share of a step). The lock is there for the dumper thread (launcher/flight_dumps.h),
// which snapshots the ring while the program runs on (SIGUSR1).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/call_recorder.h"

namespace tp {

/// One recorded call (fixed size: recording allocates nothing).
struct FlightEntry {
  uint64_t index = 0;  ///< 1, 2, ... over every call of this rank (0: an empty slot)
  int32_t group = -1;
  int64_t sequence = 0;
  char op[24] = {};
  int64_t count = 0;
  Dtype dtype = Dtype::f32;
  int32_t peer = -1;
  bool async = false;
  char label[64] = {};
  int64_t step = -1;
  double issued = 0, started = 0, completed = 0;  ///< real-time seconds; completed 0: not yet
};

/// One group in the ring file (the first kRingGroups groups, kRingGroupRanks world ranks each).
constexpr int kRingGroups = 32;
constexpr int kRingGroupRanks = 64;
struct FlightRingGroup {
  char role[24] = {};
  int32_t rank = 0, size = 0, count = 0;  ///< count: world ranks stored (at most kRingGroupRanks)
  int32_t ranks[kRingGroupRanks] = {};
};

/// The head of a ring file; `capacity` FlightEntry follow it.
struct FlightRingHeader {
  char magic[8] = {'T', 'P', 'F', 'L', 'R', 'I', 'N', 'G'};
  uint32_t entry_size = sizeof(FlightEntry);
  uint32_t header_size = 0;  ///< sizeof(FlightRingHeader), set by the recorder
  char job[96] = {};
  char host[64] = {};
  int32_t rank = 0, world_size = 1;
  int64_t pid = 0;
  uint64_t capacity = 0;
  uint64_t next = 1;  ///< the index the next call gets
  int64_t step = -1;
  int32_t groups = 0;
  FlightRingGroup group[kRingGroups];
};

/// Bytes of a ring file of `capacity` entries.
size_t flight_ring_bytes(size_t capacity);

/// A communicator as the dump names it.
struct FlightGroup {
  std::string role;  ///< "TP group", ..., "world"
  std::vector<int> world_ranks;
  int rank = 0, size = 1;
};

/// Who writes the dump: the same `job` on every rank of one job.
struct FlightIdentity {
  std::string job;
  int rank = 0;
  int world_size = 1;
  std::string host;
  int64_t pid = 0;
};

class FlightRecorder : public CallRecorder {
 public:
  static constexpr size_t kDefaultCapacity = 4096;

  /// Dumps go to `dir` (created by nobody: the launcher checks it is writable). With `ring_file`
  /// (flight_ring_bytes(capacity) of zeroed memory, a file mapping) the ring lives there.
  FlightRecorder(FlightIdentity identity, std::string dir, size_t capacity = kDefaultCapacity,
                 void* ring_file = nullptr);

  int add_group(const std::string& role, const std::vector<int>& world_ranks, int rank,
                int size) override;
  uint64_t issued(int group, int64_t sequence, const IssuedCall& call) override;
  void started(uint64_t token) override;
  void completed(uint64_t token) override;
  /// Writes the dump file (see the top of this file); throws tp::Error when it cannot.
  void dump(const std::string& reason) override;

  /// The step the next calls belong to.
  void set_step(int64_t step) {
    step_.store(step, std::memory_order_relaxed);
    if (file_ != nullptr) file_->step = step;
  }
  /// The dump's file: DIR/flight-rank-R.jsonl.
  std::string path() const;
  /// The dump's text. `wait_ms`: how long to wait for the ring's lock before reading it unlocked (a
  /// fatal signal may have stopped the thread that held it); negative: wait as long as it takes.
  std::string snapshot(const std::string& reason, int wait_ms = -1) const;
  /// The records still in the ring, oldest first.
  std::vector<FlightEntry> entries() const;
  const std::vector<FlightGroup>& groups() const { return groups_; }

 private:
  std::vector<FlightEntry> entries_locked() const;
  FlightEntry* find(uint64_t token);

  FlightIdentity identity_;
  std::string dir_;
  mutable std::timed_mutex mutex_;
  std::vector<FlightEntry> owned_;  // the ring, without a ring file
  FlightEntry* ring_;
  size_t capacity_;
  FlightRingHeader* file_ = nullptr;
  uint64_t next_ = 1;  // the index of the next call
  std::vector<FlightGroup> groups_;
  std::atomic<int64_t> step_{-1};
};

}  // namespace tp
