// Scalar dequantization of the K-quant and MLX layouts, written straight from the format
// descriptions in dtype.h: the ground truth for the SIMD kernels and the quantizers.
#include "loom/kernels/block_formats.h"

namespace loom::kernels::internal {
namespace {

void DequantizeQ4K(const std::byte* blk, float* y) {
  const float d = LoadF16(blk);
  const float dmin = LoadF16(blk + 2);
  const std::byte* qs = blk + kQ4KQs;
  for (int c = 0; c < 4; ++c) {  // 64-value chunks: sub-blocks 2c (low nibbles), 2c + 1 (high)
    int sc0, m0, sc1, m1;
    KScaleMin(2 * c, blk + kQ4KScales, &sc0, &m0);
    KScaleMin(2 * c + 1, blk + kQ4KScales, &sc1, &m1);
    for (int l = 0; l < 32; ++l) {
      const int b = static_cast<int>(qs[32 * c + l]);
      y[64 * c + l] = d * static_cast<float>(sc0) * static_cast<float>(b & 0x0F) -
                      dmin * static_cast<float>(m0);
      y[64 * c + 32 + l] =
          d * static_cast<float>(sc1) * static_cast<float>(b >> 4) - dmin * static_cast<float>(m1);
    }
  }
}

void DequantizeQ5K(const std::byte* blk, float* y) {
  const float d = LoadF16(blk);
  const float dmin = LoadF16(blk + 2);
  const std::byte* qh = blk + kQ5KQh;
  const std::byte* qs = blk + kQ5KQs;
  for (int c = 0; c < 4; ++c) {
    int sc0, m0, sc1, m1;
    KScaleMin(2 * c, blk + kQ4KScales, &sc0, &m0);
    KScaleMin(2 * c + 1, blk + kQ4KScales, &sc1, &m1);
    for (int l = 0; l < 32; ++l) {
      const int b = static_cast<int>(qs[32 * c + l]);
      const int h = static_cast<int>(qh[l]);
      const int q0 = (b & 0x0F) | (((h >> (2 * c)) & 1) << 4);
      const int q1 = (b >> 4) | (((h >> (2 * c + 1)) & 1) << 4);
      y[64 * c + l] =
          d * static_cast<float>(sc0) * static_cast<float>(q0) - dmin * static_cast<float>(m0);
      y[64 * c + 32 + l] =
          d * static_cast<float>(sc1) * static_cast<float>(q1) - dmin * static_cast<float>(m1);
    }
  }
}

void DequantizeQ6K(const std::byte* blk, float* y) {
  const float d = LoadF16(blk + kQ6KD);
  for (int n = 0; n < 2; ++n) {  // 128-value halves
    const std::byte* ql = blk + 64 * n;
    const std::byte* qh = blk + kQ6KQh + 32 * n;
    const auto* sc = reinterpret_cast<const int8_t*>(blk + kQ6KScales + 8 * n);
    float* yn = y + 128 * n;
    for (int l = 0; l < 32; ++l) {
      const int lo = static_cast<int>(ql[l]);
      const int hi = static_cast<int>(ql[l + 32]);
      const int h = static_cast<int>(qh[l]);
      const int q[4] = {(lo & 0x0F) | ((h & 3) << 4), (hi & 0x0F) | (((h >> 2) & 3) << 4),
                        (lo >> 4) | (((h >> 4) & 3) << 4), (hi >> 4) | (((h >> 6) & 3) << 4)};
      for (int k = 0; k < 4; ++k) {  // value 32k + l of this half, in 16-value sub-block
        yn[32 * k + l] = d * static_cast<float>(sc[2 * k + l / 16]) * static_cast<float>(q[k] - 32);
      }
    }
  }
}

}  // namespace

void DequantizeKQuantRow(DType type, const std::byte* row, int64_t cols, float* out) {
  const int64_t bytes = Traits(type).block_bytes;
  for (int64_t b = 0; b < cols / kQK; ++b) {
    const std::byte* blk = row + b * bytes;
    float* y = out + b * kQK;
    if (type == DType::kQ4_K) {
      DequantizeQ4K(blk, y);
    } else if (type == DType::kQ5_K) {
      DequantizeQ5K(blk, y);
    } else {
      DequantizeQ6K(blk, y);
    }
  }
}

void DequantizeMlxRow(const MatrixView& w, int64_t row, float* out) {
  const int bits = MlxBitsOf(w.type);
  const std::byte* p = w.data + row * w.row_stride;
  const std::byte* s = w.scales + row * w.scale_row_stride;
  const std::byte* b = w.biases + row * w.scale_row_stride;
  const int64_t scale_bytes = Traits(w.scale_type).block_bytes;
  for (int64_t g = 0; g < w.cols / w.group_size; ++g) {
    const float scale = LoadScalar(w.scale_type, s + g * scale_bytes);
    const float bias = LoadScalar(w.scale_type, b + g * scale_bytes);
    for (int64_t i = g * w.group_size; i < (g + 1) * w.group_size; ++i) {
      out[i] = scale * static_cast<float>(MlxUnpack(p, bits, i)) + bias;
    }
  }
}

}  // namespace loom::kernels::internal
