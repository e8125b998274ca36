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
};

struct DTypeTraits {
  std::string_view name;  // "f32", "q4_0", ...
  int64_t block_elems;    // values per block (1 for plain floats)
  int64_t block_bytes;    // bytes per block
};

const DTypeTraits& Traits(DType type);

// Bytes of a row of `cols` values; an error when `cols` is not a whole number of blocks.
StatusOr<int64_t> RowBytes(DType type, int64_t cols);

}  // namespace loom::kernels
