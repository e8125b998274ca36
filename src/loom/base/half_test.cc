#include "loom/base/half.h"

#include <gtest/gtest.h>

#include <cmath>

namespace loom::base {
namespace {

TEST(HalfTest, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(F32ToF16(f), h) << std::hex << h;
  }
}

TEST(HalfTest, RoundsToNearestEven) {
  // 1 + 2^-11 lies exactly between 1 and the next half (1 + 2^-10): ties to even -> 1.
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  // 1 + 3 * 2^-11 lies between 1 + 2^-10 (odd) and 1 + 2^-9 (even): rounds up to even.
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7BFF);
  EXPECT_EQ(F32ToF16(70000.0f), 0x7C00);
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
}

TEST(HalfTest, Bfloat16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBf16(1.0f), 0x3F80);
  EXPECT_EQ(Bf16ToF32(0x3F80), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even -> 1.
  EXPECT_EQ(F32ToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  EXPECT_EQ(F32ToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = Bf16ToF32(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    EXPECT_EQ(F32ToBf16(f), b);
  }
}

}  // namespace
}  // namespace loom::base
