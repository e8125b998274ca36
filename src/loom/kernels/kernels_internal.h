// Internal interfaces between matmul.cc and the per-type SIMD translation units.  Not for use
// outside the kernels layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "loom/kernels/matrix.h"

// Function attribute that enables the 512-bit VNNI instructions (vpdpbusd) inside the AVX3_DL
// code paths; Highway 1.0.3's AVX3_DL target string lacks avx512vnni although its CPU check
// requires it.  It repeats the target's own features because clang replaces (GCC extends) the
// features of the enclosing Highway target pragma.  Only expanded inside HWY_TARGET == AVX3_DL.
#if defined(__x86_64__) || defined(__i386__)
#define LOOM_KERNELS_VNNI_ATTR __attribute__((target(HWY_TARGET_STR ",avx512vnni")))
#else
#define LOOM_KERNELS_VNNI_ATTR
#endif

namespace loom::kernels::internal {

// Quantized activations ("qact"), the 8-bit form of one row of x that the Q8_0/Q4_0 kernels read.
// Values are quantized in 32-value blocks exactly as reference::QuantizeActivations does, and laid
// out in groups of 4 blocks (128 values) matching the Q4_0 nibble order, 256 bytes per group:
//   [0, 64)    int8 "lo": block s of the group at bytes 16s..16s+15 holds its values 0..15
//   [64, 128)  int8 "hi": block s at 64+16s..64+16s+15 holds its values 16..31
//   [128, 192) int32[16]: lane l holds -corr_mult * (sum of the 32 values of block l / 4).  The
//              VNNI kernels multiply unsigned weights (Q4_0: q + 8; Q8_0: q ^ 0x80 = q + 128) with
//              these signed values, starting each lane's sum from this correction; the 4 lanes of
//              a block together remove the offset, so corr_mult = offset / 4 (Q4_0 2, Q8_0 32)
//   [192, 256) float[16]: lane l holds the scale d of block l / 4
// (lane l = 4s + r of the kernels' vectors is block s, weight row r).  A row has ceil(cols / 128)
// groups; the missing blocks of a last partial group are zero.
inline constexpr int64_t kQActGroupValues = 128;
inline constexpr int64_t kQActGroupBytes = 256;
inline constexpr int64_t kQActLo = 0;
inline constexpr int64_t kQActHi = 64;
inline constexpr int64_t kQActCorr = 128;
inline constexpr int64_t kQActScale = 192;

inline int64_t QActRowBytes(int64_t cols) {
  return (cols + kQActGroupValues - 1) / kQActGroupValues * kQActGroupBytes;
}

// out(n, QActRowBytes(cols)) = quantized rows of x(n, cols); cols a multiple of 32; out 64-byte
// aligned.
void QuantizeActivationRows(const float* x, int64_t n, int64_t cols, int32_t corr_mult,
                            std::byte* out);

// Activations of the K-quant and MLX kernels ("kact"), one row of x per KActRowBytes(cols):
//   [0, KActQBytes)           int8 q(cols), from reference::QuantizeActivations (32-value blocks)
//   then float d(cols / 32)   the blocks' scales
//   then float hs(cols / 16)  hs[h] = d[h / 2] * (sum of the 16 q of half-block h), for the
//                             weights' per-half offsets (Q4_K/Q5_K mins, Q6_K's -32, MLX biases)
//   then, from KActTileOffset(cols), the same values again as the register-tiled AVX3_DL kernels
//   read them (matmul_kquant_tile-inl.h): ceil(cols / 128) groups of 4 blocks, kKTileGroupBytes
//   each, laid out like the qact groups above with lane l = 4s + r standing for block s:
//     [0, 64)     int8 "lo": block s of the group at bytes 16s..16s+15 holds its values 0..15
//     [64, 128)   int8 "hi": block s at 64+16s..64+16s+15 holds its values 16..31
//     [128, 192)  float[16]: lane l holds d of block l / 4
//     [192, 256)  float[16]: lane l holds hs[2b] + hs[2b + 1] of block b = l / 4 (for mins, biases)
//     [256, 320)  int32[16]: lane l holds -8 * (sum of values 0..15 of block l / 4): 4 lanes
//                 together remove Q6_K's offset of 32 from the 16 values' integer dot product
//     [320, 384)  int32[16]: the same for values 16..31
//   The missing blocks of a last partial group are zero.
inline constexpr int64_t kKTileGroupValues = 128;
inline constexpr int64_t kKTileGroupBytes = 384;
inline constexpr int64_t kKTileLo = 0;
inline constexpr int64_t kKTileHi = 64;
inline constexpr int64_t kKTileScale = 128;
inline constexpr int64_t kKTileSum = 192;
inline constexpr int64_t kKTileCorrLo = 256;
inline constexpr int64_t kKTileCorrHi = 320;
inline int64_t KActQBytes(int64_t cols) { return (cols + 63) / 64 * 64; }
inline int64_t KActTileOffset(int64_t cols) {
  return KActQBytes(cols) + (cols / 32 * 4 + cols / 16 * 4 + 63) / 64 * 64;
}
inline int64_t KActRowBytes(int64_t cols) {
  return KActTileOffset(cols) +
         (cols + kKTileGroupValues - 1) / kKTileGroupValues * kKTileGroupBytes;
}

// out(n, KActRowBytes(cols)) = the kact rows of x(n, cols); cols a multiple of 32; out 64-byte
// aligned.  The scalar version writes the same bytes (a reference for tests).
void QuantizeKActRows(const float* x, int64_t n, int64_t cols, std::byte* out);
void QuantizeKActRowsScalar(const float* x, int64_t n, int64_t cols, std::byte* out);

// y(n, y_stride)[:, row_begin:row_end] = x . w[row_begin:row_end]^T for one weight type.
// Float types take x(n, w.cols) as float; quantized types take qact rows (n, QActRowBytes(cols)).
void MatMulRowsF32(const MatrixView& w, int64_t row_begin, int64_t row_end, const float* x,
                   int64_t n, float* y, int64_t y_stride);
void MatMulRowsF16(const MatrixView& w, int64_t row_begin, int64_t row_end, const float* x,
                   int64_t n, float* y, int64_t y_stride);
void MatMulRowsBF16(const MatrixView& w, int64_t row_begin, int64_t row_end, const float* x,
                    int64_t n, float* y, int64_t y_stride);
void MatMulRowsQ8_0(const MatrixView& w, int64_t row_begin, int64_t row_end, const std::byte* xq,
                    int64_t n, float* y, int64_t y_stride);
void MatMulRowsQ4_0(const MatrixView& w, int64_t row_begin, int64_t row_end, const std::byte* xq,
                    int64_t n, float* y, int64_t y_stride);

// K-quant and MLX products; xa is kact rows (n, KActRowBytes(w.cols)).
void MatMulRowsQ4_K(const MatrixView& w, int64_t row_begin, int64_t row_end, const std::byte* xa,
                    int64_t n, float* y, int64_t y_stride);
void MatMulRowsQ5_K(const MatrixView& w, int64_t row_begin, int64_t row_end, const std::byte* xa,
                    int64_t n, float* y, int64_t y_stride);
void MatMulRowsQ6_K(const MatrixView& w, int64_t row_begin, int64_t row_end, const std::byte* xa,
                    int64_t n, float* y, int64_t y_stride);
void MatMulRowsMlx(const MatrixView& w, int64_t row_begin, int64_t row_end, const std::byte* xa,
                   int64_t n, float* y, int64_t y_stride);

// Decode (one activation row) of a product split into `leaves` column leaves (MatrixView::k_leaves,
// each of whole blocks and groups): parts[l][r] for r in [row_begin, row_end) = row r's columns
// [l * width, (l + 1) * width), width = w.cols / leaves, times the activation row (qact or kact,
// of width values) at act + l * act_stride: the same bits as the products of the leaves' ColRange
// views, with each quad of rows read once, its leaves in turn.  False (nothing done) where the
// type or SIMD target has no such path: the caller then runs the leaves' views.
bool MatVecLeavesQ8_0(const MatrixView& w, int64_t leaves, int64_t row_begin, int64_t row_end,
                      const std::byte* act, int64_t act_stride, float* const* parts);
bool MatVecLeavesQ4_0(const MatrixView& w, int64_t leaves, int64_t row_begin, int64_t row_end,
                      const std::byte* act, int64_t act_stride, float* const* parts);
bool MatVecLeavesQ4_K(const MatrixView& w, int64_t leaves, int64_t row_begin, int64_t row_end,
                      const std::byte* act, int64_t act_stride, float* const* parts);
bool MatVecLeavesQ5_K(const MatrixView& w, int64_t leaves, int64_t row_begin, int64_t row_end,
                      const std::byte* act, int64_t act_stride, float* const* parts);
bool MatVecLeavesQ6_K(const MatrixView& w, int64_t leaves, int64_t row_begin, int64_t row_end,
                      const std::byte* act, int64_t act_stride, float* const* parts);
bool MatVecLeavesMlx(const MatrixView& w, int64_t leaves, int64_t row_begin, int64_t row_end,
                     const std::byte* act, int64_t act_stride, float* const* parts);

}  // namespace loom::kernels::internal
