// A view of a weight matrix in place (usually inside a memory-mapped model file).
#pragma once

#include <cstddef>
#include <cstdint>

#include "loom/kernels/dtype.h"

namespace loom::kernels {

// Row-major W with `rows` output features and `cols` input features, stored in `type`; row r starts
// at data + r * row_stride bytes.  Views of row ranges and of block-aligned column ranges point
// into the same bytes: tensor-parallel shards are views, never copies.
struct MatrixView {
  DType type = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const std::byte* data = nullptr;
  int64_t row_stride = 0;  // bytes between the starts of consecutive rows

  // Rows [begin, begin + count).
  MatrixView RowRange(int64_t begin, int64_t count) const {
    MatrixView v = *this;
    v.rows = count;
    v.data = data + begin * row_stride;
    return v;
  }
  // Columns [begin, begin + count); both must be multiples of the type's block size (the caller,
  // usually a shard planner, validates that with ColRangeOk first).
  MatrixView ColRange(int64_t begin, int64_t count) const {
    const DTypeTraits& t = Traits(type);
    MatrixView v = *this;
    v.cols = count;
    v.data = data + begin / t.block_elems * t.block_bytes;
    return v;
  }
  bool ColRangeOk(int64_t begin, int64_t count) const {
    const int64_t b = Traits(type).block_elems;
    return begin >= 0 && count >= 0 && begin + count <= cols && begin % b == 0 && count % b == 0;
  }
};

}  // namespace loom::kernels
