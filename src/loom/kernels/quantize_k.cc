// Quantizers for the K-quant and MLX layouts (dtype.h).
//
// K-quants search each sub-block's scale (and, for Q4_K/Q5_K, minimum) for the lowest weighted
// squared error: for a sweep of candidate scales around the min/max one, the values are rounded to
// levels and the scale and offset that fit those levels best are solved in closed form (weighted
// least squares), and the best candidate is refined once more.  The weight of a value is
// x^2 + mean(x^2) over its super-block: large weights, which dominate dot products, count more,
// small ones still count.  The sub-block scales and minimums are then quantized against one
// super-block scale each, and every value is rounded to the nearest level of the stored (rounded)
// scales.  MLX groups keep plain min/max (as mlx-lm does).  Non-finite inputs never reach a
// float-to-int conversion (they get weight 0 and are clamped).
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

// Weights for the error of a super-block's values: x^2 + mean(x^2); 0 for non-finite values.
void Weights(const float* x, int n, float* w) {
  double sum = 0;
  int finite = 0;
  for (int i = 0; i < n; ++i) {
    if (std::isfinite(x[i])) {
      sum += static_cast<double>(x[i]) * x[i];
      ++finite;
    }
  }
  const float mean = finite > 0 ? static_cast<float>(sum / finite) : 0.0f;
  for (int i = 0; i < n; ++i) w[i] = std::isfinite(x[i]) ? x[i] * x[i] + mean : 0.0f;
}

// x[i] with non-finite values as 0 (their weight is 0, so they do not steer the fit).
float Finite(float v) { return std::isfinite(v) ? v : 0.0f; }

// A sub-block fit: value = scale * q + offset.
struct Fit {
  float scale = 0;
  float offset = 0;
  double err = 0;  // weighted squared error
};

// Candidate scales per sub-block (beside the min/max one): kSteps + 1 from (kMax - 1) to (kMax + 1)
// levels over the range.
constexpr int kSteps = 10;

// Weighted sums of one sub-block that do not depend on the levels.
struct Sums {
  float w = 0, x = 0, xx = 0;
};
Sums SumsOf(const float* x, const float* w, int n) {
  Sums s;
  for (int i = 0; i < n; ++i) {
    const float xi = Finite(x[i]);
    s.w += w[i];
    s.x += w[i] * xi;
    s.xx += w[i] * xi * xi;
  }
  return s;
}

// The weighted least-squares scale and offset (offset <= 0: Q4_K/Q5_K store minus the minimum as a
// non-negative number) for levels q, and the error they leave (from the sums, no second pass).
Fit FitAffine(const float* x, const float* w, const Sums& c, const uint8_t* q, int n) {
  float sq = 0, sqq = 0, sqx = 0;
  for (int i = 0; i < n; ++i) {
    const float wq = w[i] * static_cast<float>(q[i]);
    sq += wq;
    sqq += wq * static_cast<float>(q[i]);
    sqx += wq * Finite(x[i]);
  }
  const double det = static_cast<double>(c.w) * sqq - static_cast<double>(sq) * sq;
  double scale = 0, offset = c.w > 0 ? c.x / c.w : 0;
  if (det > 0) {
    scale = (static_cast<double>(c.w) * sqx - static_cast<double>(sq) * c.x) / det;
    offset = (static_cast<double>(sqq) * c.x - static_cast<double>(sq) * sqx) / det;
  }
  if (offset > 0 || scale < 0) {  // the minimum must stay <= 0: fit the scale alone
    offset = 0;
    scale = sqq > 0 ? std::max(0.0, static_cast<double>(sqx) / sqq) : 0;
  }
  Fit f;
  f.scale = static_cast<float>(scale);
  f.offset = static_cast<float>(offset);
  // sum w (s q + b - x)^2, expanded.
  f.err = c.xx + scale * scale * sqq + offset * offset * c.w - 2 * scale * sqx - 2 * offset * c.x +
          2 * scale * offset * sq;
  return f;
}

// Rounds the values to levels 0..kMax of value = scale * q + offset (halves round up; NaN to 0).
template <int kMax>
void Levels(const float* x, float scale, float offset, int n, uint8_t* q) {
  const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
  for (int i = 0; i < n; ++i) {
    const float v = (x[i] - offset) * inv;
    // Written so that NaN fails both comparisons and lands on 0.
    const float c = v > 0.0f ? (v < static_cast<float>(kMax) ? v : static_cast<float>(kMax)) : 0.0f;
    q[i] = static_cast<uint8_t>(static_cast<int>(c + 0.5f));
  }
}

// The best scale and offset of one sub-block of n values for levels 0..kMax.
template <int kMax>
Fit SearchAffine(const float* x, const float* w, int n) {
  float lo = 0.0f, hi = 0.0f;  // the range always includes 0: mins are stored as offsets <= 0
  for (int i = 0; i < n; ++i) {
    if (std::isfinite(x[i])) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
  }
  uint8_t q[32];
  Fit best;
  best.offset = lo;
  best.scale = (hi - lo) / kMax;
  if (hi - lo <= 0.0f) {
    Levels<kMax>(x, best.scale, best.offset, n, q);
    best.err = 0;
    return best;
  }
  // The min/max fit itself, then levels of scales from (kMax - 1) to (kMax + 1) steps over the
  // range, each refitted, then the levels of the best fit refitted once more.
  const Sums sums = SumsOf(x, w, n);
  Levels<kMax>(x, best.scale, best.offset, n, q);
  {
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double d = best.scale * q[i] + best.offset - Finite(x[i]);
      err += w[i] * d * d;
    }
    best.err = err;
  }
  for (int step = 0; step <= kSteps; ++step) {
    const float levels = static_cast<float>(kMax) - 1.0f + 2.0f * static_cast<float>(step) / kSteps;
    Levels<kMax>(x, (hi - lo) / levels, lo, n, q);
    const Fit f = FitAffine(x, w, sums, q, n);
    if (f.err < best.err) best = f;
  }
  Levels<kMax>(x, best.scale, best.offset, n, q);
  const Fit f = FitAffine(x, w, sums, q, n);
  if (f.err < best.err) best = f;
  return best;
}

// Q4_K (kMax 15) and Q5_K (kMax 31): quants q(256) in [0, kMax], the 12 scale bytes and d, dmin.
template <int kMax>
void QuantizeQ45K(const float* x, uint8_t* q, std::byte* scale_bytes, float* d_out,
                  float* dmin_out) {
  float w[256];
  Weights(x, 256, w);
  float scale[8], minv[8];  // value = scale * q - minv per 32-value sub-block (minv >= 0)
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    const Fit f = SearchAffine<kMax>(x + 32 * j, w + 32 * j, 32);
    scale[j] = f.scale;
    minv[j] = -f.offset;
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, minv[j]);
  }
  const float d = base::F16ToF32(base::F32ToF16(max_scale / 63.0f));
  const float dmin = base::F16ToF32(base::F32ToF16(max_min / 63.0f));
  int sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = d > 0.0f ? RoundClamp(scale[j] / d, 0, 63) : 0;
    m[j] = dmin > 0.0f ? RoundClamp(minv[j] / dmin, 0, 63) : 0;
  }
  for (int j = 0; j < 4; ++j) {
    scale_bytes[j] = static_cast<std::byte>(sc[j] | ((sc[j + 4] >> 4) << 6));
    scale_bytes[j + 4] = static_cast<std::byte>(m[j] | ((m[j + 4] >> 4) << 6));
    scale_bytes[j + 8] = static_cast<std::byte>((sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4));
  }
  // With the 6-bit scales and minimums fixed, refit the two super-block scales (value =
  // d * sc * q - dmin * m) by weighted least squares over all 256 values, and round again.
  float dd = d, dm = dmin;
  for (int iter = 0; iter < 2; ++iter) {
    for (int j = 0; j < 8; ++j) {
      Levels<kMax>(x + 32 * j, dd * static_cast<float>(sc[j]), -dm * static_cast<float>(m[j]), 32,
                   q + 32 * j);
    }
    double saa = 0, sab = 0, sbb = 0, sax = 0, sbx = 0;
    for (int i = 0; i < 256; ++i) {
      const double a = static_cast<double>(sc[i / 32]) * q[i];
      const double b = -static_cast<double>(m[i / 32]);
      const double xi = Finite(x[i]);
      saa += w[i] * a * a;
      sab += w[i] * a * b;
      sbb += w[i] * b * b;
      sax += w[i] * a * xi;
      sbx += w[i] * b * xi;
    }
    const double det = saa * sbb - sab * sab;
    double nd = dd, nm = dm;
    if (det > 0) {
      nd = (sax * sbb - sbx * sab) / det;
      nm = (sbx * saa - sax * sab) / det;
    } else if (saa > 0) {
      nd = sax / saa;
    }
    if (!(nd > 0) || !(nm >= 0) || !std::isfinite(nd) || !std::isfinite(nm)) break;
    const float rd = base::F16ToF32(base::F32ToF16(static_cast<float>(nd)));
    const float rm = base::F16ToF32(base::F32ToF16(static_cast<float>(nm)));
    if (!std::isfinite(rd) || !std::isfinite(rm)) break;
    // Keep the refit only when it lowers the error of the current levels.
    double before = 0, after = 0;
    for (int i = 0; i < 256; ++i) {
      const double a = static_cast<double>(sc[i / 32]) * q[i];
      const double b = static_cast<double>(m[i / 32]);
      const double e0 = dd * a - dm * b - Finite(x[i]);
      const double e1 = rd * a - rm * b - Finite(x[i]);
      before += w[i] * e0 * e0;
      after += w[i] * e1 * e1;
    }
    if (after >= before) break;
    dd = rd;
    dm = rm;
  }
  for (int j = 0; j < 8; ++j) {
    Levels<kMax>(x + 32 * j, dd * static_cast<float>(sc[j]), -dm * static_cast<float>(m[j]), 32,
                 q + 32 * j);
  }
  *d_out = dd;
  *dmin_out = dm;
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

// The best scale of one 16-value Q6_K sub-block (value = scale * q, q in -32..31): candidate
// scales that put the value of largest magnitude near -32 or +31, each refitted by weighted least
// squares.
float SearchSymmetric(const float* x, const float* w) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < 16; ++i) {
    if (std::isfinite(x[i]) && std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax == 0.0f) return 0.0f;
  float best_scale = max / -32.0f;  // the largest magnitude at -32 (as Q4_0 does with -8)
  float xf[16];
  for (int i = 0; i < 16; ++i) xf[i] = Finite(x[i]);
  double best_err = 0;
  bool have = false;
  for (int side = 0; side < 2; ++side) {
    for (int step = -5; step <= 5; ++step) {
      const float target = side == 0 ? -32.0f - 0.2f * static_cast<float>(step)
                                     : 31.0f + 0.2f * static_cast<float>(step);
      const float inv = target / max;
      float sqq = 0, sqx = 0;
      for (int i = 0; i < 16; ++i) {
        const float v = xf[i] * inv;
        const float c = v > -32.0f ? (v < 31.0f ? v : 31.0f) : -32.0f;
        // c + 32.5 > 0, so truncation rounds to nearest (halves up) without a libm call.
        const float q = static_cast<float>(static_cast<int>(c + 32.5f) - 32);
        sqq += w[i] * q * q;
        sqx += w[i] * q * xf[i];
      }
      if (sqq <= 0) continue;
      // With the best scale for these levels, sum w (x - s q)^2 = sum w x^2 - sqx^2 / sqq; the
      // first term is the same for every candidate.
      const double err = -static_cast<double>(sqx) * sqx / sqq;
      if (!have || err < best_err) {
        have = true;
        best_err = err;
        best_scale = sqx / sqq;
      }
    }
  }
  return best_scale;
}

void QuantizeBlockQ6K(const float* x, std::byte* out) {
  float w[256];
  Weights(x, 256, w);
  float scale[16];
  float max_abs_scale = 0.0f;
  for (int k = 0; k < 16; ++k) {
    scale[k] = SearchSymmetric(x + 16 * k, w + 16 * k);
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
