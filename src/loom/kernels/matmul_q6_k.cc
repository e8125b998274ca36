// q6_k weight matrix products: one translation unit per weight type (compiled once per SIMD
// target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "loom/kernels/matmul_q6_k.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "loom/kernels/kernels_internal.h"
#include "loom/kernels/matmul_kquant-inl.h"

HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {

void MatMulRowsQ6_K(const MatrixView& w, int64_t row_begin, int64_t row_end, const std::byte* xa,
                    int64_t n, float* y, int64_t y_stride) {
  KQuantRows<DType::kQ6_K>(w, row_begin, row_end, xa, n, y, y_stride);
}

bool MatVecLeavesQ6_K(const MatrixView& w, int64_t leaves, int64_t row_begin, int64_t row_end,
                      const std::byte* xa, int64_t xa_stride, float* const* parts) {
  return KQuantLeafRows<DType::kQ6_K>(w, leaves, row_begin, row_end, xa, xa_stride, parts);
}

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::kernels {
HWY_EXPORT(MatMulRowsQ6_K);
HWY_EXPORT(MatVecLeavesQ6_K);

void internal::MatMulRowsQ6_K(const MatrixView& w, int64_t row_begin, int64_t row_end,
                              const std::byte* xa, int64_t n, float* y, int64_t y_stride) {
  HWY_DYNAMIC_DISPATCH(MatMulRowsQ6_K)(w, row_begin, row_end, xa, n, y, y_stride);
}

bool internal::MatVecLeavesQ6_K(const MatrixView& w, int64_t leaves, int64_t row_begin,
                                int64_t row_end, const std::byte* xa, int64_t xa_stride,
                                float* const* parts) {
  return HWY_DYNAMIC_DISPATCH(MatVecLeavesQ6_K)(w, leaves, row_begin, row_end, xa, xa_stride,
                                                parts);
}

}  // namespace loom::kernels
#endif  // HWY_ONCE
