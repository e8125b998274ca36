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

// How far ahead of the rows being multiplied the weights are prefetched, rounded up to whole
// quads of rows: rows of quantized weights are short, ~1-3 KiB, too short for the hardware
// prefetchers to ramp up.  AVX3_DL: 8 KiB, measured best of 2-16 KiB for the n = 1 Q4_0 path on
// Zen 5.  AVX2: 4 KiB (one quad of 2048-value rows), measured best of 2, 4 and 8 KiB with
// RegionPrefetcher on Zen 3.
#if HWY_TARGET == HWY_AVX3_DL
inline constexpr int64_t kPrefetchBytes = 8192;
#else
inline constexpr int64_t kPrefetchBytes = 4096;
#endif

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

// Prefetches the cache lines of [base + offset, base + offset + bytes) in order, a few per Next(), spread over
// `steps` calls: the quad `prefetch_offset` ahead as one sequential run instead of four
// interleaved rows.  On Zen 3 the hardware prefetchers follow the run much better: a read loop
// over quads of four 1,152-byte rows streamed 13-16 GB/s on one core prefetching each row ahead,
// 17-18 GB/s prefetching the run (sequential reads: 19-20); the AVX2 Q4_0 products of 2048-value
// rows rose from 0.60-0.70 to 0.80-0.94 of the read bandwidth (docs/benchmarks.md).
class RegionPrefetcher {
 public:
  // No prefetches when offset or steps is 0.
  HWY_INLINE RegionPrefetcher(const std::byte* base, int64_t offset, int64_t bytes,
                              int64_t steps) {
    if (offset == 0 || steps <= 0) return;
    // Integer arithmetic: the region may lie past the end of the matrix (prefetches never fault).
    const uintptr_t begin = reinterpret_cast<uintptr_t>(base) + static_cast<uintptr_t>(offset);
    next_ = begin & ~uintptr_t{63};
    end_ = begin + static_cast<uintptr_t>(bytes);
    const int64_t lines = static_cast<int64_t>((end_ - next_ + 63) / 64);
    per_step_ = (lines + steps - 1) / steps;
  }
  HWY_INLINE void Next() {
    for (int64_t k = 0; k < per_step_ && next_ < end_; ++k, next_ += 64) {
      hwy::Prefetch(reinterpret_cast<const std::byte*>(next_));
    }
  }

 private:
  uintptr_t next_ = 0, end_ = 0;
  int64_t per_step_ = 0;
};

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
