// Scalar IEEE half (f16) and bfloat16 conversions.  SIMD versions live in kernels/.
#pragma once

#include <cstdint>
#include <cstring>

namespace loom::base {

inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
inline uint32_t FloatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0) {
    if (mant == 0) return BitsToFloat(sign);
    // Subnormal half: value = mant * 2^-24.
    const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return (sign != 0) ? -v : v;
  }
  if (exp == 31) return BitsToFloat(sign | 0x7F800000u | (mant << 13));  // inf / nan
  return BitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

// Round-to-nearest-even conversion to half, with overflow to infinity.
inline uint16_t F32ToF16(float f) {
  const uint32_t x = FloatToBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds past 65504
  if (abs < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    // Adding 0.5 makes the FPU round the mantissa into place (round to nearest even).
    const float v = BitsToFloat(abs) + 0.5f;
    return static_cast<uint16_t>(sign | (FloatToBits(v) - 0x3F000000u));
  }
  const uint32_t mant_odd = (abs >> 13) & 1u;
  const uint32_t rounded = abs + 0xC8000FFFu + mant_odd;  // rebias exponent (-112 << 23) + round
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

inline float Bf16ToF32(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

// Round-to-nearest-even conversion to bfloat16 (NaN stays NaN).
inline uint16_t F32ToBf16(float f) {
  uint32_t x = FloatToBits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace loom::base
