// q5_k weight matrix products: one translation unit per weight type (compiled once per SIMD
// target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "loom/kernels/matmul_q5_k.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "loom/kernels/kernels_internal.h"
#include "loom/kernels/matmul_kquant-inl.h"

HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {

void MatMulRowsQ5_K(const MatrixView& w, int64_t row_begin, int64_t row_end, const std::byte* xa,
                    int64_t n, float* y, int64_t y_stride) {
  KQuantRows<DType::kQ5_K>(w, row_begin, row_end, xa, n, y, y_stride);
}

bool MatVecLeavesQ5_K(const MatrixView& w, int64_t leaves, int64_t row_begin, int64_t row_end,
                      const std::byte* xa, int64_t xa_stride, float* const* parts) {
  return KQuantLeafRows<DType::kQ5_K>(w, leaves, row_begin, row_end, xa, xa_stride, parts);
}

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::kernels {
HWY_EXPORT(MatMulRowsQ5_K);
HWY_EXPORT(MatVecLeavesQ5_K);

void internal::MatMulRowsQ5_K(const MatrixView& w, int64_t row_begin, int64_t row_end,
                              const std::byte* xa, int64_t n, float* y, int64_t y_stride) {
  HWY_DYNAMIC_DISPATCH(MatMulRowsQ5_K)(w, row_begin, row_end, xa, n, y, y_stride);
}

bool internal::MatVecLeavesQ5_K(const MatrixView& w, int64_t leaves, int64_t row_begin,
                                int64_t row_end, const std::byte* xa, int64_t xa_stride,
                                float* const* parts) {
  return HWY_DYNAMIC_DISPATCH(MatVecLeavesQ5_K)(w, leaves, row_begin, row_end, xa, xa_stride,
                                                parts);
}

}  // namespace loom::kernels
#endif  // HWY_ONCE
