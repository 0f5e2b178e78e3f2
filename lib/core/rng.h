// rng.h — counter-based random numbers (Philox4x32-10) keyed by (seed, parameter name, global index).
//
// Why counter-based: a rank that holds columns [c0, c1) of a weight fills exactly those elements by
// evaluating the generator at their global indices. No rank ever builds the full matrix, and the
// numbers are bit-identical for every tensor-parallel size t, so a run at t = 4 starts from the same
// weights as a run at t = 1.
//
//   value(seed, name, i) = transform(Philox4x32-10(counter = (i_lo, i_hi, 0, 0), key = K(seed, name)))
//
// Philox4x32-10 is the generator of Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"
// (SC'11): ten rounds of two 32x32→64-bit multiplies and xors, with a Weyl-sequence key schedule.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace tp {

/// The 64-bit Philox key, derived from (seed, name).
struct RngKey {
  uint32_t k0 = 0, k1 = 0;
  /// Key for parameter `name` under run seed `seed`: splitmix64(seed ^ fnv1a64(name)).
  static RngKey from(uint64_t seed, const std::string& name);
};

/// Maps a shard's local 2-D position to the parameter's global flat index:
/// global(r, c) = offset + r * row_stride + c.
struct GlobalIndex {
  int64_t offset = 0;
  int64_t row_stride = 0;
  /// The whole tensor, unsplit: global(r, c) = r * cols + c.
  static GlobalIndex whole(int64_t cols) { return {0, cols}; }
  /// Columns [col0, col0 + n) of a [rows, cols] matrix (a column-parallel shard).
  static GlobalIndex columns(int64_t cols, int64_t col0) { return {col0, cols}; }
  /// Rows [row0, row0 + n) of a [rows, cols] matrix (a row-parallel shard).
  static GlobalIndex rows(int64_t cols, int64_t row0) { return {row0 * cols, cols}; }
};

/// What the 32-bit words are turned into.
struct Distribution {
  enum class Kind { Uniform, Normal };
  Kind kind = Kind::Normal;
  float a = 0.0f;  ///< Uniform: low end. Normal: mean.
  float b = 1.0f;  ///< Uniform: high end. Normal: standard deviation.
  static Distribution uniform(float lo, float hi) { return {Kind::Uniform, lo, hi}; }
  static Distribution normal(float mean, float stddev) { return {Kind::Normal, mean, stddev}; }
};

/// One Philox4x32-10 block: four 32-bit outputs for a 128-bit counter and a 64-bit key.
constexpr std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> ctr, RngKey key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule (golden ratio, sqrt 3)
  uint32_t k0 = key.k0, k1 = key.k1;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = {hi1 ^ ctr[1] ^ k0, lo1, hi0 ^ ctr[3] ^ k1, lo0};
    k0 += kW0;
    k1 += kW1;
  }
  return ctr;
}

/// The value of element `global_index` of the parameter keyed by `key`. Every backend's
/// Device::fill_random must agree with this function (it is the reference the tests use).
float random_value(const RngKey& key, int64_t global_index, const Distribution& dist);

}  // namespace tp
