// q4_0 weight matrix products: one translation unit per weight type (compiled once per SIMD
// target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "loom/kernels/matmul_q4_0.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "loom/kernels/kernels_internal.h"
#include "loom/kernels/matmul_quant-inl.h"

HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {

void MatMulRowsQ4_0(const MatrixView& w, int64_t row_begin, int64_t row_end, const std::byte* xq,
                    int64_t n, float* y, int64_t y_stride) {
  QuantRows<DType::kQ4_0>(w, row_begin, row_end, xq, n, y, y_stride);
}

bool MatVecLeavesQ4_0(const MatrixView& w, int64_t leaves, int64_t row_begin, int64_t row_end,
                      const std::byte* xq, int64_t xq_stride, float* const* parts) {
  return QuantLeafRows<DType::kQ4_0>(w, leaves, row_begin, row_end, xq, xq_stride, parts);
}

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::kernels {
HWY_EXPORT(MatMulRowsQ4_0);
HWY_EXPORT(MatVecLeavesQ4_0);

void internal::MatMulRowsQ4_0(const MatrixView& w, int64_t row_begin, int64_t row_end,
                              const std::byte* xq, int64_t n, float* y, int64_t y_stride) {
  HWY_DYNAMIC_DISPATCH(MatMulRowsQ4_0)(w, row_begin, row_end, xq, n, y, y_stride);
}

bool internal::MatVecLeavesQ4_0(const MatrixView& w, int64_t leaves, int64_t row_begin,
                                int64_t row_end, const std::byte* xq, int64_t xq_stride,
                                float* const* parts) {
  return HWY_DYNAMIC_DISPATCH(MatVecLeavesQ4_0)(w, leaves, row_begin, row_end, xq, xq_stride,
                                                parts);
}

}  // namespace loom::kernels
#endif  // HWY_ONCE
