// flight_analysis.h — reads the flight recorder's dumps (observe/flight_recorder.h) of one job and
// says what held it up: tools/tp_flight prints this, tests call it on synthetic dumps.
//
// Alignment. A communicator numbers its calls 1, 2, ... and every member makes the same calls in
// the same order, so call #N of one group is the same call on each member's dump (a group is known
// by its role and world ranks; two alike, the world and a TP group that spans it, are told apart by
// the order they were first used). A group with point-to-point calls (a pipeline's stages send and
// receive different sequences) is not aligned.
//
// The diagnosis, the first that applies:
//   1. a mismatch: the first sequence number of a group where two ranks called different ops, counts
//      or dtypes ("collective #57 of the world of world ranks 0, 1: rank 0 called all_reduce(16 KiB,
//      'mlp fc2'), rank 1 called all_gather(…)");
//   2. a rank that never entered a call the others of its group wait in: "rank 3 (host B, step 812)
//      never entered collective #4417 all_reduce(1 MiB, 'mlp fc2') on the TP group of world ranks
//      2, 3; its last completed was #4416; rank 2 waits in #4417" (of several laggards, one outside
//      every call first, then one that left only its ring file: the others wait for it elsewhere);
//   3. a rank without a dump (SIGKILLed, or stopped and never resumed): who is missing, and what the
//      others last saw of it (the call they wait in on a group it belongs to, the last one they
//      completed with it);
//   4. every rank is in the same call, nobody lags: the call does not complete (a rank that left
//      only its ring file, stopped or killed inside it, is named);
//   5. "all ranks completed everything: the stall is outside the collectives (step N, after #…)".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tp {

/// One record of a dump.
struct FlightCall {
  int64_t seq = 0;
  int group = 0;
  std::string op;
  int64_t count = 0;
  std::string dtype;
  int peer = -1;
  bool async = false;
  std::string label;
  int64_t step = -1;
  double issued = 0, started = 0, completed = 0;  ///< completed 0: not completed
};

/// One communicator of a dump.
struct FlightGroupInfo {
  std::string role;
  std::vector<int> world_ranks;
};

/// One rank's dump.
struct FlightDump {
  std::string file;
  std::string job;
  int rank = 0;
  int world_size = 1;
  std::string host;
  int64_t pid = 0;
  int64_t step = -1;
  std::string reason;
  bool from_ring = false;  ///< read from the rank's ring file: it wrote no dump (stopped, killed)
  std::vector<FlightGroupInfo> groups;
  std::vector<FlightCall> calls;  ///< oldest first
};

/// Parses one dump's text; `name` names it in errors. A cut or malformed file is a bad-input
/// tp::Error (exit 2) naming the file and the line.
FlightDump parse_flight_dump(const std::string& text, const std::string& name);

/// The ring file of a rank that wrote no dump (observe/flight_recorder.h: FlightRingHeader and
/// its entries, as the rank left them); a damaged one is a bad-input tp::Error.
FlightDump parse_flight_ring(const std::string& bytes, const std::string& name);

/// Every flight-rank-*.jsonl in `dir`, by rank, and the ring file (flight-rank-R.ring) of each rank
/// without one. Bad input (one line, exit 2): no such folder, no
/// dump in it, a truncated or malformed file, dumps of two different jobs, two dumps of one rank.
std::vector<FlightDump> read_flight_dumps(const std::string& dir);

/// What the dumps say.
struct FlightDiagnosis {
  std::string kind;   ///< "mismatch", "never_entered", "missing", "in_flight", "all_completed"
  std::string line;   ///< the one line
  int rank = -1;      ///< the rank named (world rank; -1: none)
  int64_t seq = 0;    ///< the call named (0: none)
  std::string op;     ///< its op
  std::string group;  ///< "the TP group of world ranks 2, 3"
  std::vector<int> waiting;  ///< world ranks waiting in that call
  std::vector<int> missing;  ///< world ranks without a dump
  std::string job;
};

FlightDiagnosis diagnose_flight(const std::vector<FlightDump>& dumps);

/// The last `rows` calls of each aligned group, one column per rank (✓ completed, "wait" issued and
/// not completed, "-" not entered), the diagnosis's group first.
std::string flight_tail(const std::vector<FlightDump>& dumps, const FlightDiagnosis& d, int rows);

/// The diagnosis as one JSON object (for --json).
std::string flight_json(const FlightDiagnosis& d);

}  // namespace tp
