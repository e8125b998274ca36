// Q8_0 and Q4_0 quad tiles for AVX2 (and AVX-512 without VNNI/VBMI, the AVX3 target), included by
// matmul_quant-inl.h once per SIMD target; empty for other targets.
//
// The same scheme as the AVX3_DL tiles, on 256-bit vectors: a group of 4 blocks (128 values) of a
// quad of 4 rows is taken in two halves, blocks (0, 1) and (2, 3); half h of the qact group (its
// bytes [32h, 32h + 32) of lo, hi, corrections and scales) meets the half's quants decoded as
// bytes in the qact order.  AVX2 has no vpdpbusd: vpmaddubsw (unsigned x signed bytes, adjacent
// pairs summed into int16) and vpmaddwd with ones give the same 4-value int32 lanes exactly (Q4_0
// pairs are at most 2 * 15 * 127, no saturation; Q8_0 multiplies |w| by x with w's sign, as
// llama.cpp does, at most 2 * 128 * 127 per pair, and its lo and hi halves are widened apart).
// In-lane unpacks gather the 4 rows' lanes into one vector with a lane per (block, row), whose
// f32 part (convert, scale by d_w * d_x, fused multiply-add) is lane for lane the AVX3_DL one:
// each lane's chain of multiply-adds runs over the groups in order, and a row's 4 block lanes are
// added as (b0 + b2) + (b1 + b3) at the end.  So this path gives the AVX3_DL path's bits, and a
// position decoded alone the bits it has inside a batched prompt.
//
// Decode (one activation row) takes both halves of a group before the next group, so the rows
// stream in order; batched tiles take all groups of half 0, then of half 1 (16 ymm registers
// hold one half of a quad and the accumulators of kTileActs activation rows).

#if defined(LOOM_KERNELS_MATMUL_QUANT_AVX2_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LOOM_KERNELS_MATMUL_QUANT_AVX2_INL_H_
#undef LOOM_KERNELS_MATMUL_QUANT_AVX2_INL_H_
#else
#define LOOM_KERNELS_MATMUL_QUANT_AVX2_INL_H_
#endif

#include <cstring>

#include "hwy/highway.h"
#include "loom/kernels/block_formats.h"
#include "loom/kernels/kernels_internal.h"
#include "loom/kernels/stream_avx3-inl.h"

HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

// Activation rows per batched tile: half a quad (8 registers) and 4 accumulators.
inline constexpr int kTileActs = 4;

// Half h of one row's group (at p), as bytes in the qact order: blocks 2h, 2h + 1 in the two
// 128-bit lanes, values 0..15 in lo, 16..31 in hi.  Q4_0: unsigned nibbles (q + 8); Q8_0: the
// signed quants.  kPairs: the group in WeightLayout::kScalePairs, whose pair h holds exactly these
// bytes after its scales (one 32-byte load each instead of two 16-byte loads and an insert).
template <DType kType, bool kPairs>
HWY_INLINE void DecodeHalf(const std::byte* p, int h, __m256i* lo, __m256i* hi) {
  constexpr int64_t kB = internal::QuantBlockBytes(kType);
  const auto load = [](const std::byte* q) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  };
  const auto load256 = [](const std::byte* q) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  };
  const std::byte* b0 = p + 2 * h * kB + (kPairs ? 4 : 2);  // quants of block 2h (pair h)
  const std::byte* b1 = b0 + kB;                            // of block 2h + 1 (file)
  if constexpr (kType == DType::kQ4_0) {
    const __m256i bytes = kPairs ? load256(b0) : _mm256_set_m128i(load(b1), load(b0));
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    *lo = _mm256_and_si256(bytes, nibble);
    *hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble);
  } else if constexpr (kPairs) {
    *lo = load256(b0);
    *hi = load256(b0 + 32);
  } else {
    *lo = _mm256_set_m128i(load(b1), load(b0));
    *hi = _mm256_set_m128i(load(b1 + 16), load(b0 + 16));
  }
}

// f32 lane 4s + r: the scale of block 2h + s of row r (groups[r] = row r's group).
template <DType kType, bool kPairs>
HWY_INLINE __m256 HalfScales(const std::byte* const* groups, int h) {
  constexpr int64_t kB = internal::QuantBlockBytes(kType);
  // Kept in general registers: GCC otherwise packs these loads, shifts and ors into a dozen
  // vector shuffles per half (measured: 132 vector instructions per group instead of ~110),
  // while the integer units are idle.
  if constexpr (kPairs) {
    // Row r's two scales are one 32-bit word: words (r, s) in row order, then one byte shuffle
    // to the lane order.
    const auto word = [&](int r) {
      uint32_t v;
      std::memcpy(&v, groups[r] + 2 * h * kB, sizeof(v));
      return uint64_t{v};
    };
    uint64_t r01 = word(0) | word(1) << 32;
    uint64_t r23 = word(2) | word(3) << 32;
    asm("" : "+r"(r01), "+r"(r23));
    // (_mm_set_epi64x went through the stack: a store-forwarding stall per half.)
    const __m128i rows = _mm_unpacklo_epi64(_mm_cvtsi64_si128(static_cast<int64_t>(r01)),
                                            _mm_cvtsi64_si128(static_cast<int64_t>(r23)));
    const __m128i order = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    return _mm256_cvtph_ps(_mm_shuffle_epi8(rows, order));
  } else {
    uint64_t s0 = 0, s1 = 0;
    for (int r = 0; r < 4; ++r) {
      uint64_t w0 = internal::LoadU16(groups[r] + 2 * h * kB);
      uint64_t w1 = internal::LoadU16(groups[r] + (2 * h + 1) * kB);
      asm("" : "+r"(w0), "+r"(w1));
      s0 |= w0 << (16 * r);
      s1 |= w1 << (16 * r);
    }
    return _mm256_cvtph_ps(_mm_set_epi64x(static_cast<int64_t>(s1), static_cast<int64_t>(s0)));
  }
}

// acc[a][h] (lane 4s + r) += half h of the products of the quad's group (groups[r]) with the
// qact group of activation row a (at x + a * xq_stride).
template <DType kType, bool kPairs, int kActs>
HWY_INLINE void HalfStep(__m256 (&acc)[kActs][2], int h, const std::byte* const* groups,
                         const std::byte* x, int64_t xq_stride) {
  __m256i lo[4], hi[4];
  for (int r = 0; r < 4; ++r) DecodeHalf<kType, kPairs>(groups[r], h, &lo[r], &hi[r]);
  const __m256 d = HalfScales<kType, kPairs>(groups, h);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int a = 0; a < kActs; ++a) {
    const std::byte* xa = x + a * xq_stride;
    const auto load = [&](int64_t offset) {
      return _mm256_load_si256(reinterpret_cast<const __m256i*>(xa + offset + 32 * h));
    };
    const __m256i x_lo = load(internal::kQActLo);
    const __m256i x_hi = load(internal::kQActHi);
    __m256i sums[4];
    __m256i isum;
    if constexpr (kType == DType::kQ4_0) {
      // int16 sums of 4 products (at most 4 * 15 * 127), gathered per (block, row) by the unpacks
      // of SumBlockLanes256 while they fit 16 bits (16 products: at most 30,480), then widened.
      // Its first level runs per pair of rows as soon as the pair is multiplied (fewer registers
      // live in the batched tiles, which spill: MatMul 2048x5632 n = 128 +2-3% on one Zen 3 core).
      const auto pair = [&](int r) __attribute__((always_inline)) {
        const auto v = [&](int k) __attribute__((always_inline)) {
          return _mm256_add_epi16(_mm256_maddubs_epi16(lo[k], x_lo),
                                  _mm256_maddubs_epi16(hi[k], x_hi));
        };
        const __m256i v0 = v(r), v1 = v(r + 1);
        return _mm256_add_epi16(_mm256_unpacklo_epi32(v0, v1), _mm256_unpackhi_epi32(v0, v1));
      };
      const __m256i s01 = pair(0);
      const __m256i s23 = pair(2);
      isum = _mm256_madd_epi16(
          _mm256_add_epi16(_mm256_unpacklo_epi64(s01, s23), _mm256_unpackhi_epi64(s01, s23)), ones);
      // The 4 correction lanes of a block, -2 * sum(x) each, remove the nibbles' offset of 8.
      isum = _mm256_add_epi32(isum, _mm256_slli_epi32(load(internal::kQActCorr), 2));
    } else {
      for (int r = 0; r < 4; ++r) {
        const __m256i p_lo =
            _mm256_maddubs_epi16(_mm256_abs_epi8(lo[r]), _mm256_sign_epi8(x_lo, lo[r]));
        const __m256i p_hi =
            _mm256_maddubs_epi16(_mm256_abs_epi8(hi[r]), _mm256_sign_epi8(x_hi, hi[r]));
        sums[r] = _mm256_add_epi32(_mm256_madd_epi16(p_lo, ones), _mm256_madd_epi16(p_hi, ones));
      }
      isum = SumBlockLanes256<kI32>(sums);
    }
    const __m256 scale =
        _mm256_mul_ps(d, _mm256_load_ps(reinterpret_cast<const float*>(
                             xa + internal::kQActScale + 32 * h)));
    acc[a][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, acc[a][h]);
  }
}

// y[a * y_stride + r] = dot(row r, activation row a) for r < rows_valid (<= 4), a < kActs; rows
// past rows_valid repeat a valid row and are not stored.  With prefetch_offset != 0, also
// prefetches the quad that far ahead, as one run (RegionPrefetcher), or, with prefetch_bytes > 0,
// the prefetch_bytes at rows[0] + prefetch_offset (a leaf's share: LeafQuads).  kPairs: the rows
// in WeightLayout::kScalePairs.
template <DType kType, bool kPairs, int kActs>
HWY_INLINE void QuadTile(const std::byte* const* rows, int rows_valid, int64_t prefetch_offset,
                         int64_t blocks, const std::byte* xq, int64_t xq_stride, float* y,
                         int64_t y_stride, int64_t prefetch_bytes = 0) {
  constexpr int64_t kGroupBytes = 4 * internal::QuantBlockBytes(kType);
  __m256 acc[kActs][2];
  for (int a = 0; a < kActs; ++a) acc[a][0] = acc[a][1] = _mm256_setzero_ps();
  const int64_t full = blocks / 4;
  const auto groups_of = [&](int64_t g, const std::byte* (&groups)[4]) {
    for (int r = 0; r < 4; ++r) groups[r] = rows[r] + g * kGroupBytes;
  };
  // Both halves per group (decode: the rows stream in order), or all groups per half.
  constexpr int kHalfPasses = kActs == 1 ? 1 : 2;
  const int64_t quad_bytes = prefetch_bytes > 0
                                 ? prefetch_bytes
                                 : rows[3] - rows[0] + blocks * internal::QuantBlockBytes(kType);
  RegionPrefetcher prefetcher(rows[0], prefetch_offset, quad_bytes, full);
  for (int pass = 0; pass < kHalfPasses; ++pass) {
    for (int64_t g = 0; g < full; ++g) {
      const std::byte* groups[4];
      groups_of(g, groups);
      if (pass == 0) prefetcher.Next();
      const std::byte* x = xq + g * internal::kQActGroupBytes;
      if constexpr (kHalfPasses == 1) {
        HalfStep<kType, kPairs, kActs>(acc, 0, groups, x, xq_stride);
        HalfStep<kType, kPairs, kActs>(acc, 1, groups, x, xq_stride);
      } else {
        HalfStep<kType, kPairs, kActs>(acc, pass, groups, x, xq_stride);
      }
    }
  }
  if (blocks % 4 != 0) {
    // The last partial group from zero-padded copies (nothing past a row is read): missing blocks
    // have zero scales, and their activations are zero.  kPairs: a row's unpaired last block (as
    // in the file) becomes the first half of a pair.
    constexpr int64_t kB = internal::QuantBlockBytes(kType);
    alignas(32) std::byte tail[4][kGroupBytes] = {};
    const std::byte* groups[4];
    groups_of(full, groups);
    const int64_t left = blocks % 4;
    for (int r = 0; r < 4; ++r) {
      std::memcpy(tail[r], groups[r], static_cast<size_t>(left * kB));
      if (kPairs && left % 2 != 0) {  // with the zeros after it
        internal::ConvertScalePairs(kType, /*to_pairs=*/true, tail[r] + (left - 1) * kB, 2);
      }
      groups[r] = tail[r];
    }
    const std::byte* x = xq + full * internal::kQActGroupBytes;
    HalfStep<kType, kPairs, kActs>(acc, 0, groups, x, xq_stride);
    HalfStep<kType, kPairs, kActs>(acc, 1, groups, x, xq_stride);
  }
  for (int a = 0; a < kActs; ++a) {
    StoreQuadRows256(acc[a][0], acc[a][1], rows_valid, y + a * y_stride);
  }
}

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
