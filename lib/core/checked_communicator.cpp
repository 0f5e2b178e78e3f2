#include "core/checked_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "core/call_recorder.h"
#include "core/device.h"
#include "core/error.h"

namespace tp {

namespace {

// The fingerprint of one call, as it travels: fixed size, one byte per float.
struct Fingerprint {
  int64_t sequence = 0;
  int64_t elements = 0;    // all_to_all_v: the cols (its counts differ by rank by design)
  int64_t rows_sent = -1;  // all_to_all_v: Σ send_rows and Σ recv_rows, not in the key
  int64_t rows_received = -1;
  int32_t root = -1;
  int32_t world_rank = 0;
  uint8_t dtype = 0;
  char op[23] = {};
  char label[64] = {};
};
constexpr int64_t kRecordFloats = sizeof(Fingerprint);

void copy_text(char* to, size_t capacity, const std::string& text) {
  const size_t n = std::min(text.size(), capacity - 1);
  std::memcpy(to, text.data(), n);
  to[n] = '\0';
}

std::vector<float> encode(const Fingerprint& f) {
  unsigned char bytes[sizeof f];
  std::memcpy(bytes, &f, sizeof f);
  return std::vector<float>(bytes, bytes + sizeof f);
}

Fingerprint decode(const float* floats) {
  unsigned char bytes[sizeof(Fingerprint)];
  for (size_t i = 0; i < sizeof bytes; ++i) bytes[i] = static_cast<unsigned char>(floats[i]);
  Fingerprint f;
  std::memcpy(&f, bytes, sizeof f);
  f.op[sizeof f.op - 1] = '\0';  // whatever arrived, the texts end
  f.label[sizeof f.label - 1] = '\0';
  return f;
}

// What must agree: everything but the world rank.
std::string key(const Fingerprint& f) {
  return detail::str_cat(f.sequence, '|', f.op, '|', f.elements, '|', int(f.dtype), '|', f.root,
                         '|', f.label);
}

// "all_gather(4096 floats, 'attn qkv')", "broadcast(12 bf16 from rank 0)", "barrier()".
std::string describe(const Fingerprint& f) {
  std::string args;
  if (std::strcmp(f.op, "all_to_all_v") == 0) {
    args = "rows of " + std::to_string(f.elements) +
           (f.dtype == static_cast<uint8_t>(Dtype::bf16) ? " bf16" : " floats");
  } else if (std::strcmp(f.op, "barrier") != 0) {
    args = std::to_string(f.elements) +
           (f.dtype == static_cast<uint8_t>(Dtype::bf16) ? " bf16" : " floats");
    if (f.root >= 0) args += " from rank " + std::to_string(f.root);
  }
  if (f.label[0] != '\0') args += std::string(args.empty() ? "" : ", ") + "'" + f.label + "'";
  return std::string(f.op) + "(" + args + ")";
}

// "ranks 0, 2" (of the group); on a sub-group with their world ranks: "rank 1 (world rank 3)".
std::string rank_list(const std::vector<int>& ranks, const std::vector<Fingerprint>& all,
                      bool subgroup) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(ranks[i]);
    if (subgroup) s += " (world rank " + std::to_string(all[ranks[i]].world_rank) + ")";
  }
  return s;
}

// The one line of a mismatch: the group (a sub-group by its role, Communicator::set_role), then each set of agreeing ranks and what they called,
// smallest set first (on a tie, the set without rank 0 first: rank 0 reads as the reference).
std::string mismatch_line(const std::vector<Fingerprint>& all, int world_size,
                          const std::string& role) {
  std::map<std::string, std::vector<int>> by_key;
  for (size_t r = 0; r < all.size(); ++r) by_key[key(all[r])].push_back(static_cast<int>(r));
  std::vector<std::vector<int>> sets;
  for (auto& [k, ranks] : by_key) sets.push_back(ranks);
  std::sort(sets.begin(), sets.end(), [](const std::vector<int>& a, const std::vector<int>& b) {
    if (a.size() != b.size()) return a.size() < b.size();
    return a.front() > b.front();
  });
  const bool subgroup = static_cast<int>(all.size()) != world_size;
  std::string group;
  if (!subgroup) {
    group = "the world (" + std::to_string(world_size) + " ranks)";
  } else {
    group = "the " + (role.empty() ? std::string("group") : role) + " of world ranks ";
    for (size_t r = 0; r < all.size(); ++r)
      group += (r ? ", " : "") + std::to_string(all[r].world_rank);
  }
  std::string line = "collective #" + std::to_string(all[0].sequence) + " on " + group + ": ";
  for (size_t i = 0; i < sets.size(); ++i)
    line += (i ? ", " : "") + rank_list(sets[i], all, subgroup) + " called " +
            describe(all[sets[i].front()]);
  return line + " (--check-collectives)";
}

}  // namespace

CheckedCommunicator::CheckedCommunicator(std::unique_ptr<Communicator> inner, Device& device)
    : CheckedCommunicator(std::move(inner), device, 0, 0) {
  world_rank_ = rank();
  world_size_ = size();
}

CheckedCommunicator::CheckedCommunicator(std::unique_ptr<Communicator> inner, Device& device,
                                         int world_rank, int world_size)
    : ForwardingCommunicator(std::move(inner)),
      device_(device),
      world_rank_(world_rank),
      world_size_(world_size) {}

std::string CheckedCommunicator::name() const { return "checked " + inner().name(); }

void CheckedCommunicator::agree(const Forwarded& call) {
  Fingerprint mine;
  mine.sequence = ++sequence_;
  const bool rows = call.rows_sent >= 0;  // all_to_all_v: the row width must agree, not N
  mine.elements = call.buffer == nullptr ? 0 : rows ? call.buffer->cols() : call.buffer->numel();
  mine.rows_sent = call.rows_sent;
  mine.rows_received = call.rows_received;
  mine.root = call.root;
  mine.world_rank = world_rank_;
  mine.dtype = static_cast<uint8_t>(call.buffer != nullptr ? call.buffer->dtype() : Dtype::f32);
  copy_text(mine.op, sizeof mine.op, call.op);
  if (call.buffer != nullptr && ledger().size() > 0)  // a barrier has no ledger record
    copy_text(mine.label, sizeof mine.label, ledger().records().back().label);
  if (size() == 1) return;

  const Tensor send = Tensor::from_host(device_, Shape{kRecordFloats}, encode(mine));
  Tensor gathered(device_, Shape{kRecordFloats * size()});
  inner().all_gather(send, gathered);
  const std::vector<float> floats = gathered.to_host();
  std::vector<Fingerprint> all;
  bool same = true;
  for (int r = 0; r < size(); ++r) {
    all.push_back(decode(floats.data() + r * kRecordFloats));
    same = same && key(all.back()) == key(all.front());
  }
  std::string line;
  if (!same) {
    line = mismatch_line(all, world_size_, role());
  } else if (rows) {
    // Every row sent is received somewhere: the totals over the group agree. (Each rank's
    // recv_rows[p] must equal rank p's send_rows[this rank]; a fingerprint of fixed size cannot
    // carry the counts, so only their sums are compared.)
    int64_t sent = 0, received = 0;
    for (const Fingerprint& f : all) sent += f.rows_sent, received += f.rows_received;
    if (sent == received) return;
    line = "collective #" + std::to_string(mine.sequence) + " " + describe(mine) +
           ": the group sends " + std::to_string(sent) + " rows in all but receives " +
           std::to_string(received) +
           "; each rank's recv_rows[p] must be rank p's "
           "send_rows[this rank] (exchange_counts gives them) (--check-collectives)";
  } else {
    return;
  }
  dump_flight_record("collective mismatch: " + line);  // before any rank is aborted
  if (size() == world_size_) throw Error(line, 2);
  if (rank() != 0) std::this_thread::sleep_for(std::chrono::duration<double>(kOthersWait));
  throw Error(line, 2, Error::ThisRankOnly{});
}

// Point to point is passed through (see the header).

void CheckedCommunicator::around(const Forwarded& call, const std::function<void()>& run) {
  if (!call.point_to_point) agree(call);
  run();
}

std::unique_ptr<Work> CheckedCommunicator::around_async(
    const Forwarded& call, const std::function<std::unique_ptr<Work>()>& issue) {
  if (!call.point_to_point) agree(call);
  return issue();
}

std::unique_ptr<Communicator> CheckedCommunicator::decorate(std::unique_ptr<Communicator> child) {
  return std::unique_ptr<Communicator>(
      new CheckedCommunicator(std::move(child), device_, world_rank_, world_size_));
}

bool check_collectives_from_environment() {
  const char* value = std::getenv("TP_CHECK_COLLECTIVES");
  const std::string v = value == nullptr ? "" : value;
  if (v.empty() || v == "0" || v == "false" || v == "no" || v == "off") return false;
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  TP_CHECK_INPUT(false, "TP_CHECK_COLLECTIVES=", v,
                 ": give 1 to check every collective's fingerprint across ranks, or 0 (or unset "
                 "it) not to");
  return false;
}

}  // namespace tp
