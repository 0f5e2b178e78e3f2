// process_grid.h — the world's ranks as a grid with four named axes, tp × cp × dp × pp: tensor
// parallelism inside each row, context parallelism next, data parallelism down each column,
// pipeline stages outermost.
//
//   world rank  r = ((pp_rank · dp + dp_rank) · cp + cp_rank) · tp + tp_rank
//                                           (tp innermost, then cp, dp, pp outermost)
//   TP group    = {…, r − 1, r, r + 1, …}  tp adjacent ranks: one stage of one model replica, split
//   CP group    = ranks tp apart            the same shard, each holding S/cp of every sequence
//                                           (parallel/context_parallel.h); cp = 1 without --cp
//   DP group    = ranks tp · cp apart       the same shard of the same stage in every replica
//   PP group    = ranks tp · cp · dp apart  the stages of one replica's shard, in stage order
//
// CP sits next to TP because it moves the most after TP: every layer's keys and values go around
// its ring (parallel/ring_attention.h), where DP moves the gradients once a step.
//
// np 4 = tp 2 × dp 2 (pp 1):      tp_rank 0   tp_rank 1
//                     dp_rank 0   rank 0      rank 1      ← TP group {0, 1}
//                     dp_rank 1   rank 2      rank 3      ← TP group {2, 3}
//                                 DP {0, 2}   DP {1, 3}
//
// np 4 = tp 2 × pp 2 (dp 1): TP groups {0, 1} {2, 3}; PP groups {0, 2} {1, 3} (stage 0 on ranks
// 0, 1; stage 1 on 2, 3). Pipeline parallelism puts stages outermost, as Megatron does: its traffic
// (one activation per micro-batch between neighbouring stages) is the lightest, so it may cross
// nodes. Pipeline parallelism on the PP groups: parallel/pipeline_parallel.h (the schedules) and
// train_step's pp branch (model/train.h).
//
// Why TP ranks are adjacent: mpirun places consecutive ranks on the same node (block placement), and
// TP's all-reduces sit on the critical path of every layer (the next GEMM needs their result), so
// they belong on the fast links inside a node (NVLink); DP's one gradient all-reduce per step can
// cross nodes (InfiniBand) and overlap with backward. The grid checks the placement with the node of
// every rank (launcher: Context::node_of_rank) and *warns* when a TP group spans nodes: the numbers
// stay right (TP equals single device wherever the ranks are), only the speed suffers, so it is not
// an error. tp_train and lesson 12 print the warning.
//
// Data parallelism (parallel/data_parallel.h) averages the gradients over the DP group.
//
// Expert parallelism (parallel/expert_parallel.h) is carved from the DP axis: ep consecutive DP
// ranks form an EP group (dp_rank = edp_rank · ep + ep_rank), over which a mixture of experts
// spreads its experts; the DP ranks ep apart hold the same experts and form the expert-data-
// parallel (EDP) group, of dp / ep ranks, over which those experts' gradients are summed.
//   np 4 = tp 1 × dp 4, ep 2:  EP groups {0, 1} {2, 3};  EDP groups {0, 2} {1, 3}
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/communicator.h"

namespace tp {

/// The sizes of the grid's outer axes; tp = world size / (cp · dp · pp).
struct GridAxes {
  int dp = 1;
  int pp = 1;
  int cp = 1;
  int ep = 1;  ///< expert parallelism, inside dp (ep divides dp)
};

class ProcessGrid {
 public:
  /// Every problem with tp × dp × pp = world_size (empty when fine): dp ≥ 1, pp ≥ 1, dp · pp
  /// divides world_size. The same on every rank: validate before constructing (the constructor
  /// throws them as bad input).
  static std::vector<std::string> problems(int world_size, int dp, int pp = 1, int cp = 1,
                                           int ep = 1);

  /// Splits `world` into the TP, DP and PP groups (collective: every rank of `world` calls it).
  /// `node_of_rank`: the node of every world rank (Context::node_of_rank); empty: unknown (no
  /// placement check). An axis that spans the world is `world` itself (no split: dp = pp = 1
  /// keeps the world's ledger, timeline and link for TP); an axis of size 1 is a
  /// SerialCommunicator.
  ProcessGrid(Communicator& world, GridAxes axes, std::vector<int> node_of_rank = {});
  /// tp × dp (pp = 1).
  ProcessGrid(Communicator& world, int dp, std::vector<int> node_of_rank = {})
      : ProcessGrid(world, GridAxes{dp, 1}, std::move(node_of_rank)) {}

  int tp_size() const { return tp_size_; }
  int cp_size() const { return cp_size_; }
  int dp_size() const { return dp_size_; }
  int pp_size() const { return pp_size_; }
  int tp_rank() const { return tp_rank_; }
  int cp_rank() const { return cp_rank_; }
  int dp_rank() const { return dp_rank_; }
  int pp_rank() const { return pp_rank_; }
  int ep_size() const { return ep_size_; }
  int ep_rank() const { return dp_rank_ % ep_size_; }
  Communicator& world() { return world_; }
  /// The TP group of this rank (the model's communicator), its DP group and its PP group.
  Communicator& tp() { return *tp_; }
  /// The CP group: the ranks holding the other parts of the same sequences.
  Communicator& cp() { return *cp_; }
  Communicator& dp() { return *dp_; }
  Communicator& pp() { return *pp_; }
  /// The EP group (ep consecutive DP ranks) and the EDP group (the DP ranks ep apart).
  Communicator& ep() { return *ep_; }
  Communicator& edp() { return *edp_; }

  /// World rank at coordinate (tp_rank, dp_rank, pp_rank, cp_rank):
  /// ((pp_rank · dp + dp_rank) · cp + cp_rank) · tp + tp_rank.
  int world_rank(int tp_rank, int dp_rank, int pp_rank = 0, int cp_rank = 0) const {
    return ((pp_rank * dp_size_ + dp_rank) * cp_size_ + cp_rank) * tp_size_ + tp_rank;
  }
  /// World ranks of one group of each axis, in group-rank order, named by the other
  /// coordinates.
  std::vector<int> tp_group(int dp_rank, int pp_rank = 0, int cp_rank = 0) const;
  std::vector<int> cp_group(int tp_rank, int dp_rank = 0, int pp_rank = 0) const;
  std::vector<int> dp_group(int tp_rank, int pp_rank = 0, int cp_rank = 0) const;
  std::vector<int> pp_group(int tp_rank, int dp_rank = 0, int cp_rank = 0) const;

  /// "" when every TP group lies on one node (or the placement is unknown), else one line naming
  /// the first group that spans nodes and the fix.
  std::string placement_warning() const { return placement_warning(tp_size_, node_of_rank_); }
  /// The same check for any tp and placement (node_of_rank: the node of each world rank).
  static std::string placement_warning(int tp, const std::vector<int>& node_of_rank);

  /// "tp 2 × dp 2 (TP groups {0, 1} {2, 3}; DP groups {0, 2} {1, 3})"; with pp > 1
  /// "tp 2 × pp 2 × dp 1 (TP groups {0, 1} {2, 3}; PP groups {0, 2} {1, 3}; DP groups …)".
  std::string describe() const;

 private:
  /// The group of this rank along one axis: a SerialCommunicator (size 1), the world (the whole
  /// world), or a split by `color` ordered by `key`.
  Communicator* axis(int size, int color, int key, std::unique_ptr<Communicator>& owned,
                     const char* role);

  Communicator& world_;
  int tp_size_, cp_size_, dp_size_, pp_size_, tp_rank_, cp_rank_, dp_rank_, pp_rank_;
  int ep_size_ = 1;
  std::vector<int> node_of_rank_;
  std::unique_ptr<Communicator> tp_owned_, cp_owned_, dp_owned_, pp_owned_, ep_owned_, edp_owned_;
  Communicator* tp_ = nullptr;
  Communicator* cp_ = nullptr;
  Communicator* dp_ = nullptr;
  Communicator* pp_ = nullptr;
  Communicator* ep_ = nullptr;
  Communicator* edp_ = nullptr;
};

}  // namespace tp
