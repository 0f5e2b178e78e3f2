#include "test_util.h"

#include <cmath>
#include <limits>

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

double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    diff += d * d;
    norm += static_cast<double>(want[i]) * want[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

std::vector<float> iota_vector(int64_t n, float start, float step) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = start + step * static_cast<float>(i);
  return v;
}

}  // namespace tp::testing
