// Helpers of the x86 matrix-vector kernels that stream weights from memory (matmul_quant-inl.h,
// matmul_quant_avx2-inl.h, matmul_kquant-inl.h): software prefetch ahead of the rows being
// multiplied (AVX2, AVX3, AVX3_DL), and masks for loads at the ends of rows (AVX3_DL).  Included
// once per SIMD target.

#if defined(LOOM_KERNELS_STREAM_AVX3_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LOOM_KERNELS_STREAM_AVX3_INL_H_
#undef LOOM_KERNELS_STREAM_AVX3_INL_H_
#else
#define LOOM_KERNELS_STREAM_AVX3_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/cache_control.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX2

// How far ahead of the rows being multiplied the weights are prefetched (8 KiB measured best of
// 2-16 KiB for the n = 1 Q4_0 path on Zen 5; rows of quantized weights are short, ~1-3 KiB, too
// short for the hardware prefetchers to ramp up).
inline constexpr int64_t kPrefetchBytes = 8192;

// Prefetches the kBytes bytes at p + offset: the weights `offset` bytes ahead of those being
// multiplied.  Prefetches never fault; integer arithmetic keeps an address past the end of the
// matrix from being formed as a pointer.
template <int64_t kBytes>
HWY_INLINE void PrefetchAhead(const std::byte* p, int64_t offset) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(offset);
  for (int64_t b = 0; b < kBytes; b += 64) {
    hwy::Prefetch(reinterpret_cast<const std::byte*>(address + static_cast<uintptr_t>(b)));
  }
}

#endif

#if HWY_TARGET == HWY_AVX3_DL

// Mask of the first `count` lanes of a vector of up to 64 (none if count <= 0).  Masked-out
// elements of a load are never read, so loads near the end of a mapping cannot fault.
HWY_INLINE __mmask64 FirstLanes(int64_t count) {
  if (count <= 0) return 0;
  if (count >= 64) return ~__mmask64{0};
  return (__mmask64{1} << count) - 1;
}

#endif  // HWY_TARGET == HWY_AVX3_DL

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
