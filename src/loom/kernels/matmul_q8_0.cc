// q8_0 weight matrix products: one translation unit per weight type (compiled once per SIMD
// target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "loom/kernels/matmul_q8_0.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "loom/kernels/kernels_internal.h"
#include "loom/kernels/matmul_quant-inl.h"

HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {

void MatMulRowsQ8_0(const MatrixView& w, int64_t row_begin, int64_t row_end, const std::byte* xq,
                    int64_t n, float* y, int64_t y_stride) {
  QuantRows<DType::kQ8_0>(w, row_begin, row_end, xq, n, y, y_stride);
}

bool MatVecLeavesQ8_0(const MatrixView& w, int64_t leaves, int64_t row_begin, int64_t row_end,
                      const std::byte* xq, int64_t xq_stride, float* const* parts) {
  return QuantLeafRows<DType::kQ8_0>(w, leaves, row_begin, row_end, xq, xq_stride, parts);
}

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::kernels {
HWY_EXPORT(MatMulRowsQ8_0);
HWY_EXPORT(MatVecLeavesQ8_0);

void internal::MatMulRowsQ8_0(const MatrixView& w, int64_t row_begin, int64_t row_end,
                              const std::byte* xq, int64_t n, float* y, int64_t y_stride) {
  HWY_DYNAMIC_DISPATCH(MatMulRowsQ8_0)(w, row_begin, row_end, xq, n, y, y_stride);
}

bool internal::MatVecLeavesQ8_0(const MatrixView& w, int64_t leaves, int64_t row_begin,
                                int64_t row_end, const std::byte* xq, int64_t xq_stride,
                                float* const* parts) {
  return HWY_DYNAMIC_DISPATCH(MatVecLeavesQ8_0)(w, leaves, row_begin, row_end, xq, xq_stride,
                                                parts);
}

}  // namespace loom::kernels
#endif  // HWY_ONCE
