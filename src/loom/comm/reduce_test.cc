#include "loom/comm/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "loom/base/half.h"

namespace loom::comm {
namespace {

// Random values of `type` as raw bytes, including some that round.
std::vector<uint8_t> RandomValues(ElementType type, int64_t count, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 100.0f);
  std::vector<uint8_t> out(static_cast<size_t>(count * ElementSize(type)));
  for (int64_t i = 0; i < count; ++i) {
    const float v = dist(rng);
    if (type == ElementType::kF32) {
      std::memcpy(out.data() + 4 * i, &v, 4);
    } else {
      const uint16_t h = type == ElementType::kF16 ? base::F32ToF16(v) : base::F32ToBf16(v);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

class ReduceTest : public ::testing::TestWithParam<ElementType> {};

TEST_P(ReduceTest, VectorSumMatchesScalarReferenceBitForBitOnRaggedSizes) {
  const ElementType type = GetParam();
  std::mt19937 rng(42);
  for (int64_t count : {1, 3, 7, 15, 16, 17, 31, 33, 64, 100, 1023, 4099}) {
    for (int n : {1, 2, 3, 5}) {
      std::vector<std::vector<uint8_t>> inputs;
      std::vector<const void*> srcs;
      for (int k = 0; k < n; ++k) inputs.push_back(RandomValues(type, count, rng));
      for (auto& in : inputs) srcs.push_back(in.data());
      std::vector<uint8_t> got(inputs[0].size()), want(inputs[0].size());
      SumInto(got.data(), srcs.data(), n, count, type);
      SumIntoReference(want.data(), srcs.data(), n, count, type);
      ASSERT_EQ(got, want) << ElementTypeName(type) << " count " << count << " n " << n;
    }
  }
}

TEST_P(ReduceTest, SumMayWriteOverItsFirstSource) {
  const ElementType type = GetParam();
  std::mt19937 rng(7);
  const int64_t count = 301;
  auto a = RandomValues(type, count, rng);
  auto b = RandomValues(type, count, rng);
  std::vector<uint8_t> want(a.size());
  const void* srcs[2] = {a.data(), b.data()};
  SumIntoReference(want.data(), srcs, 2, count, type);
  AddInto(a.data(), b.data(), count, type);
  EXPECT_EQ(a, want);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, ReduceTest,
                         ::testing::Values(ElementType::kF32, ElementType::kF16,
                                           ElementType::kBF16),
                         [](const auto& info) { return std::string(ElementTypeName(info.param)); });

TEST(ReduceTest, HalfTypesAccumulateInF32AndRoundOnce) {
  // 1 + 3 * 2^-9 in bf16 (ulp of 1 is 2^-7): rounding after each add loses every small term;
  // accumulating in f32 gives 1 + 0.75 ulp, which rounds up to 1 + 2^-7.
  const uint16_t one[1] = {base::F32ToBf16(1.0f)};
  const uint16_t tiny[1] = {base::F32ToBf16(1.0f / 512)};
  uint16_t out[1];
  const void* srcs[4] = {one, tiny, tiny, tiny};
  SumInto(out, srcs, 4, 1, ElementType::kBF16);
  EXPECT_EQ(base::Bf16ToF32(out[0]), 1.0f + 1.0f / 128);
}

TEST(ReduceTest, NanAndInfinityPropagate) {
  float a[17], b[17], out[17];
  for (int i = 0; i < 17; ++i) a[i] = b[i] = 1;
  a[3] = std::nanf("");
  b[16] = INFINITY;
  const void* srcs[2] = {a, b};
  SumInto(out, srcs, 2, 17, ElementType::kF32);
  EXPECT_TRUE(std::isnan(out[3]));
  EXPECT_TRUE(std::isinf(out[16]));
  EXPECT_EQ(out[0], 2);
  uint16_t ha[9], hb[9], hout[9];
  for (int i = 0; i < 9; ++i) ha[i] = hb[i] = base::F32ToBf16(1);
  ha[2] = 0x7FC0;  // bf16 NaN
  const void* hs[2] = {ha, hb};
  SumInto(hout, hs, 2, 9, ElementType::kBF16);
  EXPECT_TRUE(std::isnan(base::Bf16ToF32(hout[2])));
  EXPECT_EQ(base::Bf16ToF32(hout[0]), 2.0f);
}

}  // namespace
}  // namespace loom::comm
