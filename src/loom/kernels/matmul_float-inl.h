// Matrix products for float weight types (f32, f16, bf16): included once per SIMD target by
// matmul_f32.cc, matmul_f16.cc and matmul_bf16.cc (Highway foreach_target).
//
// Register tiles of kRows weight rows x kActs activation rows: each weight vector is loaded (and
// converted) once for kActs rows of x, each x vector once for kRows weight rows.  Products and sums
// stay in f32 with fused multiply-adds.

#if defined(LOOM_KERNELS_MATMUL_FLOAT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LOOM_KERNELS_MATMUL_FLOAT_INL_H_
#undef LOOM_KERNELS_MATMUL_FLOAT_INL_H_
#else
#define LOOM_KERNELS_MATMUL_FLOAT_INL_H_
#endif

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "loom/base/half.h"
#include "loom/kernels/matrix.h"

HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Loads Lanes(df) weights at p (element type W: float, hwy::float16_t or hwy::bfloat16_t) as f32.
template <class W, class DF>
HWY_INLINE hn::Vec<DF> LoadWeightsF32(DF df, const std::byte* p) {
  if constexpr (std::is_same_v<W, float>) {
    return hn::LoadU(df, reinterpret_cast<const float*>(p));
  } else {
    return hn::PromoteTo(df, hn::LoadU(hn::Rebind<W, DF>(), reinterpret_cast<const W*>(p)));
  }
}

template <class W>
HWY_INLINE float WeightToF32(const std::byte* p) {
  if constexpr (std::is_same_v<W, float>) {
    float v;
    std::memcpy(&v, p, sizeof(v));
    return v;
  } else {
    uint16_t bits;
    std::memcpy(&bits, p, sizeof(bits));
    return std::is_same_v<W, hwy::float16_t> ? base::F16ToF32(bits) : base::Bf16ToF32(bits);
  }
}

// y[a * y_stride + r] = dot(row r of w, row a of x) for r < kRows, a < kActs.  With `prefetch`,
// also prefetches the rows prefetch[0..kRows) a few rows ahead (the hardware prefetchers ramp up
// too slowly on rows of a few KiB).
template <class W, int kRows, int kActs>
HWY_INLINE void FloatTile(const std::byte* const* w_rows, const std::byte* const* prefetch,
                          const float* x, int64_t cols, float* y, int64_t y_stride) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  constexpr int64_t kBytes = sizeof(W);
  hn::Vec<decltype(df)> acc[kRows][kActs];
  for (int r = 0; r < kRows; ++r) {
    for (int a = 0; a < kActs; ++a) acc[r][a] = hn::Zero(df);
  }
  int64_t c = 0;
  for (; c + lanes <= cols; c += lanes) {
    if (prefetch != nullptr) {
      for (int r = 0; r < kRows; ++r) hwy::Prefetch(prefetch[r] + c * kBytes);
    }
    hn::Vec<decltype(df)> xv[kActs];
    for (int a = 0; a < kActs; ++a) xv[a] = hn::LoadU(df, x + a * cols + c);
    for (int r = 0; r < kRows; ++r) {
      const auto wv = LoadWeightsF32<W>(df, w_rows[r] + c * kBytes);
      for (int a = 0; a < kActs; ++a) acc[r][a] = hn::MulAdd(wv, xv[a], acc[r][a]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int a = 0; a < kActs; ++a) {
      float sum = hn::GetLane(hn::SumOfLanes(df, acc[r][a]));
      for (int64_t t = c; t < cols; ++t) {
        sum += WeightToF32<W>(w_rows[r] + t * kBytes) * x[a * cols + t];
      }
      y[a * y_stride + r] = sum;
    }
  }
}

template <class W>
void FloatRows(const MatrixView& w, int64_t row_begin, int64_t row_end, const float* x, int64_t n,
               float* y, int64_t y_stride) {
  constexpr int kRows = 4;
  constexpr int kActs = 4;
  constexpr int64_t kPrefetchBytes = 8192;
  const int64_t cols = w.cols;
  const int64_t row_bytes = std::max<int64_t>(1, cols * static_cast<int64_t>(sizeof(W)));
  // Whole row tiles ahead: less than a tile ahead re-prefetches rows of the current tile.
  const int64_t ahead_rows =
      (kPrefetchBytes + kRows * row_bytes - 1) / (kRows * row_bytes) * kRows;
  const auto row_ptr = [&](int64_t r) { return w.data + r * w.row_stride; };
  // Activation rows are processed in chunks that stay in L2 (~256 KiB) while every row tile of
  // this thread's weights passes over them.
  const int64_t chunk = std::max<int64_t>(
      kActs, (int64_t{256} << 10) / std::max<int64_t>(1, cols * 4) / kActs * kActs);
  for (int64_t i0 = 0; i0 < n; i0 += chunk) {
    const int64_t i1 = std::min(n, i0 + chunk);
    int64_t r = row_begin;
    for (; r + kRows <= row_end; r += kRows) {
      const std::byte* rows[kRows];
      const std::byte* ahead[kRows];
      for (int k = 0; k < kRows; ++k) {
        rows[k] = row_ptr(r + k);
        // Past the end, prefetch the row itself (harmless: already cached).
        ahead[k] = row_ptr(r + k + ahead_rows < row_end ? r + k + ahead_rows : r + k);
      }
      // Only the first pass over a row tile reads it from memory; later ones hit the L1.
      const std::byte* const* prefetch = ahead;
      int64_t i = i0;
      for (; i + kActs <= i1; i += kActs) {
        FloatTile<W, kRows, kActs>(rows, prefetch, x + i * cols, cols, y + i * y_stride + r,
                                   y_stride);
        prefetch = nullptr;
      }
      for (; i < i1; ++i) {
        FloatTile<W, kRows, 1>(rows, prefetch, x + i * cols, cols, y + i * y_stride + r, y_stride);
        prefetch = nullptr;
      }
    }
    for (; r < row_end; ++r) {
      const std::byte* rows[1] = {row_ptr(r)};
      int64_t i = i0;
      for (; i + kActs <= i1; i += kActs) {
        FloatTile<W, 1, kActs>(rows, nullptr, x + i * cols, cols, y + i * y_stride + r, y_stride);
      }
      for (; i < i1; ++i) {
        FloatTile<W, 1, 1>(rows, nullptr, x + i * cols, cols, y + i * y_stride + r, y_stride);
      }
    }
  }
}

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
