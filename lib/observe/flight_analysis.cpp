// flight_analysis.cpp — reading and aligning the flight recorder's dumps (see flight_analysis.h).
#include "observe/flight_analysis.h"

#include <dirent.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/format.h"
#include "observe/flight_recorder.h"

namespace tp {

namespace {

using Json = nlohmann::json;

FlightCall call_from(const Json& j) {
  FlightCall c;
  c.seq = j.at("seq").get<int64_t>();
  c.group = j.at("group").get<int>();
  c.op = j.at("op").get<std::string>();
  c.count = j.at("count").get<int64_t>();
  c.dtype = j.at("dtype").get<std::string>();
  c.peer = j.at("peer").get<int>();
  c.async = j.at("async").get<bool>();
  c.label = j.at("label").get<std::string>();
  c.step = j.at("step").get<int64_t>();
  c.issued = j.at("issued").get<double>();
  c.started = j.at("started").get<double>();
  c.completed = j.at("completed").is_null() ? 0.0 : j.at("completed").get<double>();
  return c;
}

bool point_to_point(const std::string& op) {
  return op == "send" || op == "recv" || op == "send_recv";
}

// "all_reduce(16 KiB, 'mlp fc2')", "barrier"
std::string describe(const FlightCall& c) {
  if (c.op == "barrier") return "barrier";
  const double bytes = static_cast<double>(c.count) * (c.dtype == "bf16" ? 2 : 4);
  std::string s = c.op + "(" + kib_mib(bytes);
  if (c.dtype != "f32") s += " " + c.dtype;
  if (!c.label.empty()) s += ", '" + c.label + "'";
  return s + ")";
}

// "all_reduce(262144 floats, 'mlp fc2')": the exact count, for a mismatch (as the collective
// checker, core/checked_communicator.h, names it).
std::string describe_exact(const FlightCall& c) {
  std::string s = c.op + "(" + std::to_string(c.count) + (c.dtype == "bf16" ? " bf16" : " floats");
  if (!c.label.empty()) s += ", '" + c.label + "'";
  return s + ")";
}

// Do two ranks' call #N agree (op, dtype, count; broadcast's root)? all_to_all_v's counts differ by
// rank by design.
bool same_call(const FlightCall& a, const FlightCall& b) {
  if (a.op != b.op || a.dtype != b.dtype) return false;
  if (a.op != "all_to_all_v" && a.count != b.count) return false;
  return a.op != "broadcast" || a.peer == b.peer;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

std::string ranks_word(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks);
}

// One group as every dump that has it sees it.
struct Member {
  const FlightDump* dump = nullptr;
  std::map<int64_t, const FlightCall*> calls;  // by sequence number
  int64_t last() const { return calls.empty() ? 0 : calls.rbegin()->first; }
  int64_t last_completed() const {
    for (auto it = calls.rbegin(); it != calls.rend(); ++it)
      if (it->second->completed > 0) return it->first;
    return 0;
  }
  const FlightCall* at(int64_t seq) const {
    const auto it = calls.find(seq);
    return it == calls.end() ? nullptr : it->second;
  }
};

struct Aligned {
  FlightGroupInfo info;
  bool p2p = false;
  std::map<int, Member> members;  // by world rank
  std::string name() const {
    return "the " + info.role + " of world ranks " + rank_list(info.world_ranks);
  }
};

std::vector<Aligned> align(const std::vector<FlightDump>& dumps) {
  std::vector<Aligned> out;
  std::map<std::string, size_t> index;
  for (const FlightDump& d : dumps) {
    std::map<std::string, int> seen;  // alike groups of this dump, by first use
    std::vector<size_t> local(d.groups.size());
    for (size_t g = 0; g < d.groups.size(); ++g) {
      const FlightGroupInfo& info = d.groups[g];
      std::string key = info.role + "|" + rank_list(info.world_ranks);
      key += "#" + std::to_string(seen[key]++);
      auto [it, fresh] = index.emplace(key, out.size());
      if (fresh) out.push_back(Aligned{info, false, {}});
      local[g] = it->second;
      out[it->second].members[d.rank].dump = &d;
    }
    for (const FlightCall& c : d.calls) {
      if (c.group < 0 || static_cast<size_t>(c.group) >= local.size()) continue;
      Aligned& a = out[local[static_cast<size_t>(c.group)]];
      a.members[d.rank].calls[c.seq] = &c;
      a.p2p = a.p2p || point_to_point(c.op);
    }
  }
  return out;
}

const FlightDump* dump_of(const std::vector<FlightDump>& dumps, int rank) {
  for (const FlightDump& d : dumps)
    if (d.rank == rank) return &d;
  return nullptr;
}

// A rank inside a call it has not completed, anywhere: where it waits ("" when nowhere).
std::string waits_in(const std::vector<Aligned>& groups, int rank) {
  for (const Aligned& g : groups) {
    const auto m = g.members.find(rank);
    if (m == g.members.end() || m->second.calls.empty()) continue;
    const FlightCall* c = m->second.calls.rbegin()->second;
    if (c->completed == 0)
      return "#" + std::to_string(c->seq) + " " + describe(*c) + " on " + g.name();
  }
  return "";
}

bool find_mismatch(const std::vector<Aligned>& groups, FlightDiagnosis& d) {
  double first_time = 0;
  for (const Aligned& g : groups) {
    if (g.p2p || g.members.size() < 2) continue;
    std::set<int64_t> seqs;
    for (const auto& [rank, m] : g.members)
      for (const auto& [seq, c] : m.calls) seqs.insert(seq);
    for (int64_t seq : seqs) {
      std::vector<std::pair<std::string, std::vector<int>>> kinds;  // description, ranks
      const FlightCall* ref = nullptr;
      bool differ = false;
      double issued = 0;
      for (const auto& [rank, m] : g.members) {
        const FlightCall* c = m.at(seq);
        if (c == nullptr) continue;
        if (ref == nullptr) ref = c;
        differ = differ || !same_call(*ref, *c);
        issued = issued == 0 ? c->issued : std::min(issued, c->issued);
        const std::string what = describe_exact(*c);
        auto k = std::find_if(kinds.begin(), kinds.end(), [&](auto& p) { return p.first == what; });
        if (k == kinds.end())
          kinds.push_back({what, {rank}});
        else
          k->second.push_back(rank);
      }
      if (!differ) continue;
      if (d.kind != "mismatch" || issued < first_time) {
        first_time = issued;
        d.kind = "mismatch";
        d.seq = seq;
        d.group = g.name();
        d.op = ref->op;
        std::stable_sort(kinds.begin(), kinds.end(),
                         [](auto& a, auto& b) { return a.second.size() > b.second.size(); });
        d.rank = kinds.back().second.front();
        d.line = "collective #" + std::to_string(seq) + " of " + d.group + ": ";
        for (size_t i = 0; i < kinds.size(); ++i)
          d.line += (i ? "; " : "") + ranks_word(kinds[i].second) + " called " + kinds[i].first;
        d.line += " (the first call where the ranks disagree)";
      }
      break;  // the first disagreement of this group
    }
  }
  return d.kind == "mismatch";
}

// Ranks of `g` waiting in its newest call, and that call's number.
std::vector<int> waiting_in_newest(const Aligned& g, int64_t* newest) {
  *newest = 0;
  for (const auto& [rank, m] : g.members) *newest = std::max(*newest, m.last());
  std::vector<int> waiting;
  for (const auto& [rank, m] : g.members) {
    const FlightCall* c = m.at(*newest);
    if (c != nullptr && c->completed == 0) waiting.push_back(rank);
  }
  return waiting;
}

bool find_laggard(const std::vector<FlightDump>& dumps, const std::vector<Aligned>& groups,
                  FlightDiagnosis& d) {
  // Which laggard is the cause: one that left only its ring file (stopped or killed: it could not
  // answer the dump request) before one outside every recorded call (it computes, or hangs,
  // elsewhere — or waits in a call the recorder does not see, such as the stop-signal agreement
  // over raw MPI, behind the stopped one), before one that waits in another group's call (it only
  // follows a cause there).
  int best = 0;
  for (const Aligned& g : groups) {
    if (g.p2p) continue;
    int64_t newest = 0;
    const std::vector<int> waiting = waiting_in_newest(g, &newest);
    if (waiting.empty()) continue;
    for (const auto& [rank, m] : g.members) {
      if (m.last() >= newest || m.dump == nullptr) continue;
      const std::string elsewhere = waits_in(groups, rank);
      const int score = m.dump->from_ring ? 3 : elsewhere.empty() ? 2 : 1;
      if (score <= best) continue;
      best = score;
      const FlightCall* call = g.members.at(waiting.front()).at(newest);
      const FlightDump* dump = dump_of(dumps, rank);
      d.kind = "never_entered";
      d.rank = rank;
      d.seq = newest;
      d.op = call->op;
      d.group = g.name();
      d.waiting = waiting;
      d.line = "rank " + std::to_string(rank) + " (host " + dump->host +
               (dump->step >= 0 ? ", step " + std::to_string(dump->step) : std::string()) +
               (dump->from_ring ? ", no dump of its own: stopped or killed" : "") +
               ") never entered collective #" + std::to_string(newest) + " " + describe(*call) +
               " on " + d.group + "; its last completed was #" +
               std::to_string(m.last_completed()) + "; " + ranks_word(waiting) +
               (waiting.size() == 1 ? " waits" : " wait") + " in #" + std::to_string(newest);
      if (!elsewhere.empty())
        d.line += "; rank " + std::to_string(rank) + " itself is in " + elsewhere;
    }
  }
  return d.kind == "never_entered";
}

bool find_missing_view(const std::vector<Aligned>& groups, FlightDiagnosis& d) {
  for (int missing : d.missing)
    for (const Aligned& g : groups) {
      const auto& r = g.info.world_ranks;
      if (g.p2p || std::find(r.begin(), r.end(), missing) == r.end()) continue;
      int64_t newest = 0;
      const std::vector<int> waiting = waiting_in_newest(g, &newest);
      if (waiting.empty()) continue;
      const Member& w = g.members.at(waiting.front());
      d.kind = "missing";
      d.rank = missing;
      d.seq = newest;
      d.op = w.at(newest)->op;
      d.group = g.name();
      d.waiting = waiting;
      d.line = "rank " + std::to_string(missing) +
               " left no dump (killed, or stopped and never resumed); " + ranks_word(waiting) +
               (waiting.size() == 1 ? " waits" : " wait") + " for it in collective #" +
               std::to_string(newest) + " " + describe(*w.at(newest)) + " on " + d.group +
               "; the last call they completed with it was #" + std::to_string(w.last_completed());
      return true;
    }
  return false;
}

bool find_in_flight(const std::vector<Aligned>& groups, FlightDiagnosis& d) {
  for (const Aligned& g : groups) {
    if (g.p2p) continue;
    int64_t newest = 0;
    const std::vector<int> waiting = waiting_in_newest(g, &newest);
    if (waiting.empty()) continue;
    const FlightCall* c = g.members.at(waiting.front()).at(newest);
    d.kind = "in_flight";
    d.seq = newest;
    d.op = c->op;
    d.group = g.name();
    d.waiting = waiting;
    d.line = "every rank of " + d.group + " is in collective #" + std::to_string(newest) + " " +
             describe(*c) + " and none has completed it";
    std::vector<int> silent;  // ranks that left only their ring file
    for (const auto& [rank, m] : g.members)
      if (m.dump != nullptr && m.dump->from_ring) silent.push_back(rank);
    if (!silent.empty()) {
      d.rank = silent.front();
      d.line += "; " + ranks_word(silent) + " wrote no dump of " +
                (silent.size() == 1 ? "its own" : "their own") +
                " (stopped or killed inside the call: read from the ring file)";
    } else {
      d.line +=
          ": the call itself does not finish (the backend or the network, or a rank "
          "outside these dumps)";
    }
    return true;
  }
  return false;
}

void all_completed(const std::vector<FlightDump>& dumps, const std::vector<Aligned>& groups,
                   FlightDiagnosis& d) {
  int64_t step = -1;
  for (const FlightDump& dump : dumps) step = std::max(step, dump.step);
  d.kind = "all_completed";
  d.line = "all ranks completed everything: the stall is outside the collectives (step " +
           std::to_string(step);
  // The newest call of all, by its issue time.
  const FlightCall* newest = nullptr;
  const Aligned* where = nullptr;
  for (const Aligned& g : groups)
    for (const auto& [rank, m] : g.members)
      if (!m.calls.empty() &&
          (newest == nullptr || m.calls.rbegin()->second->issued > newest->issued)) {
        newest = m.calls.rbegin()->second;
        where = &g;
      }
  if (newest != nullptr)
    d.line += ", after #" + std::to_string(newest->seq) + " " + describe(*newest) + " on " +
              where->name();
  d.line += ")";
}

}  // namespace

FlightDump parse_flight_dump(const std::string& text, const std::string& name) {
  FlightDump d;
  d.file = name;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  bool ended = false;
  size_t records = 0;
  while (std::getline(in, line)) {
    ++number;
    Json j;
    try {
      j = Json::parse(line);
      if (number == 1) {
        TP_CHECK_INPUT(j.contains("flight") && j.contains("job"), name,
                       ": not a flight recorder dump (line 1 is no header); give the folder of "
                       "flight-rank-*.jsonl files a run wrote under --flight-dir");
        d.job = j.at("job").get<std::string>();
        d.rank = j.at("rank").get<int>();
        d.world_size = j.at("world_size").get<int>();
        d.host = j.at("host").get<std::string>();
        d.pid = j.at("pid").get<int64_t>();
        d.step = j.at("step").get<int64_t>();
        d.reason = j.at("reason").get<std::string>();
      } else if (j.contains("end")) {
        records = j.at("records").get<size_t>();
        ended = true;
      } else if (j.contains("role")) {
        d.groups.push_back(
            {j.at("role").get<std::string>(), j.at("ranks").get<std::vector<int>>()});
      } else {
        d.calls.push_back(call_from(j));
      }
    } catch (const Json::exception& e) {
      TP_CHECK_INPUT(false, name, " line ", number,
                     " is not a whole record (the file is truncated or damaged: ", e.what(),
                     "); rerun to get a new dump, or move the file out of the folder");
    }
  }
  TP_CHECK_INPUT(number > 0, name, " is empty (a dump cut short); move it out of the folder");
  TP_CHECK_INPUT(ended && records == d.calls.size(), name, " is truncated after line ", number,
                 " (no end record); the rank was killed while writing it: move it out of the "
                 "folder to read the others");
  return d;
}

FlightDump parse_flight_ring(const std::string& bytes, const std::string& name) {
  FlightRingHeader h;
  const bool whole_header = bytes.size() >= sizeof h;
  if (whole_header) std::memcpy(&h, bytes.data(), sizeof h);
  TP_CHECK_INPUT(whole_header && std::memcmp(h.magic, "TPFLRING", 8) == 0 &&
                     h.header_size == sizeof h && h.entry_size == sizeof(FlightEntry) &&
                     bytes.size() >= flight_ring_bytes(h.capacity) && h.capacity > 0,
                 name,
                 " is not a ring file of this build (or it is cut short); move it out of "
                 "the folder");
  FlightDump d;
  d.file = name;
  d.job = std::string(h.job, strnlen(h.job, sizeof h.job));
  d.rank = h.rank;
  d.world_size = h.world_size;
  d.host = std::string(h.host, strnlen(h.host, sizeof h.host));
  d.pid = h.pid;
  d.step = h.step;
  d.reason = "no dump: read from its ring file (stopped or killed)";
  d.from_ring = true;
  for (int g = 0; g < std::min(h.groups, kRingGroups); ++g) {
    const FlightRingGroup& f = h.group[g];
    const int n = std::clamp(f.count, 0, kRingGroupRanks);
    d.groups.push_back({std::string(f.role, strnlen(f.role, sizeof f.role)),
                        std::vector<int>(f.ranks, f.ranks + n)});
  }
  const uint64_t first = h.next > h.capacity ? h.next - h.capacity : 1;
  for (uint64_t i = first; i < h.next; ++i) {
    FlightEntry e;
    std::memcpy(&e, bytes.data() + sizeof h + (i % h.capacity) * sizeof e, sizeof e);
    if (e.index != i) continue;  // being rewritten when the rank stopped
    FlightCall c;
    c.seq = e.sequence;
    c.group = e.group;
    c.op = std::string(e.op, strnlen(e.op, sizeof e.op));
    c.count = e.count;
    c.dtype = dtype_name(e.dtype);
    c.peer = e.peer;
    c.async = e.async;
    c.label = std::string(e.label, strnlen(e.label, sizeof e.label));
    c.step = e.step;
    c.issued = e.issued;
    c.started = e.started;
    c.completed = e.completed;
    d.calls.push_back(std::move(c));
  }
  return d;
}

std::vector<FlightDump> read_flight_dumps(const std::string& dir) {
  DIR* folder = ::opendir(dir.c_str());
  TP_CHECK_INPUT(folder != nullptr, "tp_flight: cannot open the folder ", dir,
                 "; give the --flight-dir of the run");
  std::vector<std::string> names, rings;
  auto ends_with = [](const std::string& n, const std::string& end) {
    return n.size() > end.size() && n.compare(n.size() - end.size(), end.size(), end) == 0;
  };
  while (const dirent* e = ::readdir(folder)) {
    const std::string n = e->d_name;
    if (n.rfind("flight-rank-", 0) != 0) continue;
    if (ends_with(n, ".jsonl")) names.push_back(n);
    if (ends_with(n, ".ring")) rings.push_back(n);
  }
  ::closedir(folder);
  TP_CHECK_INPUT(!names.empty() || !rings.empty(), "tp_flight: no flight-rank-*.jsonl in ", dir,
                 " (the run wrote no dump there); give the --flight-dir of the run");
  auto contents = [&](const std::string& n) {
    std::ifstream f(dir + "/" + n, std::ios::binary);
    std::stringstream text;
    text << f.rdbuf();
    return text.str();
  };
  std::vector<FlightDump> dumps;
  for (const std::string& n : names) dumps.push_back(parse_flight_dump(contents(n), dir + "/" + n));
  for (const std::string& n : rings) {  // a rank's own dump, when it wrote one, says more
    const std::string stem = n.substr(0, n.size() - 5);
    if (std::find(names.begin(), names.end(), stem + ".jsonl") == names.end())
      dumps.push_back(parse_flight_ring(contents(n), dir + "/" + n));
  }
  std::sort(dumps.begin(), dumps.end(),
            [](const FlightDump& a, const FlightDump& b) { return a.rank < b.rank; });
  for (size_t i = 1; i < dumps.size(); ++i) {
    TP_CHECK_INPUT(dumps[i].job == dumps[0].job, "tp_flight: ", dumps[0].file, " and ",
                   dumps[i].file, " come from two different jobs (", dumps[0].job, ", ",
                   dumps[i].job, "); give a folder with one job's dumps");
    TP_CHECK_INPUT(dumps[i].rank != dumps[i - 1].rank, "tp_flight: ", dumps[i - 1].file, " and ",
                   dumps[i].file, " are both rank ", dumps[i].rank, "'s; keep one");
  }
  return dumps;
}

FlightDiagnosis diagnose_flight(const std::vector<FlightDump>& dumps) {
  FlightDiagnosis d;
  if (dumps.empty()) return d;
  d.job = dumps[0].job;
  int world = 0;
  for (const FlightDump& dump : dumps) world = std::max(world, dump.world_size);
  for (int r = 0; r < world; ++r)
    if (dump_of(dumps, r) == nullptr) d.missing.push_back(r);
  const std::vector<Aligned> groups = align(dumps);
  if (!find_mismatch(groups, d) && !find_laggard(dumps, groups, d) &&
      !find_missing_view(groups, d) && !find_in_flight(groups, d))
    all_completed(dumps, groups, d);
  if (!d.missing.empty() && d.kind != "missing")
    d.line += " (no dump from " + ranks_word(d.missing) + ")";
  return d;
}

std::string flight_tail(const std::vector<FlightDump>& dumps, const FlightDiagnosis& d, int rows) {
  std::vector<Aligned> groups = align(dumps);
  std::stable_partition(groups.begin(), groups.end(),
                        [&](const Aligned& g) { return g.name() == d.group; });
  std::ostringstream out;
  for (const Aligned& g : groups) {
    out << "\n" << g.name() << ":";
    if (g.p2p) {
      out << " point-to-point calls (each rank's own sequence), not aligned\n";
      continue;
    }
    out << " the last calls (✓ completed, wait: issued and not completed, -: not entered)\n";
    int64_t newest = 0;
    for (const auto& [rank, m] : g.members) newest = std::max(newest, m.last());
    for (int64_t seq = std::max<int64_t>(1, newest - rows + 1); seq <= newest; ++seq) {
      const FlightCall* ref = nullptr;
      for (const auto& [rank, m] : g.members)
        if (ref == nullptr) ref = m.at(seq);
      if (ref == nullptr) continue;
      std::string row = "  #" + std::to_string(seq) + " " + describe(*ref) + " step " +
                        std::to_string(ref->step) + ":";
      for (const auto& [rank, m] : g.members) {
        const FlightCall* c = m.at(seq);
        row += "  rank " + std::to_string(rank) + " ";
        if (c == nullptr)
          row += seq > m.last() ? "-" : "?";
        else if (!same_call(*ref, *c))
          row += "≠ " + describe(*c);
        else
          row += c->completed > 0 ? "✓" : "wait";
      }
      out << row << "\n";
    }
  }
  return out.str();
}

std::string flight_json(const FlightDiagnosis& d) {
  Json j;
  j["job"] = d.job;
  j["kind"] = d.kind;
  j["diagnosis"] = d.line;
  j["rank"] = d.rank;
  j["seq"] = d.seq;
  j["op"] = d.op;
  j["group"] = d.group;
  j["waiting"] = d.waiting;
  j["missing"] = d.missing;
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace tp
