#include "loom/kernels/dtype.h"

namespace loom::kernels {

const DTypeTraits& Traits(DType type) {
  static constexpr DTypeTraits kF32{"f32", 1, 4};
  static constexpr DTypeTraits kF16{"f16", 1, 2};
  static constexpr DTypeTraits kBF16{"bf16", 1, 2};
  static constexpr DTypeTraits kQ8_0{"q8_0", 32, 34};
  static constexpr DTypeTraits kQ4_0{"q4_0", 32, 18};
  switch (type) {
    case DType::kF32:
      return kF32;
    case DType::kF16:
      return kF16;
    case DType::kBF16:
      return kBF16;
    case DType::kQ8_0:
      return kQ8_0;
    case DType::kQ4_0:
      return kQ4_0;
  }
  return kF32;  // unreachable for valid enumerators
}

StatusOr<int64_t> RowBytes(DType type, int64_t cols) {
  const DTypeTraits& t = Traits(type);
  if (cols < 0 || cols % t.block_elems != 0) {
    return InvalidArgumentError("RowBytes: ", cols, " columns of ", t.name,
                                " is not a whole number of ", t.block_elems, "-value blocks");
  }
  return cols / t.block_elems * t.block_bytes;
}

}  // namespace loom::kernels
