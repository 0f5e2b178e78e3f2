// test_format.cpp — what the programs compute and print through lib/ instead of their own copies:
// the number formats (core/format.h), the median of timings (observe/timer.h) and the learning
// rate schedule (model/schedule.h) (serial).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/format.h"
#include "model/schedule.h"
#include "observe/timer.h"

namespace {

using tp::LrSchedule;

TEST(Format, BinaryUnits) {
  EXPECT_EQ(tp::mib(3.0 * 1048576), "3.0 MiB");
  EXPECT_EQ(tp::mib(12.5 * 1048576, 0), "12 MiB");  // %.0f rounds half to even
  EXPECT_EQ(tp::mib(64.0 * 1048576, 0), "64 MiB");
  EXPECT_EQ(tp::gib(1.5 * 1073741824.0), "1.5 GiB");
  EXPECT_EQ(tp::gib(0.0123 * 1073741824.0), "0.0123 GiB");
  EXPECT_EQ(tp::kib_mib(512), "512 B");
  EXPECT_EQ(tp::kib_mib(1023), "1023 B");
  EXPECT_EQ(tp::kib_mib(1536), "1.5 KiB");
  EXPECT_EQ(tp::kib_mib(2.25 * 1048576), "2.2 MiB");  // 2.25 is exact: half to even again
}

TEST(Format, Percent) {
  EXPECT_EQ(tp::pct(0.373), "37 %");
  EXPECT_EQ(tp::pct(1.0), "100 %");
  EXPECT_EQ(tp::pct(0.0), "0 %");
}

TEST(Timer, MedianIsTheMiddleOfTheSorted) {
  EXPECT_EQ(tp::median({}), 0.0);
  EXPECT_EQ(tp::median({3.0}), 3.0);
  EXPECT_EQ(tp::median({5.0, 1.0, 3.0}), 3.0);
  EXPECT_EQ(tp::median({4.0, 1.0, 3.0, 2.0}), 3.0);  // the upper middle of an even count
}

TEST(Timer, NowAdvances) {
  const double a = tp::now();
  volatile double x = 0;
  for (int i = 0; i < 100000; ++i) x = x + 1;
  EXPECT_GT(tp::now(), a);
}

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
