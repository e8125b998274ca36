// Conversion of float rows into the stored weight types (model writers, synthetic models, tests).
#pragma once

#include <cstddef>
#include <cstdint>

#include "loom/kernels/dtype.h"

namespace loom::kernels {

// Writes x(n) as `type` into out (RowBytes(type, n) bytes).  n must be a whole number of blocks.
// Q8_0/Q4_0 follow the GGUF reference rounding (scale from the absolute maximum; Q4_0 uses the
// signed maximum / -8 as llama.cpp does), so files match what llama.cpp would write.
// K-quants (n a multiple of 256) take per-sub-block minimum and maximum, then quantize the
// sub-block scales (and Q4_K/Q5_K mins) to 6 bits (Q6_K: int8) against one f16 super-block scale.
// MLX types carry scales and biases outside the row: QuantizeRow writes zero words for them; use
// QuantizeMlxRow.
void QuantizeRow(DType type, const float* x, int64_t n, std::byte* out);

// Writes x(n) as MLX type `type` (IsMlx) with groups of group_size values (n a multiple of it and
// of 32): packed(n * bits / 8 bytes), scales and biases (n / group_size values of scale_type:
// kF32, kF16 or kBF16).  Per group: bias = minimum, scale = (maximum - minimum) / (2^bits - 1),
// both rounded to scale_type before q = round((x - bias) / scale) is chosen.
void QuantizeMlxRow(DType type, int64_t group_size, DType scale_type, const float* x, int64_t n,
                    std::byte* packed, std::byte* scales, std::byte* biases);

}  // namespace loom::kernels
