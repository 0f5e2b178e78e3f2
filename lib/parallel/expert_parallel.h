// expert_parallel.h — expert parallelism (EP): the E experts of a mixture-of-experts layer
// (model/moe.h) spread over the ep ranks of an EP group, and the all-to-all that takes each token
// to the rank holding its expert and brings the expert's output back (issue 43, item 2).
//
// Placement. Rank r of the EP group holds the E/ep experts [r·E/ep, (r+1)·E/ep) (ExpertPlacement).
// The ranks of an EP group are data-parallel replicas of everything else (attention, the router,
// the norms, the embeddings): each routes its own tokens, and the router sends each (token,
// expert) assignment to the expert's owner. The EP groups are carved from the DP axis
// (parallel/process_grid.h): ep consecutive DP ranks form one; the ranks that hold the same
// experts in the other EP groups form the expert-data-parallel (EDP) group, over which the
// experts' gradients are summed (model/train.cpp).
//
// One pass (ExpertDispatch), after the layer has sorted its M kept assignments by expert:
//
//   plan(count per global expert)  the counts go to the owners, one all-to-all of E numbers
//                                  ("moe counts"): rank r learns, for each source s and each of
//                                  its experts i, how many rows s will send for i
//   dispatch(slots (M, h))         all_to_all_v: the rows for rank p go to p ("moe dispatch"),
//                                  then each rank reorders what arrived from source-major
//                                  (s, i) to expert-major (i, s), so each local expert's rows
//                                  are contiguous: (R, h), R = rows received
//   combine(expert rows (R, h))    the reverse: back to source-major, all_to_all_v to the
//                                  sources ("moe combine"): (M, h) in the slots' order again
//
// Backward uses the same plan the other way round: the output gradients are dispatched (as the
// tokens were) and the input gradients combined. Four all-to-alls per layer per step, each
// moving on average M·h·(ep − 1)/ep values out of every rank when the routing is balanced (the
// block to itself is a local copy): M = tokens × k, dropless.
//
// At ep = 1 (no group) the plan exchanges nothing and dispatch / combine return their input.
//
// Shape legend: M = this rank's kept assignments, R = rows received, h = hidden, E = experts,
// El = E/ep local experts. The project's full legend: core/device.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/device.h"
#include "core/tensor.h"

namespace tp {

/// Which rank of an EP group holds which experts.
struct ExpertPlacement {
  int experts = 1;                                ///< E
  int ep = 1;                                     ///< ranks in the EP group
  int rank = 0;                                   ///< this rank's place in it
  int local() const { return experts / ep; }      ///< El
  int first() const { return rank * local(); }    ///< the first expert held here
  int owner(int e) const { return e / local(); }  ///< the EP rank holding expert e
  bool holds(int e) const { return owner(e) == rank; }
};

/// The one line refusing an EP size for E experts (ep outside 1..4096, ep > 1 without experts, E
/// not divisible by ep); "" when E experts spread evenly over ep ranks. experts ≤ 0: a dense model.
std::string expert_parallel_problem(int experts, int ep);

/// The expert-major order of the rows one rank received (exercise 13). recv_counts[s·El + i]: the
/// rows source s sent for local expert i; they arrive source-major, source 0's block first and
/// inside it expert 0's rows, then expert 1's, …. Returns, for each row j of the expert-major
/// order (local expert 0's rows from source 0, 1, …, then expert 1's, …; each block's rows kept in
/// their order), the source-major row it is: out[j] = r. R = Σ recv_counts entries.
std::vector<int64_t> expert_major_order(const std::vector<int64_t>& recv_counts, int ep, int local);

class ExpertDispatch {
 public:
  /// `ep`: the EP group (null: ep = 1, nothing moves). Checks experts % ep (bad input).
  ExpertDispatch(Device& device, Communicator* ep, int experts);

  const ExpertPlacement& placement() const { return place_; }
  /// Plans one pass: per_expert[e] = this rank's rows for global expert e (the rows are sorted
  /// by expert, so those for rank p are contiguous). Collective over the EP group.
  void plan(const std::vector<int64_t>& per_expert);

  /// (M, h) slot rows → (R, h) rows for this rank's experts, expert-major. Collective.
  Tensor dispatch(const Tensor& slots, const char* label = "moe dispatch") const;
  /// (R, h) expert-major rows → (M, h) in the slots' order on their source ranks. Collective.
  Tensor combine(const Tensor& expert_rows, const char* label = "moe combine") const;

  /// (El + 1) offsets: local expert i's rows are [begin[i], begin[i + 1]) of dispatch's result.
  const std::vector<int64_t>& expert_begin() const { return begin_; }
  int64_t received() const { return begin_.back(); }
  /// Rows this rank sends to / receives from each EP rank in the last plan.
  const std::vector<int64_t>& send_rows() const { return send_rows_; }
  const std::vector<int64_t>& recv_rows() const { return recv_rows_; }
  /// From each source s, the rows for each local expert i: [s·El + i].
  const std::vector<int64_t>& recv_counts() const { return recv_counts_; }

 private:
  /// rows[ids[j]] for each j: the reorder between source-major and expert-major.
  Tensor reorder(const Tensor& rows, const Tensor& ids) const;

  Device& device_;
  Communicator* ep_;
  ExpertPlacement place_;
  std::vector<int64_t> send_rows_, recv_rows_, recv_counts_, begin_;
  Tensor to_expert_major_;  // (R): expert-major row j comes from source-major row [j]
  Tensor to_source_major_;  // (R): its inverse
};

}  // namespace tp
