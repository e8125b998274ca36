#include "loom/kernels/quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
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
        default:  // K-quants and MLX: their own tests below
          break;
      }
      ASSERT_LE(std::fabs(back[static_cast<size_t>(i)] - v), tol) << "element " << i;
    }
  }
}

// K-quants: per 32-value sub-block (Q4_K/Q5_K) one step of its range (the searched scale may
// clip an extreme value by up to a step to lower the squared error of the rest) plus the 6-bit
// rounding of its scale (d) and min (dmin); per 16-value sub-block (Q6_K) two steps (clipping,
// and the value opposite the scale's sign is clamped from +32 to 31) plus the int8 rounding of
// the scale (32 * d / 2).
TEST(QuantizeTest, KQuantRowsRoundTripWithinTheirResolution) {
  const int64_t n = 2304;
  const std::vector<float> x = RandomVector(n, 17, 3.0f);
  for (DType type : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    SCOPED_TRACE(std::string(Traits(type).name));
    const int64_t bytes = RowBytes(type, n).value();
    ASSERT_EQ(bytes, n / 256 * Traits(type).block_bytes);
    std::vector<std::byte> row(static_cast<size_t>(bytes));
    QuantizeRow(type, x.data(), n, row.data());
    std::vector<float> back(static_cast<size_t>(n));
    DequantizeRow(MatrixView{type, 1, n, row.data(), bytes}, 0, back.data());
    const int sub = type == DType::kQ6_K ? 16 : 32;
    const float levels = type == DType::kQ4_K ? 15.0f : 31.0f;
    double err2 = 0.0, x2 = 0.0;
    for (int64_t s0 = 0; s0 < n; s0 += 256) {
      float max_step = 0.0f, max_min = 0.0f;  // super-block maxima of the sub-block quantities
      for (int64_t j = s0; j < s0 + 256; j += sub) {
        float lo = 0.0f, hi = 0.0f, amax = 0.0f;
        for (int64_t i = j; i < j + sub; ++i) {
          lo = std::min(lo, x[static_cast<size_t>(i)]);
          hi = std::max(hi, x[static_cast<size_t>(i)]);
          amax = std::max(amax, std::fabs(x[static_cast<size_t>(i)]));
        }
        max_step = std::max(max_step, type == DType::kQ6_K ? amax / 32.0f : (hi - lo) / levels);
        max_min = std::max(max_min, -lo);
      }
      for (int64_t j = s0; j < s0 + 256; j += sub) {
        float lo = 0.0f, hi = 0.0f, amax = 0.0f;
        for (int64_t i = j; i < j + sub; ++i) {
          lo = std::min(lo, x[static_cast<size_t>(i)]);
          hi = std::max(hi, x[static_cast<size_t>(i)]);
          amax = std::max(amax, std::fabs(x[static_cast<size_t>(i)]));
        }
        const float tol =
            type == DType::kQ6_K
                ? (2 * amax / 32.0f + 16.5f * max_step / 127.0f) * 1.01f
                : ((hi - lo) / levels + max_step / 63.0f + max_min / 63.0f) * 1.01f;
        for (int64_t i = j; i < j + sub; ++i) {
          const float v = x[static_cast<size_t>(i)];
          ASSERT_LE(std::fabs(back[static_cast<size_t>(i)] - v), tol) << "element " << i;
          err2 += (back[static_cast<size_t>(i)] - v) * (back[static_cast<size_t>(i)] - v);
          x2 += v * v;
        }
      }
    }
    // Relative RMS error: plain per-sub-block min/max gave 9.47%, 4.53% and 2.51% on this data;
    // the scale/minimum search gives 8.55%, 4.39% and 2.42%.  More bits, less error.
    const double rel = std::sqrt(err2 / x2);
    std::printf("%s: relative RMS error %.4f\n", Traits(type).name.data(), rel);
    EXPECT_LT(rel, type == DType::kQ4_K ? 0.089 : type == DType::kQ5_K ? 0.0445 : 0.0246);
  }
}

// A hand-built Q4_K super-block decodes as the ggml layout says, whatever the quantizer does.
TEST(QuantizeTest, Q4KLayoutDecodesScalesMinsAndNibbles) {
  std::byte blk[144] = {};
  const uint16_t one = base::F32ToF16(1.0f), half = base::F32ToF16(0.5f);
  std::memcpy(blk, &one, 2);       // d
  std::memcpy(blk + 2, &half, 2);  // dmin
  // Sub-block 1: scale 3, min 2 (bytes 1 and 5); sub-block 6: scale 0x25, min 0x31 (low nibbles in
  // byte 14, top bits in bytes 2 and 6).
  blk[4 + 1] = std::byte{3};
  blk[4 + 5] = std::byte{2};
  blk[4 + 10] = std::byte{0x15};       // scale low 5, min low 1
  blk[4 + 2] = std::byte{2 << 6};      // scale high bits 2 -> 0x25
  blk[4 + 6] = std::byte{3 << 6};      // min high bits 3 -> 0x31
  blk[16 + 5] = std::byte{0x70};       // value 32 + 5 (sub-block 1): high nibble 7
  blk[16 + 96 + 7] = std::byte{0x09};  // value 192 + 7 (sub-block 6): low nibble 9
  std::vector<float> y(256);
  DequantizeRow(MatrixView{DType::kQ4_K, 1, 256, blk, 144}, 0, y.data());
  EXPECT_EQ(y[37], 3.0f * 7 - 0.5f * 2);
  EXPECT_EQ(y[36], -0.5f * 2);
  EXPECT_EQ(y[199], 37.0f * 9 - 0.5f * 49);
  EXPECT_EQ(y[0], 0.0f);
}

// A hand-built Q5_K super-block: qh[l] bit 2c + 1 is the fifth bit of value 64c + 32 + l.
TEST(QuantizeTest, Q5KLayoutDecodesHighBits) {
  std::byte blk[176] = {};
  const uint16_t one = base::F32ToF16(1.0f);
  std::memcpy(blk, &one, 2);
  blk[4 + 3] = std::byte{1};           // sub-block 3: scale 1, min 0
  blk[48 + 32 + 4] = std::byte{0x50};  // value 64 + 32 + 4: high nibble 5
  blk[16 + 4] = std::byte{1 << 3};     // ... and its fifth bit (c = 1)
  std::vector<float> y(256);
  DequantizeRow(MatrixView{DType::kQ5_K, 1, 256, blk, 176}, 0, y.data());
  EXPECT_EQ(y[100], 21.0f);
  EXPECT_EQ(y[68], 0.0f);  // same byte's low nibble, sub-block 2 (scale 0)
}

// A hand-built Q6_K super-block: q = ql nibble | qh bits << 4, minus 32, times d * int8 scale.
TEST(QuantizeTest, Q6KLayoutDecodesLowAndHighBits) {
  std::byte blk[210] = {};
  const uint16_t two = base::F32ToF16(2.0f);
  std::memcpy(blk + 208, &two, 2);
  for (int k = 0; k < 16; ++k) blk[192 + k] = static_cast<std::byte>(static_cast<int8_t>(-k - 1));
  // Value 128 + 64 + 20 (second half, k = 2, l = 20): high nibble of ql[64 + 20], bits 4-5 of
  // qh[32 + 20]; its sub-block is (128 + 64 + 20) / 16 = 13.
  blk[64 + 20] = std::byte{0xA0};
  blk[128 + 32 + 20] = std::byte{0x30};
  std::vector<float> y(256);
  DequantizeRow(MatrixView{DType::kQ6_K, 1, 256, blk, 210}, 0, y.data());
  EXPECT_EQ(y[212], 2.0f * -14 * ((0xA | (3 << 4)) - 32));
  EXPECT_EQ(y[0], 2.0f * -1 * -32);
}

// MLX rows: every value within one step ((max - min) / (2^bits - 1)) of its group, for every
// width and scale type; the packed words hold the values LSB first.
TEST(QuantizeTest, MlxRowsRoundTripWithinOneStep) {
  const int64_t n = 384;
  const std::vector<float> x = RandomVector(n, 23, 2.0f);
  for (DType type :
       {DType::kMlx2, DType::kMlx3, DType::kMlx4, DType::kMlx5, DType::kMlx6, DType::kMlx8}) {
    for (int64_t group : {32, 64, 128}) {
      for (DType st : {DType::kF32, DType::kF16, DType::kBF16}) {
        SCOPED_TRACE(std::string(Traits(type).name) + " g" + std::to_string(group) + " " +
                     std::string(Traits(st).name));
        const int bits = MlxBitsOf(type);
        const int64_t sb = Traits(st).block_bytes;
        std::vector<std::byte> packed(static_cast<size_t>(RowBytes(type, n).value()));
        ASSERT_EQ(static_cast<int64_t>(packed.size()), n * bits / 8);
        std::vector<std::byte> scales(static_cast<size_t>(n / group * sb)), biases(scales.size());
        QuantizeMlxRow(type, group, st, x.data(), n, packed.data(), scales.data(), biases.data());
        MatrixView v{type, 1, n, packed.data(), static_cast<int64_t>(packed.size())};
        v.scales = scales.data();
        v.biases = biases.data();
        v.scale_row_stride = static_cast<int64_t>(scales.size());
        v.scale_type = st;
        v.group_size = group;
        std::vector<float> back(static_cast<size_t>(n));
        DequantizeRow(v, 0, back.data());
        for (int64_t g = 0; g < n / group; ++g) {
          const auto [lo, hi] =
              std::minmax_element(x.begin() + g * group, x.begin() + (g + 1) * group);
          // One step, plus the scale's and bias's rounding to bf16 (2^-8 relative).
          const float tol = (*hi - *lo) / static_cast<float>((1 << bits) - 1) +
                            (std::fabs(*lo) + (*hi - *lo)) * 0x1p-7f;
          for (int64_t i = g * group; i < (g + 1) * group; ++i) {
            ASSERT_LE(std::fabs(back[static_cast<size_t>(i)] - x[static_cast<size_t>(i)]), tol)
                << i;
          }
        }
      }
    }
  }
  // Layout: 4-bit value k is nibble k % 8 of little-endian word k / 8.
  const uint32_t words[1 * 4] = {0x76543210u, 0xFEDCBA98u, 0, 0};
  const float scale = 1.0f, bias = 0.0f;
  MatrixView v{DType::kMlx4, 1, 32, reinterpret_cast<const std::byte*>(words), 16};
  v.scales = reinterpret_cast<const std::byte*>(&scale);
  v.biases = reinterpret_cast<const std::byte*>(&bias);
  v.scale_type = DType::kF32;
  v.group_size = 32;
  std::vector<float> y(32);
  DequantizeRow(v, 0, y.data());
  for (int k = 0; k < 16; ++k) EXPECT_EQ(y[static_cast<size_t>(k)], static_cast<float>(k));
}

TEST(QuantizeTest, KQuantNonFiniteInputsDoNotCrash) {
  std::vector<float> x(256, 1.0f);
  x[3] = std::nanf("");
  x[40] = INFINITY;
  x[200] = -INFINITY;
  for (DType type : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    std::vector<std::byte> row(static_cast<size_t>(Traits(type).block_bytes));
    QuantizeRow(type, x.data(), 256, row.data());
    std::vector<float> back(256);
    DequantizeRow(MatrixView{type, 1, 256, row.data(), Traits(type).block_bytes}, 0, back.data());
    EXPECT_NEAR(back[100], 1.0f, 0.1f) << Traits(type).name;
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
