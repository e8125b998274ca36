#include "loom/kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "loom/base/half.h"
#include "loom/kernels/block_formats.h"

namespace loom::kernels {
namespace {

void StoreU16(uint16_t v, std::byte* p) { std::memcpy(p, &v, sizeof(v)); }

// Float to integer in [lo, hi], truncating toward zero; NaN becomes 0 (non-finite inputs must not
// reach an undefined float-to-int conversion).
int TruncClamp(float v, int lo, int hi) {
  if (!(v == v)) return 0;
  return static_cast<int>(std::clamp(v, static_cast<float>(lo), static_cast<float>(hi)));
}

// llama.cpp quantize_row_q8_0_ref: d = absmax / 127 (stored as f16), q = round(x / d).
void QuantizeBlockQ8_0(const float* x, std::byte* out) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  StoreU16(base::F32ToF16(d), out);
  for (int j = 0; j < 32; ++j) {
    out[2 + j] =
        static_cast<std::byte>(static_cast<int8_t>(TruncClamp(std::round(x[j] * id), -127, 127)));
  }
}

// llama.cpp quantize_row_q4_0_ref: d = (value of largest magnitude) / -8, q = min(15, x / d + 8.5).
void QuantizeBlockQ4_0(const float* x, std::byte* out) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  StoreU16(base::F32ToF16(d), out);
  for (int j = 0; j < 16; ++j) {
    // Truncation matches llama.cpp; finite values are in [0.5, 16.5] here.
    const int lo = TruncClamp(x[j] * id + 8.5f, 0, 15);
    const int hi = TruncClamp(x[16 + j] * id + 8.5f, 0, 15);
    out[2 + j] = static_cast<std::byte>(lo | (hi << 4));
  }
}

}  // namespace

void QuantizeRow(DType type, const float* x, int64_t n, std::byte* out) {
  switch (type) {
    case DType::kF32:
      std::memcpy(out, x, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) StoreU16(base::F32ToF16(x[i]), out + 2 * i);
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) StoreU16(base::F32ToBf16(x[i]), out + 2 * i);
      return;
    case DType::kQ8_0:
      for (int64_t b = 0; b < n / 32; ++b) QuantizeBlockQ8_0(x + 32 * b, out + 34 * b);
      return;
    case DType::kQ4_0:
      for (int64_t b = 0; b < n / 32; ++b) QuantizeBlockQ4_0(x + 32 * b, out + 18 * b);
      return;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      internal::QuantizeKQuantRow(type, x, n, out);
      return;
    case DType::kMlx2:
    case DType::kMlx3:
    case DType::kMlx4:
    case DType::kMlx5:
    case DType::kMlx6:
    case DType::kMlx8:
      std::memset(out, 0, static_cast<size_t>(n / 32 * Traits(type).block_bytes));
      return;
  }
}

}  // namespace loom::kernels
