// Matrix products of activations with weight matrices, the bulk of inference time.
//
// Every weight type has a Highway SIMD kernel (dynamic dispatch: the best target for this CPU is
// chosen once) and a scalar reference in reference.h that tests compare against.  Quantized weights
// are used block by block in place; no dequantized copy of a matrix is ever made.  For quantized
// types the activations are first quantized to 8 bits per row (as llama.cpp does with Q8_0), so
// integer dot products can be used; the reference does the same, so both agree to float rounding.
#pragma once

#include <cstdint>
#include <span>

#include "loom/base/aligned_buffer.h"
#include "loom/base/thread_pool.h"
#include "loom/kernels/matrix.h"

namespace loom::kernels {

// Scratch memory for MatMul (quantized activations).  It grows on first use to the largest size
// seen and is then reused: after a warm-up call with the largest (n, cols), MatMul does not
// allocate.
class Workspace {
 public:
  // Grows to at least `bytes`; contents are not preserved.
  std::byte* Get(int64_t bytes);

 private:
  base::AlignedBuffer<std::byte> buffer_;
};

// y(n, w.rows) = x(n, w.cols) . w^T, rows of w split over the pool's threads.
// x and y are dense row-major float arrays.  Requires w.cols to be a whole number of blocks.
// With w.k_leaves = L > 1 each row's sum is taken over L equal column slices, each by the kernel
// as a product of its own, and the L results are added with SumTree (ops.h).
void MatMul(const MatrixView& w, const float* x, int64_t n, float* y, Workspace& ws,
            base::ThreadPool& pool);

// Several products sharing one input x (q/k/v, gate/up) in one parallel pass: ys[i](n, ws[i].rows)
// = x(n, cols) . ws[i]^T.  All matrices must have the same cols, type and k_leaves.
void MatMulMulti(std::span<const MatrixView> w, const float* x, int64_t n,
                 std::span<float* const> y, Workspace& ws, base::ThreadPool& pool);

// Products whose inputs are row ranges of one x, in one parallel pass (the experts of a mixture:
// each runs on its own tokens): ys[i](n[i], w[i].rows) = x[x_row[i], x_row[i] + n[i]) . w[i]^T
// for x(m, cols).  The activations of x are prepared once; threads split the rows of all products
// together, each row weighted by its product's n[i] (plus what reading the row costs), on the
// kernels' 4-row tiles.  Products with n[i] == 0 are skipped (w[i] and ys[i] are not touched).
// Each result is bit for bit the separate MatMul's.  Matrices of different types, cols or with
// k_leaves > 1 are run one MatMul each.
void MatMulGrouped(std::span<const MatrixView> w, const float* x, int64_t m,
                   std::span<const int64_t> x_row, std::span<const int64_t> n,
                   std::span<float* const> y, Workspace& ws, base::ThreadPool& pool);

// Row-split products (tensor parallelism cuts their input features: attention output, feed-forward
// down) use a canonical reduction so that their results do not depend on how they are split: the
// whole matrix's `full_cols` are KLeaves(...) equal leaves added in SumTree's order.  A rank that
// holds columns [begin, begin + count) made of a whole subtree of leaves sums those leaves the same
// way (SliceKLeaves), and the ranks' partial sums added in SumTree's order over the ranks give one
// process's result bit for bit.  Leaves are whole blocks (MLX: groups) of at least kMinLeafCols
// values; L is the largest power of two up to kMaxKLeaves that allows that (1: no split).  So
// 1, 2 and 4 tensor-parallel ranks agree exactly wherever L = 4 (every layer of a 1.1B Llama).
// Measured on the 1.1B Q4_0 model: L = 4 costs no measurable generation speed; L = 8 (leaves of
// 256 and 704 values) cost 10-20%: each leaf is a kernel call with its own final reduction.
inline constexpr int64_t kMaxKLeaves = 4;
inline constexpr int64_t kMinLeafCols = 256;
int64_t KLeaves(const MatrixView& w, int64_t full_cols);
// The k_leaves of a slice [begin, begin + w.cols) of a matrix with full_cols columns: the number of
// leaves it holds when they form a whole subtree, else 1 (the slice's sum is then not canonical).
int64_t SliceKLeaves(const MatrixView& w, int64_t full_cols, int64_t begin);

// The layout (matrix.h) this CPU's kernels read a matrix of `type` with `cols` columns fastest in,
// where the kernels run AVX2 (or AVX-512 without VNNI): kPairedNibbles for Q4_K and Q5_K, whose
// decode then takes one shift per 64 values instead of two variable shifts (docs/benchmarks.md,
// "Q4_K's nibbles re-paired"); kScalePairs for Q4_0 and Q8_0 when cols is a multiple of 256 (every
// leaf split then begins on a pair), which reads a pair's scales in one word and its quants in
// whole 32-byte loads ("Q4_0 and Q8_0 scales in pairs").  kFile otherwise.  Asked when weights are
// copied into memory (model::PackMatrix).
WeightLayout PreferredLayout(DType type, int64_t cols);
// Rows of `cols` values of `type` at src (layout `from`) written to dst (layout `to`), `rows` rows
// each `src_stride` / `dst_stride` bytes apart (dst may be src, with equal strides).  Layouts other
// than kFile exist only for the types PreferredLayout gives them to; any other conversion is a
// plain copy only when from == to. Returns false (nothing written) for a conversion that does not
// exist.
bool CopyRowsToLayout(DType type, int64_t cols, int64_t rows, WeightLayout from,
                      const std::byte* src, int64_t src_stride, WeightLayout to, std::byte* dst,
                      int64_t dst_stride);

// out(cols) = row `row` of w converted to float (embedding lookup).
void DequantizeRow(const MatrixView& w, int64_t row, float* out);

}  // namespace loom::kernels
