// test_schedule.cpp — the learning rate schedule (model/schedule.h): linear warmup, then constant or
// cosine decay to 10 % (serial).
#include <gtest/gtest.h>

#include <cstdint>

#include "model/schedule.h"

namespace {

using tp::LrSchedule;

TEST(Schedule, ConstantWithoutWarmupOrDecay) {
  const LrSchedule s{2e-3f, 0, 0};
  for (int64_t step : {0, 1, 100}) EXPECT_EQ(tp::learning_rate(s, step), 2e-3f);
}

TEST(Schedule, LinearWarmupThenConstant) {
  const LrSchedule s{1e-3f, 4, 0};
  EXPECT_FLOAT_EQ(tp::learning_rate(s, 0), 0.25e-3f);
  EXPECT_FLOAT_EQ(tp::learning_rate(s, 1), 0.5e-3f);
  EXPECT_FLOAT_EQ(tp::learning_rate(s, 3), 1e-3f);
  EXPECT_EQ(tp::learning_rate(s, 4), 1e-3f);
  EXPECT_EQ(tp::learning_rate(s, 1000), 1e-3f);
}

TEST(Schedule, CosineDecayToTenPercent) {
  const LrSchedule s{1e-3f, 2, 12};
  EXPECT_FLOAT_EQ(tp::learning_rate(s, 2), 1e-3f);     // x = 0: the peak
  EXPECT_FLOAT_EQ(tp::learning_rate(s, 7), 0.55e-3f);  // x = ½: halfway between 1 and 0.1
  EXPECT_FLOAT_EQ(tp::learning_rate(s, 12), 1e-4f);    // x = 1: 10 %
  EXPECT_FLOAT_EQ(tp::learning_rate(s, 50), 1e-4f);    // and stays there
  float prev = tp::learning_rate(s, 2);
  for (int64_t step = 3; step <= 12; ++step) {
    const float lr = tp::learning_rate(s, step);
    EXPECT_LT(lr, prev) << "step " << step;
    prev = lr;
  }
}

TEST(Schedule, DecayNotAboveWarmupMeansNone) {
  const LrSchedule s{1e-3f, 5, 5};
  EXPECT_EQ(tp::learning_rate(s, 5), 1e-3f);
  EXPECT_EQ(tp::learning_rate(s, 100), 1e-3f);
}

}  // namespace
