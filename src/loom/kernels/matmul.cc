#include "loom/kernels/matmul.h"

#include <algorithm>

#include "loom/kernels/kernels_internal.h"
#include "loom/kernels/reference.h"

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

}  // namespace

std::byte* Workspace::Get(int64_t bytes) {
  if (buffer_.size() < bytes) buffer_ = base::AlignedBuffer<std::byte>(bytes);
  return buffer_.data();
}

void MatMulMulti(std::span<const MatrixView> w, const float* x, int64_t n,
                 std::span<float* const> y, Workspace& ws, base::ThreadPool& pool) {
  if (w.empty() || n <= 0) return;
  const DType type = w[0].type;
  const int64_t cols = w[0].cols;
  const void* act = x;
  if (UsesKAct(type)) {
    const int64_t row_bytes = internal::KActRowBytes(cols);
    std::byte* xa = ws.Get(n * row_bytes);
    if (n >= 8 && pool.size() > 1) {
      pool.ParallelFor(n, 1, [&](int64_t begin, int64_t end) {
        internal::QuantizeKActRows(x + begin * cols, end - begin, cols, xa + begin * row_bytes);
      });
    } else {
      internal::QuantizeKActRows(x, n, cols, xa);
    }
    act = xa;
  } else if (UsesQAct(type)) {
    // One quantization of x serves every matrix (q/k/v, gate/up).
    const int64_t row_bytes = internal::QActRowBytes(cols);
    std::byte* xq = ws.Get(n * row_bytes);
    const int32_t corr_mult = type == DType::kQ4_0 ? 2 : 32;  // kernels_internal.h
    if (n >= 8 && pool.size() > 1) {
      pool.ParallelFor(n, 1, [&](int64_t begin, int64_t end) {
        internal::QuantizeActivationRows(x + begin * cols, end - begin, cols, corr_mult,
                                         xq + begin * row_bytes);
      });
    } else {
      internal::QuantizeActivationRows(x, n, cols, corr_mult, xq);
    }
    act = xq;
  }
  int64_t total_rows = 0;
  for (const MatrixView& m : w) total_rows += m.rows;
  // Grain 4 = the kernels' row tile, so threads split on tile boundaries.
  pool.ParallelFor(total_rows, 4, [&](int64_t begin, int64_t end) {
    int64_t base = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      const int64_t lo = std::max(begin, base);
      const int64_t hi = std::min(end, base + w[i].rows);
      if (lo < hi) RunRows(w[i], lo - base, hi - base, act, n, y[i]);
      base += w[i].rows;
    }
  });
}

void MatMul(const MatrixView& w, const float* x, int64_t n, float* y, Workspace& ws,
            base::ThreadPool& pool) {
  float* const ys[1] = {y};
  MatMulMulti(std::span<const MatrixView>(&w, 1), x, n, ys, ws, pool);
}

void DequantizeRow(const MatrixView& w, int64_t row, float* out) {
  // One row per token (embedding lookup): the scalar code is fast enough.
  reference::DequantizeRow(w, row, out);
}

}  // namespace loom::kernels
