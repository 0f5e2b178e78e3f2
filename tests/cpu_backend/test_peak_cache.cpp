// test_peak_cache.cpp — the file of measured peak FLOP/s, one line per machine key
// (cpu_backend/peak_cache.h) (serial).
#include <gtest/gtest.h>

#include <string>

#include "peak_cache.h"
#include "test_util.h"

namespace tp {
namespace {

// The peak cache keeps one line per key, replaces a key's value, and reads 0 for what it lacks.
TEST(PeakCache, StoresOneValuePerMachineKey) {
  const std::string path = testing::empty_test_folder("tp_peak_cache_") + "sub/sgemm-peak.txt";
  const std::string a = peak_cache_key("Xeon\tGold", "SkylakeX"),
                    b = peak_cache_key("Xeon", "Haswell");
  EXPECT_EQ(a, "Xeon Gold | openblas SkylakeX");
  EXPECT_EQ(cached_peak(path, a), 0.0);
  EXPECT_TRUE(store_peak(path, a, 150.5));
  EXPECT_TRUE(store_peak(path, b, 70.25));
  EXPECT_TRUE(store_peak(path, a, 148.0));
  EXPECT_DOUBLE_EQ(cached_peak(path, a), 148.0);
  EXPECT_DOUBLE_EQ(cached_peak(path, b), 70.25);
  EXPECT_EQ(cached_peak(path, "Xeon"), 0.0);  // a prefix of a key is not the key
  EXPECT_FALSE(store_peak("", a, 1.0));
  EXPECT_NE(cpu_model_name(), "");
}

}  // namespace
}  // namespace tp
