// test_format.cpp — the number formats the programs print through lib/ instead of their own copies
// (core/format.h): scientific and fixed, binary units, percent (serial).
#include <gtest/gtest.h>

#include "core/format.h"

namespace {

TEST(Format, ScientificAndFixed) {
  EXPECT_EQ(tp::sci(0.000123), "1.23e-04");
  EXPECT_EQ(tp::sci(-5.0, 1), "-5.0e+00");
  EXPECT_EQ(tp::fixed(2.346, 2), "2.35");
  EXPECT_EQ(tp::fixed(5.123456789, 5), "5.12346");
  EXPECT_EQ(tp::fixed(7.0, 0), "7");
  EXPECT_EQ(tp::fmt_g(0.5), "0.5");
  EXPECT_EQ(tp::fmt_g(3.14159), "3.142");
  EXPECT_EQ(tp::fmt_g(12346.0), "1.235e+04");
}

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

}  // namespace
