#include "parallel/process_grid.h"

#include <algorithm>

#include "core/error.h"

namespace tp {

namespace {

std::string group_str(const std::vector<int>& ranks) {
  std::string s = "{";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "}";
}

}  // namespace

std::vector<std::string> ProcessGrid::problems(int world_size, int dp) {
  std::vector<std::string> out;
  std::string divisors;
  for (int d = 1; d <= world_size; ++d)
    if (world_size % d == 0) divisors += (divisors.empty() ? "" : ", ") + std::to_string(d);
  if (dp < 1)
    out.push_back("--dp=" + std::to_string(dp) +
                  " must be at least 1 (np = tp × dp); choose --dp in {" + divisors + "}");
  else if (world_size % dp != 0)
    out.push_back("--dp=" + std::to_string(dp) + " does not divide the " +
                  std::to_string(world_size) + " ranks: np must equal tp × dp (tp = np / dp); " +
                  "choose --dp in {" + divisors + "}");
  return out;
}

ProcessGrid::ProcessGrid(Communicator& world, int dp, std::vector<int> node_of_rank)
    : world_(world), node_of_rank_(std::move(node_of_rank)) {
  const auto bad = problems(world.size(), dp);
  TP_CHECK_INPUT(bad.empty(), bad.empty() ? "" : bad.front());
  TP_CHECK(node_of_rank_.empty() || static_cast<int>(node_of_rank_.size()) == world.size(),
           "ProcessGrid: node_of_rank has ", node_of_rank_.size(), " entries for ", world.size(),
           " ranks");
  dp_size_ = dp;
  tp_size_ = world.size() / dp;
  tp_rank_ = world.rank() % tp_size_;
  dp_rank_ = world.rank() / tp_size_;
  if (dp_size_ == 1) {
    tp_ = &world;  // the whole world is one TP group: keep its ledger, timeline and link
    dp_owned_ = std::make_unique<SerialCommunicator>();
  } else if (tp_size_ == 1) {
    tp_owned_ = std::make_unique<SerialCommunicator>();
    dp_ = &world;
  } else {
    // Both splits on every rank, in the same order (each is collective over the world).
    tp_owned_ = world.split(/*color=*/dp_rank_, /*key=*/tp_rank_);
    dp_owned_ = world.split(/*color=*/tp_rank_, /*key=*/dp_rank_);
  }
  if (tp_owned_) tp_ = tp_owned_.get();
  if (dp_owned_) dp_ = dp_owned_.get();
  TP_CHECK(tp_->size() == tp_size_ && tp_->rank() == tp_rank_ && dp_->size() == dp_size_ &&
               dp_->rank() == dp_rank_,
           "ProcessGrid: the split gave TP rank ", tp_->rank(), "/", tp_->size(), " and DP rank ",
           dp_->rank(), "/", dp_->size(), "; expected ", tp_rank_, "/", tp_size_, " and ", dp_rank_,
           "/", dp_size_);
}

std::vector<int> ProcessGrid::tp_group(int dp_rank) const {
  std::vector<int> out;
  for (int i = 0; i < tp_size_; ++i) out.push_back(world_rank(i, dp_rank));
  return out;
}

std::vector<int> ProcessGrid::dp_group(int tp_rank) const {
  std::vector<int> out;
  for (int d = 0; d < dp_size_; ++d) out.push_back(world_rank(tp_rank, d));
  return out;
}

std::string ProcessGrid::placement_warning(int tp, const std::vector<int>& node_of_rank) {
  const int n = static_cast<int>(node_of_rank.size());
  if (tp < 1 || n == 0) return "";
  for (int first = 0; first + tp <= n; first += tp) {
    std::vector<int> group, nodes;
    for (int r = first; r < first + tp; ++r) {
      group.push_back(r);
      if (std::find(nodes.begin(), nodes.end(), node_of_rank[r]) == nodes.end())
        nodes.push_back(node_of_rank[r]);
    }
    if (nodes.size() > 1) {
      int most = 0;  // ranks on the fullest node: the largest tp that could stay inside one
      for (int node : node_of_rank) {
        int count = 0;
        for (int m : node_of_rank) count += m == node;
        most = std::max(most, count);
      }
      return "TP group " + group_str(group) + " spans nodes " + group_str(nodes) +
             ": its all-reduces (4 per layer, on the critical path) would cross the slow link "
             "between nodes; choose tp ≤ " +
             std::to_string(most) +
             " (the ranks per node) and place consecutive ranks on one node (mpirun's default "
             "block placement)";
    }
  }
  return "";
}

std::string ProcessGrid::describe() const {
  std::string tps, dps;
  for (int d = 0; d < dp_size_; ++d) tps += (d ? " " : "") + group_str(tp_group(d));
  for (int i = 0; i < tp_size_; ++i) dps += (i ? " " : "") + group_str(dp_group(i));
  return "tp " + std::to_string(tp_size_) + " × dp " + std::to_string(dp_size_) + " (TP groups " +
         tps + "; DP groups " + dps + ")";
}

int64_t data_parallel_elements(const ParamList& params) {
  int64_t n = 1;  // the loss
  for (const Param& p : params) n += p.grad.numel();
  return n;
}

void average_gradients(Communicator& dp, Device& device, ParamList& params, float* loss) {
  if (dp.size() == 1) return;
  // One all-reduce for everything: pack, sum over the DP group, scale by 1/dp, unpack. (Real
  // frameworks cut this into buckets and start each while backward still runs; one buffer keeps
  // the collectives few and the ledger easy to read.)
  Tensor packed(device, Shape{data_parallel_elements(params)});
  int64_t at = 0;
  for (const Param& p : params) {
    packed.view(at, at + p.grad.numel()).copy_from(p.grad);
    at += p.grad.numel();
  }
  packed.view(at, at + 1).copy_from_host({loss ? *loss : 0.0f});
  {
    CommLedger::Scope scope(dp.ledger(), "data_parallel_grads");
    dp.all_reduce(packed);
  }
  device.scale(packed, 1.0f / static_cast<float>(dp.size()));
  at = 0;
  for (Param& p : params) {
    Tensor g = p.grad;
    g.copy_from(packed.view(at, at + g.numel()));
    at += g.numel();
  }
  if (loss) *loss = packed.view(at, at + 1).to_host()[0];
}

}  // namespace tp
