// dtype.h — the storage types of a Tensor (f32, bf16) and bf16's host conversions.
//
// bf16 is the top half of an IEEE f32: the same sign and 8-bit exponent (so the same range, which
// is why no loss scaling is needed, unlike fp16's 5-bit exponent), 7 stored mantissa bits instead
// of 23. bf16 → f32 is exact; f32 → bf16 rounds to nearest, ties to even (half a unit in the last place: a
// relative error of at most 2^−8, bf16's unit roundoff with its 8-bit significand); NaN stays a quiet NaN. There is no fp16: see
// docs/model.md, "Precision".
#pragma once

#include <cstdint>
#include <cstring>

namespace tp {

/// How a Tensor stores its elements. f32 is the default everywhere.
enum class Dtype { f32, bf16 };

/// Bytes per element: 4 for f32, 2 for bf16.
constexpr int64_t dtype_size(Dtype d) { return d == Dtype::bf16 ? 2 : 4; }
/// "f32" or "bf16".
constexpr const char* dtype_name(Dtype d) { return d == Dtype::bf16 ? "bf16" : "f32"; }

/// bf16 bits → float, exact.
inline float bf16_bits_to_float(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// float → bf16 bits, round to nearest even (a carry may bump the exponent, up to ±inf); NaN stays
/// a quiet NaN. A select, not an early return, so that a loop of it vectorises (the CPU's convert
/// and its kernels that store bf16 themselves, cpu_backend/kernels/kernel_util.h).
inline uint16_t float_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint32_t nearest = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet : nearest);
}

/// The float nearest to x among bf16 values (what a store to bf16 and a load back gives).
inline float round_to_bf16(float x) { return bf16_bits_to_float(float_to_bf16_bits(x)); }

}  // namespace tp
