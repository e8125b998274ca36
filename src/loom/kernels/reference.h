// Scalar reference implementations of every kernel: plain loops written for clarity, the ground
// truth that the SIMD kernels are tested against.  Not used on hot paths.
#pragma once

#include <cstdint>

#include "loom/kernels/attention.h"
#include "loom/kernels/matrix.h"
#include "loom/kernels/ops.h"

namespace loom::kernels::reference {

// Values per block of the 8-bit activation quantization (llama.cpp's Q8_0 scheme).
inline constexpr int64_t kQ8Block = 32;

// Quantizes x(n) (n a multiple of kQ8Block) per 32-value block: d = absmax / 127,
// q = round-to-nearest-even(x / d), stored as q(n) and d(n / 32).  A block of zeros has d = 0.
// The SIMD quantizer produces bit-identical q and d.
void QuantizeActivations(const float* x, int64_t n, int8_t* q, float* d);

// Row `row` of a quantized matrix (Q8_0 / Q4_0) dotted with quantized activations (q, d) from
// QuantizeActivations: sum over blocks of (d_w * d_x) * integer dot of the block.
float DotQuantizedRow(const MatrixView& w, int64_t row, const int8_t* q, const float* d);

// Whether the kernels multiply `type` with 8-bit quantized activations (every non-float type).
bool UsesQuantizedActivations(DType type);

// y(n, w.rows) = x(n, w.cols) . w^T.  Float types multiply in float with one running sum per
// output; quantized types first quantize each row of x with QuantizeActivations.  Q8_0/Q4_0 then
// use DotQuantizedRow; K-quant and MLX rows are dequantized to float and each 32-value block's
// float sum of w * q_x is scaled by its d_x.  Allocates (reference).
void MatMul(const MatrixView& w, const float* x, int64_t n, float* y);

// out(w.cols) = row `row` of w as floats.
void DequantizeRow(const MatrixView& w, int64_t row, float* out);

void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out);
void Rope(float* x, int64_t n_heads, int64_t head_dim, const float* cos_sin, RopeStyle style);
void Softmax(float* x, int64_t n);
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);
void Add(const float* x, int64_t n, float* y);
float Dot(const float* a, const float* b, int64_t n);
void Axpy(float alpha, const float* x, int64_t n, float* y);
void Scale(float alpha, int64_t n, float* x);
void Attend(const float* q, const float* keys, const float* values, int64_t len, int64_t stride,
            int64_t head_dim, float scale, float* scores, float* out);
// Each query as Attend over its rows dequantized to floats (two passes: softmax, then values).
// Allocates (reference).
void AttendMany(const AttendQuery* queries, int64_t n_queries, const KvHeadRows& keys,
                const KvHeadRows& values, int64_t head_dim, float scale);

}  // namespace loom::kernels::reference
