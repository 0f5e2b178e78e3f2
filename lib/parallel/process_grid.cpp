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

std::vector<std::string> ProcessGrid::problems(int world_size, int dp, int pp, int cp, int ep) {
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
  if (pp < 1)
    out.push_back("pp=" + std::to_string(pp) + " must be at least 1 (np = tp × dp × pp)");
  else if (out.empty() && world_size % (dp * pp) != 0)
    out.push_back("pp=" + std::to_string(pp) + " with dp=" + std::to_string(dp) +
                  " does not divide the " + std::to_string(world_size) +
                  " ranks: np must equal tp × dp × pp; choose dp · pp in {" + divisors + "}");
  if (cp < 1)
    out.push_back("--cp=" + std::to_string(cp) + " must be at least 1 (np = tp × cp × dp × pp)");
  else if (out.empty() && world_size % (dp * pp * cp) != 0)
    out.push_back("--cp=" + std::to_string(cp) + " does not divide the " +
                  std::to_string(world_size / (dp * pp)) +
                  " ranks left by dp=" + std::to_string(dp) + " and pp=" + std::to_string(pp) +
                  ": np must equal tp × cp × dp × pp; choose cp · dp · pp in {" + divisors + "}");
  if (out.empty() && (ep < 1 || dp % ep != 0)) {
    std::string fits;
    for (int d = 1; d <= dp; ++d)
      if (dp % d == 0) fits += (fits.empty() ? "" : ", ") + std::to_string(d);
    out.push_back("--ep " + std::to_string(ep) + " with --dp " + std::to_string(dp) +
                  ": the EP groups are carved from the data-parallel ranks, so ep must divide dp; "
                  "choose --ep in {" +
                  fits + "} or a larger --dp");
  }
  return out;
}

ProcessGrid::ProcessGrid(Communicator& world, GridAxes axes, std::vector<int> node_of_rank)
    : world_(world), node_of_rank_(std::move(node_of_rank)) {
  const auto bad = problems(world.size(), axes.dp, axes.pp, axes.cp, axes.ep);
  TP_CHECK_INPUT(bad.empty(), bad.empty() ? "" : bad.front());
  TP_CHECK(node_of_rank_.empty() || static_cast<int>(node_of_rank_.size()) == world.size(),
           "ProcessGrid: node_of_rank has ", node_of_rank_.size(), " entries for ", world.size(),
           " ranks");
  dp_size_ = axes.dp;
  pp_size_ = axes.pp;
  cp_size_ = axes.cp;
  ep_size_ = axes.ep;
  tp_size_ = world.size() / (dp_size_ * pp_size_ * cp_size_);
  const int r = world.rank();
  tp_rank_ = r % tp_size_;
  cp_rank_ = r / tp_size_ % cp_size_;
  dp_rank_ = r / (tp_size_ * cp_size_) % dp_size_;
  pp_rank_ = r / (tp_size_ * cp_size_ * dp_size_);
  // Every split on every rank, in the same order (each is collective over the world); whether an
  // axis splits depends on the sizes only, the same everywhere. A group's color numbers the other
  // three coordinates.
  const int T = tp_size_, C = cp_size_, D = dp_size_;
  tp_ = axis(T, (pp_rank_ * D + dp_rank_) * C + cp_rank_, tp_rank_, tp_owned_, "TP group");
  cp_ = axis(C, (pp_rank_ * D + dp_rank_) * T + tp_rank_, cp_rank_, cp_owned_, "CP group");
  dp_ = axis(D, (pp_rank_ * C + cp_rank_) * T + tp_rank_, dp_rank_, dp_owned_, "DP group");
  pp_ = axis(pp_size_, (dp_rank_ * C + cp_rank_) * T + tp_rank_, pp_rank_, pp_owned_, "PP group");
  const int E = ep_size_, edp_rank = dp_rank_ / E, ep_rank = dp_rank_ % E;
  ep_ = axis(E, ((pp_rank_ * (D / E) + edp_rank) * C + cp_rank_) * T + tp_rank_, ep_rank, ep_owned_,
             "EP group");
  edp_ = axis(D / E, ((pp_rank_ * E + ep_rank) * C + cp_rank_) * T + tp_rank_, edp_rank, edp_owned_,
              "EDP group");
  TP_CHECK(tp_->size() == tp_size_ && tp_->rank() == tp_rank_ && dp_->size() == dp_size_ &&
               dp_->rank() == dp_rank_ && pp_->size() == pp_size_ && pp_->rank() == pp_rank_ &&
               cp_->size() == cp_size_ && cp_->rank() == cp_rank_,
           "ProcessGrid: the split gave TP rank ", tp_->rank(), "/", tp_->size(), ", CP rank ",
           cp_->rank(), "/", cp_->size(), ", DP rank ", dp_->rank(), "/", dp_->size(),
           " and PP rank ", pp_->rank(), "/", pp_->size(), "; expected ", tp_rank_, "/", tp_size_,
           ", ", cp_rank_, "/", cp_size_, ", ", dp_rank_, "/", dp_size_, " and ", pp_rank_, "/",
           pp_size_);
  // The flight recorder names a sub-group by its members' world ranks (observe/flight_recorder.h).
  if (tp_owned_) tp_owned_->set_world_ranks(tp_group(dp_rank_, pp_rank_, cp_rank_));
  if (cp_owned_) cp_owned_->set_world_ranks(cp_group(tp_rank_, dp_rank_, pp_rank_));
  if (dp_owned_) dp_owned_->set_world_ranks(dp_group(tp_rank_, pp_rank_, cp_rank_));
  if (pp_owned_) pp_owned_->set_world_ranks(pp_group(tp_rank_, dp_rank_, cp_rank_));
}

Communicator* ProcessGrid::axis(int size, int color, int key, std::unique_ptr<Communicator>& owned,
                                const char* role) {
  if (size == world_.size()) return &world_;  // keeps the world's ledger, timeline and link
  if (size == 1)
    owned = std::make_unique<SerialCommunicator>();
  else
    owned = world_.split(color, key);
  owned->set_role(role);
  return owned.get();
}

std::vector<int> ProcessGrid::tp_group(int dp_rank, int pp_rank, int cp_rank) const {
  std::vector<int> out;
  for (int i = 0; i < tp_size_; ++i) out.push_back(world_rank(i, dp_rank, pp_rank, cp_rank));
  return out;
}

std::vector<int> ProcessGrid::cp_group(int tp_rank, int dp_rank, int pp_rank) const {
  std::vector<int> out;
  for (int c = 0; c < cp_size_; ++c) out.push_back(world_rank(tp_rank, dp_rank, pp_rank, c));
  return out;
}

std::vector<int> ProcessGrid::dp_group(int tp_rank, int pp_rank, int cp_rank) const {
  std::vector<int> out;
  for (int d = 0; d < dp_size_; ++d) out.push_back(world_rank(tp_rank, d, pp_rank, cp_rank));
  return out;
}

std::vector<int> ProcessGrid::pp_group(int tp_rank, int dp_rank, int cp_rank) const {
  std::vector<int> out;
  for (int p = 0; p < pp_size_; ++p) out.push_back(world_rank(tp_rank, dp_rank, p, cp_rank));
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
  std::string tps, cps, dps, pps;
  const auto add = [](std::string& to, const std::vector<int>& g) {
    to += (to.empty() ? "" : " ") + group_str(g);
  };
  for (int p = 0; p < pp_size_; ++p)
    for (int d = 0; d < dp_size_; ++d)
      for (int c = 0; c < cp_size_; ++c) add(tps, tp_group(d, p, c));
  for (int p = 0; p < pp_size_; ++p)
    for (int d = 0; d < dp_size_; ++d)
      for (int i = 0; i < tp_size_; ++i) add(cps, cp_group(i, d, p));
  for (int p = 0; p < pp_size_; ++p)
    for (int c = 0; c < cp_size_; ++c)
      for (int i = 0; i < tp_size_; ++i) add(dps, dp_group(i, p, c));
  for (int d = 0; d < dp_size_; ++d)
    for (int c = 0; c < cp_size_; ++c)
      for (int i = 0; i < tp_size_; ++i) add(pps, pp_group(i, d, c));
  std::string eps;
  for (int p = 0; p < pp_size_ && ep_size_ > 1; ++p)
    for (int g = 0; g < dp_size_ / ep_size_; ++g)
      for (int c = 0; c < cp_size_; ++c)
        for (int i = 0; i < tp_size_; ++i) {
          std::vector<int> group;
          for (int e = 0; e < ep_size_; ++e) group.push_back(world_rank(i, g * ep_size_ + e, p, c));
          add(eps, group);
        }
  const std::string ep_groups = ep_size_ > 1 ? "; EP groups " + eps : "";
  const std::string cp = cp_size_ > 1 ? " × cp " + std::to_string(cp_size_) : "";
  const std::string cp_groups = cp_size_ > 1 ? "; CP groups " + cps : "";
  if (pp_size_ == 1)
    return "tp " + std::to_string(tp_size_) + cp + " × dp " + std::to_string(dp_size_) +
           " (TP groups " + tps + cp_groups + "; DP groups " + dps + ep_groups + ")";
  return "tp " + std::to_string(tp_size_) + cp + " × pp " + std::to_string(pp_size_) + " × dp " +
         std::to_string(dp_size_) + " (TP groups " + tps + cp_groups + "; PP groups " + pps +
         "; DP groups " + dps + ep_groups + ")";
}

}  // namespace tp
