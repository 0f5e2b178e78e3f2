// test_link_mpi.cpp — the simulated interconnect (observe/simulated_link.h) and the α–β predictor
// (observe/alpha_beta.h): --link parsing, the ring formulas against hand values, the decorator's
// delays (blocking and async), values and ledger records, and measure_alpha_beta recovering a
// simulated link's α and β.
// Runs under mpirun -np 1, 2, 3, 4. The links here are slow on purpose (milliseconds per message),
// so the model dominates the real transport and the scheduling noise of a shared machine; each
// test runs only a few collectives.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <utility>
#include <vector>

#include "core/error.h"
#include "expect_bad_input.h"
#include "observe/alpha_beta.h"
#include "observe/simulated_link.h"
#include "test_util.h"

namespace {

using namespace tp;
using tp::testing::device;
using tp::testing::expect_bad_input;
using tp::testing::world;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The world's ranks (a fresh communicator over them) behind a link with α = `alpha_ms`.
std::unique_ptr<SimulatedLink> linked_world(double alpha_ms, double beta_gbps) {
  return std::make_unique<SimulatedLink>(world().split(0, world().rank()),
                                         Link{"test", {alpha_ms * 1e-3, beta_gbps * 1e9}});
}

// x[i] = (rank + 1) · (i + 1): small integers, so sums are exact.
Tensor rank_valued(int64_t n) {
  const float r = static_cast<float>(world().rank() + 1);
  return Tensor::from_host(device(), Shape{n}, tp::testing::iota_vector(n, r, r));
}

// ---- --link values ---------------------------------------------------------------------------------

TEST(Link, PresetsAndTheCustomForm) {
  EXPECT_FALSE(parse_link("none").has_value());
  const Link nvlink = *parse_link("nvlink"), ib = *parse_link("ib"), eth = *parse_link("10gbe");
  EXPECT_DOUBLE_EQ(nvlink.model.beta, 450e9);
  EXPECT_DOUBLE_EQ(ib.model.beta, 50e9);
  EXPECT_DOUBLE_EQ(eth.model.beta, 1.25e9);
  EXPECT_DOUBLE_EQ(ib.model.alpha, 5e-6);
  EXPECT_LT(nvlink.model.alpha, ib.model.alpha);
  EXPECT_LT(ib.model.alpha, eth.model.alpha);
  EXPECT_EQ(ib.str(), "ib (α 5 µs, β 50 GB/s)");
  const Link custom = *parse_link("5,12.5");
  EXPECT_DOUBLE_EQ(custom.model.alpha, 5e-6);
  EXPECT_DOUBLE_EQ(custom.model.beta, 12.5e9);
  EXPECT_DOUBLE_EQ(parse_link("0,1")->model.alpha, 0.0);  // a pure-bandwidth link
}

TEST(Link, BadValuesAreBadInputNamingTheForms) {
  for (const char* bad : {"", "fast", "IB", "5", "5,", ",12.5", "5,0", "-1,12.5", "5,12.5,1",
                          "5;12.5", "nan,1", "1,inf", "5 ,12.5"}) {
    expect_bad_input([&] { parse_link(bad); }, "none, nvlink, ib, 10gbe or α_us,β_GBps",
                     std::string("--link=") + bad);
  }
}

// The custom form's bounds keep a run finite: α = 1000 s never ends, β = 1e-300 GB/s overflows the
// deadline (the delay vanished); each refusal names the value as typed and the bound.
TEST(Link, CustomValuesOutsideTheBoundsAreRefused) {
  for (const auto& [bad, needle] :
       std::vector<std::pair<const char*, const char*>>{{"1e9,1", "α = 1e9 µs is more than"},
                                                        {"10001,1", "α = 10001 µs"},
                                                        {"0,1e-300", "β = 1e-300 GB/s is outside"},
                                                        {"5,0.09", "β = 0.09 GB/s"},
                                                        {"5,2e6", "β = 2e6 GB/s"}}) {
    // (an init-capture: a lambda may not capture a structured binding in C++17)
    expect_bad_input([link = bad] { parse_link(link); }, needle, std::string("--link=") + bad);
  }
  EXPECT_DOUBLE_EQ(parse_link("10000,0.1")->model.alpha, 10000e-6);  // both bounds included
  EXPECT_DOUBLE_EQ(parse_link("0,1000000")->model.beta, 1e15);
}

// ---- the ring formulas -----------------------------------------------------------------------------

TEST(AlphaBeta, RingFormulasAgainstHandValues) {
  const AlphaBeta ab{1e-6, 1e9};  // 1 µs per message, 1 GB/s
  const int64_t n = 1 << 20;      // 1 MiB
  // t = 4: all-reduce 6 α + 2 · 3/4 · n / β; all-gather, reduce-scatter 3 α + 3/4 · n / β;
  // broadcast 3 α + n / β; send-recv α + n / β.
  EXPECT_NEAR(predict_seconds("all_reduce", 4, n, ab), 6e-6 + 1.572864e-3, 1e-12);
  EXPECT_NEAR(predict_seconds("all_reduce_max", 4, n, ab), 6e-6 + 1.572864e-3, 1e-12);
  EXPECT_NEAR(predict_seconds("all_gather", 4, n, ab), 3e-6 + 0.786432e-3, 1e-12);
  EXPECT_NEAR(predict_seconds("reduce_scatter", 4, n, ab), 3e-6 + 0.786432e-3, 1e-12);
  EXPECT_NEAR(predict_seconds("broadcast", 4, n, ab), 3e-6 + 1.048576e-3, 1e-12);
  EXPECT_NEAR(predict_seconds("send_recv", 4, n, ab), 1e-6 + 1.048576e-3, 1e-12);
  // t = 2: all-reduce 2 α + n / β.
  EXPECT_NEAR(predict_seconds("all_reduce", 2, n, ab), 2e-6 + 1.048576e-3, 1e-12);
  EXPECT_EQ(ring_steps("all_reduce", 8), 14);
  EXPECT_EQ(ring_steps("all_gather", 8), 7);
  EXPECT_EQ(ring_steps("send_recv", 8), 1);
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv"}) {
    EXPECT_EQ(ring_steps(op, 1), 0) << op;
    EXPECT_EQ(predict_seconds(op, 1, n, AlphaBeta{}), 0.0) << op;  // t = 1: nothing, not even α
  }
  EXPECT_THROW(ring_steps("all_to_all", 2), Error);
  // all_to_all_v: t − 1 messages; from N alone an even split, (t − 1)/t · N.
  EXPECT_EQ(ring_steps("all_to_all_v", 4), 3);
  EXPECT_NEAR(predict_seconds("all_to_all_v", 4, n, ab), 3e-6 + 0.786432e-3, 1e-12);
}

TEST(AlphaBeta, ReportPredictsAnAllToAllVByTheBytesItSends) {
  // A 1 MiB send buffer at t = 4 of which this rank keeps 1/2: it sends 512 KiB to the others.
  // α = 1 µs, β = 1 GB/s: 3 α + 524288 / β = 527.288 µs (not the even split's 789.4).
  CommLedger ledger;
  const size_t i = ledger.record("all_to_all_v", 4, 1 << 18);
  ledger.set_wire_bytes(i, 524288.0);
  ledger.set_seconds(i, 527.288e-6);
  const std::string report =
      prediction_report(ledger, 0, ledger.size(), AlphaBeta{1e-6, 1e9}, "P: ");
  EXPECT_NE(report.find("all_to_all_v     1048576      1         527.3        527.3       1.00"),
            std::string::npos)
      << report;
}

TEST(AlphaBeta, SeedNumbersFromThePresets) {
  // [A3]: a 64 MiB all-reduce at t = 8 sends 112 MiB per rank; 0.26 ms on NVLink, 2.3 ms on
  // IB (the β term), plus 14 α.
  const int64_t n = int64_t{64} << 20;
  AlphaBeta nvlink = parse_link("nvlink")->model, ib = parse_link("ib")->model;
  EXPECT_NEAR(predict_seconds("all_reduce", 8, n, nvlink) - 14 * nvlink.alpha, 0.26e-3, 0.005e-3);
  EXPECT_NEAR(predict_seconds("all_reduce", 8, n, ib) - 14 * ib.alpha, 2.35e-3, 0.005e-3);
}

// ---- the decorator ---------------------------------------------------------------------------------

TEST(SimulatedLink, BlockingCallTakesTheModelledTimeAndKeepsValues) {
  const int t = world().size();
  auto link = linked_world(2.0, 1.0);  // α = 2 ms: 2 (t − 1) · 2 ms for an all-reduce
  EXPECT_EQ(link->name().rfind("simulated test (α 2 ms, β 1 GB/s) over mpi", 0), 0u)
      << link->name();
  EXPECT_TRUE(is_simulated(*link));
  EXPECT_FALSE(is_simulated(world()));
  Tensor x = rank_valued(10), want = rank_valued(10);
  world().all_reduce(want);
  const size_t before = link->ledger().size(), inner_before = link->inner().ledger().size();
  const double model = predict_seconds("all_reduce", t, x.bytes(), link->link().model);
  const Clock::time_point start = Clock::now();
  link->all_reduce(x);
  const double took = seconds_since(start);
  EXPECT_GE(took, model);
  if (t > 1) {
    EXPECT_GE(model, 2e-3);
  }
  EXPECT_EQ(x.to_host(), want.to_host());
  // One record on the decorator (with the delay in its seconds); the inner keeps its own.
  ASSERT_EQ(link->ledger().size(), before + 1);
  const CommRecord& r = link->ledger().records().back();
  EXPECT_EQ(r.op, "all_reduce");
  EXPECT_EQ(r.group_size, t);
  EXPECT_GE(r.seconds, model);
  EXPECT_EQ(link->inner().ledger().size(), inner_before + 1);
}

// A bf16 tensor is modelled by its bytes: half of f32's, so a bandwidth-bound call takes half the
// modelled time, and the decorator's ledger counts 2 B per element.
TEST(SimulatedLink, Bf16IsModelledByItsBytes) {
  const int t = world().size();
  auto link = linked_world(0.0, 0.01);  // α = 0, β = 10 MB/s: time = wire bytes / β
  const int64_t n = 20000;
  Tensor x = Tensor::from_host(device(), Shape{n}, std::vector<float>(n, 1.0f), Dtype::bf16);
  const double m16 =
      predict_seconds("all_reduce", t, static_cast<int64_t>(x.bytes()), link->link().model);
  EXPECT_DOUBLE_EQ(2 * m16, predict_seconds("all_reduce", t, 4 * n, link->link().model));
  const Clock::time_point start = Clock::now();
  link->all_reduce(x);
  EXPECT_GE(seconds_since(start), m16);
  EXPECT_EQ(x.to_host(), std::vector<float>(n, static_cast<float>(t)));  // small integers: exact
  const CommRecord& r = link->ledger().records().back();
  EXPECT_EQ(r.bytes, 2 * n);
  EXPECT_EQ(link->inner().ledger().records().back().bytes, 2 * n);
}

TEST(SimulatedLink, AsyncWorkIsDoneOnlyAfterTheDeadline) {
  const int t = world().size();
  auto link = linked_world(20.0, 1.0);
  Tensor full(device(), Shape{2 * t, 3});
  Tensor shard = Tensor::from_host(device(), Shape{2, 3},
                                   tp::testing::iota_vector(6, 100.0f * world().rank()));
  const double model = predict_seconds("all_gather", t, full.bytes(), link->link().model);
  const Clock::time_point start = Clock::now();
  auto work = link->all_gather_async(shard, full);
  if (t > 1) {
    EXPECT_FALSE(work->test());  // the deadline is ≥ 20 ms away
  }
  work->wait();
  EXPECT_GE(seconds_since(start), model);
  EXPECT_TRUE(work->test());
  std::vector<float> want;
  for (int q = 0; q < t; ++q)
    for (int i = 0; i < 6; ++i) want.push_back(100.0f * q + i);
  EXPECT_EQ(full.to_host(), want);
  ASSERT_GE(link->ledger().size(), 1u);
  EXPECT_TRUE(link->ledger().records().back().async);
}

TEST(SimulatedLink, SendRecvAsyncAndSplitKeepTheLink) {
  const int t = world().size(), r = world().rank();
  auto link = linked_world(2.0, 1.0);
  auto sub = link->split(r % 2, r);  // the same link over each half
  EXPECT_TRUE(is_simulated(*sub));
  EXPECT_EQ(sub->name().rfind("simulated test", 0), 0u);
  Tensor send = Tensor::from_host(device(), Shape{3}, {1.0f * r, 2.0f * r, 3.0f * r});
  Tensor recv(device(), Shape{3});
  const int to = (r + 1) % t, from = (r + t - 1) % t;
  const Clock::time_point start = Clock::now();
  auto work = link->send_recv_async(send, to, recv, from);
  work->wait();
  EXPECT_GE(seconds_since(start), t > 1 ? 2e-3 : 0.0);  // one message: α
  EXPECT_EQ(recv.to_host(), (std::vector<float>{1.0f * from, 2.0f * from, 3.0f * from}));
}

// ---- measuring α and β ----------------------------------------------------------------------------

TEST(AlphaBeta, MeasureRecoversASimulatedLink) {
  // α = 3 ms, β = 0.01 GB/s: a 256 KiB transfer takes 3 + 26 ms, far above the real transport
  // even with four ranks on two busy cores.
  auto link = linked_world(3.0, 0.01);
  const AlphaBeta got = measure_alpha_beta(*link, device(), int64_t{256} << 10);
  if (world().size() == 1) {
    EXPECT_EQ(got.alpha, 0.0);
    EXPECT_EQ(got.beta, 0.0);
    return;
  }
  EXPECT_NEAR(got.alpha, 3e-3, 0.25 * 3e-3) << got.str();
  EXPECT_NEAR(got.beta, 0.01e9, 0.25 * 0.01e9) << got.str();
  // The calls are labelled; every rank agreed on the same numbers.
  EXPECT_EQ(link->ledger().records().front().label, "alpha_beta");
  Tensor mine = Tensor::from_host(device(), Shape{2},
                                  {static_cast<float>(got.alpha), static_cast<float>(got.beta)});
  Tensor most = Tensor::from_host(device(), Shape{2}, mine.to_host());
  world().all_reduce(most, ReduceOp::Max);
  EXPECT_EQ(most.to_host(), mine.to_host());
}

TEST(AlphaBeta, ReportComparesEachRecordWithTheModel) {
  // A hand-made ledger: two all-reduces of 1 MiB at t = 2 measured at 1.1 ms each, one async
  // all-gather; α = 0, β = 1 GB/s predicts 1.048576 ms per all-reduce.
  CommLedger ledger;
  {
    CommLedger::Scope scope(ledger, "layer0");
    ledger.set_seconds(ledger.record("all_reduce", 2, 1 << 18), 1.1e-3);
    ledger.set_seconds(ledger.record("all_reduce", 2, 1 << 18), 1.1e-3);
  }
  ledger.set_seconds(ledger.record("all_gather", 2, 1 << 10, true), 1e-6);
  const std::string report =
      prediction_report(ledger, 0, ledger.size(), AlphaBeta{0.0, 1e9}, "P: ");
  EXPECT_NE(
      report.find("P:       all_reduce     1048576      2        2097.2       2200.0       0.95"),
      std::string::npos)
      << report;
  EXPECT_NE(report.find("layer0"), std::string::npos);
  EXPECT_NE(report.find("async"), std::string::npos);
  for (size_t at = 0; at != std::string::npos; at = report.find('\n', at + 1))
    EXPECT_EQ(report.compare(at == 0 ? 0 : at + 1, 3, "P: "), 0) << report;
}

}  // namespace
