// flight_recorder.cpp — the ring and its dump (see flight_recorder.h).
#include "observe/flight_recorder.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/error.h"
#include "core/output_file.h"

namespace tp {

namespace {

double realtime_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

template <size_t N>
void copy_text(char (&to)[N], const char* from) {
  std::strncpy(to, from, N - 1);
  to[N - 1] = '\0';
}

// Times to the microsecond; the completion null while the call has not completed.
nlohmann::json entry_json(const FlightEntry& e) {
  auto micros = [](double t) { return static_cast<double>(static_cast<int64_t>(t * 1e6)) / 1e6; };
  nlohmann::json j;
  j["seq"] = e.sequence;
  j["group"] = e.group;
  j["op"] = e.op;
  j["count"] = e.count;
  j["dtype"] = dtype_name(e.dtype);
  j["peer"] = e.peer;
  j["async"] = e.async;
  j["label"] = e.label;
  j["step"] = e.step;
  j["issued"] = micros(e.issued);
  j["started"] = micros(e.started);
  j["completed"] = e.completed > 0 ? nlohmann::json(micros(e.completed)) : nlohmann::json();
  return j;
}

std::string line(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace

size_t flight_ring_bytes(size_t capacity) {
  return sizeof(FlightRingHeader) + capacity * sizeof(FlightEntry);
}

FlightRecorder::FlightRecorder(FlightIdentity identity, std::string dir, size_t capacity,
                               void* ring_file)
    : identity_(std::move(identity)),
      dir_(std::move(dir)),
      capacity_(std::max<size_t>(capacity, 1)) {
  if (ring_file == nullptr) {
    owned_.resize(capacity_);
    ring_ = owned_.data();
    return;
  }
  file_ = new (ring_file) FlightRingHeader();
  file_->header_size = sizeof(FlightRingHeader);
  copy_text(file_->job, identity_.job.c_str());
  copy_text(file_->host, identity_.host.c_str());
  file_->rank = identity_.rank;
  file_->world_size = identity_.world_size;
  file_->pid = identity_.pid;
  file_->capacity = capacity_;
  ring_ = reinterpret_cast<FlightEntry*>(file_ + 1);
  for (size_t i = 0; i < capacity_; ++i) new (&ring_[i]) FlightEntry();
}

int FlightRecorder::add_group(const std::string& role, const std::vector<int>& world_ranks,
                              int rank, int size) {
  std::lock_guard<std::timed_mutex> lock(mutex_);
  FlightGroup g;
  g.role = !role.empty() ? role : size == identity_.world_size ? "world" : "group";
  g.world_ranks = world_ranks;
  g.rank = rank;
  g.size = size;
  if (file_ != nullptr && file_->groups < kRingGroups) {
    FlightRingGroup& f = file_->group[file_->groups];
    copy_text(f.role, g.role.c_str());
    f.rank = rank;
    f.size = size;
    f.count = static_cast<int32_t>(std::min<size_t>(world_ranks.size(), kRingGroupRanks));
    for (int32_t i = 0; i < f.count; ++i) f.ranks[i] = world_ranks[static_cast<size_t>(i)];
    ++file_->groups;
  }
  groups_.push_back(std::move(g));
  return static_cast<int>(groups_.size()) - 1;
}

uint64_t FlightRecorder::issued(int group, int64_t sequence, const IssuedCall& call) {
  const double now = realtime_seconds();
  std::lock_guard<std::timed_mutex> lock(mutex_);
  const uint64_t token = next_++;
  FlightEntry& e = ring_[token % capacity_];
  e.index = 0;  // a reader of the ring file skips the slot while it is being rewritten
  e.group = group;
  e.sequence = sequence;
  copy_text(e.op, call.op);
  e.count = call.count;
  e.dtype = call.dtype;
  e.peer = call.peer;
  e.async = call.async;
  copy_text(e.label, call.label != nullptr ? call.label->c_str() : "");
  e.step = step_.load(std::memory_order_relaxed);
  e.issued = e.started = now;
  e.completed = 0;
  e.index = token;
  if (file_ != nullptr) file_->next = next_;
  return token;
}

FlightEntry* FlightRecorder::find(uint64_t token) {
  FlightEntry& e = ring_[token % capacity_];
  return e.index == token ? &e : nullptr;  // else overwritten by a newer call: nothing to mark
}

void FlightRecorder::started(uint64_t token) {
  const double now = realtime_seconds();
  std::lock_guard<std::timed_mutex> lock(mutex_);
  if (FlightEntry* e = find(token)) e->started = now;
}

void FlightRecorder::completed(uint64_t token) {
  const double now = realtime_seconds();
  std::lock_guard<std::timed_mutex> lock(mutex_);
  if (FlightEntry* e = find(token)) e->completed = now;
}

std::vector<FlightEntry> FlightRecorder::entries_locked() const {
  std::vector<FlightEntry> out;
  const uint64_t first = next_ > capacity_ ? next_ - capacity_ : 1;
  for (uint64_t i = first; i < next_; ++i) {
    const FlightEntry& e = ring_[i % capacity_];
    if (e.index == i) out.push_back(e);
  }
  return out;
}

std::vector<FlightEntry> FlightRecorder::entries() const {
  std::lock_guard<std::timed_mutex> lock(mutex_);
  return entries_locked();
}

std::string FlightRecorder::path() const {
  return dir_ + "/flight-rank-" + std::to_string(identity_.rank) + ".jsonl";
}

std::string FlightRecorder::snapshot(const std::string& reason, int wait_ms) const {
  std::unique_lock<std::timed_mutex> lock(mutex_, std::defer_lock);
  if (wait_ms < 0)
    lock.lock();
  else
    (void)lock.try_lock_for(std::chrono::milliseconds(wait_ms));  // best effort past that
  const std::vector<FlightEntry> entries = entries_locked();
  nlohmann::json header;
  header["flight"] = 1;
  header["job"] = identity_.job;
  header["rank"] = identity_.rank;
  header["world_size"] = identity_.world_size;
  header["host"] = identity_.host;
  header["pid"] = identity_.pid;
  header["step"] = step_.load(std::memory_order_relaxed);
  header["reason"] = reason;
  header["time"] = realtime_seconds();
  header["capacity"] = capacity_;
  header["recorded"] = next_ - 1;
  std::string text = line(header);
  for (size_t g = 0; g < groups_.size(); ++g) {
    nlohmann::json j;
    j["group"] = g;
    j["role"] = groups_[g].role;
    j["ranks"] = groups_[g].world_ranks;
    j["rank"] = groups_[g].rank;
    j["size"] = groups_[g].size;
    text += line(j);
  }
  for (const FlightEntry& e : entries) text += line(entry_json(e));
  nlohmann::json end;
  end["end"] = true;
  end["records"] = entries.size();
  return text + line(end);
}

void FlightRecorder::dump(const std::string& reason) {
  write_file_atomic(path(), snapshot(reason));
}

}  // namespace tp
