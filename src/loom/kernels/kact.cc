// Quantization of activation rows for the K-quant and MLX kernels (the "kact" layout of
// kernels_internal.h).  The 8-bit values are exactly reference::QuantizeActivations'.  A Highway
// SIMD version (one 32-value block at a time, as qact.cc) and the scalar one it must equal byte for
// byte (QuantizeKActRowsScalar, for tests).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "loom/kernels/kact.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstring>

#include "hwy/highway.h"
#include "loom/kernels/kernels_internal.h"
#include "loom/kernels/reference.h"

#ifndef LOOM_KERNELS_KACT_ONCE_
#define LOOM_KERNELS_KACT_ONCE_
namespace loom::kernels::internal {
namespace {

// The lanes of block s (0..3) in the tile group at o: d, the block's hs sum and Q6_K's
// corrections (kernels_internal.h), 4 lanes each.
inline void WriteTileLanes(std::byte* o, int64_t s, float d, float hs_lo, float hs_hi,
                           int32_t sum_lo, int32_t sum_hi) {
  auto* scale = reinterpret_cast<float*>(o + kKTileScale);
  auto* sum = reinterpret_cast<float*>(o + kKTileSum);
  auto* corr_lo = reinterpret_cast<int32_t*>(o + kKTileCorrLo);
  auto* corr_hi = reinterpret_cast<int32_t*>(o + kKTileCorrHi);
  for (int64_t r = 0; r < 4; ++r) {
    scale[4 * s + r] = d;
    sum[4 * s + r] = hs_lo + hs_hi;
    corr_lo[4 * s + r] = -8 * sum_lo;
    corr_hi[4 * s + r] = -8 * sum_hi;
  }
}

}  // namespace
}  // namespace loom::kernels::internal
#endif  // LOOM_KERNELS_KACT_ONCE_

HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Quantizes x(32) to q(32) with d = absmax / 127, q = nearest-even(x * (1 / d)) (the reference's
// arithmetic, lane by lane); returns d and the integer sums of values 0..15 and 16..31.
HWY_INLINE float QuantizeKBlock(const float* x, int8_t* q, int32_t* sum_lo, int32_t* sum_hi) {
  const hn::CappedTag<float, 16> df;  // at most 16 lanes, so no vector straddles the halves
  const hn::Rebind<int32_t, decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> d8;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  auto vmax = hn::Zero(df);
  for (int64_t j = 0; j < 32; j += lanes) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, x + j)));
  const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
  const float d = amax / 127.0f;
  const auto inv = hn::Set(df, d != 0.0f ? 1.0f / d : 0.0f);
  auto lo = hn::Zero(di), hi = hn::Zero(di);
  for (int64_t j = 0; j < 32; j += lanes) {
    const auto v = hn::NearestInt(hn::Mul(hn::LoadU(df, x + j), inv));
    if (j < 16) {
      lo = hn::Add(lo, v);
    } else {
      hi = hn::Add(hi, v);
    }
    hn::StoreU(hn::DemoteTo(d8, v), d8, q + j);
  }
  *sum_lo = hn::GetLane(hn::SumOfLanes(di, lo));
  *sum_hi = hn::GetLane(hn::SumOfLanes(di, hi));
  return d;
}

void QuantizeKActRows(const float* x, int64_t n, int64_t cols, std::byte* out) {
  using namespace internal;  // NOLINT: the layout constants
  const int64_t row_bytes = KActRowBytes(cols);
  const int64_t blocks = cols / 32;
  for (int64_t i = 0; i < n; ++i) {
    std::byte* o = out + i * row_bytes;
    auto* q = reinterpret_cast<int8_t*>(o);
    auto* d = reinterpret_cast<float*>(o + KActQBytes(cols));
    float* hs = d + blocks;
    std::byte* tiles = o + KActTileOffset(cols);
    if (blocks % 4 != 0) {
      std::memset(tiles + blocks / 4 * kKTileGroupBytes, 0, kKTileGroupBytes);
    }
    for (int64_t b = 0; b < blocks; ++b) {
      int32_t sum_lo, sum_hi;
      d[b] = QuantizeKBlock(x + i * cols + 32 * b, q + 32 * b, &sum_lo, &sum_hi);
      hs[2 * b] = d[b] * static_cast<float>(sum_lo);
      hs[2 * b + 1] = d[b] * static_cast<float>(sum_hi);
      std::byte* g = tiles + b / 4 * kKTileGroupBytes;
      const int64_t s = b % 4;
      std::memcpy(g + kKTileLo + 16 * s, q + 32 * b, 16);
      std::memcpy(g + kKTileHi + 16 * s, q + 32 * b + 16, 16);
      WriteTileLanes(g, s, d[b], hs[2 * b], hs[2 * b + 1], sum_lo, sum_hi);
    }
  }
}

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::kernels {
HWY_EXPORT(QuantizeKActRows);

void internal::QuantizeKActRows(const float* x, int64_t n, int64_t cols, std::byte* out) {
  HWY_DYNAMIC_DISPATCH(QuantizeKActRows)(x, n, cols, out);
}

void internal::QuantizeKActRowsScalar(const float* x, int64_t n, int64_t cols, std::byte* out) {
  const int64_t row_bytes = KActRowBytes(cols);
  const int64_t blocks = cols / 32;
  for (int64_t i = 0; i < n; ++i) {
    std::byte* o = out + i * row_bytes;
    auto* q = reinterpret_cast<int8_t*>(o);
    auto* d = reinterpret_cast<float*>(o + KActQBytes(cols));
    float* hs = d + blocks;
    reference::QuantizeActivations(x + i * cols, cols, q, d);
    std::byte* tiles = o + KActTileOffset(cols);
    std::memset(tiles, 0, static_cast<size_t>(row_bytes - KActTileOffset(cols)));
    for (int64_t b = 0; b < blocks; ++b) {
      int32_t sum[2] = {0, 0};
      for (int64_t j = 0; j < 32; ++j) sum[j / 16] += q[32 * b + j];
      hs[2 * b] = d[b] * static_cast<float>(sum[0]);
      hs[2 * b + 1] = d[b] * static_cast<float>(sum[1]);
      std::byte* g = tiles + b / 4 * kKTileGroupBytes;
      const int64_t s = b % 4;
      std::memcpy(g + kKTileLo + 16 * s, q + 32 * b, 16);
      std::memcpy(g + kKTileHi + 16 * s, q + 32 * b + 16, 16);
      WriteTileLanes(g, s, d[b], hs[2 * b], hs[2 * b + 1], sum[0], sum[1]);
    }
  }
}

}  // namespace loom::kernels
#endif  // HWY_ONCE
