// Scalar helpers for the Q4_0/Q8_0, K-quant and MLX layouts of dtype.h, shared by the reference,
// the quantizers and the SIMD kernels.  Not for use outside the kernels layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "loom/base/half.h"
#include "loom/kernels/matrix.h"

namespace loom::kernels::internal {

inline uint16_t LoadU16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline float LoadF16(const std::byte* p) { return base::F16ToF32(LoadU16(p)); }

// Bytes of a Q8_0 block (f16 d, 32 int8) and of a Q4_0 block (f16 d, 16 bytes of nibbles).
inline constexpr int64_t kQ8_0BlockBytes = 34;
inline constexpr int64_t kQ4_0BlockBytes = 18;
constexpr int64_t QuantBlockBytes(DType type) {
  return type == DType::kQ8_0 ? kQ8_0BlockBytes : kQ4_0BlockBytes;
}

// Byte offsets inside the K-quant super-blocks (dtype.h).
inline constexpr int64_t kQK = 256;         // values per super-block
inline constexpr int64_t kQ4KBlockBytes = 144;  // bytes per super-block (= Traits().block_bytes)
inline constexpr int64_t kQ5KBlockBytes = 176;
inline constexpr int64_t kQ6KBlockBytes = 210;
inline constexpr int64_t kQ4KScales = 4;    // after f16 d, f16 dmin
inline constexpr int64_t kQ4KQs = 16;       // Q4_K quants
inline constexpr int64_t kQ5KQh = 16;       // Q5_K high bits
inline constexpr int64_t kQ5KQs = 48;       // Q5_K low nibbles
inline constexpr int64_t kQ6KQh = 128;      // Q6_K high 2 bits (ql at 0)
inline constexpr int64_t kQ6KScales = 192;  // int8[16]
inline constexpr int64_t kQ6KD = 208;       // f16 d

// Q4_K/Q5_K: the 6-bit scale and min of 32-value sub-block j (0..7) from the 12 packed bytes
// (j < 4: low 6 bits of bytes j and j + 4; j >= 4: nibbles of byte j + 4, the top 2 bits from
// bytes j - 4 and j).
inline void KScaleMin(int j, const std::byte* s, int* sc, int* m) {
  const auto b = [s](int i) { return static_cast<int>(s[i]); };
  if (j < 4) {
    *sc = b(j) & 63;
    *m = b(j + 4) & 63;
  } else {
    *sc = (b(j + 4) & 0x0F) | ((b(j - 4) >> 6) << 4);
    *m = (b(j + 4) >> 4) | ((b(j) >> 6) << 4);
  }
}

// WeightLayout::kPairedNibbles (matrix.h) from kFile, or back (the same exchange): the 32-byte
// Q4_K/Q5_K qs chunk at src to dst (may be src).  Byte l < 16 and byte 16 + l exchange nibbles:
// (a, b) -> (a's low | b's low << 4, a's high | b's high << 4).
inline void SwapNibblePairs(const std::byte* src, std::byte* dst) {
  uint8_t in[32], out[32];
  std::memcpy(in, src, sizeof(in));
  for (int l = 0; l < 16; ++l) {
    out[l] = static_cast<uint8_t>((in[l] & 0x0F) | (in[16 + l] << 4));
    out[16 + l] = static_cast<uint8_t>((in[l] >> 4) | (in[16 + l] & 0xF0));
  }
  std::memcpy(dst, out, sizeof(out));
}

// SwapNibblePairs over the four qs chunks of the Q4_K or Q5_K super-block at blk, in place.
inline void SwapSuperBlockNibblePairs(DType type, std::byte* blk) {
  std::byte* qs = blk + (type == DType::kQ4_K ? kQ4KQs : kQ5KQs);
  for (int c = 0; c < 4; ++c) SwapNibblePairs(qs + 32 * c, qs + 32 * c);
}

// WeightLayout::kScalePairs (matrix.h): the two Q4_0 or Q8_0 blocks at src (file layout, 2 *
// QuantBlockBytes bytes) as one pair at dst: both f16 scales, then the quants in the qact order
// (Q4_0: the two blocks' 16 nibble bytes; Q8_0: values 0..15 of both blocks, then 16..31 of both).
// ScalePairToFile is its inverse.  src and dst must not overlap.
inline void FileToScalePair(DType type, const std::byte* src, std::byte* dst) {
  const int64_t kB = QuantBlockBytes(type);
  std::memcpy(dst, src, 2);
  std::memcpy(dst + 2, src + kB, 2);
  std::memcpy(dst + 4, src + 2, 16);
  std::memcpy(dst + 20, src + kB + 2, 16);
  if (type == DType::kQ8_0) {
    std::memcpy(dst + 36, src + 18, 16);
    std::memcpy(dst + 52, src + kB + 18, 16);
  }
}
inline void ScalePairToFile(DType type, const std::byte* src, std::byte* dst) {
  const int64_t kB = QuantBlockBytes(type);
  std::memcpy(dst, src, 2);
  std::memcpy(dst + kB, src + 2, 2);
  std::memcpy(dst + 2, src + 4, 16);
  std::memcpy(dst + kB + 2, src + 20, 16);
  if (type == DType::kQ8_0) {
    std::memcpy(dst + 18, src + 36, 16);
    std::memcpy(dst + kB + 18, src + 52, 16);
  }
}

// `blocks` Q4_0 or Q8_0 blocks of a row from src to dst (not overlapping), pair by pair from the
// first, into WeightLayout::kScalePairs or back to the file's layout; an unpaired last block is
// copied as it is.
inline void FileToScalePairs(DType type, const std::byte* src, int64_t blocks, std::byte* dst) {
  const int64_t kB = QuantBlockBytes(type);
  for (int64_t b = 0; b + 1 < blocks; b += 2) FileToScalePair(type, src + b * kB, dst + b * kB);
  if (blocks % 2 != 0) {
    std::memcpy(dst + (blocks - 1) * kB, src + (blocks - 1) * kB, static_cast<size_t>(kB));
  }
}
inline void ScalePairsToFile(DType type, const std::byte* src, int64_t blocks, std::byte* dst) {
  const int64_t kB = QuantBlockBytes(type);
  for (int64_t b = 0; b + 1 < blocks; b += 2) ScalePairToFile(type, src + b * kB, dst + b * kB);
  if (blocks % 2 != 0) {
    std::memcpy(dst + (blocks - 1) * kB, src + (blocks - 1) * kB, static_cast<size_t>(kB));
  }
}

// Blocks b and b + 1 (b even; b alone when it is the row's last of `blocks`) of a Q4_0 or Q8_0 row
// in the file's layout: the row's own bytes for kFile, else converted into buf (2 *
// QuantBlockBytes bytes).
inline const std::byte* FileBlocks(DType type, WeightLayout layout, const std::byte* row,
                                   int64_t blocks, int64_t b, std::byte* buf) {
  const std::byte* at = row + b * QuantBlockBytes(type);
  if (layout != WeightLayout::kScalePairs) return at;
  ScalePairsToFile(type, at, b + 1 < blocks ? 2 : 1, buf);
  return buf;
}

// A float stored as kF32, kF16 or kBF16 (MLX scales and biases).
inline float LoadScalar(DType type, const std::byte* p) {
  switch (type) {
    case DType::kF16:
      return base::F16ToF32(LoadU16(p));
    case DType::kBF16:
      return base::Bf16ToF32(LoadU16(p));
    default: {
      float f;
      std::memcpy(&f, p, sizeof(f));
      return f;
    }
  }
}

// Value k of an MLX row packed at `bits` bits per value, LSB first (bits <= 8).  Reads only the
// bytes that hold the value.
inline uint32_t MlxUnpack(const std::byte* row, int bits, int64_t k) {
  const int64_t bit = k * bits;
  const int64_t byte = bit / 8;
  const int shift = static_cast<int>(bit % 8);
  uint32_t v = static_cast<uint32_t>(row[byte]) >> shift;
  if (shift + bits > 8) v |= static_cast<uint32_t>(row[byte + 1]) << (8 - shift);
  return v & ((1u << bits) - 1u);
}

// reference: row `row` of a K-quant or MLX matrix as floats (kquant_reference.cc).
void DequantizeKQuantRow(DType type, const std::byte* row, int64_t cols, float* out);
void DequantizeMlxRow(const MatrixView& w, int64_t row, float* out);

// QuantizeRow for the K-quants (quantize_k.cc).
void QuantizeKQuantRow(DType type, const float* x, int64_t n, std::byte* out);

}  // namespace loom::kernels::internal
