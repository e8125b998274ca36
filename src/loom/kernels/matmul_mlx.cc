// MLX affine weight matrix products (every bit width; the width comes from w.type): one translation
// unit per weight type (compiled once per SIMD target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "loom/kernels/matmul_mlx.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "loom/kernels/kernels_internal.h"
#include "loom/kernels/matmul_kquant-inl.h"

HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {

void MatMulRowsMlx(const MatrixView& w, int64_t row_begin, int64_t row_end, const std::byte* xa,
                   int64_t n, float* y, int64_t y_stride) {
  KQuantRows<DType::kMlx4>(w, row_begin, row_end, xa, n, y, y_stride);
}

bool MatVecLeavesMlx(const MatrixView& w, int64_t leaves, int64_t row_begin, int64_t row_end,
                     const std::byte* xa, int64_t xa_stride, float* const* parts) {
  return KQuantLeafRows<DType::kMlx4>(w, leaves, row_begin, row_end, xa, xa_stride, parts);
}

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::kernels {
HWY_EXPORT(MatMulRowsMlx);
HWY_EXPORT(MatVecLeavesMlx);

void internal::MatMulRowsMlx(const MatrixView& w, int64_t row_begin, int64_t row_end,
                             const std::byte* xa, int64_t n, float* y, int64_t y_stride) {
  HWY_DYNAMIC_DISPATCH(MatMulRowsMlx)(w, row_begin, row_end, xa, n, y, y_stride);
}

bool internal::MatVecLeavesMlx(const MatrixView& w, int64_t leaves, int64_t row_begin,
                               int64_t row_end, const std::byte* xa, int64_t xa_stride,
                               float* const* parts) {
  return HWY_DYNAMIC_DISPATCH(MatVecLeavesMlx)(w, leaves, row_begin, row_end, xa, xa_stride, parts);
}

}  // namespace loom::kernels
#endif  // HWY_ONCE
