// cuda_bf16.h (CUDA emulator) — bfloat16 storage and its conversions, round to nearest even.
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda_runtime.h"

struct __nv_bfloat16 {
  uint16_t x;
};

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  __nv_bfloat16 r;
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    r.x = static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN stays a (quiet) NaN
    return r;
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  r.x = static_cast<uint16_t>(u >> 16);
  return r;
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float __bfloat162float(__nv_bfloat16 b) {
  const uint32_t u = static_cast<uint32_t>(b.x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
