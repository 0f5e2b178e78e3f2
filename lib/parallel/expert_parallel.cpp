#include "parallel/expert_parallel.h"

#include "core/comm_ledger.h"
#include "core/error.h"
#include "core/exercise.h"

namespace tp {

std::string expert_parallel_problem(int experts, int ep) {
  constexpr int kMaxEp = 4096;
  if (ep < 1 || ep > kMaxEp)
    return "--ep=" + std::to_string(ep) + " must be in [1, " + std::to_string(kMaxEp) + "]";
  if (ep > 1 && experts <= 0)
    return "--ep " + std::to_string(ep) +
           " without --experts: expert parallelism places experts; give --experts E (a multiple "
           "of " +
           std::to_string(ep) + ") or --ep 1";
  if (experts > 0 && experts % ep != 0)
    return "--experts=" + std::to_string(experts) +
           " is not divisible by --ep=" + std::to_string(ep) +
           ": each rank of an EP group holds E/ep whole experts; choose --ep among the divisors "
           "of " +
           std::to_string(experts);
  return "";
}

#if TP_EXERCISE != 13  // exercises/13_expert_major_order.cpp
std::vector<int64_t> expert_major_order(const std::vector<int64_t>& recv_counts, int ep,
                                        int local) {
  // Source-major offsets of block (s, i), then the expert-major walk over them.
  std::vector<int64_t> src_begin(static_cast<size_t>(ep * local) + 1, 0);
  for (int b = 0; b < ep * local; ++b) src_begin[b + 1] = src_begin[b] + recv_counts[b];
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(src_begin.back()));
  for (int i = 0; i < local; ++i)
    for (int s = 0; s < ep; ++s)
      for (int64_t r = src_begin[s * local + i]; r < src_begin[s * local + i + 1]; ++r)
        order.push_back(r);
  return order;
}
#endif

ExpertDispatch::ExpertDispatch(Device& device, Communicator* ep, int experts)
    : device_(device), ep_(ep) {
  place_.experts = experts;
  place_.ep = ep ? ep->size() : 1;
  place_.rank = ep ? ep->rank() : 0;
  const std::string problem = expert_parallel_problem(experts, place_.ep);
  TP_CHECK_INPUT(problem.empty(), problem);
}

void ExpertDispatch::plan(const std::vector<int64_t>& per_expert) {
  const int ep = place_.ep, el = place_.local();
  TP_CHECK(static_cast<int>(per_expert.size()) == place_.experts,
           "ExpertDispatch::plan: ", per_expert.size(), " counts for ", place_.experts, " experts");
  send_rows_.assign(static_cast<size_t>(ep), 0);
  for (int e = 0; e < place_.experts; ++e) send_rows_[place_.owner(e)] += per_expert[e];
  if (ep == 1) {
    recv_counts_ = per_expert;
  } else {
    CommLedger::Scope scope(ep_->ledger(), "moe counts");
    recv_counts_ = exchange_counts(*ep_, device_, per_expert);
  }
  recv_rows_.assign(static_cast<size_t>(ep), 0);
  begin_.assign(static_cast<size_t>(el + 1), 0);
  for (int s = 0; s < ep; ++s)
    for (int i = 0; i < el; ++i) {
      recv_rows_[s] += recv_counts_[s * el + i];
      begin_[i + 1] += recv_counts_[s * el + i];
    }
  for (int i = 0; i < el; ++i) begin_[i + 1] += begin_[i];
  to_expert_major_ = to_source_major_ = Tensor();
  if (ep == 1 || el == 1 || received() == 0) return;  // the two orders are the same
  const std::vector<int64_t> order = expert_major_order(recv_counts_, ep, el);
  TP_CHECK(static_cast<int64_t>(order.size()) == received(), "expert_major_order: ", order.size(),
           " rows for the ", received(), " received");
  std::vector<float> to_expert(order.size()), to_source(order.size(), -1.0f);
  for (size_t j = 0; j < order.size(); ++j) {
    const int64_t r = order[j];
    TP_CHECK(r >= 0 && r < received() && to_source[static_cast<size_t>(r)] < 0,
             "expert_major_order: row ", j, " names source-major row ", r,
             ", out of range or named twice (the order must be a permutation of 0 … R − 1)");
    to_expert[j] = static_cast<float>(r);
    to_source[static_cast<size_t>(r)] = static_cast<float>(j);
  }
  TP_CHECK(received() < (int64_t{1} << 24), "ExpertDispatch: ", received(),
           " rows received; row ids travel as f32, exact below 2^24");
  to_expert_major_ = Tensor::from_host(device_, Shape{received()}, to_expert);
  to_source_major_ = Tensor::from_host(device_, Shape{received()}, to_source);
}

Tensor ExpertDispatch::reorder(const Tensor& rows, const Tensor& ids) const {
  if (!ids.defined()) return rows;
  Tensor out(device_, rows.shape());
  device_.embedding_shard_forward(out, ids, rows, 0);  // out[j] = rows[ids[j]]
  return out;
}

Tensor ExpertDispatch::dispatch(const Tensor& slots, const char* label) const {
  if (place_.ep == 1) return slots;
  Tensor got(device_, Shape{received(), slots.cols()}, slots.dtype());
  {
    CommLedger::Scope scope(ep_->ledger(), label);
    ep_->all_to_all_v(slots, send_rows_, got, recv_rows_);
  }
  return reorder(got, to_expert_major_);
}

Tensor ExpertDispatch::combine(const Tensor& expert_rows, const char* label) const {
  if (place_.ep == 1) return expert_rows;
  const Tensor source_major = reorder(expert_rows, to_source_major_);
  int64_t m = 0;
  for (int64_t r : send_rows_) m += r;
  Tensor back(device_, Shape{m, expert_rows.cols()}, expert_rows.dtype());
  {
    CommLedger::Scope scope(ep_->ledger(), label);
    ep_->all_to_all_v(source_major, recv_rows_, back, send_rows_);
  }
  return back;
}

}  // namespace tp
