// test_rng.cpp — Philox4x32-10 and shard-invariant initialisation (serial).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "core/host.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "test_util.h"

namespace {

using namespace tp;
using tp::testing::device;

// Known-answer vectors published with Random123 (kat_vectors, philox4x32_10).
TEST(Philox, KnownAnswers) {
  using A = std::array<uint32_t, 4>;
  EXPECT_EQ(philox4x32_10(A{0, 0, 0, 0}, RngKey{0, 0}),
            (A{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10(A{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                          RngKey{0xffffffff, 0xffffffff}),
            (A{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10(A{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                          RngKey{0xa4093822, 0x299f31d0}),
            (A{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

std::vector<float> fill(const Shape& shape, const RngKey& key, const GlobalIndex& index) {
  Tensor t(device(), shape);
  device().fill_random(t, key, index, Distribution::normal(0.0f, 0.02f));
  return t.to_host();
}

// A [rows, cols] parameter filled shard by shard (each rank fills only its own block of columns,
// or of rows) equals the parameter filled whole, bit for bit, for every t that divides the split
// dimension.
void expect_shards_match_the_whole(bool by_columns, int64_t rows, int64_t cols, const char* name) {
  const RngKey key = RngKey::from(42, name);
  const auto whole = fill(Shape{rows, cols}, key, GlobalIndex::whole(cols));
  for (int t : {1, 2, 3, 4}) {
    const int64_t n = (by_columns ? cols : rows) / t;
    for (int r = 0; r < t; ++r) {
      const auto shard = by_columns ? fill(Shape{rows, n}, key, GlobalIndex::columns(cols, r * n))
                                    : fill(Shape{n, cols}, key, GlobalIndex::rows(cols, r * n));
      const auto want = by_columns ? host_block(whole, cols, 0, rows, r * n, n)
                                   : host_block(whole, cols, r * n, n, 0, cols);
      EXPECT_EQ(shard, want) << "t=" << t << " rank=" << r;
    }
  }
}

TEST(Philox, ColumnShardsAreBitIdenticalToTheWholeForEveryT) {
  expect_shards_match_the_whole(true, 5, 12, "transformer.h.0.mlp.c_fc.weight");
}

TEST(Philox, RowShardsAreBitIdenticalToTheWholeForEveryT) {
  expect_shards_match_the_whole(false, 12, 7, "transformer.h.0.mlp.c_proj.weight");
}

TEST(Philox, DeviceFillMatchesTheReferenceFunctionAndIgnoresThreads) {
  const RngKey key = RngKey::from(7, "w");
  omp_set_num_threads(1);
  const auto one = fill(Shape{64, 130}, key, GlobalIndex::whole(130));
  omp_set_num_threads(2);
  const auto two = fill(Shape{64, 130}, key, GlobalIndex::whole(130));
  EXPECT_EQ(one, two);
  for (int64_t i : {0, 1, 129, 130, 64 * 130 - 1})
    EXPECT_EQ(one[i], random_value(key, i, Distribution::normal(0.0f, 0.02f)));
}

TEST(Philox, KeysSeparateNamesAndSeeds) {
  const auto d = Distribution::uniform(0.0f, 1.0f);
  EXPECT_NE(random_value(RngKey::from(1, "a"), 0, d), random_value(RngKey::from(1, "b"), 0, d));
  EXPECT_NE(random_value(RngKey::from(1, "a"), 0, d), random_value(RngKey::from(2, "a"), 0, d));
  EXPECT_EQ(random_value(RngKey::from(1, "a"), 5, d), random_value(RngKey::from(1, "a"), 5, d));
}

TEST(Philox, DistributionsHaveTheRightMoments) {
  const int n = 200000;
  const RngKey key = RngKey::from(3, "moments");
  double sum = 0, sq = 0, umin = 1, umax = 0, usum = 0;
  for (int i = 0; i < n; ++i) {
    const double z = random_value(key, i, Distribution::normal(1.0f, 2.0f));
    sum += z;
    sq += z * z;
    const double u = random_value(key, i, Distribution::uniform(-1.0f, 3.0f));
    umin = std::min(umin, u);
    umax = std::max(umax, u);
    usum += u;
  }
  const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 1.0, 0.02);  // standard error 2/sqrt(2e5) ≈ 0.0045
  EXPECT_NEAR(sd, 2.0, 0.02);
  EXPECT_GE(umin, -1.0);
  EXPECT_LT(umax, 3.0);
  EXPECT_NEAR(usum / n, 1.0, 0.02);
}

}  // namespace
