// process_grid.h — the world's ranks as a tp × dp grid: tensor parallelism inside each row, data
// parallelism down each column.
//
//   world rank  r = dp_rank · tp + tp_rank            (tp_rank = r mod tp, dp_rank = r div tp)
//   TP group d  = {d·tp, d·tp + 1, …, d·tp + tp − 1}   adjacent ranks: one model replica, split
//   DP group i  = {i, i + tp, i + 2·tp, …}             strided: the same shard in every replica
//
// np 4 = tp 2 × dp 2:            tp_rank 0   tp_rank 1
//                     dp_rank 0   rank 0      rank 1      ← TP group {0, 1}
//                     dp_rank 1   rank 2      rank 3      ← TP group {2, 3}
//                                 DP {0, 2}   DP {1, 3}
//
// Why TP ranks are adjacent: mpirun places consecutive ranks on the same node (block placement), and
// TP's all-reduces sit on the critical path of every layer (the next GEMM needs their result), so
// they belong on the fast links inside a node (NVLink); DP's one gradient all-reduce per step can
// cross nodes (InfiniBand) and overlap with backward. The grid checks the placement with the node of
// every rank (launcher: Context::node_of_rank) and *warns* when a TP group spans nodes: the numbers
// stay right (TP equals single device wherever the ranks are), only the speed suffers, so it is not
// an error. tp_train and lesson 12 print the warning.
//
// Data parallelism: every DP rank holds the same weights, runs a different slice of the global batch
// and, after backward, the gradients are averaged over the DP group (average_gradients: one
// all-reduce of all of them packed together), so every replica takes the same AdamW step that
// dp = 1 would take on the whole batch: the mean loss over B sequences is the mean of the dp
// slices' mean losses when the slices are equal, and so is its gradient.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/device.h"
#include "parallel/param.h"

namespace tp {

class ProcessGrid {
 public:
  /// Every problem with tp × dp = world_size (empty when fine): dp ≥ 1, dp divides world_size.
  /// The same on every rank: validate before constructing (the constructor throws them as bad
  /// input).
  static std::vector<std::string> problems(int world_size, int dp);

  /// Splits `world` into the TP and DP groups (collective: every rank of `world` calls it).
  /// `node_of_rank`: the node of every world rank (Context::node_of_rank); empty: unknown (no
  /// placement check). With dp = 1 the TP group is `world` itself (no split); with tp = 1 or
  /// dp = 1 the size-1 group is a SerialCommunicator.
  ProcessGrid(Communicator& world, int dp, std::vector<int> node_of_rank = {});

  int tp_size() const { return tp_size_; }
  int dp_size() const { return dp_size_; }
  int tp_rank() const { return tp_rank_; }
  int dp_rank() const { return dp_rank_; }
  Communicator& world() { return world_; }
  /// The TP group of this rank (the model's communicator) and its DP group.
  Communicator& tp() { return *tp_; }
  Communicator& dp() { return *dp_; }

  /// World rank at coordinate (tp_rank, dp_rank): dp_rank · tp + tp_rank.
  int world_rank(int tp_rank, int dp_rank) const { return dp_rank * tp_size_ + tp_rank; }
  /// World ranks of TP group `dp_rank` and of DP group `tp_rank`, in group-rank order.
  std::vector<int> tp_group(int dp_rank) const;
  std::vector<int> dp_group(int tp_rank) const;

  /// "" when every TP group lies on one node (or the placement is unknown), else one line naming
  /// the first group that spans nodes and the fix.
  std::string placement_warning() const { return placement_warning(tp_size_, node_of_rank_); }
  /// The same check for any tp and placement (node_of_rank: the node of each world rank).
  static std::string placement_warning(int tp, const std::vector<int>& node_of_rank);

  /// "tp 2 × dp 2 (TP groups {0, 1} {2, 3}; DP groups {0, 2} {1, 3})".
  std::string describe() const;

 private:
  Communicator& world_;
  int tp_size_, dp_size_, tp_rank_, dp_rank_;
  std::vector<int> node_of_rank_;
  std::unique_ptr<Communicator> tp_owned_, dp_owned_;
  Communicator* tp_ = nullptr;
  Communicator* dp_ = nullptr;
};

/// Data parallelism's step after backward: g ← (1/dp) Σ_dp g for every parameter gradient (this
/// rank's shard), and *loss ← the mean of the dp losses, in one all-reduce over `dp` of everything
/// packed together (label "data_parallel_grads"). Afterwards every DP rank holds the gradient of
/// the global batch's mean loss. Nothing happens when dp.size() == 1. `loss` may be null.
void average_gradients(Communicator& dp, Device& device, ParamList& params, float* loss);

/// Elements average_gradients moves per rank: every gradient shard, plus one for the loss.
int64_t data_parallel_elements(const ParamList& params);

}  // namespace tp
