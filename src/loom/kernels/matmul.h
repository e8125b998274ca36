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
void MatMul(const MatrixView& w, const float* x, int64_t n, float* y, Workspace& ws,
            base::ThreadPool& pool);

// Several products sharing one input x (q/k/v, gate/up) in one parallel pass: ys[i](n, ws[i].rows)
// = x(n, cols) . ws[i]^T.  All matrices must have the same cols and type.
void MatMulMulti(std::span<const MatrixView> w, const float* x, int64_t n,
                 std::span<float* const> y, Workspace& ws, base::ThreadPool& pool);

// out(cols) = row `row` of w converted to float (embedding lookup).
void DequantizeRow(const MatrixView& w, int64_t row, float* out);

}  // namespace loom::kernels
