// test_collectives_mpi.cpp — every collective of MpiCommunicator, sync and async, on the world and on
// split groups, with rank-valued inputs and closed-form answers (the all-reduce with sum and with
// max); the CommLedger records; and asynchronous calls that progress while the caller computes.
// Runs under mpirun -np 1, 2, 3, 4. Values are small integers, so equality is exact.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

#include "core/communicator.h"
#include "core/error.h"
#include "node.h"
#include "test_util.h"

namespace {

using namespace tp;
using tp::testing::device;
using tp::testing::world;

// x[i] = (rank + 1) · (i + 1): the sum over ranks is (i + 1) · t(t + 1)/2.
Tensor rank_valued(const Communicator& c, int64_t n) {
  return Tensor::from_host(
      device(), Shape{n},
      tp::testing::iota_vector(n, 1.0f * (c.rank() + 1), 1.0f * (c.rank() + 1)));
}

std::vector<float> triangle_times(int64_t n, int t, int64_t first = 0) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((first + i + 1) * t * (t + 1) / 2);
  return v;
}

void check_all_reduce(Communicator& c, bool async) {
  Tensor x = rank_valued(c, 10);
  if (async) {
    auto w = c.all_reduce_async(x);
    w->wait();
    EXPECT_TRUE(w->test());
  } else {
    c.all_reduce(x);
  }
  EXPECT_EQ(x.to_host(), triangle_times(10, c.size()));
}

void check_all_gather(Communicator& c, bool async) {
  const int t = c.size(), r = c.rank();
  Tensor shard = Tensor::from_host(device(), Shape{2, 3}, tp::testing::iota_vector(6, 100.0f * r));
  Tensor full(device(), Shape{2 * t, 3});
  if (async)
    c.all_gather_async(shard, full)->wait();
  else
    c.all_gather(shard, full);
  std::vector<float> want;
  for (int q = 0; q < t; ++q)
    for (int i = 0; i < 6; ++i) want.push_back(100.0f * q + i);
  EXPECT_EQ(full.to_host(), want);
}

void check_reduce_scatter(Communicator& c, bool async) {
  const int t = c.size(), r = c.rank();
  const int64_t n = 3;
  Tensor full = rank_valued(c, n * t);
  Tensor shard(device(), Shape{n});
  if (async)
    c.reduce_scatter_async(full, shard)->wait();
  else
    c.reduce_scatter(full, shard);
  EXPECT_EQ(shard.to_host(), triangle_times(n, t, r * n));
}

// x[i] = rank + i for even i, −(rank + i) for odd i: the maximum over the group is t − 1 + i (the
// last rank) for even i and −i (rank 0) for odd i, so x[0] = t − 1. One ledger record, op
// "all_reduce_max", with the all-reduce's ring bytes 2 (t − 1)/t · 4N.
void check_all_reduce_max(Communicator& c) {
  const int t = c.size(), r = c.rank();
  const int64_t n = 6;
  std::vector<float> v(n), want(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = (i % 2 == 0 ? 1.0f : -1.0f) * static_cast<float>(r + i);
    want[i] = i % 2 == 0 ? static_cast<float>(t - 1 + i) : -static_cast<float>(i);
  }
  Tensor x = Tensor::from_host(device(), Shape{n}, v), y = rank_valued(c, 4);
  const size_t before = c.ledger().size();
  c.all_reduce(x, ReduceOp::Max);
  c.all_reduce(y, ReduceOp::Sum);  // the other reduction, for contrast
  EXPECT_EQ(x.to_host(), want);
  EXPECT_EQ(x.to_host()[0], static_cast<float>(t - 1));
  EXPECT_EQ(y.to_host(), triangle_times(4, t));
  ASSERT_EQ(c.ledger().size(), before + 2);  // after the last collective: ASSERT is safe
  const CommRecord& rec = c.ledger().records()[before];
  EXPECT_EQ(rec.op, "all_reduce_max");
  EXPECT_EQ(rec.group_size, t);
  EXPECT_EQ(rec.elements, n);
  EXPECT_EQ(rec.bytes, 4 * n);
  EXPECT_DOUBLE_EQ(rec.wire_bytes, 2.0 * (t - 1) / t * 4.0 * n);
  EXPECT_FALSE(rec.async);
  EXPECT_EQ(c.ledger().records()[before + 1].op, "all_reduce");
}

TEST(Collectives, AllReduceSumsRankValues) { check_all_reduce(world(), false); }
TEST(Collectives, AllReduceMaxOfRankValuesIsTheLastRank) { check_all_reduce_max(world()); }
TEST(Collectives, AllReduceMaxOnSplitGroups) {
  Communicator& w = world();
  auto sub = w.split(w.rank() % 2, w.rank());
  ASSERT_EQ(sub->size(),
            (w.size() + (w.rank() % 2 == 0 ? 1 : 0)) / 2);  // same outcome on every rank of a group
  check_all_reduce_max(*sub);
  // In world ranks: the largest of the group is the last even (or odd) world rank.
  Tensor x = Tensor::from_host(device(), Shape{1}, {1.0f * w.rank()});
  sub->all_reduce(x, ReduceOp::Max);
  int want = w.rank() % 2;
  while (want + 2 < w.size()) want += 2;
  EXPECT_EQ(x.to_host()[0], static_cast<float>(want));
}
TEST(Collectives, AllReduceAsync) { check_all_reduce(world(), true); }
TEST(Collectives, AllGatherConcatenatesAlongDim0) { check_all_gather(world(), false); }
TEST(Collectives, AllGatherAsync) { check_all_gather(world(), true); }
TEST(Collectives, ReduceScatterGivesEachRankItsBlockOfTheSum) {
  check_reduce_scatter(world(), false);
}
TEST(Collectives, ReduceScatterAsync) { check_reduce_scatter(world(), true); }

void check_broadcast(Communicator& c) {
  Tensor x = Tensor::from_host(device(), Shape{4}, std::vector<float>(4, 1.0f * c.rank()));
  c.broadcast(x, c.size() - 1);
  EXPECT_EQ(x.to_host(), std::vector<float>(4, 1.0f * (c.size() - 1)));
}

// One ring step: send to rank + 1, receive from rank − 1.
void check_send_recv(Communicator& c, bool async) {
  const int t = c.size(), r = c.rank();
  Tensor send = Tensor::from_host(device(), Shape{3}, std::vector<float>(3, 1.0f * r));
  Tensor recv = Tensor::zeros(device(), Shape{3});
  if (async)
    c.send_recv_async(send, (r + 1) % t, recv, (r - 1 + t) % t)->wait();
  else
    c.send_recv(send, (r + 1) % t, recv, (r - 1 + t) % t);
  EXPECT_EQ(recv.to_host(), std::vector<float>(3, 1.0f * ((r - 1 + t) % t)));
}

TEST(Collectives, BroadcastFromTheLastRank) { check_broadcast(world()); }
TEST(Collectives, SendRecvAroundTheRing) { check_send_recv(world(), false); }
TEST(Collectives, SendRecvAsyncAroundTheRing) { check_send_recv(world(), true); }

TEST(Collectives, SendRecvAsyncTwoStepsInFlight) {
  // Two ring steps at once (right and left), waited for in reverse order: the next step of a ring
  // attention or a pipelined all-gather overlaps the current one.
  Communicator& c = world();
  const int t = c.size(), r = c.rank();
  Tensor send = Tensor::from_host(device(), Shape{4}, tp::testing::iota_vector(4, 10.0f * r));
  Tensor from_left(device(), Shape{4}), from_right(device(), Shape{4});
  auto right = c.send_recv_async(send, (r + 1) % t, from_left, (r + t - 1) % t);
  auto left = c.send_recv_async(send, (r + t - 1) % t, from_right, (r + 1) % t);
  left->wait();
  right->wait();
  EXPECT_EQ(from_left.to_host(), tp::testing::iota_vector(4, 10.0f * ((r + t - 1) % t)));
  EXPECT_EQ(from_right.to_host(), tp::testing::iota_vector(4, 10.0f * ((r + 1) % t)));
}

TEST(Collectives, AsyncWorkDroppedWithoutWaitStillCompletes) {
  // Destroying the Work waits for the transfer: the result lands, and MPI never writes into memory
  // that is gone (the tensors here are freed right after).
  Communicator& c = world();
  const int t = c.size(), r = c.rank();
  Tensor x = rank_valued(c, 6);
  c.all_reduce_async(x);
  EXPECT_EQ(x.to_host(), triangle_times(6, t));
  Tensor send = Tensor::from_host(device(), Shape{2}, {1.0f * r, 2.0f * r});
  Tensor recv(device(), Shape{2});
  c.send_recv_async(send, (r + 1) % t, recv, (r + t - 1) % t);
  const float left = static_cast<float>((r + t - 1) % t);
  EXPECT_EQ(recv.to_host(), std::vector<float>({left, 2.0f * left}));
}

// Spins on arithmetic for `seconds`, calling nothing (no MPI, no system call but the clock).
void compute_for(double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  volatile double sink = 1.0;
  while (std::chrono::steady_clock::now() < end)
    for (int i = 0; i < 1000; ++i) sink = sink * 1.0000001 + 1e-9;
}

// The point of the progress thread (mpi_communicator.h): a large all-reduce started before some
// compute has finished when the compute ends, although this thread made no MPI call in between —
// test() is true before wait(). Without a progress thread the transfer would wait for wait().
TEST(Collectives, AsyncAllReduceProgressesWhileTheCallerComputes) {
  Communicator& c = world();
  int provided = MPI_THREAD_SINGLE, local_rank = 0, local_size = 1;
  MPI_Query_thread(&provided);
  if (provided != MPI_THREAD_MULTIPLE)
    GTEST_SKIP() << "MPI without MPI_THREAD_MULTIPLE: no progress thread";
  // With more ranks than cores each rank's compute loop takes a core another rank's progress
  // thread needs; the test would measure the scheduler (and cost seconds), not the progress thread.
  tp::node_local_rank(MPI_COMM_WORLD, &local_rank, &local_size);
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  Tensor crowded = Tensor::from_host(device(), Shape{1}, {local_size > cores ? 1.0f : 0.0f});
  c.all_reduce(crowded, ReduceOp::Max);  // every rank skips alike
  if (crowded.to_host()[0] > 0)
    GTEST_SKIP() << local_size << " ranks on " << cores
                 << " cores: oversubscribed, so whether a transfer finishes during another rank's "
                    "compute depends on the scheduler";

  // x[i] = (rank + 1)(i mod 8 + 1), 64 MiB: the sum is (i mod 8 + 1) t(t + 1)/2, exact.
  const int64_t n = int64_t{16} << 20;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((c.rank() + 1) * (i % 8 + 1));
  Tensor x = Tensor::from_host(device(), Shape{n}, v);
  // 1. How long the transfer takes: the blocking all-reduce of the same size (slowest rank).
  Tensor probe = x.clone();
  c.barrier();
  const auto start = std::chrono::steady_clock::now();
  c.all_reduce(probe);
  Tensor took = Tensor::from_host(
      device(), Shape{1},
      {static_cast<float>(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count())});
  c.all_reduce(took, ReduceOp::Max);
  const double transfer_s = took.to_host()[0];
  // 2. Start the all-reduce, then compute 10× as long (at least 0.2 s) without calling MPI.
  auto work = c.all_reduce_async(x);
  compute_for(std::max(0.2, 10 * transfer_s));
  // 3. test() reads the flag the progress thread sets. On a loaded machine, compute on (still no
  //    MPI) for up to 5 s more.
  bool done = work->test();
  for (int step = 0; !done && step < 500; ++step) {
    compute_for(0.01);
    done = work->test();
  }
  EXPECT_TRUE(done) << "the all-reduce (" << transfer_s * 1e3
                    << " ms blocking) did not finish during 5 s of compute";
  work->wait();
  const std::vector<float> got = x.to_host();
  const int t = c.size();
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i)
    wrong += got[i] != static_cast<float>((i % 8 + 1) * t * (t + 1) / 2);
  EXPECT_EQ(wrong, 0) << "of " << n << " elements";
}

TEST(Collectives, AsyncWorkCompletesAfterOtherWork) {
  // Two collectives in flight at once, waited for in reverse order.
  Communicator& c = world();
  Tensor a = rank_valued(c, 5), b = rank_valued(c, 7);
  auto wa = c.all_reduce_async(a);
  auto wb = c.all_reduce_async(b);
  wb->wait();
  wa->wait();
  EXPECT_EQ(a.to_host(), triangle_times(5, c.size()));
  EXPECT_EQ(b.to_host(), triangle_times(7, c.size()));
}

// Split by parity: even ranks form one group, odd ranks another; every collective within it.
TEST(Collectives, SplitGroupsRunEveryCollective) {
  Communicator& w = world();
  auto sub = w.split(w.rank() % 2, w.rank());
  const int expected_size = (w.size() + (w.rank() % 2 == 0 ? 1 : 0)) / 2;
  ASSERT_EQ(sub->size(), expected_size);  // same outcome on every rank of a group
  EXPECT_EQ(sub->rank(), w.rank() / 2);
  for (bool async : {false, true}) {
    check_all_reduce(*sub, async);
    check_all_gather(*sub, async);
    check_reduce_scatter(*sub, async);
  }
  check_broadcast(*sub);
  check_send_recv(*sub, false);
  check_send_recv(*sub, true);
  // The group's sum of world ranks: even group 0 + 2 + ..., odd group 1 + 3 + ...
  Tensor x = Tensor::from_host(device(), Shape{1}, {1.0f * w.rank()});
  sub->all_reduce(x);
  float want = 0;
  for (int q = w.rank() % 2; q < w.size(); q += 2) want += q;
  EXPECT_EQ(x.to_host()[0], want);
  EXPECT_EQ(sub->ledger().size(),
            10u);  // its own ledger: 2 × 3 + broadcast + 2 send-recv + all-reduce
}

TEST(Collectives, SplitKeyOrdersRanks) {
  Communicator& w = world();
  auto rev = w.split(0, w.size() - w.rank());
  EXPECT_EQ(rev->size(), w.size());
  EXPECT_EQ(rev->rank(), w.size() - 1 - w.rank());
}

TEST(Collectives, LedgerRecordsRingBytes) {
  Communicator& c = world();
  const int t = c.size();
  const size_t before = c.ledger().size();
  Tensor x = rank_valued(c, 12);
  c.all_reduce(x);
  Tensor shard(device(), Shape{6}), full(device(), Shape{6 * t});
  c.all_gather(shard, full);
  c.reduce_scatter(full, shard);
  c.all_reduce_async(x)->wait();
  const auto& recs = c.ledger().records();
  ASSERT_EQ(recs.size(), before + 4);
  const double share = static_cast<double>(t - 1) / t;
  EXPECT_EQ(recs[before].op, "all_reduce");
  EXPECT_EQ(recs[before].elements, 12);
  EXPECT_EQ(recs[before].bytes, 48);
  EXPECT_DOUBLE_EQ(recs[before].wire_bytes, 2 * share * 48);
  EXPECT_EQ(recs[before + 1].op, "all_gather");
  EXPECT_EQ(recs[before + 1].elements, 6 * t);
  EXPECT_DOUBLE_EQ(recs[before + 1].wire_bytes, share * 24 * t);
  EXPECT_EQ(recs[before + 2].op, "reduce_scatter");
  EXPECT_DOUBLE_EQ(recs[before + 2].wire_bytes, share * 24 * t);
  EXPECT_TRUE(recs[before + 3].async);
  EXPECT_EQ(recs[before].group_size, t);
}

TEST(Collectives, WrongBufferSizesAreRejectedBeforeCommunicating) {
  Communicator& c = world();
  Tensor shard(device(), Shape{4}), wrong(device(), Shape{4 * c.size() + 1});
  EXPECT_THROW(c.all_gather(shard, wrong), Error);
  EXPECT_THROW(c.reduce_scatter(wrong, shard), Error);
  EXPECT_THROW(c.broadcast(shard, c.size()), Error);
}

// Point to point at np 2-4: a ring pass, a pairwise exchange, asynchronous sends in flight at
// once, the ledger, wrong peers (tests/test_util.cpp); then the same on split groups.
TEST(PointToPoint, RingPassExchangeAsyncSendsAndWrongPeers) {
  tp::testing::check_point_to_point(world(), device());
}

TEST(PointToPoint, OnSplitGroups) {
  Communicator& w = world();
  auto sub = w.split(w.rank() % 2, w.rank());
  tp::testing::check_point_to_point(*sub, device());
}

TEST(PointToPoint, ReceiveBufferOfAnotherSizeIsNamed) {
  Communicator& c = world();
  if (c.size() == 1) GTEST_SKIP() << "needs two ranks";
  if (c.rank() > 1) return;
  Tensor four = Tensor::zeros(device(), Shape{4}), six = Tensor::zeros(device(), Shape{2, 3});
  if (c.rank() == 0) {
    c.send(four, 1);
  } else {
    try {
      c.recv(six, 0);
      ADD_FAILURE() << "a 4-element message filled a 6-element buffer silently";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("sent 4 elements"), std::string::npos) << e.what();
    }
  }
}

// A backend that implements only what it must: the optional operations fail with one line that
// names the backend and the operation.
class MinimalCommunicator : public Communicator {
 public:
  MinimalCommunicator() : Communicator(0, 2) {}
  std::string name() const override { return "minimal"; }

 protected:
  void do_all_reduce(Tensor&, ReduceOp) override {}
  void do_all_gather(const Tensor&, Tensor&) override {}
  void do_reduce_scatter(const Tensor&, Tensor&) override {}
  void do_broadcast(Tensor&, int) override {}
  void do_send_recv(const Tensor&, int, Tensor&, int) override {}
  void do_barrier() override {}
  std::unique_ptr<Communicator> do_split(int, int) override { return nullptr; }
};

TEST(OptionalOperations, FailWithOneLineNamingTheBackendAndTheOp) {
  MinimalCommunicator c;
  Tensor x = Tensor::zeros(device(), Shape{3});
  auto message = [](const std::function<void()>& call) {
    try {
      call();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([&] { c.send(x, 1); }), "minimal communicator: send not supported");
  EXPECT_EQ(message([&] { c.recv(x, 1); }), "minimal communicator: recv not supported");
  EXPECT_EQ(message([&] { c.send_async(x, 1); }), "minimal communicator: send_async not supported");
  EXPECT_EQ(message([&] { c.recv_async(x, 1); }), "minimal communicator: recv_async not supported");
  Tensor rows = Tensor::zeros(device(), Shape{0, 3});
  const std::vector<int64_t> none(static_cast<size_t>(c.size()), 0);
  EXPECT_EQ(message([&] { c.all_to_all_v(rows, none, rows, none); }),
            "minimal communicator: all_to_all_v not supported");
}

TEST(SerialCommunicator, IsTheSizeOneCase) {
  SerialCommunicator s;
  check_all_reduce(s, false);
  check_all_gather(s, true);
  check_reduce_scatter(s, false);
  EXPECT_EQ(s.ledger().records()[0].wire_bytes, 0.0);
  check_all_reduce_max(s);  // t = 1: the max of one value is itself
}

}  // namespace

// ---- bf16 ----------------------------------------------------------------------------------------
// The bound and the checks are tp::testing::check_bf16_collectives's (test_util.h): t − 1 combines,
// each rounding once to bf16, |err| ≤ γ_{t−1} Σ|p| with γ_k = k 2^−8 / (1 − k 2^−8).

// all_to_all_v with uneven counts (zeros included), f32 and bf16, against its definition; the
// ledger; bad calls refused (tests/test_util.cpp). On the world, on split groups, and serial.
TEST(AllToAllV, UnevenCountsMatchTheDefinition) {
  for (unsigned seed : {1u, 2u, 3u}) tp::testing::check_all_to_all_v(world(), device(), seed);
}

TEST(AllToAllV, OnSplitGroups) {
  Communicator& w = world();
  auto sub = w.split(w.rank() % 2, w.rank());
  tp::testing::check_all_to_all_v(*sub, device(), 7);
}

TEST(AllToAllV, SerialIsACopy) {
  SerialCommunicator serial;
  tp::testing::check_all_to_all_v(serial, device(), 5);
}

TEST(Bf16Collectives, SumsWithinTheRoundingBoundAndHalfTheBytes) {
  tp::testing::check_bf16_collectives(world(), device());
}

TEST(Bf16Collectives, OnSplitGroups) {
  Communicator& w = world();
  auto sub = w.split(w.rank() % 2, w.rank());
  tp::testing::check_bf16_collectives(*sub, device());
}

TEST(Bf16Collectives, BuffersOfTwoDtypesAreRejected) {
  Communicator& c = world();
  Tensor shard(device(), Shape{2}, Dtype::bf16), full(device(), Shape{2 * c.size()});
  try {
    c.all_gather(shard, full);
    ADD_FAILURE() << "all_gather accepted a bf16 shard and an f32 full buffer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a bf16 and a f32 buffer"), std::string::npos) << e.what();
  }
}
