// Quantization of activation rows for the K-quant and MLX kernels (the "kact" layout of
// kernels_internal.h).  The 8-bit values are exactly reference::QuantizeActivations'.
#include <cstring>

#include "loom/kernels/kernels_internal.h"
#include "loom/kernels/reference.h"

namespace loom::kernels::internal {

void QuantizeKActRows(const float* x, int64_t n, int64_t cols, std::byte* out) {
  const int64_t row_bytes = KActRowBytes(cols);
  const int64_t q_bytes = KActQBytes(cols);
  const int64_t blocks = cols / 32;
  for (int64_t i = 0; i < n; ++i) {
    std::byte* o = out + i * row_bytes;
    auto* q = reinterpret_cast<int8_t*>(o);
    auto* d = reinterpret_cast<float*>(o + q_bytes);
    float* hs = d + blocks;
    reference::QuantizeActivations(x + i * cols, cols, q, d);
    for (int64_t h = 0; h < 2 * blocks; ++h) {
      int32_t sum = 0;
      for (int64_t j = 0; j < 16; ++j) sum += q[16 * h + j];
      hs[h] = d[h / 2] * static_cast<float>(sum);
    }
  }
}

}  // namespace loom::kernels::internal
