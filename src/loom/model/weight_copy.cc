#include "loom/model/weight_copy.h"

#include <cstring>
#include <new>
#include <vector>

#include "loom/base/sysinfo.h"
#include "loom/kernels/matmul.h"

namespace loom::model {

namespace {

constexpr int64_t kAlign = 64;

int64_t AlignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The matrices CopyMatricesToMemory moves (W: TransformerWeights, const or not): with `experts`,
// a mixture's routed experts too (each expert's gate, up and down, in expert order).
template <class W>
auto Streamed(W& w, bool experts) {
  std::vector<decltype(&w.output)> out;
  for (auto& l : w.layers) {
    // Empty views (a mixture's dense matrices, experts another rank holds) are skipped.
    for (auto* m :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.router, &l.wq_a, &l.wq_b,
          &l.wkv_a, &l.wkv_b, &l.wk_b, &l.wv_b, &l.shexp_gate, &l.shexp_up, &l.shexp_down}) {
      if (m->data != nullptr) out.push_back(m);
    }
    if (!experts) continue;
    for (auto& e : l.experts) {
      for (auto* m : {&e.gate, &e.up, &e.down}) {
        if (m->data != nullptr) out.push_back(m);
      }
    }
  }
  if (w.local.head && w.output.data != nullptr) out.push_back(&w.output);
  return out;
}

// Row bytes of m's values and (MLX) of its scales / biases rows.
int64_t ValueRowBytes(const kernels::MatrixView& m) {
  const StatusOr<int64_t> bytes = kernels::RowBytes(m.type, m.cols);  // bound views are valid
  return bytes.ok() ? *bytes : m.row_stride;
}
int64_t ScaleRowBytes(const kernels::MatrixView& m) {
  if (m.scales == nullptr || m.group_size <= 0) return 0;
  return m.cols / m.group_size * kernels::Traits(m.scale_type).block_bytes;
}

// Copies `rows` rows of `bytes` bytes, `stride` apart, to dst; returns dst.
const std::byte* CopyRows(const std::byte* src, int64_t rows, int64_t bytes, int64_t stride,
                          std::byte* dst) {
  if (stride == bytes) {
    std::memcpy(dst, src, static_cast<size_t>(rows * bytes));
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(dst + r * bytes, src + r * stride, static_cast<size_t>(bytes));
    }
  }
  return dst;
}

}  // namespace

int64_t PackedMatrixBytes(const kernels::MatrixView& m) {
  int64_t bytes = AlignUp(m.rows * ValueRowBytes(m));
  if (m.scales != nullptr) bytes += 2 * AlignUp(m.rows * ScaleRowBytes(m));
  return bytes;
}

void PackMatrix(kernels::MatrixView* m, std::byte* dst) {
  const int64_t row_bytes = ValueRowBytes(*m);
  const kernels::WeightLayout layout = kernels::PreferredLayout(m->type, m->cols);
  if (layout != m->layout &&
      kernels::CopyRowsToLayout(m->type, m->cols, m->rows, m->layout, m->data, m->row_stride,
                                layout, dst, row_bytes)) {
    m->data = dst;
    m->layout = layout;
  } else {
    m->data = CopyRows(m->data, m->rows, row_bytes, m->row_stride, dst);
  }
  m->row_stride = row_bytes;
  dst += AlignUp(m->rows * row_bytes);
  if (m->scales != nullptr) {
    const int64_t scale_bytes = ScaleRowBytes(*m);
    m->scales = CopyRows(m->scales, m->rows, scale_bytes, m->scale_row_stride, dst);
    dst += AlignUp(m->rows * scale_bytes);
    m->biases = CopyRows(m->biases, m->rows, scale_bytes, m->scale_row_stride, dst);
    m->scale_row_stride = scale_bytes;
  }
}

int64_t CopiedMatrixBytes(const TransformerWeights& weights, bool experts) {
  int64_t total = 0;
  for (const kernels::MatrixView* m : Streamed(weights, experts)) {
    total += PackedMatrixBytes(*m);
  }
  return total;
}

bool CopyFitsInMemory(const TransformerWeights& weights, int copies, bool experts) {
  const int64_t available = base::ReadMemoryInfo().available_bytes;
  return available > 0 && CopiedMatrixBytes(weights, experts) * copies < available / 2;
}

Status CopyMatricesToMemory(TransformerWeights* weights, bool experts) {
  const int64_t total = CopiedMatrixBytes(*weights, experts);
  base::AlignedBuffer<std::byte> buffer;
  try {
    buffer = base::AlignedBuffer<std::byte>::WithHugePages(total);
  } catch (const std::bad_alloc&) {
    return ResourceExhaustedError("cannot allocate ", total,
                                  " bytes to copy the weights into (use the mapped weights)");
  }
  std::byte* at = buffer.data();
  for (kernels::MatrixView* m : Streamed(*weights, experts)) {
    const int64_t bytes = PackedMatrixBytes(*m);  // before PackMatrix re-points m
    PackMatrix(m, at);
    at += bytes;
  }
  // Every matrix that pointed into a BindCols pack now has its own copy.
  weights->owned_bytes.clear();
  weights->owned_bytes.push_back(std::move(buffer));
  return OkStatus();
}

}  // namespace loom::model
