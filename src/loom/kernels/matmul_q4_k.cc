// q4_k weight matrix products: one translation unit per weight type (compiled once per SIMD
// target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "loom/kernels/matmul_q4_k.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "loom/kernels/kernels_internal.h"
#include "loom/kernels/matmul_kquant-inl.h"

HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {

void MatMulRowsQ4_K(const MatrixView& w, int64_t row_begin, int64_t row_end, const std::byte* xa,
                    int64_t n, float* y, int64_t y_stride) {
  KQuantRows<DType::kQ4_K>(w, row_begin, row_end, xa, n, y, y_stride);
}

bool MatVecLeavesQ4_K(const MatrixView& w, int64_t leaves, int64_t row_begin, int64_t row_end,
                      const std::byte* xa, int64_t xa_stride, float* const* parts) {
  return KQuantLeafRows<DType::kQ4_K>(w, leaves, row_begin, row_end, xa, xa_stride, parts);
}

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::kernels {
HWY_EXPORT(MatMulRowsQ4_K);
HWY_EXPORT(MatVecLeavesQ4_K);

void internal::MatMulRowsQ4_K(const MatrixView& w, int64_t row_begin, int64_t row_end,
                              const std::byte* xa, int64_t n, float* y, int64_t y_stride) {
  HWY_DYNAMIC_DISPATCH(MatMulRowsQ4_K)(w, row_begin, row_end, xa, n, y, y_stride);
}

bool internal::MatVecLeavesQ4_K(const MatrixView& w, int64_t leaves, int64_t row_begin,
                                int64_t row_end, const std::byte* xa, int64_t xa_stride,
                                float* const* parts) {
  return HWY_DYNAMIC_DISPATCH(MatVecLeavesQ4_K)(w, leaves, row_begin, row_end, xa, xa_stride,
                                                parts);
}

}  // namespace loom::kernels
#endif  // HWY_ONCE
