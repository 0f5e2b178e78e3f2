// test_checked_communicator_mpi.cpp — CheckedCommunicator (core/checked_communicator.h) under mpirun
// -np 1..4: matching calls give the inner communicator's results and ledger, one check each; a
// mismatch (another size, another op, another dtype) throws the same one-line bad-input error on
// every rank, before the real call, so the group can go on. Values are small integers: exact.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/checked_communicator.h"
#include "core/error.h"
#include "parallel/process_grid.h"
#include "test_util.h"

namespace {

using namespace tp;
using tp::testing::device;
using tp::testing::world;

// A checked copy of the world (a split with every rank: the world's own ranks).
std::unique_ptr<CheckedCommunicator> checked_world() {
  return std::make_unique<CheckedCommunicator>(world().split(0, world().rank()), device());
}

// The message of the tp::Error that `call` throws (exit code 2), or "" when it throws none.
std::string mismatch_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_TRUE(e.on_every_rank());
    return e.what();
  }
  return "";
}

// "rank 0" or "ranks 0, 1, 2": the ranks other than the last.
std::string others(int t) {
  std::string s = t == 2 ? "rank 0" : "ranks 0";
  for (int r = 1; r < t - 1; ++r) s += ", " + std::to_string(r);
  return s;
}

TEST(CheckedCommunicator, MatchingCallsPassThrough) {
  auto c = checked_world();
  const int t = c->size(), r = c->rank();
  Tensor x = Tensor::from_host(device(), Shape{6}, std::vector<float>(6, float(r + 1)));
  c->all_reduce(x);
  EXPECT_EQ(x.to_host(), std::vector<float>(6, float(t * (t + 1) / 2)));
  c->all_reduce_async(x)->wait();
  EXPECT_EQ(x.to_host(), std::vector<float>(6, float(t * t * (t + 1) / 2)));
  Tensor shard = Tensor::from_host(device(), Shape{2}, std::vector<float>(2, float(r)));
  Tensor full = Tensor::zeros(device(), Shape{2 * t});
  c->all_gather(shard, full);
  for (int i = 0; i < 2 * t; ++i) EXPECT_EQ(full.to_host()[i], float(i / 2));
  c->reduce_scatter(full, shard);
  EXPECT_EQ(shard.to_host(), std::vector<float>(2, float(r * t)));
  Tensor b = Tensor::from_host(device(), Shape{3}, std::vector<float>(3, float(r + 7)));
  c->broadcast(b, t - 1);
  EXPECT_EQ(b.to_host(), std::vector<float>(3, float(t + 6)));
  c->barrier();
  EXPECT_EQ(c->checked(), 6);
  // This ledger holds the program's five calls; the inner one the checks (t > 1) and the calls.
  ASSERT_EQ(c->ledger().size(), 5u);
  EXPECT_EQ(c->ledger().records()[2].op, "all_gather");
  EXPECT_EQ(c->inner().ledger().size(), t > 1 ? 11u : 5u);
  EXPECT_EQ(c->name(), "checked " + c->inner().name());
}

TEST(CheckedCommunicator, AnotherSizeIsNamed) {
  auto c = checked_world();
  const int t = c->size();
  if (t == 1) GTEST_SKIP() << "needs two ranks";
  const bool last = c->rank() == t - 1;
  Tensor x = Tensor::zeros(device(), Shape{last ? 12 : 10});
  const std::string line = mismatch_of([&] {
    CommLedger::Scope label(c->ledger(), "mlp fc2");
    c->all_reduce(x);
  });
  EXPECT_EQ(line, "collective #1 on the world (" + std::to_string(t) + " ranks): rank " +
                      std::to_string(t - 1) + " called all_reduce(12 floats, 'mlp fc2'), " +
                      others(t) + " called all_reduce(10 floats, 'mlp fc2') (--check-collectives)");
  // Nothing ran: the group goes on, and the next call is #2.
  Tensor y = Tensor::from_host(device(), Shape{4}, std::vector<float>(4, 1.0f));
  c->all_reduce(y);
  EXPECT_EQ(y.to_host(), std::vector<float>(4, float(t)));
  EXPECT_EQ(c->checked(), 2);
}

TEST(CheckedCommunicator, SkippedCallAndOtherDtypeAreNamed) {
  auto c = checked_world();
  const int t = c->size();
  if (t == 1) GTEST_SKIP() << "needs two ranks";
  const bool last = c->rank() == t - 1;
  // The last rank skips the all-reduce: its all-gather meets the others' all-reduce.
  Tensor x = Tensor::zeros(device(), Shape{4 * t});
  Tensor shard = Tensor::zeros(device(), Shape{4});
  std::string line = mismatch_of([&] {
    if (last)
      c->all_gather(shard, x);
    else
      c->all_reduce(x);
  });
  const std::string n = std::to_string(4 * t);
  EXPECT_EQ(line, "collective #1 on the world (" + std::to_string(t) + " ranks): rank " +
                      std::to_string(t - 1) + " called all_gather(" + n + " floats), " + others(t) +
                      " called all_reduce(" + n + " floats) (--check-collectives)");
  // Same op and size, another dtype.
  Tensor y = Tensor::zeros(device(), Shape{8}, last ? Dtype::bf16 : Dtype::f32);
  line = mismatch_of([&] { c->broadcast(y, 0); });
  EXPECT_NE(line.find("#2 on the world"), std::string::npos) << line;
  EXPECT_NE(line.find("called broadcast(8 bf16 from rank 0)"), std::string::npos) << line;
  EXPECT_NE(line.find("called broadcast(8 floats from rank 0)"), std::string::npos) << line;
}

// all_to_all_v: counts differ by rank by design, so the check compares the op, the row width and
// the dtype, and the group's total rows sent against received.
TEST(CheckedCommunicator, AllToAllVPassesUnevenCountsAndNamesAMismatch) {
  auto c = checked_world();
  const int t = c->size(), r = c->rank();
  tp::testing::check_all_to_all_v(*c, device(), 11);  // uneven counts pass, results exact
  if (t == 1) GTEST_SKIP() << "the mismatches need two ranks";
  const bool last = r == t - 1;
  // Rank r sends one row to every rank: (t, 2) in, (t, 2) out.
  const std::vector<int64_t> ones(t, 1);
  Tensor send = Tensor::zeros(device(), Shape{t, 2}, last ? Dtype::bf16 : Dtype::f32);
  Tensor recv = Tensor::zeros(device(), Shape{t, 2}, last ? Dtype::bf16 : Dtype::f32);
  const int64_t checked = c->checked();
  std::string line = mismatch_of([&] { c->all_to_all_v(send, ones, recv, ones); });
  EXPECT_EQ(line, "collective #" + std::to_string(checked + 1) + " on the world (" +
                      std::to_string(t) + " ranks): rank " + std::to_string(t - 1) +
                      " called all_to_all_v(rows of 2 bf16), " + others(t) +
                      " called all_to_all_v(rows of 2 floats) (--check-collectives)");
  // Same op, width and dtype, but rank 0 expects a row that nobody sends.
  Tensor f_send = Tensor::zeros(device(), Shape{t, 2});
  std::vector<int64_t> expect = ones;
  if (r == 0) expect[0] = 2;
  Tensor f_recv = Tensor::zeros(device(), Shape{r == 0 ? t + 1 : t, 2});
  line = mismatch_of([&] { c->all_to_all_v(f_send, ones, f_recv, expect); });
  EXPECT_EQ(line, "collective #" + std::to_string(checked + 2) +
                      " all_to_all_v(rows of 2 floats): the group sends " + std::to_string(t * t) +
                      " rows in all but receives " + std::to_string(t * t + 1) +
                      "; each rank's recv_rows[p] must be rank p's send_rows[this rank] "
                      "(exchange_counts gives them) (--check-collectives)");
  // Nothing ran: the group goes on.
  c->all_to_all_v(f_send, ones, f_send, ones);
}

// A sub-group of a process grid is named by its axis: the grid sets each split's role, and the
// checker's line says "the TP group of world ranks …" (np 4: tp 2 × dp 2, both axes split).
TEST(CheckedCommunicator, GridSubGroupIsNamedByItsAxis) {
  auto c = checked_world();
  if (c->size() != 4) GTEST_SKIP() << "needs four ranks (tp 2 × dp 2)";
  ProcessGrid grid(*c, 2);
  EXPECT_EQ(grid.tp().role(), "TP group");
  EXPECT_EQ(grid.dp().role(), "DP group");
  const bool last = grid.tp().rank() == 1;
  Tensor x = Tensor::zeros(device(), Shape{last ? 6 : 5});
  std::string line;
  try {
    grid.tp().all_reduce(x);
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);  // bad input; thrown on this group's ranks (not every world rank)
    line = e.what();
  }
  const std::string r0 = std::to_string(c->rank() / 2 * 2),
                    r1 = std::to_string(c->rank() / 2 * 2 + 1);
  EXPECT_EQ(line, "collective #1 on the TP group of world ranks " + r0 + ", " + r1 +
                      ": rank 1 (world rank " + r1 +
                      ") called all_reduce(6 floats), rank 0 (world rank " + r0 +
                      ") called all_reduce(5 floats) (--check-collectives)");
}

}  // namespace
