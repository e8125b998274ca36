// A view of a weight matrix in place (usually inside a memory-mapped model file).
#pragma once

#include <cstddef>
#include <cstdint>

#include "loom/kernels/dtype.h"

namespace loom::kernels {

// How a matrix's blocks are laid out in memory: as dtype.h describes them (kFile, every file and
// every mapped view), or rearranged inside each block for the kernels of this CPU when the weights
// are copied into memory (model::PackMatrix asks PreferredLayout, matmul.h).  Every kernel and
// DequantizeRow read both; views of row and column ranges keep their matrix's layout.
enum class WeightLayout : uint8_t {
  kFile,
  // Q4_K and Q5_K: in each 32-byte chunk of qs (sub-blocks 2c and 2c + 1), byte l < 16 holds
  // values l (low nibble) and 16 + l (high nibble) of sub-block 2c, byte 16 + l those of sub-block
  // 2c + 1 (the file pairs value l of 2c with value l of 2c + 1).  SwapNibblePairs
  // (block_formats.h) converts either way.  Q5_K's qh is unchanged.
  kPairedNibbles,
  // Q4_0 and Q8_0: each row's blocks in pairs from its first column, a pair (2 * 32 values, the
  // bytes of two blocks) holding both f16 scales and then the quants in the qact order (Q4_0: the
  // two blocks' nibble bytes; Q8_0: values 0..15 of both blocks, then 16..31 of both); a row's
  // last block, when unpaired, as in the file.  ConvertScalePairs (block_formats.h) converts.
  // Column ranges must begin on a pair (ColRangeOk).
  kScalePairs,
};

// Row-major W with `rows` output features and `cols` input features, stored in `type`; row r starts
// at data + r * row_stride bytes.  Views of row ranges and of block-aligned column ranges point
// into the same bytes: tensor-parallel shards are views, never copies.
struct MatrixView {
  DType type = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const std::byte* data = nullptr;
  int64_t row_stride = 0;  // bytes between the starts of consecutive rows
  // MLX affine types only (IsMlx(type)): per-group scale and bias, value = scale * q + bias.
  const std::byte* scales = nullptr;  // (rows, cols / group_size) of scale_type
  const std::byte* biases = nullptr;  // same shape and type
  int64_t scale_row_stride = 0;       // bytes between rows of scales (and of biases)
  DType scale_type = DType::kBF16;    // kF32, kF16 or kBF16
  int64_t group_size = 0;             // values per group: 32, 64 or 128
  // The product sums its cols as this many equal column slices ("leaves"), each reduced on its
  // own and then added in a fixed balanced tree (kernels/matmul.h, KLeaves): 1 for most matrices.
  // A value that does not cut cols into at most kMaxKLeaves slices of whole blocks (kScalePairs:
  // whole pairs of blocks, ColRangeOk) counts as 1.
  int64_t k_leaves = 1;
  WeightLayout layout = WeightLayout::kFile;

  // Rows [begin, begin + count).
  MatrixView RowRange(int64_t begin, int64_t count) const {
    MatrixView v = *this;
    v.rows = count;
    v.data = data + begin * row_stride;
    if (scales != nullptr) v.scales = scales + begin * scale_row_stride;
    if (biases != nullptr) v.biases = biases + begin * scale_row_stride;
    return v;
  }
  // Columns [begin, begin + count); both must be multiples of the type's block size (for MLX
  // types also of group_size; the caller, usually a shard planner, validates that with ColRangeOk
  // first).
  MatrixView ColRange(int64_t begin, int64_t count) const {
    const DTypeTraits& t = Traits(type);
    MatrixView v = *this;
    v.cols = count;
    v.data = data + begin / t.block_elems * t.block_bytes;
    if (IsMlx(type) && group_size > 0) {
      const int64_t offset = begin / group_size * Traits(scale_type).block_bytes;
      if (scales != nullptr) v.scales = scales + offset;
      if (biases != nullptr) v.biases = biases + offset;
    }
    return v;
  }
  bool ColRangeOk(int64_t begin, int64_t count) const {
    const int64_t b = Traits(type).block_elems;
    if (begin < 0 || count < 0 || begin + count > cols || begin % b != 0 || count % b != 0) {
      return false;
    }
    if (layout == WeightLayout::kScalePairs &&
        (begin % (2 * b) != 0 || (count % (2 * b) != 0 && begin + count != cols))) {
      return false;  // a slice would cut a pair of blocks
    }
    if (IsMlx(type)) {  // whole groups (block_elems = 32 values = whole 32-bit words)
      return group_size > 0 && begin % group_size == 0 && count % group_size == 0;
    }
    return true;
  }
};

}  // namespace loom::kernels
