// Quantizers for the K-quant and MLX layouts (dtype.h).  Honest and simple rather than
// llama.cpp's error-minimizing searches: per sub-block minimum/maximum, sub-block scales quantized
// against one super-block scale, values rounded to the nearest level of the stored (rounded)
// scales.  Non-finite inputs never reach a float-to-int conversion.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "loom/base/half.h"
#include "loom/kernels/block_formats.h"
#include "loom/kernels/quantize.h"

namespace loom::kernels {
namespace {

void StoreU16(uint16_t v, std::byte* p) { std::memcpy(p, &v, sizeof(v)); }

// Nearest integer to v, clamped to [lo, hi]; NaN becomes lo.
int RoundClamp(float v, int lo, int hi) {
  if (!(v == v)) return lo;
  return static_cast<int>(
      std::nearbyint(std::clamp(v, static_cast<float>(lo), static_cast<float>(hi))));
}

// Q4_K (kMax 15) and Q5_K (kMax 31): quants q(256) in [0, kMax], the 12 scale bytes and d, dmin.
template <int kMax>
void QuantizeQ45K(const float* x, uint8_t* q, std::byte* scale_bytes, float* d_out,
                  float* dmin_out) {
  float scale[8], minv[8];  // value = scale * q - minv per 32-value sub-block (minv >= 0)
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    float lo = 0.0f, hi = 0.0f;  // the range always includes 0: mins are stored as offsets >= 0
    for (int i = 0; i < 32; ++i) {
      const float v = x[32 * j + i];
      if (std::isfinite(v)) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    }
    minv[j] = -lo;
    scale[j] = (hi - lo) / kMax;
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, minv[j]);
  }
  const float d = base::F16ToF32(base::F32ToF16(max_scale / 63.0f));
  const float dmin = base::F16ToF32(base::F32ToF16(max_min / 63.0f));
  int sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    // Round the scale up so that the sub-block's range still fits in kMax levels.
    sc[j] = d > 0.0f ? RoundClamp(std::ceil(scale[j] / d), 0, 63) : 0;
    m[j] = dmin > 0.0f ? RoundClamp(minv[j] / dmin, 0, 63) : 0;
  }
  for (int j = 0; j < 4; ++j) {
    scale_bytes[j] = static_cast<std::byte>(sc[j] | ((sc[j + 4] >> 4) << 6));
    scale_bytes[j + 4] = static_cast<std::byte>(m[j] | ((m[j + 4] >> 4) << 6));
    scale_bytes[j + 8] = static_cast<std::byte>((sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4));
  }
  for (int j = 0; j < 8; ++j) {
    const float step = d * static_cast<float>(sc[j]);
    const float offset = dmin * static_cast<float>(m[j]);
    const float inv = step > 0.0f ? 1.0f / step : 0.0f;
    for (int i = 0; i < 32; ++i) {
      q[32 * j + i] = static_cast<uint8_t>(RoundClamp((x[32 * j + i] + offset) * inv, 0, kMax));
    }
  }
  *d_out = d;
  *dmin_out = dmin;
}

void QuantizeBlockQ4K(const float* x, std::byte* out) {
  uint8_t q[256];
  float d, dmin;
  QuantizeQ45K<15>(x, q, out + internal::kQ4KScales, &d, &dmin);
  StoreU16(base::F32ToF16(d), out);
  StoreU16(base::F32ToF16(dmin), out + 2);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      out[internal::kQ4KQs + 32 * c + l] =
          static_cast<std::byte>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
    }
  }
}

void QuantizeBlockQ5K(const float* x, std::byte* out) {
  uint8_t q[256];
  float d, dmin;
  QuantizeQ45K<31>(x, q, out + internal::kQ4KScales, &d, &dmin);
  StoreU16(base::F32ToF16(d), out);
  StoreU16(base::F32ToF16(dmin), out + 2);
  std::memset(out + internal::kQ5KQh, 0, 32);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int q0 = q[64 * c + l];
      const int q1 = q[64 * c + 32 + l];
      out[internal::kQ5KQs + 32 * c + l] = static_cast<std::byte>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      out[internal::kQ5KQh + l] |=
          static_cast<std::byte>(((q0 >> 4) << (2 * c)) | ((q1 >> 4) << (2 * c + 1)));
    }
  }
}

void QuantizeBlockQ6K(const float* x, std::byte* out) {
  // Per 16-value sub-block, the value of largest magnitude maps to -32 (as Q4_0 does with -8).
  float scale[16];
  float max_abs_scale = 0.0f;
  for (int k = 0; k < 16; ++k) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 16; ++i) {
      const float v = x[16 * k + i];
      if (std::isfinite(v) && std::fabs(v) > amax) {
        amax = std::fabs(v);
        max = v;
      }
    }
    scale[k] = max / -32.0f;
    max_abs_scale = std::max(max_abs_scale, std::fabs(scale[k]));
  }
  const float d = base::F16ToF32(base::F32ToF16(max_abs_scale / 127.0f));
  StoreU16(base::F32ToF16(d), out + internal::kQ6KD);
  uint8_t q[256];
  for (int k = 0; k < 16; ++k) {
    const int sc = d > 0.0f ? RoundClamp(scale[k] / d, -127, 127) : 0;
    out[internal::kQ6KScales + k] = static_cast<std::byte>(static_cast<int8_t>(sc));
    const float step = d * static_cast<float>(sc);
    const float inv = step != 0.0f ? 1.0f / step : 0.0f;
    for (int i = 0; i < 16; ++i) {
      q[16 * k + i] = static_cast<uint8_t>(RoundClamp(x[16 * k + i] * inv, -32, 31) + 32);
    }
  }
  for (int n = 0; n < 2; ++n) {
    const uint8_t* qn = q + 128 * n;
    for (int l = 0; l < 32; ++l) {
      out[64 * n + l] = static_cast<std::byte>((qn[l] & 0x0F) | ((qn[l + 64] & 0x0F) << 4));
      out[64 * n + l + 32] =
          static_cast<std::byte>((qn[l + 32] & 0x0F) | ((qn[l + 96] & 0x0F) << 4));
      out[internal::kQ6KQh + 32 * n + l] =
          static_cast<std::byte>((qn[l] >> 4) | ((qn[l + 32] >> 4) << 2) |
                                 ((qn[l + 64] >> 4) << 4) | ((qn[l + 96] >> 4) << 6));
    }
  }
}

void StoreScalar(DType type, float v, std::byte* p) {
  switch (type) {
    case DType::kF16:
      StoreU16(base::F32ToF16(v), p);
      return;
    case DType::kBF16:
      StoreU16(base::F32ToBf16(v), p);
      return;
    default:
      std::memcpy(p, &v, sizeof(v));
      return;
  }
}

}  // namespace

void internal::QuantizeKQuantRow(DType type, const float* x, int64_t n, std::byte* out) {
  const int64_t bytes = Traits(type).block_bytes;
  for (int64_t b = 0; b < n / kQK; ++b) {
    if (type == DType::kQ4_K) {
      QuantizeBlockQ4K(x + b * kQK, out + b * bytes);
    } else if (type == DType::kQ5_K) {
      QuantizeBlockQ5K(x + b * kQK, out + b * bytes);
    } else {
      QuantizeBlockQ6K(x + b * kQK, out + b * bytes);
    }
  }
}

void QuantizeMlxRow(DType type, int64_t group_size, DType scale_type, const float* x, int64_t n,
                    std::byte* packed, std::byte* scales, std::byte* biases) {
  const int bits = MlxBitsOf(type);
  const int levels = (1 << bits) - 1;
  const int64_t scale_bytes = Traits(scale_type).block_bytes;
  std::memset(packed, 0, static_cast<size_t>(n * bits / 8));
  for (int64_t g = 0; g < n / group_size; ++g) {
    const float* w = x + g * group_size;
    float lo = 0.0f, hi = 0.0f;
    bool any = false;
    for (int64_t i = 0; i < group_size; ++i) {
      if (!std::isfinite(w[i])) continue;
      lo = any ? std::min(lo, w[i]) : w[i];
      hi = any ? std::max(hi, w[i]) : w[i];
      any = true;
    }
    StoreScalar(scale_type, (hi - lo) / static_cast<float>(levels), scales + g * scale_bytes);
    StoreScalar(scale_type, lo, biases + g * scale_bytes);
    const float s = internal::LoadScalar(scale_type, scales + g * scale_bytes);
    const float b = internal::LoadScalar(scale_type, biases + g * scale_bytes);
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    for (int64_t i = 0; i < group_size; ++i) {
      const uint32_t q = static_cast<uint32_t>(RoundClamp((w[i] - b) * inv, 0, levels));
      const int64_t bit = (g * group_size + i) * bits;
      const int shift = static_cast<int>(bit % 8);
      packed[bit / 8] |= static_cast<std::byte>((q << shift) & 0xFFu);
      if (shift + bits > 8) packed[bit / 8 + 1] |= static_cast<std::byte>(q >> (8 - shift));
    }
  }
}

}  // namespace loom::kernels
