#include "loom/kernels/dtype.h"

namespace loom::kernels {

const DTypeTraits& Traits(DType type) {
  static constexpr DTypeTraits kF32{"f32", 1, 4};
  static constexpr DTypeTraits kF16{"f16", 1, 2};
  static constexpr DTypeTraits kBF16{"bf16", 1, 2};
  static constexpr DTypeTraits kQ8_0{"q8_0", 32, 34};
  static constexpr DTypeTraits kQ4_0{"q4_0", 32, 18};
  static constexpr DTypeTraits kQ4_K{"q4_k", 256, 144};
  static constexpr DTypeTraits kQ5_K{"q5_k", 256, 176};
  static constexpr DTypeTraits kQ6_K{"q6_k", 256, 210};
  static constexpr DTypeTraits kMlx2{"mlx2", 32, 8};
  static constexpr DTypeTraits kMlx3{"mlx3", 32, 12};
  static constexpr DTypeTraits kMlx4{"mlx4", 32, 16};
  static constexpr DTypeTraits kMlx5{"mlx5", 32, 20};
  static constexpr DTypeTraits kMlx6{"mlx6", 32, 24};
  static constexpr DTypeTraits kMlx8{"mlx8", 32, 32};
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
    case DType::kQ4_K:
      return kQ4_K;
    case DType::kQ5_K:
      return kQ5_K;
    case DType::kQ6_K:
      return kQ6_K;
    case DType::kMlx2:
      return kMlx2;
    case DType::kMlx3:
      return kMlx3;
    case DType::kMlx4:
      return kMlx4;
    case DType::kMlx5:
      return kMlx5;
    case DType::kMlx6:
      return kMlx6;
    case DType::kMlx8:
      return kMlx8;
  }
  return kF32;  // unreachable for valid enumerators
}

int MlxBitsOf(DType type) {
  switch (type) {
    case DType::kMlx2:
      return 2;
    case DType::kMlx3:
      return 3;
    case DType::kMlx4:
      return 4;
    case DType::kMlx5:
      return 5;
    case DType::kMlx6:
      return 6;
    case DType::kMlx8:
      return 8;
    default:
      return 0;
  }
}

bool IsMlx(DType type) { return MlxBitsOf(type) != 0; }

StatusOr<int64_t> RowBytes(DType type, int64_t cols) {
  const DTypeTraits& t = Traits(type);
  if (cols < 0 || cols % t.block_elems != 0) {
    return InvalidArgumentError("RowBytes: ", cols, " columns of ", t.name,
                                " is not a whole number of ", t.block_elems, "-value blocks");
  }
  return cols / t.block_elems * t.block_bytes;
}

}  // namespace loom::kernels
