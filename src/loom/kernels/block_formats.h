// Scalar helpers for the Q4_0/Q8_0, K-quant and MLX layouts of dtype.h, shared by the reference,
// the quantizers and the SIMD kernels.  Not for use outside the kernels layer.
#pragma once

#include <algorithm>
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

// WeightLayout::kScalePairs (matrix.h) from the file's layout (to_pairs) or back, in place: the
// `blocks` Q4_0 or Q8_0 blocks at p, a pair (2 * QuantBlockBytes bytes) at a time from the first;
// an unpaired last block is left as it is.  A pair holds both f16 scales, then the quants in the
// qact order (Q4_0: the two blocks' 16 nibble bytes; Q8_0: values 0..15 of both blocks, then
// 16..31 of both).
inline void ConvertScalePairs(DType type, bool to_pairs, std::byte* p, int64_t blocks) {
  const int64_t kB = QuantBlockBytes(type);
  struct Move {
    int64_t pair, file, bytes;  // where bytes of the pair and of its two file blocks lie
  };
  const Move moves[] = {{0, 0, 2},        {2, kB, 2},   {4, 2, 16},
                        {20, kB + 2, 16}, {36, 18, 16}, {52, kB + 18, 16}};
  const int count = type == DType::kQ8_0 ? 6 : 4;
  for (int64_t b = 0; b + 1 < blocks; b += 2) {
    std::byte* at = p + b * kB;
    std::byte in[2 * kQ8_0BlockBytes];
    std::memcpy(in, at, static_cast<size_t>(2 * kB));
    for (int i = 0; i < count; ++i) {
      const Move& m = moves[i];
      if (to_pairs) {
        std::memcpy(at + m.pair, in + m.file, static_cast<size_t>(m.bytes));
      } else {
        std::memcpy(at + m.file, in + m.pair, static_cast<size_t>(m.bytes));
      }
    }
  }
}

// Block b of a Q4_0 or Q8_0 row in the file's layout, for b = 0, 1, 2, .. in order: the row's own
// bytes (kFile), or its pair converted back into a buffer of the reader's (kScalePairs).
class FileBlockReader {
 public:
  FileBlockReader(DType type, WeightLayout layout, const std::byte* row, int64_t blocks)
      : type_(type), pairs_(layout == WeightLayout::kScalePairs), row_(row), blocks_(blocks) {}
  const std::byte* Block(int64_t b) {
    const int64_t kB = QuantBlockBytes(type_);
    if (!pairs_) return row_ + b * kB;
    if (b % 2 == 0) {
      const int64_t n = std::min<int64_t>(2, blocks_ - b);
      std::memcpy(pair_, row_ + b * kB, static_cast<size_t>(n * kB));
      ConvertScalePairs(type_, /*to_pairs=*/false, pair_, n);
    }
    return pair_ + b % 2 * kB;
  }

 private:
  DType type_;
  bool pairs_;
  const std::byte* row_;
  int64_t blocks_;
  std::byte pair_[2 * kQ8_0BlockBytes];
};

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
