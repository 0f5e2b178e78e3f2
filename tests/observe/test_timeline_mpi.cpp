// test_timeline_mpi.cpp — the Timeline (observe/timeline.h): spans recorded by construction for
// kernels and collectives (names, kinds, tracks, the async issue → completion span), nothing
// without a timeline, the exposed / hidden arithmetic on hand-made spans, and the gather to rank 0
// written as a Chrome trace (valid JSON, every rank a process, no overlap within a thread) and SVG.
// Runs under mpirun -np 1, 2, 3, 4; a handful of collectives per test.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/communicator.h"
#include "core/device.h"
#include "observe/timeline.h"
#include "test_util.h"

namespace {

using namespace tp;
using tp::testing::device;
using tp::testing::world;

// The spans of `kind` named `name`.
std::vector<Span> named(const std::vector<Span>& spans, SpanKind kind, const std::string& name) {
  std::vector<Span> out;
  for (const Span& s : spans)
    if (s.kind == kind && s.name == name) out.push_back(s);
  return out;
}

// No two spans of one rank's track overlap (ends may touch starts).
void expect_no_overlap(std::vector<Span> spans, const std::string& track) {
  std::vector<Span> row;
  for (const Span& s : spans)
    if (s.track() == track) row.push_back(s);
  std::sort(row.begin(), row.end(), [](const Span& a, const Span& b) { return a.start < b.start; });
  for (size_t i = 0; i + 1 < row.size(); ++i)
    EXPECT_LE(row[i].end, row[i + 1].start) << row[i].name << " overlaps " << row[i + 1].name;
}

// Kernels, a blocking all-reduce, an async all-gather waited for, an async reduce-scatter polled
// with test() until done: returns the spans this rank recorded.
std::vector<Span> record_a_little(Timeline& tl) {
  const int t = world().size();
  device().set_timeline(&tl);
  world().set_timeline(&tl);
  Tensor a(device(), Shape{4, 3}), b(device(), Shape{3, 5}), c(device(), Shape{4, 5});
  device().fill(a, 1.0f);
  device().fill(b, 2.0f);
  device().gemm(false, false, 1.0f, a, b, 0.0f, c);
  {
    CommLedger::Scope scope(world().ledger(), "timeline test");
    world().all_reduce(c);
  }
  Tensor full(device(), Shape{4 * t, 5});
  auto gathering = world().all_gather_async(c, full);
  device().scale(c, 0.5f);  // compute while the all-gather is in flight
  gathering->wait();
  Tensor shard(device(), Shape{4, 5});
  auto scattering = world().reduce_scatter_async(full, shard);
  while (!scattering->test()) {
  }
  scattering->wait();
  scattering.reset();
  device().set_timeline(nullptr);
  world().set_timeline(nullptr);
  return tl.spans();
}

TEST(Timeline, OffByDefault) {
  EXPECT_EQ(device().timeline(), nullptr);
  EXPECT_EQ(world().timeline(), nullptr);
  Timeline tl;
  Tensor x(device(), Shape{8});
  device().fill(x, 1.0f);
  world().all_reduce(x);
  EXPECT_TRUE(tl.spans().empty());
  // Attached and detached again: what ran in between only.
  device().set_timeline(&tl);
  device().scale(x, 2.0f);
  device().set_timeline(nullptr);
  device().scale(x, 2.0f);
  ASSERT_EQ(tl.spans().size(), 1u);
  EXPECT_EQ(tl.spans()[0].name, "scale");
}

TEST(Timeline, KernelsAndCollectivesAreRecordedByConstruction) {
  const int t = world().size();
  Timeline tl(world().rank());
  const std::vector<Span> spans = record_a_little(tl);

  EXPECT_EQ(named(spans, SpanKind::Kernel, "fill").size(), 2u);
  ASSERT_EQ(named(spans, SpanKind::Kernel, "gemm").size(), 1u);
  EXPECT_STREQ(named(spans, SpanKind::Kernel, "gemm")[0].track(), "compute");
  EXPECT_EQ(named(spans, SpanKind::Kernel, "scale").size(), 1u);

  // The blocking all-reduce: one span, the call, with its bytes and ledger label.
  const auto reduce = named(spans, SpanKind::Collective, "all_reduce");
  ASSERT_EQ(reduce.size(), 1u);
  EXPECT_STREQ(reduce[0].track(), "communication");
  EXPECT_FALSE(reduce[0].async);
  EXPECT_EQ(reduce[0].bytes, 4 * 20);
  EXPECT_EQ(reduce[0].label, "timeline test");
  EXPECT_EQ(reduce[0].rank, world().rank());

  // The async all-gather: issue and wait on the compute track; the collective from the start of
  // the issue to the end of the wait, around the scale that ran meanwhile.
  const auto issue = named(spans, SpanKind::Wait, "issue all_gather");
  const auto wait = named(spans, SpanKind::Wait, "wait all_gather");
  const auto gather = named(spans, SpanKind::Collective, "all_gather");
  ASSERT_EQ(issue.size(), 1u);
  ASSERT_EQ(wait.size(), 1u);
  ASSERT_EQ(gather.size(), 1u);
  EXPECT_STREQ(wait[0].track(), "compute");
  EXPECT_TRUE(gather[0].async);
  EXPECT_EQ(gather[0].bytes, 4 * 20 * t);
  EXPECT_EQ(gather[0].start, issue[0].start);
  EXPECT_EQ(gather[0].end, wait[0].end);
  const Span scale = named(spans, SpanKind::Kernel, "scale")[0];
  EXPECT_LE(gather[0].start, scale.start);
  EXPECT_GE(gather[0].end, scale.end);

  // The reduce-scatter polled with test(): complete when test() first said so, recorded once,
  // before the wait() that followed.
  const auto scatter = named(spans, SpanKind::Collective, "reduce_scatter");
  ASSERT_EQ(scatter.size(), 1u);
  const auto scatter_wait = named(spans, SpanKind::Wait, "wait reduce_scatter");
  ASSERT_EQ(scatter_wait.size(), 1u);
  EXPECT_LE(scatter[0].end, scatter_wait[0].start);

  for (const Span& s : spans) EXPECT_LE(s.start, s.end) << s.name;
  expect_no_overlap(spans, "compute");
  expect_no_overlap(spans, "communication");
}

// all_to_all_v is recorded as the other blocking collectives are: one span on the communication
// track with the bytes of its send buffer and its label.
TEST(Timeline, AllToAllVIsOneCollectiveSpan) {
  const int t = world().size();
  Timeline tl(world().rank());
  world().set_timeline(&tl);
  const std::vector<int64_t> twos(static_cast<size_t>(t), 2);
  Tensor send = Tensor::zeros(device(), Shape{2 * t, 3}), recv(device(), Shape{2 * t, 3});
  {
    CommLedger::Scope scope(world().ledger(), "dispatch");
    world().all_to_all_v(send, twos, recv, twos);
  }
  world().set_timeline(nullptr);
  const auto spans = named(tl.spans(), SpanKind::Collective, "all_to_all_v");
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_STREQ(spans[0].track(), "communication");
  EXPECT_FALSE(spans[0].async);
  EXPECT_EQ(spans[0].bytes, 4 * 2 * t * 3);
  EXPECT_EQ(spans[0].label, "dispatch");
}

// Hand-made spans (seconds), with the sums worked out:
//   kernel            [0, 1]
//   all_reduce        [1, 1.5]   blocking: exposed 0.5
//   issue all_gather  [1.5, 1.75]
//   kernel            [1.75, 3]
//   wait all_gather   [3, 3.5]
//   all_gather        [1.5, 3.5] async: communication 2, of which 0.25 + 0.5 exposed
// communication = 2.5, exposed = 0.5 + 0.25 + 0.5 = 1.25, hidden = 1.25, compute = 2.25.
TEST(Timeline, ExposedIsBlockingPlusWaitsHiddenIsTheRest) {
  Timeline tl;
  auto add = [&](SpanKind kind, const char* name, double start, double end, bool async = false) {
    Span s;
    s.kind = kind;
    s.name = name;
    s.start = start;
    s.end = end;
    s.async = async;
    tl.record(s);
  };
  add(SpanKind::Kernel, "gemm", 0, 1);
  const size_t after_first = tl.mark();
  add(SpanKind::Collective, "all_reduce", 1, 1.5);
  add(SpanKind::Wait, "issue all_gather", 1.5, 1.75);
  add(SpanKind::Kernel, "gelu_forward", 1.75, 3);
  add(SpanKind::Wait, "wait all_gather", 3, 3.5);
  add(SpanKind::Collective, "all_gather", 1.5, 3.5, true);
  const CommTotals all = tl.totals_since(0);
  EXPECT_DOUBLE_EQ(all.compute, 2.25);
  EXPECT_DOUBLE_EQ(all.communication, 2.5);
  EXPECT_DOUBLE_EQ(all.exposed, 1.25);
  EXPECT_DOUBLE_EQ(all.hidden, 1.25);
  EXPECT_DOUBLE_EQ(tl.totals_since(after_first).compute, 1.25);
  EXPECT_DOUBLE_EQ(tl.totals_since(tl.mark()).exposed, 0.0);

  // A wait longer than the collective it waited for (its completion was seen by test() first):
  // hidden is clamped at 0, never negative.
  const size_t mark = tl.mark();
  add(SpanKind::Collective, "reduce_scatter", 4, 4.25, true);
  add(SpanKind::Wait, "wait reduce_scatter", 4, 4.5);
  const CommTotals late = tl.totals_since(mark);
  EXPECT_DOUBLE_EQ(late.communication, 0.25);
  EXPECT_DOUBLE_EQ(late.exposed, 0.5);
  EXPECT_DOUBLE_EQ(late.hidden, 0.0);

  tl.clear();
  EXPECT_EQ(tl.mark(), 0u);
}

// Checks the Chrome trace: valid JSON, "X" events with the metadata of every rank in `ranks`, and
// no two X events of one (pid, tid) overlapping. Returns the X events.
std::vector<nlohmann::json> check_trace(const std::string& text, int ranks) {
  const nlohmann::json trace = nlohmann::json::parse(text);  // throws on invalid JSON
  std::map<int, std::string> process;
  std::map<std::pair<int, int>, std::string> thread;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> busy;
  std::vector<nlohmann::json> events;
  for (const auto& e : trace.at("traceEvents")) {
    const int pid = e.at("pid"), tid = e.at("tid");
    if (e.at("ph") == "M" && e.at("name") == "process_name") process[pid] = e["args"]["name"];
    if (e.at("ph") == "M" && e.at("name") == "thread_name") thread[{pid, tid}] = e["args"]["name"];
    if (e.at("ph") != "X") continue;
    events.push_back(e);
    const double ts = e.at("ts").get<double>(), dur = e.at("dur").get<double>();
    busy[{pid, tid}].push_back({ts, ts + dur});
    EXPECT_GE(dur, 0.0);
  }
  for (int r = 0; r < ranks; ++r) EXPECT_EQ(process[r], "rank " + std::to_string(r));
  for (auto& [where, intervals] : busy) {
    EXPECT_EQ(process.count(where.first), 1u);
    EXPECT_EQ(thread.count(where), 1u) << "no thread_name for pid " << where.first;
    std::sort(intervals.begin(), intervals.end());
    for (size_t i = 0; i + 1 < intervals.size(); ++i)
      EXPECT_LE(intervals[i].second, intervals[i + 1].first + 1e-6)
          << "overlap on pid " << where.first << " " << thread[where];
  }
  return events;
}

TEST(Timeline, GatherBringsEveryRankToRankZeroAsAValidTrace) {
  const int t = world().size(), r = world().rank();
  Timeline tl(r);
  record_a_little(tl);
  // A span whose name and label need escaping in JSON and SVG, and bytes beyond 32 bits.
  Span odd;
  odd.kind = SpanKind::Collective;
  odd.name = "odd \"name\" \\ <&> \n µs";
  odd.label = "rank " + std::to_string(r);
  odd.bytes = 1234567890123;
  odd.async = true;
  odd.start = tl.now();
  odd.end = odd.start + 1e-6;
  tl.record(odd);
  const size_t mine = tl.spans().size();

  tl.gather(world(), device());
  if (r != 0) {
    EXPECT_EQ(tl.spans().size(), mine);  // other ranks keep their own
    return;
  }
  const std::vector<Span> all = tl.spans();
  std::set<int> ranks;
  double first = 1e300;
  for (const Span& s : all) ranks.insert(s.rank), first = std::min(first, s.start);
  EXPECT_EQ(static_cast<int>(ranks.size()), t);
  EXPECT_EQ(first, 0.0);
  for (int q = 0; q < t; ++q) {
    std::vector<Span> of_q;
    for (const Span& s : all)
      if (s.rank == q) of_q.push_back(s);
    const auto odd_q = named(of_q, SpanKind::Collective, odd.name);
    ASSERT_EQ(odd_q.size(), 1u) << "rank " << q;
    EXPECT_EQ(odd_q[0].label, "rank " + std::to_string(q));
    EXPECT_EQ(odd_q[0].bytes, odd.bytes);
    EXPECT_TRUE(odd_q[0].async);
    EXPECT_EQ(named(of_q, SpanKind::Kernel, "gemm").size(), 1u);
    expect_no_overlap(of_q, "compute");
  }

  const auto events = check_trace(tl.trace_json(), t);
  EXPECT_EQ(events.size(), all.size());
  int odd_events = 0;
  for (const auto& e : events) odd_events += e.at("name") == odd.name;
  EXPECT_EQ(odd_events, t);

  const std::string svg = tl.svg();
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("rank " + std::to_string(t - 1) + " compute"), std::string::npos);
  EXPECT_NE(svg.find("GEMM"), std::string::npos);
  EXPECT_NE(svg.find("odd &quot;name&quot; \\ &lt;&amp;&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("<&>"), std::string::npos);

  const std::string path = ::testing::TempDir() + "timeline_test.json";
  tl.write_trace_json(path);
  std::ifstream in(path);
  EXPECT_NO_THROW(check_trace(std::string(std::istreambuf_iterator<char>(in), {}), t));
}

// Async collectives in flight together overlap on the communication track: the trace gives the
// second its own thread ("communication 2"), so no thread has overlapping events. A name that is
// not UTF-8 still makes valid JSON.
TEST(Timeline, OverlappingCollectivesGetTheirOwnThread) {
  Timeline tl;
  for (double start : {0.0, 1e-3}) {
    Span s;
    s.kind = SpanKind::Collective;
    s.name = start == 0.0 ? "send_recv" : "send_recv \xff";
    s.async = true;
    s.start = start;
    s.end = start + 2e-3;
    tl.record(s);
  }
  const std::string json = tl.trace_json();
  check_trace(json, 1);
  EXPECT_NE(json.find("\"communication 2\""), std::string::npos);
  EXPECT_NE(tl.svg().find("rank 0 communication 2"), std::string::npos);
}

}  // namespace
