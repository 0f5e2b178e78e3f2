// comm_ledger.h — a record of every collective a communicator ran.
//
// Each record holds the op, the group size t, the elements and bytes of the logical buffer, and the
// bytes each rank sends under the ring model:
//
//   all-reduce       2 (t − 1) / t · N   (reduce-scatter, then all-gather, each moving (t − 1)/t of N;
//                                        the same for the max reduction, "all_reduce_max")
//   all-gather       (t − 1) / t · N     (N = the full, gathered buffer)
//   reduce-scatter   (t − 1) / t · N     (N = the full buffer before scattering)
//   broadcast        N                   (pipelined chain: every rank but the last forwards N)
//   send-recv        N                   (N = the buffer sent)
//   send / recv      N / 0               (point to point: the sender counts the message)
//   all-to-all-v     the rows sent to other ranks (N = the whole send buffer; the block a rank
//                    keeps crosses no link). Communicator::all_to_all_v sets it from the counts;
//                    from N alone, ring_wire_bytes gives an even split's (t − 1) / t · N.
//
// With t = 1 every op moves nothing. The label says where the call came from ("f backward", a
// lesson step...): code pushes labels with CommLedger::Scope.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tp {

/// One collective call as seen by this rank.
struct CommRecord {
  /// "all_reduce", "all_reduce_max", "all_gather", "reduce_scatter", "broadcast", "send_recv",
  /// "send", "recv", "all_to_all_v"
  std::string op;
  int group_size = 1;     ///< t, the ranks in the communicator
  int64_t elements = 0;   ///< N: elements of the logical buffer (see the table above)
  int64_t bytes = 0;      ///< N · element size: 4 N for f32, 2 N for bf16
  double wire_bytes = 0;  ///< bytes this rank sends under the ring model
  bool async = false;     ///< issued through an *_async call
  double seconds = 0;  ///< wall time of the call (for an async call: of issuing it, not of waiting)
  std::string label;   ///< the scope(s) active when it was issued, joined by '/'
};

/// The ring-model bytes one rank sends for `op` on a buffer of `bytes` (N) in a group of `t`:
/// \f$2\frac{t-1}{t}N\f$ for an all-reduce (a reduce-scatter, then an all-gather),
/// \f$\frac{t-1}{t}N\f$ for an all-gather (N: the gathered buffer) or a reduce-scatter (N: the
/// buffer before scattering).
double ring_wire_bytes(const std::string& op, int t, int64_t bytes);

/// Append-only list of CommRecords, with labels pushed by scopes.
class CommLedger {
 public:
  /// Records one call; fills bytes and wire_bytes from op, t, elements and the element size in
  /// bytes (4: f32, 2: bf16). Returns its index.
  size_t record(const std::string& op, int group_size, int64_t elements, bool async = false,
                int64_t element_size = 4);
  /// Sets the wall time of record `index`.
  void set_seconds(size_t index, double seconds) { records_.at(index).seconds = seconds; }
  /// Sets the wire bytes of record `index` (all_to_all_v: what its counts send to other ranks).
  void set_wire_bytes(size_t index, double bytes) { records_.at(index).wire_bytes = bytes; }
  const std::vector<CommRecord>& records() const { return records_; }
  size_t size() const { return records_.size(); }
  void clear() { records_.clear(); }
  /// Sum of wire_bytes over records [from, size()).
  double wire_bytes_since(size_t from) const;
  /// Sum of seconds over records [from, size()).
  double seconds_since(size_t from) const;

  /// Pushes a label for the lifetime of the scope object.
  class Scope {
   public:
    Scope(CommLedger& ledger, const std::string& label);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    CommLedger& ledger_;
  };

 private:
  std::vector<CommRecord> records_;
  std::vector<std::string> labels_;
};

}  // namespace tp
