// IEEE binary16 (float16) and bfloat16 <-> float32: round to nearest, ties to even; overflow
// gives infinity; NaN stays NaN (quiet). What tessel's half-precision inputs and outputs go
// through: reductions run on float32 copies of half inputs, and their results are rounded back.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace tessel {

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float32
    const float v = static_cast<float>(mant) * 0x1p-24f;
    return std::bit_cast<float>(std::bit_cast<uint32_t>(v) | sign);
  }
  if (exp == 31)
    return std::bit_cast<float>(sign | 0x7f800000u | (mant ? 0x400000u | (mant << 13) : 0u));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

inline uint16_t float_to_half(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((ax >> 13) & 0x3ffu);  // NaN
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 (or inf): rounds to infinity
  if (ax < 0x38800000u) {                        // below 2^-14: a subnormal half (or zero)
    /// Scaling by 2^24 is exact, and nearbyint rounds to even in the default rounding mode; 1024
    /// is the smallest normal's encoding, so the carry needs no special case.
    const float v = std::bit_cast<float>(ax) * 0x1p24f;
    return sign | static_cast<uint16_t>(std::nearbyint(v));
  }
  uint32_t h = ((ax >> 23) - 112) << 10 | ((ax >> 13) & 0x3ffu);
  const uint32_t rest = ax & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent
  return sign | static_cast<uint16_t>(h);
}

inline float bfloat16_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t float_to_bfloat16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace tessel
