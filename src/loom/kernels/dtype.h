// Element and block types of weight matrices.  A quantized type stores `block_elems` consecutive
// values of a row in `block_bytes` bytes; rows are whole blocks.
#pragma once

#include <cstdint>
#include <string_view>

#include "loom/base/status.h"

namespace loom::kernels {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,  // blocks of 32: f16 scale d, 32 x int8 q; value = d * q
  kQ4_0,  // blocks of 32: f16 scale d, 16 bytes of nibbles; value = d * (nibble - 8);
          // element j < 16 is the low nibble of byte j, element j + 16 its high nibble
  // GGUF K-quants: super-blocks of 256 values (ggml block_q4_K / block_q5_K / block_q6_K).
  kQ4_K,  // 144 bytes: f16 d, f16 dmin, scales[12] (8 x 6-bit scale + 6-bit min), qs[128];
          // value = d * sc_j * q - dmin * m_j in 32-value sub-block j; byte l of 32-byte chunk c
          // holds value 64c + l in its low nibble and 64c + 32 + l in its high nibble
  kQ5_K,  // 176 bytes: as kQ4_K plus qh[32] before qs: bit 2c (2c + 1) of qh[l] is the fifth
          // bit of value 64c + l (64c + 32 + l)
  kQ6_K,  // 210 bytes: ql[128], qh[64], int8 scales[16], f16 d; value = d * sc_k * (q - 32) in
          // 16-value sub-block k, q = 4 bits of ql | 2 bits of qh << 4
  // MLX affine quantization: `bits` per value packed LSB-first into little-endian uint32 words
  // along the row (3/5/6-bit values straddle words); value = scale * q + bias per group of the
  // view's group_size values, scales and biases in separate arrays (MatrixView::scales).  The
  // traits count 32-value "blocks" of bits * 4 bytes (whole words) so that RowBytes works.
  kMlx2,
  kMlx3,
  kMlx4,
  kMlx5,
  kMlx6,
  kMlx8,
};

struct DTypeTraits {
  std::string_view name;  // "f32", "q4_0", ...
  int64_t block_elems;    // values per block (1 for plain floats)
  int64_t block_bytes;    // bytes per block
};

const DTypeTraits& Traits(DType type);

// Whether `type` is an MLX affine type (data + per-group scales and biases), and its bits per
// value (0 for other types).
bool IsMlx(DType type);
int MlxBitsOf(DType type);

// Bytes of a row of `cols` values; an error when `cols` is not a whole number of blocks.
StatusOr<int64_t> RowBytes(DType type, int64_t cols);

}  // namespace loom::kernels
