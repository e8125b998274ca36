// Quantization of activation rows to the 8-bit "qact" layout (kernels_internal.h) read by the
// Q8_0 and Q4_0 matrix products.  Bit-identical to reference::QuantizeActivations.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "loom/kernels/qact.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstring>

#include "hwy/highway.h"
#include "loom/kernels/kernels_internal.h"

HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Quantizes x(32) with d = absmax / 127, q = nearest-even(x * (1 / d)); values 0..15 go to lo(16),
// 16..31 to hi(16).  Returns d.
HWY_INLINE float QuantizeBlock(const float* x, int8_t* lo, int8_t* hi) {
  const hn::CappedTag<float, 16> df;  // at most 16 lanes, so no vector straddles lo and hi
  const hn::Rebind<int8_t, decltype(df)> d8;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  auto vmax = hn::Zero(df);
  for (int64_t j = 0; j < 32; j += lanes) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, x + j)));
  const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
  const float d = amax / 127.0f;
  const auto inv = hn::Set(df, d != 0.0f ? 1.0f / d : 0.0f);
  for (int64_t j = 0; j < 32; j += lanes) {
    const auto q = hn::DemoteTo(d8, hn::NearestInt(hn::Mul(hn::LoadU(df, x + j), inv)));
    hn::StoreU(q, d8, j < 16 ? lo + j : hi + (j - 16));
  }
  return d;
}

#if HWY_TARGET == HWY_AVX3_DL
LOOM_KERNELS_VNNI_ATTR
#endif
void QuantizeActivationRows(const float* x, int64_t n, int64_t cols, int32_t corr_mult,
                            std::byte* out) {
  using internal::kQActGroupBytes;
  const int64_t blocks = cols / 32;
  const int64_t groups = (blocks + 3) / 4;
  const int64_t row_bytes = groups * kQActGroupBytes;
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * cols;
    for (int64_t g = 0; g < groups; ++g) {
      std::byte* o = out + i * row_bytes + g * kQActGroupBytes;
      int8_t* lo = reinterpret_cast<int8_t*>(o + internal::kQActLo);
      int8_t* hi = reinterpret_cast<int8_t*>(o + internal::kQActHi);
      float scales[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      const int64_t in_group = std::min<int64_t>(4, blocks - 4 * g);
      if (in_group < 4) std::memset(o, 0, kQActGroupBytes);
      for (int64_t s = 0; s < in_group; ++s) {
        scales[s] = QuantizeBlock(xi + (4 * g + s) * 32, lo + 16 * s, hi + 16 * s);
      }
      int32_t* corr = reinterpret_cast<int32_t*>(o + internal::kQActCorr);
      float* scale = reinterpret_cast<float*>(o + internal::kQActScale);
#if HWY_TARGET == HWY_AVX3_DL
      {
        // Lane sums of 4 bytes (vpdpbusd with ones), then the 4 lanes of each block.
        const __m512i ones = _mm512_set1_epi8(1);
        __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_load_si512(lo));
        sums = _mm512_dpbusd_epi32(sums, ones, _mm512_load_si512(hi));
        sums = _mm512_add_epi32(sums, _mm512_shuffle_epi32(sums, _MM_PERM_CDAB));
        sums = _mm512_add_epi32(sums, _mm512_shuffle_epi32(sums, _MM_PERM_BADC));
        _mm512_store_si512(corr, _mm512_mullo_epi32(sums, _mm512_set1_epi32(-corr_mult)));
        _mm512_store_ps(scale, _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2,
                                                                       2, 2, 3, 3, 3, 3),
                                                     _mm512_castps128_ps512(_mm_loadu_ps(scales))));
      }
#else
      for (int b = 0; b < 4; ++b) {
        int32_t sum = 0;
        for (int j = 0; j < 16; ++j) sum += lo[16 * b + j] + hi[16 * b + j];
        for (int r = 0; r < 4; ++r) {
          corr[4 * b + r] = -corr_mult * sum;
          scale[4 * b + r] = scales[b];
        }
      }
#endif
    }
  }
}

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::kernels {
HWY_EXPORT(QuantizeActivationRows);

void internal::QuantizeActivationRows(const float* x, int64_t n, int64_t cols, int32_t corr_mult,
                                      std::byte* out) {
  HWY_DYNAMIC_DISPATCH(QuantizeActivationRows)(x, n, cols, corr_mult, out);
}

}  // namespace loom::kernels
#endif  // HWY_ONCE
