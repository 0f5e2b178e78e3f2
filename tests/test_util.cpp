#include "test_util.h"

#include "core/rng.h"
#include "cpu_device.h"

namespace tp::testing {

Device& device() {
  static CpuDevice dev;
  return dev;
}

std::vector<float> random_vector(const std::string& name, int64_t n, uint64_t seed) {
  const RngKey key = RngKey::from(seed, name);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = random_value(key, i, Distribution::uniform(-1.0f, 1.0f));
  return v;
}

std::vector<float> iota_vector(int64_t n, float start, float step) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = start + step * static_cast<float>(i);
  return v;
}

}  // namespace tp::testing
