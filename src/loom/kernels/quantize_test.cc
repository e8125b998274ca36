#include "loom/kernels/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "loom/base/aligned_buffer.h"
#include "loom/base/half.h"
#include "loom/kernels/kernels_internal.h"
#include "loom/kernels/kernels_test_util.h"
#include "loom/kernels/matmul.h"
#include "loom/kernels/reference.h"

namespace loom::kernels {
namespace {

using testing::ForEachSimdTarget;
using testing::RandomVector;

float StoredScale(const std::byte* block) {
  uint16_t bits;
  std::memcpy(&bits, block, sizeof(bits));
  return base::F16ToF32(bits);
}

TEST(QuantizeTest, Q8_0BlockUsesAbsMaxOver127AndRoundsToNearest) {
  std::vector<float> x(32, 0.0f);
  x[0] = -2.54f;   // absmax: d = 0.02
  x[1] = 1.0f;     // 50
  x[2] = 0.011f;   // 0.55 -> 1
  x[3] = -0.009f;  // -0.45 -> 0
  std::byte out[34];
  QuantizeRow(DType::kQ8_0, x.data(), 32, out);
  EXPECT_EQ(StoredScale(out), base::F16ToF32(base::F32ToF16(2.54f / 127.0f)));
  EXPECT_EQ(static_cast<int8_t>(out[2]), -127);
  EXPECT_EQ(static_cast<int8_t>(out[3]), 50);
  EXPECT_EQ(static_cast<int8_t>(out[4]), 1);
  EXPECT_EQ(static_cast<int8_t>(out[5]), 0);
  EXPECT_EQ(static_cast<int8_t>(out[6]), 0);
}

TEST(QuantizeTest, Q4_0BlockUsesSignedMaxOverMinus8LikeLlamaCpp) {
  std::vector<float> x(32, 0.0f);
  x[0] = 4.0f;    // largest magnitude: d = -0.5, q = x / d + 8.5 truncated
  x[1] = -4.0f;   // 16.5 -> clamped to 15
  x[16] = 1.0f;   // -2 + 8.5 = 6.5 -> 6
  x[17] = -0.3f;  // 0.6 + 8.5 = 9.1 -> 9
  std::byte out[18];
  QuantizeRow(DType::kQ4_0, x.data(), 32, out);
  EXPECT_EQ(StoredScale(out), -0.5f);
  const auto byte = [&](int j) { return static_cast<int>(out[2 + j]); };
  EXPECT_EQ(byte(0) & 0x0F, 0);   // 4 / -0.5 + 8.5 = 0.5 -> 0, value -0.5 * (0 - 8) = 4
  EXPECT_EQ(byte(1) & 0x0F, 15);  // clamped, value -3.5
  EXPECT_EQ(byte(0) >> 4, 6);
  EXPECT_EQ(byte(1) >> 4, 9);
  EXPECT_EQ(byte(2) & 0x0F, 8);  // zero
  std::vector<float> back(32);
  DequantizeRow(MatrixView{DType::kQ4_0, 1, 32, out, 18}, 0, back.data());
  EXPECT_EQ(back[0], 4.0f);
  EXPECT_EQ(back[1], -3.5f);
  EXPECT_EQ(back[16], 1.0f);
  EXPECT_EQ(back[2], 0.0f);
}

TEST(QuantizeTest, RowsRoundTripWithinTheTypesResolution) {
  const int64_t n = 2080;
  const std::vector<float> x = RandomVector(n, 7, 3.0f);
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    SCOPED_TRACE(std::string(Traits(type).name));
    const int64_t bytes = RowBytes(type, n).value();
    std::vector<std::byte> row(static_cast<size_t>(bytes));
    QuantizeRow(type, x.data(), n, row.data());
    std::vector<float> back(static_cast<size_t>(n));
    DequantizeRow(MatrixView{type, 1, n, row.data(), bytes}, 0, back.data());
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[static_cast<size_t>(i)];
      float amax = 0.0f;  // of the 32-value block
      for (int64_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) {
        amax = std::max(amax, std::fabs(x[static_cast<size_t>(j)]));
      }
      float tol = 0.0f;
      switch (type) {
        case DType::kF32:
          tol = 0.0f;
          break;
        case DType::kF16:
          tol = std::fabs(v) * 0x1p-11f;
          break;
        case DType::kBF16:
          tol = std::fabs(v) * 0x1p-8f;
          break;
        // Half a step (amax / 127) plus the f16 rounding of the scale (2^-11 relative).
        case DType::kQ8_0:
          tol = amax / 127.0f * (0.5f + 127.0f * 0x1p-11f) * 1.001f;
          break;
        // A full step (amax / 8): the value of largest magnitude opposite the scale's sign is
        // clamped from 16 to 15, as in llama.cpp.
        case DType::kQ4_0:
          tol = amax / 8.0f * (1.0f + 8.0f * 0x1p-11f) * 1.001f;
          break;
      }
      ASSERT_LE(std::fabs(back[static_cast<size_t>(i)] - v), tol) << "element " << i;
    }
  }
}

TEST(QuantizeTest, NonFiniteInputsDoNotCrash) {
  std::vector<float> x(64, 1.0f);
  x[3] = std::nanf("");
  x[40] = INFINITY;
  std::byte q8[68];
  std::byte q4[36];
  QuantizeRow(DType::kQ8_0, x.data(), 64, q8);
  QuantizeRow(DType::kQ4_0, x.data(), 64, q4);
  EXPECT_EQ(static_cast<int8_t>(q8[2]), 127);  // block 0: NaN ignored by the max, 1.0 is absmax
}

// The SIMD activation quantizer writes exactly reference::QuantizeActivations' values into the
// qact layout (kernels_internal.h), with per-lane corrections and zeroed missing blocks.
TEST(QuantizeTest, ActivationQuantizationMatchesReferenceBitForBit) {
  ForEachSimdTarget([] {
    for (int64_t cols : {32, 96, 128, 160, 2080}) {
      SCOPED_TRACE(cols);
      const int64_t n = 3;
      std::vector<float> x = RandomVector(n * cols, static_cast<uint32_t>(cols));
      for (int64_t j = 0; j < 32; ++j) x[static_cast<size_t>(cols + j)] = 0.0f;  // a zero block
      // Block 0 of row 0 has d = 1, so 2.5 and -3.5 are ties: both round them to even.
      x[0] = 127.0f;
      x[1] = 2.5f;
      x[2] = -3.5f;
      const int64_t row_bytes = internal::QActRowBytes(cols);
      base::AlignedBuffer<std::byte> qact(n * row_bytes);
      std::memset(qact.data(), 0x5A, static_cast<size_t>(n * row_bytes));  // poison
      internal::QuantizeActivationRows(x.data(), n, cols, 2, qact.data());
      std::vector<int8_t> q(static_cast<size_t>(cols));
      std::vector<float> d(static_cast<size_t>(cols / 32));
      for (int64_t i = 0; i < n; ++i) {
        reference::QuantizeActivations(x.data() + i * cols, cols, q.data(), d.data());
        if (i == 0) {
          ASSERT_EQ(d[0], 1.0f);
          ASSERT_EQ(q[1], 2);
          ASSERT_EQ(q[2], -4);
        }
        const std::byte* row = qact.data() + i * row_bytes;
        for (int64_t b = 0; b < (cols + 127) / 128 * 4; ++b) {
          const std::byte* g = row + b / 4 * internal::kQActGroupBytes;
          const int64_t s = b % 4;
          const auto* lo = reinterpret_cast<const int8_t*>(g + internal::kQActLo) + 16 * s;
          const auto* hi = reinterpret_cast<const int8_t*>(g + internal::kQActHi) + 16 * s;
          const auto* corr = reinterpret_cast<const int32_t*>(g + internal::kQActCorr);
          const auto* scale = reinterpret_cast<const float*>(g + internal::kQActScale);
          const bool present = b < cols / 32;
          for (int j = 0; j < 16; ++j) {
            ASSERT_EQ(lo[j], present ? q[static_cast<size_t>(b * 32 + j)] : 0) << b << " " << j;
            ASSERT_EQ(hi[j], present ? q[static_cast<size_t>(b * 32 + 16 + j)] : 0)
                << b << " " << j;
          }
          int32_t block_sum = 0;
          for (int j = 0; j < 16; ++j) block_sum += lo[j] + hi[j];
          for (int r = 0; r < 4; ++r) {  // lane 4s + r
            ASSERT_EQ(corr[4 * s + r], -2 * block_sum);
            ASSERT_EQ(scale[4 * s + r], present ? d[static_cast<size_t>(b)] : 0.0f);
          }
        }
      }
    }
  });
}

}  // namespace
}  // namespace loom::kernels
