// test_timer.cpp — the clock and the median of timings the programs report (observe/timer.h)
// (serial).
#include <gtest/gtest.h>

#include "observe/timer.h"

namespace {

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

}  // namespace
