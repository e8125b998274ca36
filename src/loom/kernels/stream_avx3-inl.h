// Helpers of the x86 matrix-vector kernels that stream weights from memory (matmul_quant-inl.h,
// matmul_quant_avx2-inl.h, matmul_kquant-inl.h and its tiles): the quad tiles' function attribute,
// software prefetch ahead of the rows being multiplied (AVX2, AVX3, AVX3_DL), masks for loads at
// the ends of rows (AVX3_DL), and the lane sums of the 256-bit quad tiles (AVX2, AVX3).  Included
// once per SIMD target.

#if defined(LOOM_KERNELS_STREAM_AVX3_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LOOM_KERNELS_STREAM_AVX3_INL_H_
#undef LOOM_KERNELS_STREAM_AVX3_INL_H_
#else
#define LOOM_KERNELS_STREAM_AVX3_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "loom/kernels/kernels_internal.h"
#include "loom/kernels/matrix.h"

HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX2

// The attribute of the quad tiles and their row loops (QuantRows, KTileRows): VNNI inside AVX3_DL
// only.
#undef LOOM_KERNELS_QUAD_ATTR
#if HWY_TARGET == HWY_AVX3_DL
#define LOOM_KERNELS_QUAD_ATTR LOOM_KERNELS_VNNI_ATTR
#else
#define LOOM_KERNELS_QUAD_ATTR
#endif

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

// Rows ahead of a quad that its product prefetches: kPrefetchBytes of rows of row_bytes, rounded
// up to whole quads, so that the prefetched bytes are those the same tile position of a later quad
// will read (less than a quad ahead, on long rows, re-prefetches rows of the current quad: the
// 5632-column down projection streamed at 0.63 of the read bandwidth, 0.72-0.85 in whole quads).
HWY_INLINE int64_t QuadPrefetchRows(int64_t row_bytes) {
  row_bytes = std::max<int64_t>(1, row_bytes);
  return (kPrefetchBytes + 4 * row_bytes - 1) / (4 * row_bytes) * 4;
}

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

// Prefetches the cache lines of [base + offset, base + offset + bytes) in order, a few per
// Next(), spread over `steps` calls: the quad `prefetch_offset` ahead as one sequential run
// instead of four interleaved rows.  On Zen 3 the hardware prefetchers follow the run much better: a read loop
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

// Prefetches the cache lines of [begin, begin + bytes), an address range that may lie past the
// matrix (integer arithmetic; prefetches never fault).
HWY_INLINE void PrefetchRegion(uintptr_t begin, int64_t bytes) {
  const uintptr_t end = begin + static_cast<uintptr_t>(bytes);
  for (uintptr_t a = begin & ~uintptr_t{63}; a < end; a += 64) {
    hwy::Prefetch(reinterpret_cast<const std::byte*>(a));
  }
}
HWY_INLINE void PrefetchRegion(const std::byte* p, int64_t bytes) {
  PrefetchRegion(reinterpret_cast<uintptr_t>(p), bytes);
}

// The bytes a leaf's product prefetches over its steps (LeafQuads): [begin, begin + bytes).
struct PrefetchRun {
  uintptr_t begin = 0;
  int64_t bytes = 0;  // 0: none
};

// Decode (n = 1) of a product split into column leaves (MatrixView::k_leaves): each quad of rows
// [row_begin, row_end) in turn, and each of its leaves, quad_leaf(r, rows_valid, leaf, rows, run)
// with rows[k] the leaf's bytes of row r + k (rows past rows_valid repeat a valid one), so that
// the rows stream from memory in order and once, as without leaves.  The quad prefetch_rows
// ahead is prefetched in shares, one per leaf: where rows are contiguous, run is the leaf's share
// of that quad's bytes, in order, for the leaf's product to spread over its steps (a burst of a
// share before each leaf, 145 lines for 2 leaves of Q6_K rows of 5632 values, stalled the
// product); elsewhere (tensor-parallel slices) each row's leaf, before the leaf, and run is empty.
// Leaf-major passes over blocks of rows, which read each row in pieces at different times, ran
// the products of the attention output and down projections at 0.5-0.7 of their speed without
// leaves on Zen 3 (docs/benchmarks.md).
//   row_bytes: the bytes of a row's cols (all leaves).
template <class QuadLeaf>
HWY_INLINE void LeafQuads(const MatrixView& w, int64_t leaves, int64_t row_bytes,
                          int64_t row_begin, int64_t row_end, int64_t prefetch_rows,
                          const QuadLeaf& quad_leaf) {
  const bool contiguous = w.row_stride == row_bytes;
  const int64_t leaf_bytes = row_bytes / leaves;
  const int64_t share = 4 * row_bytes / leaves;  // contiguous rows: each leaf's share
  for (int64_t r = row_begin; r < row_end; r += 4) {
    const int rows_valid = static_cast<int>(std::min<int64_t>(4, row_end - r));
    const uintptr_t ahead = reinterpret_cast<uintptr_t>(w.data) +
                            static_cast<uintptr_t>((r + prefetch_rows) * w.row_stride);
    const std::byte* rows[4];
    for (int k = 0; k < 4; ++k) rows[k] = w.data + (r + std::min(k, rows_valid - 1)) * w.row_stride;
    for (int64_t l = 0; l < leaves; ++l) {
      PrefetchRun run;
      if (contiguous) {
        run = {ahead + static_cast<uintptr_t>(l * share), share};
      } else {
        for (int64_t k = 0; k < 4; ++k) {
          PrefetchRegion(ahead + static_cast<uintptr_t>(k * w.row_stride + l * leaf_bytes),
                         leaf_bytes);
        }
      }
      quad_leaf(r, rows_valid, l, rows, run);
      for (int k = 0; k < 4; ++k) rows[k] += leaf_bytes;
    }
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

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX2

// Lane 4s+r of the result = the sum of the 4 32-bit lanes of block s (lanes 4s..4s+3) of v[r]
// (the in-lane unpacks of the AVX3_DL SumBlockLanes, on 256 bits).  kI16: the adds are of int16
// pairs, each 32-bit lane of the result two int16 sums.
enum LaneSum { kI32, kI16 };
template <LaneSum kSum>
HWY_INLINE __m256i SumBlockLanes256(const __m256i (&v)[4]) {
  const auto add = [](__m256i a, __m256i b) {
    return kSum == kI32 ? _mm256_add_epi32(a, b) : _mm256_add_epi16(a, b);
  };
  const __m256i s01 = add(_mm256_unpacklo_epi32(v[0], v[1]), _mm256_unpackhi_epi32(v[0], v[1]));
  const __m256i s23 = add(_mm256_unpacklo_epi32(v[2], v[3]), _mm256_unpackhi_epi32(v[2], v[3]));
  return add(_mm256_unpacklo_epi64(s01, s23), _mm256_unpackhi_epi64(s01, s23));
}

// y[r] = row r's sum for r < rows_valid, from the accumulators of a quad's halves (lane 4s' + r of
// half h: block 2h + s' of row r): (b0 + b2) + (b1 + b3), the tree of the AVX3_DL tiles' 512-bit
// reduction.
HWY_INLINE void StoreQuadRows256(__m256 half0, __m256 half1, int rows_valid, float* y) {
  const __m256 t = _mm256_add_ps(half0, half1);
  alignas(16) float rows_sum[4];
  _mm_store_ps(rows_sum, _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
  for (int r = 0; r < rows_valid; ++r) y[r] = rows_sum[r];
}

#endif  // HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX2

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
