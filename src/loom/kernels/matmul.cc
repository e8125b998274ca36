#include "loom/kernels/matmul.h"

#include <algorithm>
#include <cstring>

#include "hwy/targets.h"
#include "loom/kernels/block_formats.h"
#include "loom/kernels/kernels_internal.h"
#include "loom/kernels/ops.h"
#include "loom/kernels/reference.h"
#include "loom/kernels/simd_target.h"

namespace loom::kernels {
namespace {

// Q8_0/Q4_0 read "qact" activations; K-quant and MLX kernels "kact" (kernels_internal.h).
bool UsesQAct(DType type) { return type == DType::kQ8_0 || type == DType::kQ4_0; }
bool UsesKAct(DType type) {
  return type != DType::kF32 && type != DType::kF16 && type != DType::kBF16 && !UsesQAct(type);
}

// Rows [begin, end) of one product; `act` is float x or qact rows depending on the type.
void RunRows(const MatrixView& w, int64_t begin, int64_t end, const void* act, int64_t n,
             float* y) {
  const float* xf = static_cast<const float*>(act);
  const std::byte* xq = static_cast<const std::byte*>(act);
  switch (w.type) {
    case DType::kF32:
      internal::MatMulRowsF32(w, begin, end, xf, n, y, w.rows);
      return;
    case DType::kF16:
      internal::MatMulRowsF16(w, begin, end, xf, n, y, w.rows);
      return;
    case DType::kBF16:
      internal::MatMulRowsBF16(w, begin, end, xf, n, y, w.rows);
      return;
    case DType::kQ8_0:
      internal::MatMulRowsQ8_0(w, begin, end, xq, n, y, w.rows);
      return;
    case DType::kQ4_0:
      internal::MatMulRowsQ4_0(w, begin, end, xq, n, y, w.rows);
      return;
    case DType::kQ4_K:
      internal::MatMulRowsQ4_K(w, begin, end, xq, n, y, w.rows);
      return;
    case DType::kQ5_K:
      internal::MatMulRowsQ5_K(w, begin, end, xq, n, y, w.rows);
      return;
    case DType::kQ6_K:
      internal::MatMulRowsQ6_K(w, begin, end, xq, n, y, w.rows);
      return;
    case DType::kMlx2:
    case DType::kMlx3:
    case DType::kMlx4:
    case DType::kMlx5:
    case DType::kMlx6:
    case DType::kMlx8:
      internal::MatMulRowsMlx(w, begin, end, xq, n, y, w.rows);
      return;
  }
}

// Decode of rows [begin, end) of a product split into leaves, leaf l's activation row at
// act + l * act_stride, into parts[l] (internal::MatVecLeavesQ4_0, ...); false where the type or
// SIMD target has no such path.
bool RunLeafRows(const MatrixView& w, int64_t leaves, int64_t begin, int64_t end,
                 const std::byte* act, int64_t act_stride, float* const* parts) {
  if (IsMlx(w.type))
    return internal::MatVecLeavesMlx(w, leaves, begin, end, act, act_stride, parts);
  switch (w.type) {
    case DType::kQ8_0:
      return internal::MatVecLeavesQ8_0(w, leaves, begin, end, act, act_stride, parts);
    case DType::kQ4_0:
      return internal::MatVecLeavesQ4_0(w, leaves, begin, end, act, act_stride, parts);
    case DType::kQ4_K:
      return internal::MatVecLeavesQ4_K(w, leaves, begin, end, act, act_stride, parts);
    case DType::kQ5_K:
      return internal::MatVecLeavesQ5_K(w, leaves, begin, end, act, act_stride, parts);
    case DType::kQ6_K:
      return internal::MatVecLeavesQ6_K(w, leaves, begin, end, act, act_stride, parts);
    default:
      return false;
  }
}

int64_t LeafGranularity(const MatrixView& w) {
  const int64_t block = Traits(w.type).block_elems;
  return IsMlx(w.type) ? std::max(block, w.group_size) : block;
}

// Rows per block of a leaf-split product (a multiple of the kernels' 4-row tile).
constexpr int64_t kLeafRowBlock = 64;

bool IsPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// Bytes of one activation row of `cols` values as the kernels of `type` read it.
int64_t ActRowBytes(DType type, int64_t cols) {
  if (UsesKAct(type)) return internal::KActRowBytes(cols);
  if (UsesQAct(type)) return internal::QActRowBytes(cols);
  return cols * int64_t{sizeof(float)};  // float rows, as the float kernels read x
}

// Activation rows [begin, end) of leaf `leaf` (cols [leaf * width, +width) of x(n, cols)) in the
// kernels' form, into out(n, ActRowBytes(type, width)).  Quantization works on 32-value blocks, so
// a leaf's rows are the same bytes a whole row would have for those blocks.
void PrepareLeafRows(DType type, const float* x, int64_t cols, int64_t leaf, int64_t width,
                     int64_t begin, int64_t end, std::byte* out) {
  const int64_t row_bytes = ActRowBytes(type, width);
  const int32_t corr_mult = type == DType::kQ4_0 ? 2 : 32;  // kernels_internal.h
  for (int64_t i = begin; i < end; ++i) {
    const float* src = x + i * cols + leaf * width;
    std::byte* dst = out + i * row_bytes;
    if (UsesKAct(type)) {
      internal::QuantizeKActRows(src, 1, width, dst);
    } else if (UsesQAct(type)) {
      internal::QuantizeActivationRows(src, 1, width, corr_mult, dst);
    } else {
      std::memcpy(dst, src, static_cast<size_t>(width) * sizeof(float));
    }
  }
}

}  // namespace

std::byte* Workspace::Get(int64_t bytes) {
  if (buffer_.size() < bytes) buffer_ = base::AlignedBuffer<std::byte>(bytes);
  return buffer_.data();
}

int64_t KLeaves(const MatrixView& w, int64_t full_cols) {
  const int64_t g = LeafGranularity(w);
  int64_t leaves = kMaxKLeaves;
  while (leaves > 1 &&
         (g <= 0 || full_cols % (leaves * g) != 0 || full_cols / leaves < kMinLeafCols)) {
    leaves /= 2;
  }
  return leaves;
}

int64_t SliceKLeaves(const MatrixView& w, int64_t full_cols, int64_t begin) {
  const int64_t width = full_cols / KLeaves(w, full_cols);
  if (begin % width != 0 || w.cols % width != 0) return 1;
  const int64_t held = w.cols / width;
  return IsPowerOfTwo(held) && (begin / width) % held == 0 ? held : 1;
}

void MatMulMulti(std::span<const MatrixView> w, const float* x, int64_t n,
                 std::span<float* const> y, Workspace& ws, base::ThreadPool& pool) {
  if (w.empty() || n <= 0) return;
  const DType type = w[0].type;
  const int64_t cols = w[0].cols;
  int64_t leaves = w[0].k_leaves;
  if (leaves < 1 || leaves > kMaxKLeaves || cols % leaves != 0 ||
      !w[0].ColRangeOk(0, cols / leaves)) {
    leaves = 1;  // not a split into whole blocks: one sum per row
  }
  const int64_t width = cols / leaves;
  int64_t total_rows = 0;
  for (const MatrixView& m : w) total_rows += m.rows;
  // Workspace: the activations of each leaf (leaf-major), then the partial products of leaves
  // 1.. of every matrix (leaf 0 is written straight into y).
  const int64_t leaf_act_bytes = n * ActRowBytes(type, width);
  const bool float_act = !UsesKAct(type) && !UsesQAct(type);
  const int64_t act_bytes = float_act && leaves == 1 ? 0 : leaves * leaf_act_bytes;
  const int64_t partial_floats = (leaves - 1) * n * total_rows;
  std::byte* scratch = ws.Get(act_bytes + partial_floats * int64_t{sizeof(float)});
  const void* act = x;
  if (act_bytes > 0) {
    auto prepare = [&](int64_t begin, int64_t end) {
      for (int64_t l = 0; l < leaves; ++l) {
        PrepareLeafRows(type, x, cols, l, width, begin, end, scratch + l * leaf_act_bytes);
      }
    };
    if (n >= 8 && pool.size() > 1) {
      pool.ParallelFor(n, 1, prepare);
    } else {
      prepare(0, n);
    }
    act = scratch;
  }
  float* partials = reinterpret_cast<float*>(scratch + act_bytes);
  const auto rows_of = [&](int64_t begin, int64_t end) {
    int64_t base = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      const int64_t lo = std::max(begin, base) - base;
      const int64_t hi = std::min(end, base + w[i].rows) - base;
      if (lo < hi && leaves == 1) {
        RunRows(w[i], lo, hi, act, n, y[i]);
      } else if (lo < hi) {
        // Decode: each quad of rows once, its leaves in turn, where the kernels do that (AVX2:
        // the attention output and down projections ran at 0.5-0.7 of their speed without leaves
        // in the blocks below).  Else every leaf of a block of rows before the next block: the
        // block's bytes are read from memory once (leaf-major passes over all rows read each row
        // in pieces, and the CPU's prefetchers fetch the neighbouring pieces too: TP=2 decode
        // measured 5% slower).
        const int64_t rows = w[i].rows;
        float* parts[kMaxKLeaves];
        for (int64_t l = 0; l < leaves; ++l) {
          parts[l] = l == 0 ? y[i] : partials + ((l - 1) * total_rows + base) * n;
        }
        const auto* leaf_act = static_cast<const std::byte*>(act);
        if (n != 1 || !RunLeafRows(w[i], leaves, lo, hi, leaf_act, leaf_act_bytes, parts)) {
          MatrixView views[kMaxKLeaves];
          for (int64_t l = 0; l < leaves; ++l) views[l] = w[i].ColRange(l * width, width);
          for (int64_t b = lo; b < hi; b += kLeafRowBlock) {
            const int64_t e = std::min(hi, b + kLeafRowBlock);
            for (int64_t l = 0; l < leaves; ++l) {
              RunRows(views[l], b, e, leaf_act + l * leaf_act_bytes, n, parts[l]);
            }
          }
        }
        float* row_parts[kMaxKLeaves];
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t l = 0; l < leaves; ++l) row_parts[l] = parts[l] + t * rows + lo;
          SumTree(row_parts, leaves, hi - lo);
        }
      }
      base += w[i].rows;
    }
  };
  // Grain 4 = the kernels' row tile, so threads split on tile boundaries.  The threads do not keep
  // the same pace (decode streams from memory, cores get descheduled); balanced, the thread ahead
  // takes the other's last chunks instead of waiting for them (a row's sum is the same on any
  // thread).
  pool.ParallelForBalanced(total_rows, 4, rows_of);
}

void MatMulGrouped(std::span<const MatrixView> w, const float* x, int64_t m,
                   std::span<const int64_t> x_row, std::span<const int64_t> n,
                   std::span<float* const> y, Workspace& ws, base::ThreadPool& pool) {
  if (w.empty() || m <= 0) return;
  const DType type = w[0].type;
  const int64_t cols = w[0].cols;
  bool uniform = true;
  for (const MatrixView& v : w) {
    uniform = uniform && v.type == type && v.cols == cols && v.k_leaves <= 1;
  }
  if (!uniform) {
    for (size_t i = 0; i < w.size(); ++i) {
      if (n[i] > 0) MatMul(w[i], x + x_row[i] * cols, n[i], y[i], ws, pool);
    }
    return;
  }
  const int64_t row_bytes = ActRowBytes(type, cols);
  const bool float_act = !UsesKAct(type) && !UsesQAct(type);
  const std::byte* act = reinterpret_cast<const std::byte*>(x);
  if (!float_act) {
    std::byte* scratch = ws.Get(m * row_bytes);
    auto prepare = [&](int64_t begin, int64_t end) {
      PrepareLeafRows(type, x, cols, 0, cols, begin, end, scratch);
    };
    // A decode step's few rows are quicker quantized here than handed to the pool.
    if (m >= 8 && m * cols >= (int64_t{1} << 15) && pool.size() > 1) {
      pool.ParallelFor(m, 1, prepare);
    } else {
      prepare(0, m);
    }
    act = scratch;
  }
  // A row of product i costs n[i] + kRowCost (kRowCost: reading and unpacking the weights, in
  // units of one activation row's dot products).  Thread t takes the rows from where the cost
  // reaches t / T of the total, rounded down to a 4-row tile, to where it reaches (t + 1) / T.
  constexpr int64_t kRowCost = 2;
  int64_t total = 0;
  for (size_t i = 0; i < w.size(); ++i) total += n[i] > 0 ? w[i].rows * (n[i] + kRowCost) : 0;
  if (total == 0) return;
  const int64_t threads = pool.size();
  // The (product, row) where the cost reaches `c`, as an index into the concatenated rows.
  auto row_at = [&](int64_t c) {
    int64_t base = 0, cost = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      const int64_t per = n[i] > 0 ? n[i] + kRowCost : 0;
      if (c < cost + w[i].rows * per) return base + (c - cost) / per / 4 * 4;
      cost += w[i].rows * per;
      base += w[i].rows;
    }
    return base;
  };
  auto run = [&](int t) {
    const int64_t begin = row_at(total * t / threads);
    const int64_t end = row_at(total * (t + 1) / threads);
    int64_t base = 0;
    for (size_t i = 0; i < w.size() && base < end; ++i) {
      const int64_t lo = std::max(begin, base) - base;
      const int64_t hi = std::min(end, base + w[i].rows) - base;
      if (lo < hi && n[i] > 0) RunRows(w[i], lo, hi, act + x_row[i] * row_bytes, n[i], y[i]);
      base += w[i].rows;
    }
  };
  if (threads == 1) {
    run(0);
  } else {
    pool.Run(run);
  }
}

void MatMul(const MatrixView& w, const float* x, int64_t n, float* y, Workspace& ws,
            base::ThreadPool& pool) {
  float* const ys[1] = {y};
  MatMulMulti(std::span<const MatrixView>(&w, 1), x, n, ys, ws, pool);
}

WeightLayout PreferredLayout(DType type, int64_t cols) {
  const int64_t target = ActiveSimdTarget();
  if (target != HWY_AVX2 && target != HWY_AVX3) return WeightLayout::kFile;
  switch (type) {
    case DType::kQ4_K:
    case DType::kQ5_K:
      return WeightLayout::kPairedNibbles;
    case DType::kQ4_0:
    case DType::kQ8_0:
      // Any split into at most kMaxKLeaves leaves then begins every leaf on a pair.
      return cols % (2 * 32 * kMaxKLeaves) == 0 ? WeightLayout::kScalePairs : WeightLayout::kFile;
    default:
      return WeightLayout::kFile;
  }
}

bool CopyRowsToLayout(DType type, int64_t cols, int64_t rows, WeightLayout from,
                      const std::byte* src, int64_t src_stride, WeightLayout to, std::byte* dst,
                      int64_t dst_stride) {
  const StatusOr<int64_t> row_bytes = RowBytes(type, cols);
  if (!row_bytes.ok()) return false;
  // A conversion is between kFile and the one other layout the type has.
  const WeightLayout other = from == WeightLayout::kFile ? to : from;
  const bool nibbles =
      other == WeightLayout::kPairedNibbles && (type == DType::kQ4_K || type == DType::kQ5_K);
  const bool pairs =
      other == WeightLayout::kScalePairs && (type == DType::kQ4_0 || type == DType::kQ8_0);
  if (from != to &&
      ((from != WeightLayout::kFile && to != WeightLayout::kFile) || (!nibbles && !pairs))) {
    return false;
  }
  const int64_t blocks = cols / Traits(type).block_elems;
  const int64_t block_bytes = Traits(type).block_bytes;
  for (int64_t r = 0; r < rows; ++r) {
    std::byte* out = dst + r * dst_stride;
    const std::byte* in = src + r * src_stride;
    if (out != in) std::memcpy(out, in, static_cast<size_t>(*row_bytes));
    if (from == to) continue;
    if (pairs) {
      internal::ConvertScalePairs(type, to == WeightLayout::kScalePairs, out, blocks);
      continue;
    }
    for (int64_t b = 0; b < blocks; ++b) {
      internal::SwapSuperBlockNibblePairs(type, out + b * block_bytes);
    }
  }
  return true;
}

void DequantizeRow(const MatrixView& w, int64_t row, float* out) {
  // One row per token (embedding lookup): the scalar code is fast enough.
  reference::DequantizeRow(w, row, out);
}

}  // namespace loom::kernels
