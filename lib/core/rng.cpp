#include "core/rng.h"

#include <cmath>

namespace tp {

namespace {
uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// 24 random bits → [0, 1), exactly representable in f32.
double unit(uint32_t bits) { return static_cast<double>(bits >> 8) * (1.0 / 16777216.0); }
}  // namespace

RngKey RngKey::from(uint64_t seed, const std::string& name) {
  const uint64_t k = splitmix64(seed ^ fnv1a64(name));
  return {static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32)};
}

float random_value(const RngKey& key, int64_t global_index, const Distribution& dist) {
  const uint64_t i = static_cast<uint64_t>(global_index);
  const auto r =
      philox4x32_10({static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), 0u, 0u}, key);
  if (dist.kind == Distribution::Kind::Uniform) {
    return static_cast<float>(dist.a + (static_cast<double>(dist.b) - dist.a) * unit(r[0]));
  }
  // Box–Muller: u1 in (0, 1] so the log is finite.
  const double u1 = unit(r[0]) + 1.0 / 16777216.0;
  const double u2 = unit(r[1]);
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  return static_cast<float>(dist.a + dist.b * z);
}

}  // namespace tp
