// Conversion of float rows into the stored weight types (model writers, synthetic models, tests).
#pragma once

#include <cstddef>
#include <cstdint>

#include "loom/kernels/dtype.h"

namespace loom::kernels {

// Writes x(n) as `type` into out (RowBytes(type, n) bytes).  n must be a whole number of blocks.
// Q8_0/Q4_0 follow the GGUF reference rounding (scale from the absolute maximum; Q4_0 uses the
// signed maximum / -8 as llama.cpp does), so files match what llama.cpp would write.
void QuantizeRow(DType type, const float* x, int64_t n, std::byte* out);

}  // namespace loom::kernels
