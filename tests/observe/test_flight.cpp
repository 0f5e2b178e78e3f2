// test_flight.cpp — the flight recorder (observe/flight_recorder.h) as the communicator front feeds
// it, its ring's wrap-around and its dump, and tp_flight's analysis (observe/flight_analysis.h) on
// synthetic dumps: a rank that never entered a collective, a missing rank, a mismatch, a clean
// finish, and the bad inputs (a truncated file, an empty folder, two jobs).
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/call_recorder.h"
#include "core/communicator.h"
#include "core/forwarding_communicator.h"
#include "expect_bad_input.h"
#include "observe/flight_analysis.h"
#include "observe/flight_recorder.h"
#include "test_util.h"

namespace tp {
namespace {

using testing::device;
using testing::expect_bad_input;

// Installs `r` for the test's lifetime.
struct Installed {
  explicit Installed(CallRecorder* r) { set_call_recorder(r); }
  ~Installed() { set_call_recorder(nullptr); }
};

FlightIdentity identity(int rank, int world, const std::string& job = "job-1") {
  FlightIdentity id;
  id.job = job;
  id.rank = rank;
  id.world_size = world;
  id.host = "h" + std::to_string(rank);
  id.pid = 100 + rank;
  return id;
}

// A backend whose all-reduce fails (a call that throws stays incomplete in the ring).
class FailingComm : public SerialCommunicator {
 protected:
  void do_all_reduce(Tensor&, ReduceOp) override { throw std::runtime_error("link down"); }
};

// A decorator that changes nothing: its calls reach the inner front nested in its own.
class PassThrough : public ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;

 protected:
  std::unique_ptr<Communicator> decorate(std::unique_ptr<Communicator> child) override {
    return std::make_unique<PassThrough>(std::move(child));
  }
};

TEST(FlightRecorder, RecordsEachCallOnceWithLabelCountAndCompletion) {
  FlightRecorder rec(identity(0, 1), "/nonexistent");
  Installed on(&rec);
  PassThrough comm(std::make_unique<SerialCommunicator>());
  Tensor x(device(), Shape{4, 8});
  Tensor full(device(), Shape{4, 8});
  {
    CommLedger::Scope scope(comm.ledger(), "mlp fc2");
    comm.all_reduce(x);
  }
  comm.all_gather(x, full);
  std::unique_ptr<Work> w = comm.all_reduce_async(x);
  std::vector<FlightEntry> e = rec.entries();
  ASSERT_EQ(e.size(), 3u) << "the decorator's inner calls must not be recorded again";
  EXPECT_EQ(e[0].sequence, 1);
  EXPECT_STREQ(e[0].op, "all_reduce");
  EXPECT_EQ(e[0].count, 32);
  EXPECT_STREQ(e[0].label, "mlp fc2");
  EXPECT_GT(e[0].completed, 0);
  EXPECT_GE(e[0].started, e[0].issued);
  EXPECT_STREQ(e[1].op, "all_gather");
  EXPECT_EQ(e[1].sequence, 2);
  EXPECT_TRUE(e[2].async);
  w->wait();
  EXPECT_GT(rec.entries()[2].completed, 0) << "an async call completes when its Work does";
  ASSERT_EQ(rec.groups().size(), 1u);
  EXPECT_EQ(rec.groups()[0].role, "world");
}

TEST(FlightRecorder, ACallThatThrowsStaysIncomplete) {
  FlightRecorder rec(identity(0, 1), "/nonexistent");
  Installed on(&rec);
  FailingComm comm;
  Tensor x(device(), Shape{8});
  EXPECT_THROW(comm.all_reduce(x), std::runtime_error);
  ASSERT_EQ(rec.entries().size(), 1u);
  EXPECT_EQ(rec.entries()[0].completed, 0);
}

TEST(FlightRecorder, TheRingKeepsTheLastKCalls) {
  FlightRecorder rec(identity(0, 1), "/nonexistent", 4);
  Installed on(&rec);
  SerialCommunicator comm;
  Tensor x(device(), Shape{8});
  for (int i = 0; i < 10; ++i) comm.all_reduce(x);
  const std::vector<FlightEntry> e = rec.entries();
  ASSERT_EQ(e.size(), 4u);
  for (size_t i = 0; i < e.size(); ++i) EXPECT_EQ(e[i].sequence, 7 + static_cast<int64_t>(i));
  const FlightDump d = parse_flight_dump(rec.snapshot("test"), "x");
  ASSERT_EQ(d.calls.size(), 4u);
  EXPECT_EQ(d.calls.front().seq, 7);
  EXPECT_EQ(d.calls.back().seq, 10);
  EXPECT_EQ(d.reason, "test");
}

TEST(FlightRecorder, TheRingFileHoldsWhatTheRankDid) {
  std::string file(flight_ring_bytes(4), '\0');
  FlightRecorder rec(identity(1, 2), "/nonexistent", 4, file.data());
  Installed on(&rec);
  SerialCommunicator comm;
  comm.set_role("TP group");
  comm.set_world_ranks({1});
  Tensor x(device(), Shape{8});
  rec.set_step(12);
  for (int i = 0; i < 6; ++i) comm.all_reduce(x);
  const FlightDump d = parse_flight_ring(file, "ring");
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.job, "job-1");
  EXPECT_EQ(d.step, 12);
  ASSERT_EQ(d.groups.size(), 1u);
  EXPECT_EQ(d.groups[0].role, "TP group");
  EXPECT_EQ(d.groups[0].world_ranks, std::vector<int>{1});
  ASSERT_EQ(d.calls.size(), 4u);
  EXPECT_EQ(d.calls.front().seq, 3);
  EXPECT_EQ(d.calls.back().seq, 6);
  EXPECT_GT(d.calls.back().completed, 0);
  expect_bad_input([&] { parse_flight_ring(file.substr(0, 100), "cut"); }, "not a ring file",
                   "a cut ring file");
}

// Synthetic dumps: `ranks` of a world of `world`, each completing calls 1..done[r] of an
// all-reduce of 256 Ki floats ('mlp fc2') on group `members`, and entering (not completing)
// call entered[r] when > done[r].
struct Rank {
  int rank;
  int done;
  int entered;
  int64_t count_at_3 = 262144;
};

std::vector<FlightDump> synthetic(int world, const std::vector<int>& members,
                                  const std::vector<Rank>& ranks, const std::string& role = "") {
  std::vector<FlightDump> out;
  for (const Rank& r : ranks) {
    FlightRecorder rec(identity(r.rank, world), "/nonexistent");
    rec.set_step(7);
    int pos = 0;
    while (members[static_cast<size_t>(pos)] != r.rank) ++pos;
    const int g = rec.add_group(role, members, pos, static_cast<int>(members.size()));
    const std::string label = "mlp fc2";
    for (int s = 1; s <= std::max(r.done, r.entered); ++s) {
      IssuedCall c;
      c.op = "all_reduce";
      c.count = s == 3 ? r.count_at_3 : 262144;
      c.label = &label;
      const uint64_t t = rec.issued(g, s, c);
      if (s <= r.done) rec.completed(t);
    }
    out.push_back(parse_flight_dump(rec.snapshot("stall"), "rank" + std::to_string(r.rank)));
  }
  return out;
}

TEST(FlightAnalysis, NamesTheRankThatNeverEntered) {
  const auto dumps = synthetic(4, {0, 1, 2, 3}, {{0, 5, 6}, {1, 5, 6}, {2, 5, 6}, {3, 5, 5}});
  const FlightDiagnosis d = diagnose_flight(dumps);
  EXPECT_EQ(d.kind, "never_entered");
  EXPECT_EQ(d.rank, 3);
  EXPECT_EQ(d.seq, 6);
  EXPECT_EQ(d.line,
            "rank 3 (host h3, step 7) never entered collective #6 all_reduce(1.0 MiB, 'mlp fc2') "
            "on the world of world ranks 0, 1, 2, 3; its last completed was #5; ranks 0, 1, 2 "
            "wait in #6");
  EXPECT_NE(flight_tail(dumps, d, 3)
                .find("#6 all_reduce(1.0 MiB, 'mlp fc2') step 7:  rank 0 "
                      "wait  rank 1 wait  rank 2 wait  rank 3 -"),
            std::string::npos)
      << flight_tail(dumps, d, 3);
}

TEST(FlightAnalysis, OnATpGroupNamesItsWorldRanks) {
  const auto dumps = synthetic(4, {2, 3}, {{2, 4, 5}, {3, 4, 4}}, "TP group");
  const FlightDiagnosis d = diagnose_flight(dumps);
  EXPECT_EQ(d.rank, 3);
  EXPECT_NE(d.line.find("on the TP group of world ranks 2, 3"), std::string::npos) << d.line;
  EXPECT_NE(d.line.find("(no dump from ranks 0, 1)"), std::string::npos) << d.line;
}

TEST(FlightAnalysis, SaysWhichRankLeftNoDumpAndWhatTheOthersSaw) {
  const auto dumps = synthetic(3, {0, 1, 2}, {{0, 8, 9}, {2, 8, 9}});
  const FlightDiagnosis d = diagnose_flight(dumps);
  EXPECT_EQ(d.kind, "missing");
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.seq, 9);
  EXPECT_EQ(d.missing, std::vector<int>{1});
  EXPECT_NE(d.line.find("rank 1 left no dump"), std::string::npos) << d.line;
  EXPECT_NE(d.line.find("ranks 0, 2 wait for it in collective #9 all_reduce"), std::string::npos)
      << d.line;
  EXPECT_NE(d.line.find("the last call they completed with it was #8"), std::string::npos)
      << d.line;
}

TEST(FlightAnalysis, NamesTheFirstCallWhereTheRanksDisagree) {
  Rank odd{1, 4, 5};
  odd.count_at_3 = 262152;
  const auto dumps = synthetic(2, {0, 1}, {{0, 4, 5}, odd});
  const FlightDiagnosis d = diagnose_flight(dumps);
  EXPECT_EQ(d.kind, "mismatch");
  EXPECT_EQ(d.seq, 3);
  EXPECT_NE(d.line.find("collective #3 of the world of world ranks 0, 1"), std::string::npos)
      << d.line;
  EXPECT_NE(d.line.find("rank 0 called all_reduce(262144 floats, 'mlp fc2'); rank 1 called "
                        "all_reduce(262152 floats, 'mlp fc2')"),
            std::string::npos)
      << d.line;
  EXPECT_EQ(d.rank, 1);
}

TEST(FlightAnalysis, EveryRankInTheCallNamesTheOneThatLeftOnlyItsRing) {
  auto dumps = synthetic(2, {0, 1}, {{0, 4, 5}, {1, 4, 5}});
  FlightDiagnosis d = diagnose_flight(dumps);
  EXPECT_EQ(d.kind, "in_flight");
  EXPECT_NE(d.line.find("the call itself does not finish"), std::string::npos) << d.line;
  dumps[1].from_ring = true;  // rank 1 was stopped inside #5
  d = diagnose_flight(dumps);
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.seq, 5);
  EXPECT_NE(d.line.find("rank 1 wrote no dump of its own (stopped or killed inside the call"),
            std::string::npos)
      << d.line;
}

// tp 2 × dp 2 with rank 3 stopped inside a call the recorder does not see (the stop-signal
// agreement over raw MPI): rank 1, held up behind it there, is outside every recorded call, but
// the cause is the rank that could not answer the dump request.
TEST(FlightAnalysis, AStoppedRankComesBeforeOneOutsideTheRecordedCalls) {
  auto dumps = synthetic(4, {0, 1}, {{0, 5, 6}, {1, 5, 5}}, "TP group");
  for (FlightDump& d : synthetic(4, {2, 3}, {{2, 5, 6}, {3, 5, 5}}, "TP group")) dumps.push_back(d);
  dumps[3].from_ring = true;  // rank 3: no dump of its own
  const FlightDiagnosis d = diagnose_flight(dumps);
  EXPECT_EQ(d.kind, "never_entered");
  EXPECT_EQ(d.rank, 3) << d.line;
  EXPECT_NE(d.line.find("no dump of its own: stopped or killed"), std::string::npos) << d.line;
  EXPECT_NE(d.line.find("on the TP group of world ranks 2, 3"), std::string::npos) << d.line;
}

TEST(FlightAnalysis, AllCompletedPointsOutsideTheCollectives) {
  const FlightDiagnosis d = diagnose_flight(synthetic(2, {0, 1}, {{0, 6, 6}, {1, 6, 6}}));
  EXPECT_EQ(d.kind, "all_completed");
  EXPECT_EQ(d.line,
            "all ranks completed everything: the stall is outside the collectives (step 7, after "
            "#6 all_reduce(1.0 MiB, 'mlp fc2') on the world of world ranks 0, 1)");
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(FlightAnalysis, BadInputsAreOneLineEach) {
  const std::string dir = testing::empty_test_folder("flight");
  expect_bad_input([&] { read_flight_dumps(dir); }, "no flight-rank-*.jsonl in", "an empty folder");
  expect_bad_input([&] { read_flight_dumps(dir + "nope"); }, "cannot open the folder",
                   "a missing folder");
  FlightRecorder a(identity(0, 2, "job-A"), dir), b(identity(1, 2, "job-B"), dir);
  a.dump("test");
  b.dump("test");
  expect_bad_input([&] { read_flight_dumps(dir); }, "come from two different jobs", "two jobs");
  FlightRecorder b2(identity(1, 2, "job-A"), dir);
  b2.dump("test");
  EXPECT_EQ(read_flight_dumps(dir).size(), 2u);
  const std::string whole = a.snapshot("test");
  write(a.path(), whole.substr(0, whole.size() - 10));
  expect_bad_input([&] { read_flight_dumps(dir); }, "flight-rank-0.jsonl line", "a cut last line");
  write(a.path(), whole.substr(0, whole.rfind("{\"end\"")));
  expect_bad_input([&] { read_flight_dumps(dir); }, "is truncated after line", "no end record");
}

}  // namespace
}  // namespace tp
