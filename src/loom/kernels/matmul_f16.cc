// f16 weight matrix products: one translation unit per weight type (compiled once per SIMD target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "loom/kernels/matmul_f16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "loom/kernels/kernels_internal.h"
#include "loom/kernels/matmul_float-inl.h"

HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {

void MatMulRowsF16(const MatrixView& w, int64_t row_begin, int64_t row_end, const float* x,
                   int64_t n, float* y, int64_t y_stride) {
  FloatRows<hwy::float16_t>(w, row_begin, row_end, x, n, y, y_stride);
}

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::kernels {
HWY_EXPORT(MatMulRowsF16);

void internal::MatMulRowsF16(const MatrixView& w, int64_t row_begin, int64_t row_end,
                             const float* x, int64_t n, float* y, int64_t y_stride) {
  HWY_DYNAMIC_DISPATCH(MatMulRowsF16)(w, row_begin, row_end, x, n, y, y_stride);
}

}  // namespace loom::kernels
#endif  // HWY_ONCE
