// test_kernels_rng.cpp — the CPU random kernels (cpu_backend/kernels/rng.cpp): the dropout
// mask drops about p, scales the rest, and a shard's mask is the same elements of the whole
// (serial).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "cpu_backend/kernel_test_util.h"
#include "test_util.h"

namespace {

using tp::Shape;
using tp::Tensor;
using namespace tp::testing;  // test_util.h, cpu_backend/kernel_test_util.h

TEST(KernelDropout, ZeroProbabilityGivesAllOnes) {
  Tensor M = filled(Shape{13, 17}, kNaN);
  device().dropout_mask(M, tp::RngKey::from(7, "drop"), tp::GlobalIndex::whole(17), 0.0f);
  for (float v : M.to_host()) ASSERT_EQ(v, 1.0f);
}

TEST(KernelDropout, DropsAboutPAndScalesTheRest) {
  const int64_t rows = 200, cols = 200;
  const float p = 0.25f;
  const auto key = tp::RngKey::from(7, "drop");
  Tensor M(device(), Shape{rows, cols});
  device().dropout_mask(M, key, tp::GlobalIndex::whole(cols), p);
  const auto m = M.to_host();
  int64_t zeros = 0;
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float u = tp::random_value(key, i, tp::Distribution::uniform(0.0f, 1.0f));
    ASSERT_EQ(m[i], u >= p ? 1.0f / (1.0f - p) : 0.0f) << "element " << i;
    if (m[i] == 0.0f) {
      ++zeros;
    } else {
      ASSERT_EQ(m[i], 1.0f / 0.75f);
    }
  }
  // Binomial(40000, 0.25): σ of the fraction ≈ 0.0022, so ±0.01 is ~4.5σ.
  EXPECT_NEAR(static_cast<double>(zeros) / (rows * cols), 0.25, 0.01);
  EXPECT_THROW(device().dropout_mask(M, key, tp::GlobalIndex::whole(cols), 1.0f), tp::Error);
}

TEST(KernelDropout, ShardMaskEqualsTheSameElementsOfTheWhole) {
  const int64_t rows = 7, cols = 10;
  const auto key = tp::RngKey::from(3, "layer0.attn_drop");
  Tensor whole(device(), Shape{rows, cols});
  device().dropout_mask(whole, key, tp::GlobalIndex::whole(cols), 0.5f);
  const auto w = whole.to_host();

  Tensor colshard(device(), Shape{rows, 4});  // columns [3, 7)
  device().dropout_mask(colshard, key, tp::GlobalIndex::columns(cols, 3), 0.5f);
  const auto c = colshard.to_host();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(c[r * 4 + j], w[r * cols + 3 + j]) << r << "," << j;

  Tensor rowshard(device(), Shape{3, cols});  // rows [2, 5)
  device().dropout_mask(rowshard, key, tp::GlobalIndex::rows(cols, 2), 0.5f);
  const auto rs = rowshard.to_host();
  for (int64_t i = 0; i < 3 * cols; ++i) EXPECT_EQ(rs[i], w[2 * cols + i]) << i;
}

}  // namespace
