#include "loom/kernels/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "loom/base/thread_pool.h"
#include "loom/kernels/kernels_test_util.h"
#include "loom/kernels/matmul_test_util.h"
#include "loom/kernels/ops.h"
#include "loom/kernels/quantize.h"
#include "loom/kernels/reference.h"

// Counts heap allocations so that a test can check that MatMul does not allocate after warm-up.
namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace
void* operator new(size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
// GCC flags free() of memory from the replaced operator new, which is exactly what is intended.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace loom::kernels {
namespace {

using testing::AllMlxCases;
using testing::ExpectBatchRowsEqualSingleRows;
using testing::Expected;
using testing::ExpectMatchesReference;
using testing::ExpectNear;
using testing::ForEachSimdTarget;
using testing::MlxCase;
using testing::MlxCaseName;
using testing::PackedCopy;
using testing::RandomVector;
using testing::TestMatrix;

class MatMulTest : public ::testing::TestWithParam<DType> {
 protected:
  static void SetUpTestSuite() {
    for (int t = 0; t < 3; ++t)
      pools_[t] = std::make_unique<base::ThreadPool>(
          t + 1, /*spin_microseconds=*/0);  // 3 threads > 2 cores here: spinning would starve
  }
  static void TearDownTestSuite() {
    for (auto& p : pools_) p.reset();
  }
  static base::ThreadPool& Pool(int threads) { return *pools_[threads - 1]; }
  static std::unique_ptr<base::ThreadPool> pools_[3];
};
std::unique_ptr<base::ThreadPool> MatMulTest::pools_[3];

TEST_P(MatMulTest, MatchesReferenceOnRaggedShapes) {
  const DType type = GetParam();
  const bool quantized = Traits(type).block_elems > 1;
  std::vector<int64_t> cols_list = {32, 64, 96, 160, 2080};
  if (!quantized) cols_list.insert(cols_list.end(), {1, 17, 33});
  if (Traits(type).block_elems == 256) cols_list = {256, 512, 2304};
  for (int64_t cols : cols_list) {
    for (int64_t rows : {1, 3, 4, 5, 13, 37}) {
      const TestMatrix m(type, rows, cols, static_cast<uint32_t>(rows * 1000 + cols));
      for (int64_t n : {1, 2, 3, 5, 8, 17}) {
        if (cols >= 2080 && n > 5 && rows > 5) continue;  // keeps the reference affordable
        const std::vector<float> x = RandomVector(n * cols, static_cast<uint32_t>(n + cols));
        const Expected want(m.view, x.data(), n);
        ForEachSimdTarget([&] {
          for (int threads : {1, 2, 3}) {
            SCOPED_TRACE(std::to_string(threads) + " threads");
            Workspace ws;
            std::vector<float> y(static_cast<size_t>(n * rows), NAN);
            MatMul(m.view, x.data(), n, y.data(), ws, Pool(threads));
            ExpectNear(want, m.view, n, y.data());
            if (HasFatalFailure()) return;
          }
        });
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Tensor-parallel shards are views: a row range and a block-aligned column range of a bigger
// matrix must give the same result as a packed copy of that sub-matrix.
TEST_P(MatMulTest, RowAndColumnViewsMatchPackedCopies) {
  const DType type = GetParam();
  const int64_t unit = std::max<int64_t>(32, Traits(type).block_elems);
  const int64_t rows = 23;
  const int64_t cols = 10 * unit;
  const TestMatrix m(type, rows, cols, 99);
  ASSERT_TRUE(m.view.ColRangeOk(3 * unit, 5 * unit));
  const MatrixView view = m.view.RowRange(5, 13).ColRange(3 * unit, 5 * unit);
  const PackedCopy packed(view);
  ForEachSimdTarget([&] {
    for (int64_t n : {1, 5}) {
      const std::vector<float> x = RandomVector(n * 5 * unit, 5);
      for (int threads : {1, 2, 3}) {
        Workspace ws;
        std::vector<float> y_view(static_cast<size_t>(n * 13));
        std::vector<float> y_packed(static_cast<size_t>(n * 13));
        MatMul(view, x.data(), n, y_view.data(), ws, Pool(threads));
        MatMul(packed.view, x.data(), n, y_packed.data(), ws, Pool(threads));
        EXPECT_EQ(y_view, y_packed);
        ExpectMatchesReference(packed.view, x.data(), n, y_view.data());
      }
    }
  });
}

// Long rows and many activation rows: the kernels process activations in L2-sized chunks (16 rows
// of 8192 quantized values, 8 rows of 8192 floats), so this crosses several chunk boundaries.
TEST_P(MatMulTest, LargeBatchesSpanSeveralActivationChunks) {
  const DType type = GetParam();
  const int64_t rows = 13, cols = 8192, n = 41;
  const TestMatrix m(type, rows, cols, 77);
  const std::vector<float> x = RandomVector(n * cols, 78);
  const Expected want(m.view, x.data(), n);
  ForEachSimdTarget([&] {
    Workspace ws;
    std::vector<float> y(static_cast<size_t>(n * rows), NAN);
    MatMul(m.view, x.data(), n, y.data(), ws, Pool(2));
    ExpectNear(want, m.view, n, y.data());
  });
}

TEST_P(MatMulTest, MultiEqualsSeparateProducts) {
  const DType type = GetParam();
  const int64_t cols = Traits(type).block_elems == 256 ? 512 : 192;
  const TestMatrix q(type, 37, cols, 1);
  const TestMatrix k(type, 6, cols, 2);
  const TestMatrix v(type, 9, cols, 3);
  const MatrixView ws_views[3] = {q.view, k.view, v.view};
  ForEachSimdTarget([&] {
    for (int64_t n : {1, 3, 8}) {
      const std::vector<float> x = RandomVector(n * cols, 11);
      for (int threads : {1, 2, 3}) {
        Workspace ws;
        std::vector<float> yq(static_cast<size_t>(n * 37)), yk(static_cast<size_t>(n * 6)),
            yv(static_cast<size_t>(n * 9));
        float* const ys[3] = {yq.data(), yk.data(), yv.data()};
        MatMulMulti(ws_views, x.data(), n, ys, ws, Pool(threads));
        for (int i = 0; i < 3; ++i) {
          std::vector<float> single(static_cast<size_t>(n * ws_views[i].rows));
          MatMul(ws_views[i], x.data(), n, single.data(), ws, Pool(1));
          EXPECT_EQ(std::vector<float>(ys[i], ys[i] + n * ws_views[i].rows), single);
        }
      }
    }
  });
}

// Grouped products (the experts of a mixture): each product reads its own rows of x, threads split
// all products' rows together weighted by their rows of x; every result equals its own MatMul bit
// for bit, a product with no rows is not touched.
TEST_P(MatMulTest, GroupedEqualsSeparateProducts) {
  const DType type = GetParam();
  const int64_t cols = Traits(type).block_elems == 256 ? 512 : 192;
  const TestMatrix a(type, 37, cols, 1);
  const TestMatrix b(type, 8, cols, 2);
  const TestMatrix c(type, 21, cols, 3);
  const MatrixView views[4] = {a.view, b.view, c.view, a.view.RowRange(4, 12)};
  const int64_t m = 11;
  const std::vector<float> x = RandomVector(m * cols, 12);
  ForEachSimdTarget([&] {
    for (const std::vector<int64_t>& n : std::vector<std::vector<int64_t>>{
             {1, 1, 1, 1}, {3, 0, 7, 1}, {0, 11, 2, 5}}) {
      const int64_t x_row[4] = {0, m - n[1], 2, m - n[3]};
      for (int threads : {1, 2, 3}) {
        Workspace ws;
        std::vector<std::vector<float>> ys(4);
        float* yp[4];
        for (int i = 0; i < 4; ++i) {
          ys[i].assign(static_cast<size_t>(std::max<int64_t>(n[i], 1) * views[i].rows), -7.0f);
          yp[i] = ys[i].data();
        }
        MatMulGrouped(views, x.data(), m, x_row, n, yp, ws, Pool(threads));
        for (int i = 0; i < 4; ++i) {
          if (n[i] == 0) {
            EXPECT_EQ(ys[i], std::vector<float>(ys[i].size(), -7.0f)) << "product " << i;
            continue;
          }
          std::vector<float> single(static_cast<size_t>(n[i] * views[i].rows));
          MatMul(views[i], x.data() + x_row[i] * cols, n[i], single.data(), ws, Pool(1));
          EXPECT_EQ(ys[i], single) << "product " << i << ", " << threads << " threads";
        }
      }
    }
  });
}

// A product with k_leaves = L sums L column slices computed on their own in SumTree's order, so
// the sum of a tensor-parallel slice holding a subtree of leaves enters the total exactly.  Decode
// (n = 1) takes each quad of rows once, its leaves in turn (LeafQuads), with contiguous rows and
// with the strided rows of tensor-parallel slices; shapes: leaves of one and of several K-quant
// super-blocks, an odd count of them (2 leaves of 11), ragged quads.
TEST_P(MatMulTest, LeavesAreColumnSlicesAddedInATree) {
  const DType type = GetParam();
  struct Shape {
    int64_t rows, cols;
  };
  for (const Shape s : {Shape{13, 1024}, Shape{37, 2048}, Shape{6, 5632}}) {
    const int64_t rows = s.rows, cols = s.cols;
    const TestMatrix m(type, rows, cols, static_cast<uint32_t>(21 + cols));
    const int64_t n_leaves = KLeaves(m.view, cols);
    if (cols != 5632) {
      ASSERT_EQ(n_leaves, 4) << cols;
    }
    if (n_leaves < 2) continue;
    const int64_t width = cols / n_leaves;
    MatrixView leaves = m.view;
    leaves.k_leaves = n_leaves;
    ForEachSimdTarget([&] {
      for (int64_t n : {1, 5, 9}) {
        const std::vector<float> x = RandomVector(n * cols, static_cast<uint32_t>(22 + n));
        // x's columns of one slice, as a dense (n, count) array.
        auto columns = [&](int64_t begin, int64_t count) {
          std::vector<float> out(static_cast<size_t>(n * count));
          for (int64_t i = 0; i < n; ++i) {
            std::copy_n(x.data() + i * cols + begin, count, out.data() + i * count);
          }
          return out;
        };
        for (int threads : {1, 2, 3}) {
          SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + ", " +
                       std::to_string(n) + " rows, " + std::to_string(threads) + " threads");
          Workspace ws;
          std::vector<float> y(static_cast<size_t>(n * rows), NAN);
          MatMul(leaves, x.data(), n, y.data(), ws, Pool(threads));
          ExpectMatchesReference(m.view, x.data(), n, y.data());
          // Leaf by leaf, added in the tree.
          std::vector<std::vector<float>> parts;
          float* ptrs[kMaxKLeaves];
          for (int64_t l = 0; l < n_leaves; ++l) {
            parts.emplace_back(static_cast<size_t>(n * rows));
            MatMul(m.view.ColRange(l * width, width), columns(l * width, width).data(), n,
                   parts.back().data(), ws, Pool(1));
            ptrs[l] = parts.back().data();
          }
          SumTree(ptrs, n_leaves, n * rows);
          EXPECT_EQ(y, parts[0]);
          // Two halves as two tensor-parallel ranks would hold them, then their sum.
          std::vector<float> halves[2];
          for (int h = 0; h < 2; ++h) {
            MatrixView half = m.view.ColRange(h * cols / 2, cols / 2);
            half.k_leaves = SliceKLeaves(half, cols, h * cols / 2);
            ASSERT_EQ(half.k_leaves, n_leaves / 2);
            halves[h].resize(static_cast<size_t>(n * rows));
            MatMul(half, columns(h * cols / 2, cols / 2).data(), n, halves[h].data(), ws,
                   Pool(threads));
          }
          Add(halves[1].data(), n * rows, halves[0].data());
          EXPECT_EQ(y, halves[0]);
        }
      }
    });
  }
}

TEST_P(MatMulTest, BatchRowsEqualSingleRowsBitForBit) {
  const DType type = GetParam();
  const int64_t block = std::max<int64_t>(32, Traits(type).block_elems);
  // Whole groups of 4 blocks and tails of 1-3 (the AVX3_DL kernels' 128-value groups), and rows
  // long enough that the activations span several L2 chunks (16 rows of 8192 quantized values).
  const std::vector<int64_t> blocks_list =
      block == 256 ? std::vector<int64_t>{1, 3, 9, 32} : std::vector<int64_t>{1, 2, 7, 13, 65, 256};
  for (int64_t blocks : blocks_list) {
    const int64_t cols = blocks * block;
    for (int64_t rows : {1, 3, 4, 6, 13, 37}) {
      if (cols >= 8192 && rows > 6) continue;
      const TestMatrix m(type, rows, cols, static_cast<uint32_t>(rows * 1000 + cols));
      for (int64_t n : {2, 3, 5, 8, 9, 17, 20}) {
        if (cols >= 8192 && n < 17) continue;
        const std::vector<float> x = RandomVector(n * cols, static_cast<uint32_t>(n * 7 + cols));
        ForEachSimdTarget([&] {
          for (int threads : {1, 3}) {
            SCOPED_TRACE(std::to_string(threads) + " threads");
            ExpectBatchRowsEqualSingleRows(m.view, x.data(), n, Pool(threads));
            if (HasFatalFailure()) return;
          }
        });
        if (HasFatalFailure()) return;
      }
    }
  }
  // A product summed over column leaves (tensor-parallel layers).
  const int64_t cols = 4 * std::max<int64_t>(kMinLeafCols, block);
  TestMatrix m(type, 13, cols, 5);
  m.view.k_leaves = KLeaves(m.view, cols);
  ASSERT_EQ(m.view.k_leaves, 4);
  const std::vector<float> x = RandomVector(9 * cols, 6);
  ForEachSimdTarget([&] { ExpectBatchRowsEqualSingleRows(m.view, x.data(), 9, Pool(2)); });
}

TEST(KLeavesTest, SlicesHoldingWholeSubtreesKeepTheirLeaves) {
  const MatrixView q4{DType::kQ4_0, 8, 2048};
  EXPECT_EQ(KLeaves(q4, 2048), 4);
  EXPECT_EQ(KLeaves(q4, 5632), 4);  // 1408 values each
  EXPECT_EQ(KLeaves(q4, 512), 2);   // leaves of at least kMinLeafCols
  EXPECT_EQ(KLeaves(q4, 96), 1);
  const MatrixView q4k{DType::kQ4_K, 8, 5632};
  EXPECT_EQ(KLeaves(q4k, 5632), 2);  // 22 blocks of 256: halves of 11
  const MatrixView f32{DType::kF32, 8, 1000};
  EXPECT_EQ(KLeaves(f32, 1000), 2);
  struct Slice {
    int64_t begin, count, leaves;
  };
  for (const Slice& s : std::vector<Slice>{{0, 2048, 4},
                                           {0, 1024, 2},
                                           {1024, 1024, 2},
                                           {1536, 512, 1},
                                           {512, 1024, 1},    // leaves 1-2: not one subtree
                                           {0, 1536, 1},      // three leaves
                                           {256, 512, 1}}) {  // cuts leaves
    MatrixView v = q4;
    v.cols = s.count;
    EXPECT_EQ(SliceKLeaves(v, 2048, s.begin), s.leaves) << s.begin << " +" << s.count;
  }
}

TEST_P(MatMulTest, DoesNotAllocateAfterWarmup) {
  const DType type = GetParam();
  const TestMatrix m(type, 64, 256, 4);
  const std::vector<float> x = RandomVector(4 * 256, 6);
  std::vector<float> y(4 * 64);
  Workspace ws;
  MatMul(m.view, x.data(), 4, y.data(), ws, Pool(2));  // warm-up at the largest n
  const int64_t before = g_allocations.load();
  for (int64_t n : {1, 4, 2}) MatMul(m.view, x.data(), n, y.data(), ws, Pool(2));
  EXPECT_EQ(g_allocations.load(), before);
}

TEST_P(MatMulTest, EmptyInputsWriteNothing) {
  const DType type = GetParam();
  const TestMatrix m(type, 4, 256, 8);
  Workspace ws;
  std::vector<float> y(4, 7.0f);
  MatMul(m.view, nullptr, 0, y.data(), ws, Pool(2));
  MatMul(m.view.RowRange(0, 0), RandomVector(256, 1).data(), 1, y.data(), ws, Pool(2));
  EXPECT_EQ(y, std::vector<float>(4, 7.0f));
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatMulTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                                           DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                                           DType::kMlx2, DType::kMlx3, DType::kMlx4, DType::kMlx5,
                                           DType::kMlx6, DType::kMlx8),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(Traits(info.param).name);
                         });

// The F32 path must stay close to a plain float loop (the llama2.c golden comparisons).
TEST(MatMulF32Test, StaysWithin1e5OfAPlainFloatLoop) {
  const int64_t rows = 64, cols = 4096;
  const TestMatrix m(DType::kF32, rows, cols, 21);
  const std::vector<float> x = RandomVector(cols, 22);
  base::ThreadPool pool(2);
  Workspace ws;
  std::vector<float> y(rows);
  MatMul(m.view, x.data(), 1, y.data(), ws, pool);
  for (int64_t r = 0; r < rows; ++r) {
    double exact = 0.0, mag = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      exact += static_cast<double>(m.floats[static_cast<size_t>(r * cols + c)]) *
               x[static_cast<size_t>(c)];
      mag += std::fabs(static_cast<double>(m.floats[static_cast<size_t>(r * cols + c)]) *
                       x[static_cast<size_t>(c)]);
    }
    EXPECT_NEAR(y[static_cast<size_t>(r)], exact, 1e-5 * mag) << r;
  }
}

// Blocks whose every product is as large as the formats allow, all of one sign: the integer sums
// of the SIMD paths (int16 pair sums on AVX2) must not saturate or wrap.  Q4_0 nibbles 15 (+7) or
// 0 (-8), Q8_0 quants 127 or -128 (a value no quantizer here writes, but a file may hold), against
// activations of magnitude 1 that quantize to +-127.
TEST(MatMulExtremesTest, LargestProductsOfOneSignDoNotOverflow) {
  constexpr int64_t kRows = 8, kCols = 256;
  for (DType type : {DType::kQ4_0, DType::kQ8_0}) {
    const int64_t block_bytes = Traits(type).block_bytes;
    const int64_t row_bytes = kCols / 32 * block_bytes;
    for (int pattern = 0; pattern < 3; ++pattern) {
      // Activation signs: all +, all -, alternating every value.
      std::vector<float> x(kCols);
      for (int64_t c = 0; c < kCols; ++c) {
        x[static_cast<size_t>(c)] = pattern == 0 ? 1.0f : pattern == 1 ? -1.0f : (c % 2 ? -1.0f : 1.0f);
      }
      std::vector<std::byte> bytes(static_cast<size_t>(kRows * row_bytes));
      for (int64_t r = 0; r < kRows; ++r) {
        // Even rows: weights of x's sign (every product positive); odd rows: the opposite sign.
        for (int64_t b = 0; b < kCols / 32; ++b) {
          std::byte* blk = bytes.data() + r * row_bytes + b * block_bytes;
          const uint16_t one = 0x3C00;  // f16 1.0
          std::memcpy(blk, &one, sizeof(one));
          for (int64_t j = 0; j < 32; ++j) {
            const bool positive = (x[static_cast<size_t>(32 * b + j)] > 0) == (r % 2 == 0);
            if (type == DType::kQ8_0) {
              blk[2 + j] = static_cast<std::byte>(positive ? 127 : -128);
            } else {
              // Value j in the low nibble of byte j, value j + 16 in the high nibble.
              const uint8_t nibble = positive ? 15 : 0;
              std::byte& q = blk[2 + j % 16];
              q |= static_cast<std::byte>(j < 16 ? nibble : nibble << 4);
            }
          }
        }
      }
      const MatrixView w{type, kRows, kCols, bytes.data(), row_bytes};
      const Expected want(w, x.data(), 1);
      ForEachSimdTarget([&] {
        SCOPED_TRACE(std::string(Traits(type).name) + " pattern " + std::to_string(pattern));
        base::ThreadPool pool(1);
        Workspace ws;
        std::vector<float> y(kRows, NAN);
        MatMul(w, x.data(), 1, y.data(), ws, pool);
        ExpectNear(want, w, 1, y.data());
      });
    }
  }
}

TEST(DequantizeRowTest, ReturnsTheStoredRow) {
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                     DType::kQ4_K, DType::kQ6_K, DType::kMlx4}) {
    const TestMatrix m(type, 3, 256, 5);
    std::vector<float> expected(256), got(256);
    reference::DequantizeRow(m.view, 2, expected.data());
    DequantizeRow(m.view, 2, got.data());
    EXPECT_EQ(got, expected);
    if (type == DType::kF32) {
      EXPECT_EQ(got, std::vector<float>(m.floats.begin() + 512, m.floats.end()));
    }
  }
}

// Every MLX width with every group size and scale type, against the reference, including row and
// column range views.

class MlxMatMulTest : public ::testing::TestWithParam<MlxCase> {};

TEST_P(MlxMatMulTest, MatchesReferenceAndViews) {
  const MlxCase c = GetParam();
  base::ThreadPool pool(2, /*spin_microseconds=*/0);
  for (int64_t cols : {128, 384, 320}) {
    if (cols % c.group != 0) continue;  // 320: a partial last 128-value chunk (groups 32, 64)
    for (int64_t rows : {1, 5, 13}) {
      const TestMatrix m(c.type, rows, cols, static_cast<uint32_t>(rows * 7 + cols), c.group,
                         c.scale_type);
      for (int64_t n : {1, 3, 17}) {
        const std::vector<float> x = RandomVector(n * cols, static_cast<uint32_t>(n + cols));
        const Expected want(m.view, x.data(), n);
        ForEachSimdTarget([&] {
          Workspace ws;
          std::vector<float> y(static_cast<size_t>(n * rows), NAN);
          MatMul(m.view, x.data(), n, y.data(), ws, pool);
          ExpectNear(want, m.view, n, y.data());
        });
        if (HasFatalFailure()) return;
      }
    }
  }
  const TestMatrix big(c.type, 11, 512, 3, c.group, c.scale_type);
  EXPECT_FALSE(big.view.ColRangeOk(32, 256) && c.group > 32);
  EXPECT_FALSE(big.view.ColRangeOk(0, 16));  // not whole 32-bit words
  ASSERT_TRUE(big.view.ColRangeOk(128, 256));
  const MatrixView view = big.view.RowRange(2, 7).ColRange(128, 256);
  const PackedCopy packed(view);
  std::vector<float> a(256), b(256);
  reference::DequantizeRow(view, 3, a.data());
  reference::DequantizeRow(packed.view, 3, b.data());
  EXPECT_EQ(a, b);
  ForEachSimdTarget([&] {
    for (int64_t n : {1, 3}) {
      const std::vector<float> x = RandomVector(n * 256, 9);
      Workspace ws;
      std::vector<float> y_view(static_cast<size_t>(n * 7)), y_packed(static_cast<size_t>(n * 7));
      MatMul(view, x.data(), n, y_view.data(), ws, pool);
      MatMul(packed.view, x.data(), n, y_packed.data(), ws, pool);
      EXPECT_EQ(y_view, y_packed);
      ExpectMatchesReference(packed.view, x.data(), n, y_view.data());
    }
  });
}

TEST_P(MlxMatMulTest, BatchRowsEqualSingleRowsBitForBit) {
  const MlxCase c = GetParam();
  base::ThreadPool pool(2, /*spin_microseconds=*/0);
  for (int64_t cols : {128, 320, 384, 1408}) {
    if (cols % c.group != 0) continue;
    for (int64_t rows : {3, 13}) {
      const TestMatrix m(c.type, rows, cols, static_cast<uint32_t>(rows * 7 + cols), c.group,
                         c.scale_type);
      for (int64_t n : {2, 5, 9}) {
        const std::vector<float> x = RandomVector(n * cols, static_cast<uint32_t>(n + cols));
        ForEachSimdTarget([&] { ExpectBatchRowsEqualSingleRows(m.view, x.data(), n, pool); });
        if (HasFatalFailure()) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, MlxMatMulTest, ::testing::ValuesIn(AllMlxCases()), MlxCaseName);

}  // namespace
}  // namespace loom::kernels
