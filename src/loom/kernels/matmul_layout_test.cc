// The weight layouts other than the file's (WeightLayout, matrix.h), which weights are copied into
// on the CPUs whose kernels read them faster (PreferredLayout): their bytes as documented, the
// conversions both ways, and, on every SIMD target, products and dequantized rows equal to the
// file layout's bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "loom/base/thread_pool.h"
#include "loom/kernels/block_formats.h"
#include "loom/kernels/kernels_test_util.h"
#include "loom/kernels/matmul.h"
#include "loom/kernels/matmul_test_util.h"
#include "loom/kernels/reference.h"
#include "loom/kernels/simd_target.h"

namespace loom::kernels {
namespace {

using testing::ForEachSimdTarget;
using testing::RandomVector;
using testing::TestMatrix;

struct LayoutCase {
  DType type;
  WeightLayout layout;
  int64_t cols;
};

void PrintTo(const LayoutCase& c, std::ostream* os) {
  *os << Traits(c.type).name << ", " << c.cols << " columns";
}

std::string LayoutCaseName(const ::testing::TestParamInfo<LayoutCase>& info) {
  return std::string(Traits(info.param.type).name) + "_" + std::to_string(info.param.cols);
}

class WeightLayoutBitsTest : public ::testing::TestWithParam<LayoutCase> {};

// Decode, the batched tiles, column leaves, row ranges and column slices; Q4_0 and Q8_0 also with
// a last partial group of one pair (448 = 14 blocks) and one ending in an unpaired block (416).
TEST_P(WeightLayoutBitsTest, ProductsAndRowsEqualTheFileLayouts) {
  const auto [type, layout, cols] = GetParam();
  base::ThreadPool pool(2, /*spin_microseconds=*/0);
  const int64_t rows = 9;
  const TestMatrix m(type, rows, cols, 23);
  const MatrixView file = m.view;
  std::vector<std::byte> bytes(static_cast<size_t>(rows * file.row_stride));
  ASSERT_TRUE(CopyRowsToLayout(type, cols, rows, WeightLayout::kFile, file.data, file.row_stride,
                               layout, bytes.data(), file.row_stride));
  EXPECT_NE(std::memcmp(bytes.data(), file.data, bytes.size()), 0);
  MatrixView other = file;
  other.data = bytes.data();
  other.layout = layout;
  // Converting back gives the file's bytes, into another buffer and in place.
  std::vector<std::byte> back(bytes.size());
  ASSERT_TRUE(CopyRowsToLayout(type, cols, rows, layout, other.data, other.row_stride,
                               WeightLayout::kFile, back.data(), other.row_stride));
  EXPECT_EQ(std::memcmp(back.data(), file.data, back.size()), 0);
  std::vector<std::byte> in_place = bytes;
  ASSERT_TRUE(CopyRowsToLayout(type, cols, rows, layout, in_place.data(), other.row_stride,
                               WeightLayout::kFile, in_place.data(), other.row_stride));
  EXPECT_EQ(in_place, back);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> want(static_cast<size_t>(cols)), got(want.size());
    DequantizeRow(file, r, want.data());
    DequantizeRow(other, r, got.data());
    ASSERT_EQ(got, want) << "row " << r;
  }
  const auto same_bits = [&](const MatrixView& a, const MatrixView& b, const float* x, int64_t n,
                             const char* what) {
    Workspace ws;
    std::vector<float> ya(static_cast<size_t>(n * a.rows)), yb(ya.size());
    MatMul(a, x, n, ya.data(), ws, pool);
    MatMul(b, x, n, yb.data(), ws, pool);
    ASSERT_EQ(std::memcmp(ya.data(), yb.data(), ya.size() * sizeof(float)), 0)
        << what << ", n = " << n;
  };
  // A column slice (a tensor-parallel rank's) keeps its matrix's layout: [256, 768) of whole
  // super-blocks, or [64, cols), which begins on a pair and keeps the row's end.
  const int64_t slice_begin = cols >= 1024 ? 256 : 64;
  const int64_t slice_cols = cols >= 1024 ? 512 : cols - 64;
  ASSERT_TRUE(other.ColRangeOk(slice_begin, slice_cols));
  for (int64_t n : {1, 2, 5, 13}) {
    const std::vector<float> x = RandomVector(n * cols, static_cast<uint32_t>(n + 5));
    {
      std::vector<float> ya(static_cast<size_t>(n * rows)), yb(ya.size());
      reference::MatMul(file, x.data(), n, ya.data());
      reference::MatMul(other, x.data(), n, yb.data());
      ASSERT_EQ(ya, yb) << "reference, n = " << n;
    }
    std::vector<float> xc(static_cast<size_t>(n * slice_cols));
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(x.begin() + i * cols + slice_begin, slice_cols, xc.begin() + i * slice_cols);
    }
    ForEachSimdTarget([&] {
      same_bits(file, other, x.data(), n, "whole rows");
      same_bits(file.RowRange(3, 6), other.RowRange(3, 6), x.data(), n, "rows 3..8");
      // Leaves begin on pairs where PreferredLayout chooses kScalePairs (cols % 256 == 0).
      for (int64_t leaves : {2, 4}) {
        if (cols % 256 != 0) break;
        MatrixView fl = file, ol = other;
        fl.k_leaves = ol.k_leaves = leaves;
        same_bits(fl, ol, x.data(), n, leaves == 2 ? "2 leaves" : "4 leaves");
      }
      same_bits(file.ColRange(slice_begin, slice_cols), other.ColRange(slice_begin, slice_cols),
                xc.data(), n, "column slice");
    });
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, WeightLayoutBitsTest,
    ::testing::Values(LayoutCase{DType::kQ4_K, WeightLayout::kPairedNibbles, 1024},
                      LayoutCase{DType::kQ5_K, WeightLayout::kPairedNibbles, 1024},
                      LayoutCase{DType::kQ4_0, WeightLayout::kScalePairs, 1024},
                      LayoutCase{DType::kQ4_0, WeightLayout::kScalePairs, 448},
                      LayoutCase{DType::kQ4_0, WeightLayout::kScalePairs, 416},
                      LayoutCase{DType::kQ8_0, WeightLayout::kScalePairs, 1024},
                      LayoutCase{DType::kQ8_0, WeightLayout::kScalePairs, 416}),
    LayoutCaseName);

// Conversions that do not exist write nothing and say so.
TEST(WeightLayoutTest, OnlyEachTypesOwnLayoutConverts) {
  const TestMatrix m(DType::kQ6_K, 2, 256, 3);
  std::vector<std::byte> out(m.bytes.size());
  for (WeightLayout layout : {WeightLayout::kPairedNibbles, WeightLayout::kScalePairs}) {
    EXPECT_FALSE(CopyRowsToLayout(DType::kQ6_K, 256, 2, WeightLayout::kFile, m.view.data,
                                  m.view.row_stride, layout, out.data(), m.view.row_stride));
  }
  const TestMatrix q(DType::kQ4_0, 2, 256, 3);
  EXPECT_FALSE(CopyRowsToLayout(DType::kQ4_0, 256, 2, WeightLayout::kFile, q.view.data,
                                q.view.row_stride, WeightLayout::kPairedNibbles, out.data(),
                                q.view.row_stride));
  EXPECT_FALSE(CopyRowsToLayout(DType::kQ4_0, 256, 2, WeightLayout::kScalePairs, q.view.data,
                                q.view.row_stride, WeightLayout::kPairedNibbles, out.data(),
                                q.view.row_stride));
  // A slice must not cut a pair.
  MatrixView pairs = q.view;
  pairs.layout = WeightLayout::kScalePairs;
  EXPECT_FALSE(pairs.ColRangeOk(32, 64));
  EXPECT_FALSE(pairs.ColRangeOk(64, 32));
  EXPECT_TRUE(pairs.ColRangeOk(64, 192));
}

// Where the copy puts each type: AVX2 and AVX3 (AVX-512 without VNNI) read the rearranged layouts
// faster; Q4_0 and Q8_0 only when every leaf split of cols begins on a pair.
TEST(WeightLayoutTest, PreferredLayoutFollowsTheTarget) {
  ForEachSimdTarget([] {
    const int64_t target = ActiveSimdTarget();
    const bool rearranged = target == HWY_AVX2 || target == HWY_AVX3;
    const WeightLayout nibbles = rearranged ? WeightLayout::kPairedNibbles : WeightLayout::kFile;
    const WeightLayout pairs = rearranged ? WeightLayout::kScalePairs : WeightLayout::kFile;
    EXPECT_EQ(PreferredLayout(DType::kQ4_K, 2048), nibbles);
    EXPECT_EQ(PreferredLayout(DType::kQ5_K, 2048), nibbles);
    EXPECT_EQ(PreferredLayout(DType::kQ4_0, 2048), pairs);
    EXPECT_EQ(PreferredLayout(DType::kQ8_0, 5632), pairs);
    // 2,752 = 4 leaves of 86 blocks: a leaf would begin inside a pair.
    EXPECT_EQ(PreferredLayout(DType::kQ4_0, 2752), WeightLayout::kFile);
    for (DType type : {DType::kF32, DType::kF16, DType::kQ6_K, DType::kMlx4}) {
      EXPECT_EQ(PreferredLayout(type, 2048), WeightLayout::kFile) << Traits(type).name;
    }
  });
}

// The paired nibbles' bytes, as matrix.h describes them: in each 32-byte chunk, byte l < 16 holds
// values l and 16 + l of its first sub-block, byte 16 + l those of its second.
TEST(WeightLayoutTest, PairedNibblesHoldEachSubBlocksValuePairs) {
  std::byte file[32], paired[32], back[32];
  // File: byte l holds value l of sub-block A (low nibble) and of sub-block B (high).
  const auto a = [](int l) { return (l * 5 + 1) & 15; };
  const auto b = [](int l) { return (l * 3 + 7) & 15; };
  for (int l = 0; l < 32; ++l) file[l] = static_cast<std::byte>(a(l) | b(l) << 4);
  internal::SwapNibblePairs(file, paired);
  for (int l = 0; l < 16; ++l) {
    EXPECT_EQ(static_cast<int>(paired[l]), a(l) | a(16 + l) << 4) << l;
    EXPECT_EQ(static_cast<int>(paired[16 + l]), b(l) | b(16 + l) << 4) << l;
  }
  internal::SwapNibblePairs(paired, back);
  EXPECT_EQ(std::memcmp(back, file, sizeof(file)), 0);
}

// The scale pairs' bytes, as matrix.h describes them: both scales, then Q4_0's two blocks of
// nibble bytes, or Q8_0's values 0..15 of both blocks and then 16..31 of both.  A row's last,
// unpaired block stays as in the file.
TEST(WeightLayoutTest, ScalePairsHoldBothScalesThenTheQuants) {
  for (DType type : {DType::kQ4_0, DType::kQ8_0}) {
    SCOPED_TRACE(Traits(type).name);
    const int64_t kB = Traits(type).block_bytes;
    const int64_t quants = kB - 2;
    std::vector<std::byte> file(static_cast<size_t>(3 * kB)), pairs(file.size()), back(file.size());
    for (size_t i = 0; i < file.size(); ++i) file[i] = static_cast<std::byte>(i * 7 + 1);
    const auto at = [&](int64_t block, int64_t byte) { return file[block * kB + byte]; };
    pairs = file;
    internal::ConvertScalePairs(type, /*to_pairs=*/true, pairs.data(), 3);
    EXPECT_EQ(pairs[0], at(0, 0));
    EXPECT_EQ(pairs[1], at(0, 1));
    EXPECT_EQ(pairs[2], at(1, 0));
    EXPECT_EQ(pairs[3], at(1, 1));
    for (int64_t j = 0; j < quants; ++j) {  // quant byte j of block s
      const int64_t half = j / 16, l = j % 16;
      EXPECT_EQ(pairs[4 + 32 * half + l], at(0, 2 + j)) << j;
      EXPECT_EQ(pairs[4 + 32 * half + 16 + l], at(1, 2 + j)) << j;
    }
    EXPECT_EQ(std::memcmp(pairs.data() + 2 * kB, file.data() + 2 * kB, kB), 0);
    back = pairs;
    internal::ConvertScalePairs(type, /*to_pairs=*/false, back.data(), 3);
    EXPECT_EQ(back, file);
  }
}

}  // namespace
}  // namespace loom::kernels
