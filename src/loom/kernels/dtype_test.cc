#include "loom/kernels/dtype.h"

#include <gtest/gtest.h>

#include "loom/kernels/block_formats.h"
#include "loom/kernels/matrix.h"

namespace loom::kernels {
namespace {

TEST(DTypeTest, TraitsDescribeBlockLayouts) {
  EXPECT_EQ(Traits(DType::kF32).name, "f32");
  EXPECT_EQ(Traits(DType::kF32).block_bytes, 4);
  EXPECT_EQ(Traits(DType::kF16).block_bytes, 2);
  EXPECT_EQ(Traits(DType::kBF16).name, "bf16");
  EXPECT_EQ(Traits(DType::kQ8_0).block_elems, 32);
  EXPECT_EQ(Traits(DType::kQ8_0).block_bytes, 34);
  EXPECT_EQ(Traits(DType::kQ4_0).block_elems, 32);
  EXPECT_EQ(Traits(DType::kQ4_0).block_bytes, 18);
}

TEST(DTypeTest, RowBytesCountsWholeBlocks) {
  EXPECT_EQ(RowBytes(DType::kF32, 17).value(), 68);
  EXPECT_EQ(RowBytes(DType::kBF16, 3).value(), 6);
  EXPECT_EQ(RowBytes(DType::kQ8_0, 2048).value(), 64 * 34);
  EXPECT_EQ(RowBytes(DType::kQ4_0, 96).value(), 3 * 18);
  EXPECT_EQ(RowBytes(DType::kQ4_0, 0).value(), 0);
}

TEST(DTypeTest, RowBytesRejectsPartialBlocks) {
  const StatusOr<int64_t> r = RowBytes(DType::kQ4_0, 33);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("q4_0"), std::string::npos);
  EXPECT_NE(r.status().message().find("33"), std::string::npos);
  EXPECT_FALSE(RowBytes(DType::kF32, -1).ok());
}

TEST(MatrixViewTest, RowAndColumnRangesPointIntoTheSameBytes) {
  std::byte storage[4 * 3 * 18] = {};
  MatrixView w{DType::kQ4_0, 4, 96, storage, 3 * 18};
  const MatrixView rows = w.RowRange(1, 2);
  EXPECT_EQ(rows.rows, 2);
  EXPECT_EQ(rows.data, storage + 54);
  EXPECT_TRUE(w.ColRangeOk(32, 64));
  EXPECT_FALSE(w.ColRangeOk(16, 32));
  EXPECT_FALSE(w.ColRangeOk(64, 64));
  const MatrixView cols = rows.ColRange(32, 64);
  EXPECT_EQ(cols.cols, 64);
  EXPECT_EQ(cols.row_stride, 54);
  EXPECT_EQ(cols.data, storage + 54 + 18);
}

TEST(DTypeTest, KernelBlockConstantsMatchTraits) {
  EXPECT_EQ(internal::kQ4KBlockBytes, Traits(DType::kQ4_K).block_bytes);
  EXPECT_EQ(internal::kQ5KBlockBytes, Traits(DType::kQ5_K).block_bytes);
  EXPECT_EQ(internal::kQ6KBlockBytes, Traits(DType::kQ6_K).block_bytes);
}

}  // namespace
}  // namespace loom::kernels
