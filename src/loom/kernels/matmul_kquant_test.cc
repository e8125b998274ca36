// The register-tiled K-quant and MLX products (matmul_kquant_tile-inl.h on AVX3_DL,
// matmul_kquant_tile_avx2-inl.h on AVX2 and AVX3, the portable path elsewhere) against the
// reference on ragged shapes, for every token count of the tiles' 8 / 4 / 1 (AVX2: 4 / 2 / 1)
// split, and batched rows against single rows bit for bit; and the kact tile groups.  Their bits
// across targets: matmul_kquant_lanes_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "loom/base/aligned_buffer.h"
#include "loom/base/thread_pool.h"
#include "loom/kernels/block_formats.h"
#include "loom/kernels/kernels_internal.h"
#include "loom/kernels/kernels_test_util.h"
#include "loom/kernels/matmul.h"
#include "loom/kernels/matmul_test_util.h"
#include "loom/kernels/reference.h"

namespace loom::kernels {
namespace {

using testing::AllMlxCases;
using testing::ExpectBatchRowsEqualSingleRows;
using testing::Expected;
using testing::ExpectNear;
using testing::ForEachSimdTarget;
using testing::MlxCase;
using testing::MlxCaseName;
using testing::RandomVector;
using testing::TestMatrix;

// Every token count 1..17 (tiles of 8 or 4, half as many, and single rows), row counts that leave 1..3 rows of
// a last quad, and rows of 1 and 3 super-blocks.
class KQuantTileTest : public ::testing::TestWithParam<DType> {};

TEST_P(KQuantTileTest, MatchesReferenceForEveryTokenCount) {
  const DType type = GetParam();
  base::ThreadPool pool(2, /*spin_microseconds=*/0);
  for (int64_t cols : {256, 768}) {
    for (int64_t rows : {1, 2, 3, 6, 7, 9}) {
      const TestMatrix m(type, rows, cols, static_cast<uint32_t>(rows * 31 + cols));
      for (int64_t n = 1; n <= 17; ++n) {
        const std::vector<float> x = RandomVector(n * cols, static_cast<uint32_t>(n * 3 + cols));
        const Expected want(m.view, x.data(), n);
        ForEachSimdTarget([&] {
          Workspace ws;
          std::vector<float> y(static_cast<size_t>(n * rows), NAN);
          MatMul(m.view, x.data(), n, y.data(), ws, pool);
          ExpectNear(want, m.view, n, y.data());
          if (n > 1) ExpectBatchRowsEqualSingleRows(m.view, x.data(), n, pool);
        });
        if (HasFatalFailure()) return;
      }
    }
  }
}

// A Q4_K_M-style pair: rows of a matrix sliced by RowRange (odd starts) give the same bits as
// the whole matrix's rows, so threads splitting rows anywhere agree.
TEST_P(KQuantTileTest, RowRangesGiveTheWholeMatrixBits) {
  const DType type = GetParam();
  base::ThreadPool pool(1, /*spin_microseconds=*/0);
  const int64_t rows = 11, cols = 512, n = 13;
  const TestMatrix m(type, rows, cols, 17);
  const std::vector<float> x = RandomVector(n * cols, 18);
  ForEachSimdTarget([&] {
    Workspace ws;
    std::vector<float> whole(static_cast<size_t>(n * rows));
    MatMul(m.view, x.data(), n, whole.data(), ws, pool);
    for (int64_t begin : {1, 3, 5}) {
      const MatrixView part = m.view.RowRange(begin, rows - begin);
      std::vector<float> y(static_cast<size_t>(n * part.rows));
      MatMul(part, x.data(), n, y.data(), ws, pool);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t r = 0; r < part.rows; ++r) {
          ASSERT_EQ(std::memcmp(&y[static_cast<size_t>(i * part.rows + r)],
                                &whole[static_cast<size_t>(i * rows + begin + r)], sizeof(float)),
                    0)
              << "row " << begin + r << ", act row " << i;
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(KQuants, KQuantTileTest,
                         ::testing::Values(DType::kQ4_K, DType::kQ5_K, DType::kQ6_K),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(Traits(info.param).name);
                         });

// MLX of every width with every group size: rows of whole 128-value chunks and of a partial last
// chunk (1..3 blocks), every token count.
class MlxTileTest : public ::testing::TestWithParam<MlxCase> {};

TEST_P(MlxTileTest, MatchesReferenceForEveryTokenCount) {
  const MlxCase c = GetParam();
  base::ThreadPool pool(2, /*spin_microseconds=*/0);
  for (int64_t cols : {32, 64, 96, 128, 224, 256, 384}) {
    if (cols % c.group != 0) continue;
    for (int64_t rows : {1, 3, 5, 8}) {
      const TestMatrix m(c.type, rows, cols, static_cast<uint32_t>(rows * 13 + cols), c.group,
                         c.scale_type);
      for (int64_t n = 1; n <= 17; n += (n < 9 ? 1 : 4)) {
        const std::vector<float> x = RandomVector(n * cols, static_cast<uint32_t>(n + cols));
        const Expected want(m.view, x.data(), n);
        ForEachSimdTarget([&] {
          Workspace ws;
          std::vector<float> y(static_cast<size_t>(n * rows), NAN);
          MatMul(m.view, x.data(), n, y.data(), ws, pool);
          ExpectNear(want, m.view, n, y.data());
          if (n > 1) ExpectBatchRowsEqualSingleRows(m.view, x.data(), n, pool);
        });
        if (HasFatalFailure()) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Mlx, MlxTileTest, ::testing::ValuesIn(AllMlxCases()), MlxCaseName);

// The tile groups of a kact row hold the row's own q, d and half sums in the tile order
// (kernels_internal.h), with zeros for the missing blocks of a partial last group.
TEST(KActTest, TileGroupsRearrangeTheRow) {
  for (int64_t cols : {32, 96, 128, 160, 2080}) {
    const std::vector<float> x = RandomVector(2 * cols, static_cast<uint32_t>(cols));
    const int64_t row_bytes = internal::KActRowBytes(cols);
    ASSERT_EQ(row_bytes % 64, 0);
    ASSERT_EQ(internal::KActTileOffset(cols) % 64, 0);
    std::vector<std::byte> out(static_cast<size_t>(2 * row_bytes + 64));
    std::byte* rows = out.data() + (64 - reinterpret_cast<uintptr_t>(out.data()) % 64) % 64;
    internal::QuantizeKActRows(x.data(), 2, cols, rows);
    const int64_t blocks = cols / 32;
    for (int64_t i = 0; i < 2; ++i) {
      const std::byte* row = rows + i * row_bytes;
      const auto* q = reinterpret_cast<const int8_t*>(row);
      const auto* d = reinterpret_cast<const float*>(row + internal::KActQBytes(cols));
      const float* hs = d + blocks;
      std::vector<int8_t> want_q(static_cast<size_t>(cols));
      std::vector<float> want_d(static_cast<size_t>(blocks));
      reference::QuantizeActivations(x.data() + i * cols, cols, want_q.data(), want_d.data());
      ASSERT_EQ(std::memcmp(q, want_q.data(), static_cast<size_t>(cols)), 0);
      ASSERT_EQ(std::memcmp(d, want_d.data(), static_cast<size_t>(blocks) * sizeof(float)), 0);
      const std::byte* tiles = row + internal::KActTileOffset(cols);
      for (int64_t b = 0; b < (blocks + 3) / 4 * 4; ++b) {
        const std::byte* g = tiles + b / 4 * internal::kKTileGroupBytes;
        const int64_t s = b % 4;
        const auto* lo = reinterpret_cast<const int8_t*>(g + internal::kKTileLo) + 16 * s;
        const auto* hi = reinterpret_cast<const int8_t*>(g + internal::kKTileHi) + 16 * s;
        int32_t sum_lo = 0, sum_hi = 0;
        for (int j = 0; j < 16; ++j) {
          const int8_t want_lo = b < blocks ? q[32 * b + j] : 0;
          const int8_t want_hi = b < blocks ? q[32 * b + 16 + j] : 0;
          ASSERT_EQ(lo[j], want_lo) << "cols " << cols << " block " << b << " value " << j;
          ASSERT_EQ(hi[j], want_hi) << "cols " << cols << " block " << b << " value " << 16 + j;
          sum_lo += want_lo;
          sum_hi += want_hi;
        }
        for (int r = 0; r < 4; ++r) {
          const int64_t lane = 4 * s + r;
          const float dx = reinterpret_cast<const float*>(g + internal::kKTileScale)[lane];
          const float sum = reinterpret_cast<const float*>(g + internal::kKTileSum)[lane];
          EXPECT_EQ(dx, b < blocks ? d[b] : 0.0f);
          EXPECT_EQ(sum, b < blocks ? hs[2 * b] + hs[2 * b + 1] : 0.0f);
          EXPECT_EQ(reinterpret_cast<const int32_t*>(g + internal::kKTileCorrLo)[lane],
                    -8 * sum_lo);
          EXPECT_EQ(reinterpret_cast<const int32_t*>(g + internal::kKTileCorrHi)[lane],
                    -8 * sum_hi);
        }
      }
    }
  }
}

// The SIMD quantization writes the bytes of the scalar one on every target, for rows of whole
// and partial tile groups, including values that round half-way and blocks of zeros.
TEST(KActTest, SimdEqualsScalarByteForByte) {
  for (int64_t cols : {32, 64, 96, 128, 160, 2080, 5632}) {
    const int64_t n = 3;
    std::vector<float> x = RandomVector(n * cols, static_cast<uint32_t>(cols + 1));
    for (int64_t c = 0; c < 32; ++c) x[static_cast<size_t>(c)] = 0.0f;  // block of zeros
    for (int64_t c = 32; c < std::min<int64_t>(cols, 64); ++c) {
      x[static_cast<size_t>(c)] = static_cast<float>(c % 9) - 4.0f + 0.5f;  // exact halves
    }
    const int64_t row_bytes = internal::KActRowBytes(cols);
    const size_t bytes = static_cast<size_t>(n * row_bytes);
    base::AlignedBuffer<std::byte> want(static_cast<int64_t>(bytes));
    std::memset(want.data(), 0x5A, bytes);
    internal::QuantizeKActRowsScalar(x.data(), n, cols, want.data());
    ForEachSimdTarget([&] {
      base::AlignedBuffer<std::byte> got(static_cast<int64_t>(bytes));
      std::memset(got.data(), 0x5A, bytes);
      internal::QuantizeKActRows(x.data(), n, cols, got.data());
      for (size_t k = 0; k < bytes; ++k) {
        ASSERT_EQ(got.data()[k], want.data()[k])
            << "cols " << cols << ", byte " << k % row_bytes << " of row " << k / row_bytes;
      }
    });
  }
}

}  // namespace
}  // namespace loom::kernels
