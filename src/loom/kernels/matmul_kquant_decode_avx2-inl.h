// Decode (one activation row, n = 1) of the K-quant (Q4_K, Q5_K, Q6_K) and MLX products on AVX2
// and AVX3 (AVX-512 without VNNI): the tiles of matmul_kquant_tile_avx2-inl.h with one activation
// row, cheaper in instructions.  Included by matmul_kquant-inl.h once per SIMD target; empty for
// other targets.  KTileRows (matmul_kquant-inl.h) hands decode calls to KMlxDecodeRows and
// KQDecodeRows.
//
// On Zen 3 these products are compute-bound in decode, and many of their instructions ran on the
// two shuffle/shift pipes (unpacks, shifts, vpermps, byte widening, lane inserts) or kept values
// on the stack.  So, with the same lanes and the same f32 arithmetic as the tiles (the same bits:
// matmul_kquant_lanes_test holds both to a scalar model):
//  - MLX factors (scales, biases) of a quad's rows are transposed once per quad into a table with
//    a 4-row vector per group, which each step loads as the factor lanes 4s' + r of its halves
//    (no per-step permutes and widening); K-quant factors come from the row-order header bytes by
//    one vpshufb per vector, a super-block ahead, into a small table;
//  - 4-bit MLX weights meet activations kept in nibble order: a copy of the activation row, made
//    once per call, holds each block's even values, then its odd ones, so that a byte's low and
//    high nibbles multiply as they are loaded (no byte interleaving of the weights);
//  - Q6_K blocks are decoded in value order and meet the kact row's own values (fewer shifts, no
//    lane inserts);
//  - integer sums are added in int16 through the lane tree (or its first level) where no int16
//    can overflow, and widened once;
//  - the quad-ahead prefetch run (RegionPrefetcher's) stays in registers.
// The integer dot product of a (block, row) lane is exact whichever way its products are paired,
// so only the f32 part fixes the bits, and it is the tiles' own.

#if defined(LOOM_KERNELS_MATMUL_KQUANT_DECODE_AVX2_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LOOM_KERNELS_MATMUL_KQUANT_DECODE_AVX2_INL_H_
#undef LOOM_KERNELS_MATMUL_KQUANT_DECODE_AVX2_INL_H_
#else
#define LOOM_KERNELS_MATMUL_KQUANT_DECODE_AVX2_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "loom/kernels/block_formats.h"
#include "loom/kernels/kernels_internal.h"
#include "loom/kernels/matmul.h"
#include "loom/kernels/matmul_kquant_tile-inl.h"
#include "loom/kernels/matmul_kquant_tile_avx2-inl.h"
#include "loom/kernels/stream_avx3-inl.h"

HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

// MLX rows of up to kKDecodeMaxSteps * 128 values (16384) take this path; longer ones the tiles.
inline constexpr int64_t kKDecodeMaxSteps = 128;

// The activation row of a decode call: its kact tile groups and, for MLX 4-bit weights, its values
// in nibble order (step s at nibbles + 128 s: bytes [16b, 16b + 16) hold values 0, 2, .., 30 of
// block b of the step, bytes [64 + 16b, 64 + 16b + 16) values 1, 3, .., 31).
struct KDecodeActs {
  const std::byte* tiles = nullptr;
  const std::byte* nibbles = nullptr;
};

// The nibble-order copy of n_steps tile groups at tiles (out: 128 bytes per step, 32-byte aligned).
HWY_INLINE void KNibbleOrderActs(const std::byte* tiles, int64_t n_steps, std::byte* out) {
  // Per 128-bit lane: even bytes to the low 8, odd bytes to the high 8.
  const __m256i split = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2,
                                         4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  for (int64_t s = 0; s < n_steps; ++s) {
    const std::byte* g = tiles + s * internal::kKTileGroupBytes;
    std::byte* o = out + 128 * s;
    for (int hh = 0; hh < 2; ++hh) {  // blocks 2hh, 2hh + 1 in the 128-bit lanes
      const __m256i lo = _mm256_shuffle_epi8(
          _mm256_load_si256(reinterpret_cast<const __m256i*>(g + internal::kKTileLo + 32 * hh)),
          split);
      const __m256i hi = _mm256_shuffle_epi8(
          _mm256_load_si256(reinterpret_cast<const __m256i*>(g + internal::kKTileHi + 32 * hh)),
          split);
      _mm256_store_si256(reinterpret_cast<__m256i*>(o + 32 * hh), _mm256_unpacklo_epi64(lo, hi));
      _mm256_store_si256(reinterpret_cast<__m256i*>(o + 64 + 32 * hh),
                         _mm256_unpackhi_epi64(lo, hi));
    }
  }
}

// ---- The factor table of a quad: the f32 scale (or bias) of group g in rows 0..3 at
// t + KGroupAt(g), zero for the groups past the row's last up to the end of its last step.
// Groups of 32 values (a step's half takes two groups) sit in order, 4 floats each; larger groups
// (a half broadcasts one) in the order of the 256-bit transposes of bf16 groups below: group g at
// float 128 (g / 16) + 8 (g % 8) + 4 (g / 8 % 2).

template <bool kInterleaved>
HWY_INLINE int64_t KGroupAt(int64_t g) {
  if constexpr (!kInterleaved) return 4 * g;
  return 128 * (g >> 4) + 8 * (g & 7) + 4 * ((g >> 3) & 1);
}

// Groups [g0, g0 + 16 / scale bytes) of the 4 rows at base[r] (kFull), or the `count` < that
// left at the ends of the rows (zeros after them: nothing past a row is read).
template <bool kFull, bool kInterleaved>
HWY_INLINE void KTransposeGroups(DType type, const std::byte* const* base, int64_t g0,
                                 int64_t count, float* t) {
  const int64_t sb = type == DType::kF32 ? 4 : 2;
  __m128i v[4];
  for (int r = 0; r < 4; ++r) {
    const std::byte* p = base[r] + g0 * sb;
    v[r] =
        kFull ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)) : KLoadHead16(p, count * sb);
  }
  const auto store = [&](int64_t j, __m128 g) __attribute__((always_inline)) {
    if (kFull || j < count) _mm_store_ps(t + KGroupAt<kInterleaved>(g0 + j), g);
  };
  if (type == DType::kF32) {
    const __m128 t01 = _mm_unpacklo_ps(_mm_castsi128_ps(v[0]), _mm_castsi128_ps(v[1]));
    const __m128 t23 = _mm_unpacklo_ps(_mm_castsi128_ps(v[2]), _mm_castsi128_ps(v[3]));
    const __m128 u01 = _mm_unpackhi_ps(_mm_castsi128_ps(v[0]), _mm_castsi128_ps(v[1]));
    const __m128 u23 = _mm_unpackhi_ps(_mm_castsi128_ps(v[2]), _mm_castsi128_ps(v[3]));
    store(0, _mm_movelh_ps(t01, t23));
    store(1, _mm_movehl_ps(t23, t01));
    store(2, _mm_movelh_ps(u01, u23));
    store(3, _mm_movehl_ps(u23, u01));
    return;
  }
  // 16-bit words: u[k] holds groups 2k, 2k + 1 of rows 0..3 in words 4j + r.
  const __m128i t0 = _mm_unpacklo_epi16(v[0], v[1]), t1 = _mm_unpackhi_epi16(v[0], v[1]);
  const __m128i t2 = _mm_unpacklo_epi16(v[2], v[3]), t3 = _mm_unpackhi_epi16(v[2], v[3]);
  const __m128i u[4] = {_mm_unpacklo_epi32(t0, t2), _mm_unpackhi_epi32(t0, t2),
                        _mm_unpacklo_epi32(t1, t3), _mm_unpackhi_epi32(t1, t3)};
  for (int k = 0; k < 4; ++k) {
    if (type == DType::kF16) {
      const __m256 f = _mm256_cvtph_ps(u[k]);
      store(2 * k, _mm256_castps256_ps128(f));
      store(2 * k + 1, _mm256_extractf128_ps(f, 1));
    } else {  // bf16: the f32 with these high 16 bits
      const __m128i zero = _mm_setzero_si128();
      store(2 * k, _mm_castsi128_ps(_mm_unpacklo_epi16(zero, u[k])));
      store(2 * k + 1, _mm_castsi128_ps(_mm_unpackhi_epi16(zero, u[k])));
    }
  }
}

// bf16 groups [g0, g0 + 16) (g0 a multiple of 16) into the interleaved layout: the 128-bit
// transposes above on both lanes at once (groups g0..g0 + 7 in the low lanes, g0 + 8.. in the
// high), half the instructions per group, stored whole.
HWY_INLINE void KTransposeBf16Groups16(const std::byte* const* base, int64_t g0, float* t) {
  __m256i v[4];
  for (int r = 0; r < 4; ++r) {
    v[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base[r] + 2 * g0));
  }
  const __m256i t0 = _mm256_unpacklo_epi16(v[0], v[1]), t1 = _mm256_unpackhi_epi16(v[0], v[1]);
  const __m256i t2 = _mm256_unpacklo_epi16(v[2], v[3]), t3 = _mm256_unpackhi_epi16(v[2], v[3]);
  const __m256i u[4] = {_mm256_unpacklo_epi32(t0, t2), _mm256_unpackhi_epi32(t0, t2),
                        _mm256_unpacklo_epi32(t1, t3), _mm256_unpackhi_epi32(t1, t3)};
  const __m256i zero = _mm256_setzero_si256();
  float* out = t + KGroupAt<true>(g0);
  for (int k = 0; k < 4; ++k) {  // groups 2k, 2k + 1 (and 8 more)
    _mm256_store_si256(reinterpret_cast<__m256i*>(out + 8 * (2 * k)),
                       _mm256_unpacklo_epi16(zero, u[k]));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out + 8 * (2 * k + 1)),
                       _mm256_unpackhi_epi16(zero, u[k]));
  }
}

// The table of the 4 rows' `groups` groups at base[r], zero up to group `padded`.
template <bool kInterleaved>
HWY_INLINE void KFactorTableOf(DType type, const std::byte* const* base, int64_t groups,
                               int64_t padded, float* t) {
  const int64_t per = type == DType::kF32 ? 4 : 8;  // groups per 16-byte load
  int64_t g0 = 0;
  if (kInterleaved && type == DType::kBF16) {
    for (; g0 + 16 <= groups; g0 += 16) KTransposeBf16Groups16(base, g0, t);
  }
  for (; g0 + per <= groups; g0 += per) {
    KTransposeGroups<true, kInterleaved>(type, base, g0, per, t);
  }
  if (g0 < groups) KTransposeGroups<false, kInterleaved>(type, base, g0, groups - g0, t);
  // The groups of a partial last chunk past the row's last are zero, as the tiles' masked loads.
  for (int64_t g = groups; g < padded; ++g) {
    _mm_store_ps(t + KGroupAt<kInterleaved>(g), _mm_setzero_ps());
  }
}

// RegionPrefetcher's run of lines (the quad ahead, in order, a part per step) without its end test
// (prefetches past the run never fault), held by value so that it stays in registers: GCC kept
// RegionPrefetcher's loop counter in memory, a tenth of the MLX decode loop's time.
struct KRunPrefetch {
  uintptr_t next = 0;
  int64_t per_step = 0;  // lines per step; 0: none
  KRunPrefetch() = default;
  HWY_INLINE KRunPrefetch(const std::byte* base, int64_t offset, int64_t bytes, int64_t steps) {
    if (offset != 0)
      Start(reinterpret_cast<uintptr_t>(base) + static_cast<uintptr_t>(offset), bytes, steps);
  }
  HWY_INLINE KRunPrefetch(PrefetchRun run, int64_t steps) { Start(run.begin, run.bytes, steps); }
  HWY_INLINE void Start(uintptr_t begin, int64_t bytes, int64_t steps) {
    if (bytes <= 0 || steps <= 0) return;
    next = begin & ~uintptr_t{63};
    const int64_t lines =
        static_cast<int64_t>((begin + static_cast<uintptr_t>(bytes) - next + 63) / 64);
    per_step = (lines + steps - 1) / steps;
  }
  HWY_INLINE void Next() {
    for (int64_t k = 0; k < per_step; ++k) {
      hwy::Prefetch(reinterpret_cast<const std::byte*>(next + static_cast<uintptr_t>(64 * k)));
    }
    next += static_cast<uintptr_t>(64 * per_step);
  }
};

// ---- MLX decode of a quad of rows.

struct KMlxDecodeQuad {
  const KMlxQuad* quad;
  const std::byte* data[4];  // row r's first chunk
  int64_t steps;
  const float* scales;  // the factor tables: 4 floats (rows) per group
  const float* biases;
};

// The int32 (block, row) lanes of half hh of a step (lane 4s' + r: block 2hh + s' of row r) for
// the chunks p[r] (a row's 16 * bits bytes of the step).
template <int kBits>
HWY_INLINE __m256i KMlxDecodeHalf(const KMlxQuad& quad, const std::byte* const* p, int hh,
                                  const std::byte* xt, const std::byte* xn) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i v[4];
  if constexpr (kBits == 4) {
    // Lane L: block 2hh + L's 16 bytes; low nibbles are its even values, high nibbles its odd.
    // A product is at most 15 * 128, a pair 3840, the even and odd pairs 7680, and the lane tree
    // adds 4 of those: 30720 fits int16, so the sums widen once, after the tree.
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    const __m256i x_even = _mm256_load_si256(reinterpret_cast<const __m256i*>(xn + 32 * hh));
    const __m256i x_odd = _mm256_load_si256(reinterpret_cast<const __m256i*>(xn + 64 + 32 * hh));
    for (int r = 0; r < 4; ++r) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p[r] + 32 * hh));
      const __m256i even = _mm256_and_si256(q, nibble);
      const __m256i odd = _mm256_and_si256(_mm256_srli_epi16(q, 4), nibble);
      v[r] = _mm256_add_epi16(_mm256_maddubs_epi16(even, x_even), _mm256_maddubs_epi16(odd, x_odd));
    }
    return _mm256_madd_epi16(SumBlockLanes256<kI16>(v), ones);
  } else {
    const __m256i x_lo =
        _mm256_load_si256(reinterpret_cast<const __m256i*>(xt + internal::kKTileLo + 32 * hh));
    const __m256i x_hi =
        _mm256_load_si256(reinterpret_cast<const __m256i*>(xt + internal::kKTileHi + 32 * hh));
    const auto load2 = [](const std::byte* hi, const std::byte* lo) __attribute__((always_inline)) {
      return _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(hi),
                                 reinterpret_cast<const __m128i*>(lo));
    };
    for (int r = 0; r < 4; ++r) {
      if constexpr (kBits == 8) {
        const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));  // q -> q - 128
        const std::byte* b = p[r] + 64 * hh;
        const __m256i lo = _mm256_xor_si256(load2(b + 32, b), flip);
        const __m256i hi = _mm256_xor_si256(load2(b + 48, b + 16), flip);
        const __m256i p_lo = _mm256_maddubs_epi16(_mm256_abs_epi8(lo), _mm256_sign_epi8(x_lo, lo));
        const __m256i p_hi = _mm256_maddubs_epi16(_mm256_abs_epi8(hi), _mm256_sign_epi8(x_hi, hi));
        v[r] = _mm256_add_epi32(_mm256_madd_epi16(p_lo, ones), _mm256_madd_epi16(p_hi, ones));
      } else {
        const int64_t block = 4 * quad.bits;
        const std::byte* b = p[r] + 2 * hh * block;
        const KMlxRows<0> rows{quad};
        const __m256i lo = rows.Unpack(load2(b + block, b));
        const __m256i hi = rows.Unpack(load2(b + block + block / 2, b + block / 2));
        v[r] = _mm256_madd_epi16(
            _mm256_add_epi16(_mm256_maddubs_epi16(lo, x_lo), _mm256_maddubs_epi16(hi, x_hi)), ones);
      }
    }
    __m256i isum = SumBlockLanes256<kI32>(v);
    if constexpr (kBits == 8) {
      // + 128 * sum(x) of the block = -16 * (its correction lanes, -8 * sum of 16 values each).
      const auto corr = [&](int64_t offset) __attribute__((always_inline)) {
        return _mm256_load_si256(reinterpret_cast<const __m256i*>(xt + offset + 32 * hh));
      };
      isum = _mm256_sub_epi32(
          isum,
          _mm256_slli_epi32(
              _mm256_add_epi32(corr(internal::kKTileCorrLo), corr(internal::kKTileCorrHi)), 4));
    }
    return isum;
  }
}

// y[r] = dot(row r, the activation row) for r < rows_valid: the steps of KHalfTile<1> with the
// factors from the tables.
template <int kBits, int kBlocksPerGroup>
HWY_INLINE void KMlxDecodeSteps(const KMlxDecodeQuad& d, const KDecodeActs& x,
                                KRunPrefetch prefetcher, int64_t copied, const std::byte* tail,
                                int rows_valid, float* y) {
  const KMlxQuad& quad = *d.quad;
  const int64_t chunk_bytes = 16 * quad.bits;
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  const auto step_of = [&](int64_t step, const std::byte* const* p) __attribute__((always_inline)) {
    const std::byte* xt = x.tiles + step * internal::kKTileGroupBytes;
    const std::byte* xn = x.nibbles + 128 * step;
    for (int hh = 0; hh < 2; ++hh) {
      // Lanes 4s' + r: the group of block 4 step + 2hh + s' of row r.
      const auto factors = [&](const float* t) __attribute__((always_inline)) {
        if constexpr (kBlocksPerGroup == 1) return _mm256_load_ps(t + 4 * (4 * step + 2 * hh));
        const int64_t g = (4 * step + 2 * hh) / kBlocksPerGroup;
        return _mm256_broadcast_ps(reinterpret_cast<const __m128*>(t + KGroupAt<true>(g)));
      };
      const __m256 a = factors(d.scales);
      const __m256 c = factors(d.biases);
      const __m256i isum = KMlxDecodeHalf<kBits>(quad, p, hh, xt, xn);
      const __m256 dx =
          _mm256_load_ps(reinterpret_cast<const float*>(xt + internal::kKTileScale + 32 * hh));
      const __m256 xs =
          _mm256_load_ps(reinterpret_cast<const float*>(xt + internal::kKTileSum + 32 * hh));
      acc[hh] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(a, dx), acc[hh]);
      acc[hh] = _mm256_fmadd_ps(c, xs, acc[hh]);
    }
  };
  const int64_t full = copied >= 0 ? copied : d.steps;
  const std::byte* p[4] = {d.data[0], d.data[1], d.data[2], d.data[3]};
  for (int64_t step = 0; step < full; ++step) {
    prefetcher.Next();
    step_of(step, p);
    for (int r = 0; r < 4; ++r) p[r] += chunk_bytes;
  }
  if (copied >= 0) {
    const std::byte* t[4] = {tail, tail + 128, tail + 256, tail + 384};
    step_of(copied, t);
  }
  StoreQuadRows256(acc[0], acc[1], rows_valid, y);
}

// The quad of rows [row, row + rows_valid) at n = 1 (rows past rows_valid repeat the last; quad:
// KMlxPrepare'd, its row_ids not read); table: 32 floats per step.
//   run: the leaf's share of a leaf-split product's prefetch (LeafQuads), which then takes
//   prefetch_rows 0; else empty.
// The row ids are computed here, not read from quad.row_ids: written by the caller's loop as two
// 16-byte stores and read back as one 32-byte load, they stalled every quad on store forwarding
// (MLX 4-bit 2048x2048 in 4 leaves: 9.5% of the samples on the instruction after that load).
template <int kBits>
HWY_INLINE void KMlxDecodeQuadRows(const KMlxQuad& quad, const KDecodeActs& x,
                                   int64_t prefetch_rows, float* table, int64_t row, int rows_valid,
                                   float* y, PrefetchRun run = {}) {
  const MatrixView& w = *quad.w;
  const int64_t blocks = w.cols / 32;
  const int64_t steps = (blocks + 3) / 4;
  KMlxDecodeQuad d{&quad, {}, steps, table, table + 4 * 4 * steps};
  const std::byte* scales[4];
  const std::byte* biases[4];
  for (int r = 0; r < 4; ++r) {
    const int64_t id = row + std::min(r, rows_valid - 1);
    d.data[r] = w.data + id * w.row_stride;
    scales[r] = w.scales + id * w.scale_row_stride;
    biases[r] = w.biases + id * w.scale_row_stride;
  }
  // The scales and biases of the quad ahead, whole (a few lines per row).
  if (prefetch_rows > 0) {
    const int64_t bytes = 4 * w.scale_row_stride;
    PrefetchRegion(scales[0] + prefetch_rows * w.scale_row_stride, bytes);
    PrefetchRegion(biases[0] + prefetch_rows * w.scale_row_stride, bytes);
  }
  const int64_t groups = w.cols >> quad.group_shift;
  const int64_t padded = (4 * 32 * steps) >> quad.group_shift;
  if (quad.group_shift == 5) {
    KFactorTableOf<false>(w.scale_type, scales, groups, padded, table);
    KFactorTableOf<false>(w.scale_type, biases, groups, padded, table + 4 * 4 * steps);
  } else {
    KFactorTableOf<true>(w.scale_type, scales, groups, padded, table);
    KFactorTableOf<true>(w.scale_type, biases, groups, padded, table + 4 * 4 * steps);
  }
  const int64_t row_bytes = blocks * 4 * quad.bits;
  const KRunPrefetch prefetcher = run.bytes > 0
                                      ? KRunPrefetch(run, steps)
                                      : KRunPrefetch(d.data[0], prefetch_rows * w.row_stride,
                                                     d.data[3] - d.data[0] + row_bytes, steps);
  // The last chunk is copied when it is partial, or when the 16-byte loads of other widths than 4
  // and 8 bits would pass its end.
  alignas(32) std::byte tail[4 * 128];
  int64_t copied = -1;
  if (kBits == 0 || blocks % 4 != 0) {
    copied = steps - 1;
    std::memset(tail, 0, sizeof(tail));
    for (int r = 0; r < 4; ++r) {
      std::memcpy(tail + 128 * r, d.data[r] + copied * 16 * quad.bits,
                  static_cast<size_t>((blocks - 4 * copied) * 4 * quad.bits));
    }
  }
  switch (quad.group_shift) {
    case 5:
      return KMlxDecodeSteps<kBits, 1>(d, x, prefetcher, copied, tail, rows_valid, y);
    case 6:
      return KMlxDecodeSteps<kBits, 2>(d, x, prefetcher, copied, tail, rows_valid, y);
    default:
      return KMlxDecodeSteps<kBits, 4>(d, x, prefetcher, copied, tail, rows_valid, y);
  }
}

// KMlxDecodeQuadRows for the quad's width: 4 and 8 bits have their own steps, others the general.
HWY_INLINE void KMlxDecodeQuadAnyBits(const KMlxQuad& quad, const KDecodeActs& x,
                                      int64_t prefetch_rows, float* table, int64_t row,
                                      int rows_valid, float* y, PrefetchRun run = {}) {
  if (quad.bits == 4) {
    KMlxDecodeQuadRows<4>(quad, x, prefetch_rows, table, row, rows_valid, y, run);
  } else if (quad.bits == 8) {
    KMlxDecodeQuadRows<8>(quad, x, prefetch_rows, table, row, rows_valid, y, run);
  } else {
    KMlxDecodeQuadRows<0>(quad, x, prefetch_rows, table, row, rows_valid, y, run);
  }
}

// The products of rows [row_begin, row_end) with one kact row xa, MLX weights of any width; false
// (nothing done) for rows longer than kKDecodeMaxSteps steps.  Not inlined: KTileRows's batched
// loops keep their own register allocation and stack frame.
inline HWY_NOINLINE bool KMlxDecodeRows(const MatrixView& w, int64_t row_begin, int64_t row_end,
                                        const std::byte* xa, int64_t prefetch_rows, float* y) {
  const int64_t steps = (w.cols + internal::kKTileGroupValues - 1) / internal::kKTileGroupValues;
  if (steps > kKDecodeMaxSteps) return false;
  KMlxQuad quad;
  quad.w = &w;
  KMlxPrepare(w, &quad);
  KDecodeActs x;
  x.tiles = xa + internal::KActTileOffset(w.cols);
  alignas(64) std::byte nibbles[128 * kKDecodeMaxSteps];
  if (quad.bits == 4) {
    KNibbleOrderActs(x.tiles, steps, nibbles);
    x.nibbles = nibbles;
  }
  alignas(64) float table[32 * kKDecodeMaxSteps];
  for (int64_t r = row_begin; r < row_end; r += 4) {
    const int rows_valid = static_cast<int>(std::min<int64_t>(4, row_end - r));
    KMlxDecodeQuadAnyBits(quad, x, prefetch_rows, table, r, rows_valid, y + r);
  }
  return true;
}

// ---- K-quant decode of a quad of rows: the factors of a super-block (a[0], a[1], c[0], c[1] of
// step k at table + 32 k), computed while the super-block before is multiplied, then its two
// steps, with nothing but their weights and the accumulators in registers (the tiles computed a
// super-block's factors at its first step and kept half of them on the stack).

// Lane 4s + r of the result = the sum of the 4 32-bit lanes of block s of v[r] (SumBlockLanes256),
// for int16 pairs that may be added once more in int16 (each int16 at most 16384 in magnitude):
// the first level of the tree in int16, the second in int32.
HWY_INLINE __m256i SumBlockLanes16Then32(const __m256i (&v)[4]) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i s01 = _mm256_madd_epi16(
      _mm256_add_epi16(_mm256_unpacklo_epi32(v[0], v[1]), _mm256_unpackhi_epi32(v[0], v[1])), ones);
  const __m256i s23 = _mm256_madd_epi16(
      _mm256_add_epi16(_mm256_unpacklo_epi32(v[2], v[3]), _mm256_unpackhi_epi32(v[2], v[3])), ones);
  return _mm256_add_epi32(_mm256_unpacklo_epi64(s01, s23), _mm256_unpackhi_epi64(s01, s23));
}

// The int32 lanes of half hh of step `step` (Q6_K: of its values 0..15 in lo, 16..31 in hi, each
// with its correction), x: the kact row, xt: the step's tile group.
template <DType kType>
struct KQDecodeHalf;

template <DType kType>
requires(kType == DType::kQ4_K || kType == DType::kQ5_K) struct KQDecodeHalf<kType> {
  template <bool kPaired>
  HWY_INLINE static void Run(const KQ45Rows<kType, kPaired>& rows, int64_t super, int n, int hh,
                             const std::byte* xt, const std::byte* /*xq*/, __m256i* lo_sum,
                             __m256i* /*hi_sum*/) {
    const __m256i x_lo =
        _mm256_load_si256(reinterpret_cast<const __m256i*>(xt + internal::kKTileLo + 32 * hh));
    const __m256i x_hi =
        _mm256_load_si256(reinterpret_cast<const __m256i*>(xt + internal::kKTileHi + 32 * hh));
    const KHalf w = rows.DecodeOf(super, n, hh);
    __m256i v[4];
    for (int r = 0; r < 4; ++r) {
      v[r] = _mm256_add_epi16(_mm256_maddubs_epi16(w.lo[r], x_lo),
                              _mm256_maddubs_epi16(w.hi[r], x_hi));
    }
    if constexpr (kType == DType::kQ4_K) {
      // q <= 15: a product at most 15 * 128, the lo and hi pairs 7680, the tree adds 4 of those
      // (30720): int16 all the way, widened once.
      *lo_sum = _mm256_madd_epi16(SumBlockLanes256<kI16>(v), _mm256_set1_epi16(1));
    } else {
      // q <= 31: the lo and hi pairs at most 4 * 31 * 128 = 15872, one level of the tree 31744.
      *lo_sum = SumBlockLanes16Then32(v);
    }
  }
};

template <>
struct KQDecodeHalf<DType::kQ6_K> {
  // Block s of step n (values 32s..32s+31 of the super-block's half n, in order, 0..63) of row r:
  // ql's low nibbles hold values 0..63, its high nibbles 64..127, qh byte l the top 2 bits of
  // values l, l + 32, l + 64, l + 96.  Loaded in value order, a block meets the kact row's values
  // in place; its half-blocks (values 0..15 and 16..31, each with its own scale) are the 128-bit
  // lanes, so the lane tree of blocks (2hh, 2hh + 1) runs once per block, and one cross-lane
  // permute per half puts the trees' lanes into the tiles' lo/hi order.
  HWY_INLINE static void Run(const KQ6Rows& rows, int64_t super, int n, int hh, const std::byte* xt,
                             const std::byte* xq, __m256i* lo_sum, __m256i* hi_sum) {
    const int64_t offset = super * KQ6Rows::kBytes;
    const int64_t step = 2 * super + n;
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    const __m256i top = _mm256_set1_epi8(0x30);
    const std::byte* x = xq + 128 * step + 64 * hh;
    const __m256i x_a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
    const __m256i x_b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32));
    __m256i pa[4], pb[4];
    for (int r = 0; r < 4; ++r) {
      const std::byte* ql = rows.rows[r] + offset + 64 * n;
      const __m256i qh = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(rows.rows[r] + offset + internal::kQ6KQh + 32 * n));
      const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i q1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      __m256i a, b;  // blocks 2hh, 2hh + 1
      if (hh == 0) {
        a = _mm256_or_si256(_mm256_and_si256(q0, nibble),
                            _mm256_and_si256(_mm256_slli_epi16(qh, 4), top));
        b = _mm256_or_si256(_mm256_and_si256(q1, nibble),
                            _mm256_and_si256(_mm256_slli_epi16(qh, 2), top));
      } else {
        a = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q0, 4), nibble),
                            _mm256_and_si256(qh, top));
        b = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q1, 4), nibble),
                            _mm256_and_si256(_mm256_srli_epi16(qh, 2), top));
      }
      // q <= 63: a pair at most 2 * 63 * 128 = 16128, one level of the tree 32256.
      pa[r] = _mm256_maddubs_epi16(a, x_a);
      pb[r] = _mm256_maddubs_epi16(b, x_b);
    }
    const __m256i ta = SumBlockLanes16Then32(pa);  // lanes: block 2hh's lo (r), its hi (4 + r)
    const __m256i tb = SumBlockLanes16Then32(pb);
    const auto corr = [&](int64_t at) __attribute__((always_inline)) {
      return _mm256_slli_epi32(
          _mm256_load_si256(reinterpret_cast<const __m256i*>(xt + at + 32 * hh)), 2);
    };
    *lo_sum =
        _mm256_add_epi32(_mm256_permute2x128_si256(ta, tb, 0x20), corr(internal::kKTileCorrLo));
    *hi_sum =
        _mm256_add_epi32(_mm256_permute2x128_si256(ta, tb, 0x31), corr(internal::kKTileCorrHi));
  }
};

// One quad of K-quant rows at n = 1 (the tiles' KQ45QuadTile / KQ6QuadTile with one activation
// row): xa the kact row; table: 128 floats (the factors of 4 steps: two super-blocks); prefetch:
// a part of its run per super-block; kPaired: Q4_K/Q5_K in WeightLayout::kPairedNibbles.
template <DType kType, bool kPaired>
HWY_INLINE void KQDecodeQuad(const std::byte* const* rows, int rows_valid, KRunPrefetch prefetch,
                             int64_t supers, const std::byte* xa, const std::byte* tiles,
                             float* table, float* y) {
  using Rows = std::conditional_t<kType == DType::kQ6_K, KQ6Rows, KQ45Rows<kType, kPaired>>;
  const Rows q{rows, RegionPrefetcher(nullptr, 0, 0, 0)};
  // The factors of super-block k, at table + 64 (k % 2), computed while super-block k - 1 is
  // multiplied: early enough for their latency to hide, late enough for the quad's headers to be
  // in cache and their loads spread over its steps (all of them at the start of a quad, in a
  // pre-pass, made the 2-thread model decode of Q4_K 10% slower although in-cache products were
  // faster; at the super-block's own start, the in-cache products were 10% slower).
  const auto factors = [&](int64_t k) __attribute__((always_inline)) {
    KFactors f[2];
    q.DecodeFactors(2 * k, f);
    for (int i = 0; i < 2; ++i) {
      float* t = table + 32 * ((2 * k + i) & 3);
      _mm256_store_ps(t, f[i].a[0]);
      _mm256_store_ps(t + 8, f[i].a[1]);
      _mm256_store_ps(t + 16, f[i].c[0]);
      _mm256_store_ps(t + 24, f[i].c[1]);
    }
  };
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  const auto step_of = [&](int64_t super, auto n_constant) __attribute__((always_inline)) {
    constexpr int n = decltype(n_constant)::value;
    const int64_t step = 2 * super + n;
    const std::byte* xt = tiles + step * internal::kKTileGroupBytes;
    const float* t = table + 32 * (step & 3);
    // Unrolled: GCC kept this loop for Q6_K, with acc[hh] in memory, stored and reloaded at every
    // half (Q6_K in-cache 15.4 -> 18.6 GB/s on one Zen 3 core; Q4_K, Q5_K unchanged).
#pragma GCC unroll 2
    for (int hh = 0; hh < 2; ++hh) {
      const __m256 a = _mm256_load_ps(t + 8 * hh);
      const __m256 c = _mm256_load_ps(t + 16 + 8 * hh);
      const __m256 dx =
          _mm256_load_ps(reinterpret_cast<const float*>(xt + internal::kKTileScale + 32 * hh));
      __m256i lo, hi;
      KQDecodeHalf<kType>::Run(q, super, n, hh, xt, xa, &lo, &hi);
      acc[hh] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), _mm256_mul_ps(a, dx), acc[hh]);
      if constexpr (kType == DType::kQ6_K) {
        acc[hh] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), _mm256_mul_ps(c, dx), acc[hh]);
      } else {
        const __m256 xs =
            _mm256_load_ps(reinterpret_cast<const float*>(xt + internal::kKTileSum + 32 * hh));
        acc[hh] = _mm256_fmadd_ps(c, xs, acc[hh]);
      }
    }
  };
  factors(0);
  for (int64_t super = 0; super < supers; ++super) {
    prefetch.Next();
    if (super + 1 < supers) factors(super + 1);
    step_of(super, std::integral_constant<int, 0>{});
    step_of(super, std::integral_constant<int, 1>{});
  }
  StoreQuadRows256(acc[0], acc[1], rows_valid, y);
}

// The products of rows [row_begin, row_end) with one kact row xa (rows of any length).  Not
// inlined (as KMlxDecodeRows).
template <DType kType, bool kPaired>
HWY_NOINLINE void KQDecodeRows(const MatrixView& w, int64_t row_begin, int64_t row_end,
                               const std::byte* xa, int64_t prefetch_rows, float* y) {
  const int64_t supers = w.cols / internal::kQK;
  const std::byte* tiles = xa + internal::KActTileOffset(w.cols);
  alignas(64) float table[128];
  for (int64_t r = row_begin; r < row_end; r += 4) {
    const int rows_valid = static_cast<int>(std::min<int64_t>(4, row_end - r));
    const std::byte* rows[4];
    for (int k = 0; k < 4; ++k) rows[k] = w.data + (r + std::min(k, rows_valid - 1)) * w.row_stride;
    // The quad ahead, a run of lines per super-block: as many as its 4 rows' super-blocks take,
    // and one more for a start within a line (no end test: prefetches never fault).
    KRunPrefetch prefetch;
    prefetch.next = (reinterpret_cast<uintptr_t>(rows[0]) +
                     static_cast<uintptr_t>(prefetch_rows * w.row_stride)) &
                    ~uintptr_t{63};
    prefetch.per_step = (4 * Traits(kType).block_bytes + 63) / 64 + 1;
    KQDecodeQuad<kType, kPaired>(rows, rows_valid, prefetch, supers, xa, tiles, table, y + r);
  }
}

// ---- Products split into column leaves (LeafQuads): each quad of rows once, its leaves in turn,
// each as its ColRange view's decode would run it (the same bits); xa: the leaves' kact rows, one
// every xa_stride bytes.

template <DType kType, bool kPaired>
HWY_NOINLINE void KQDecodeLeafRows(const MatrixView& w, int64_t leaves, int64_t row_begin,
                                   int64_t row_end, const std::byte* xa, int64_t xa_stride,
                                   int64_t prefetch_rows, float* const* parts) {
  const int64_t width = w.cols / leaves;
  const int64_t supers = width / internal::kQK;  // per leaf
  const int64_t leaf_bytes = supers * Traits(kType).block_bytes;
  const int64_t tile_offset = internal::KActTileOffset(width);
  alignas(64) float table[128];
  LeafQuads(
      w, leaves, leaves * leaf_bytes, row_begin, row_end, prefetch_rows,
      [&](int64_t r, int rows_valid, int64_t l, const std::byte* const* rows, PrefetchRun run)
          __attribute__((always_inline)) {
            const std::byte* x = xa + l * xa_stride;
            KQDecodeQuad<kType, kPaired>(rows, rows_valid, KRunPrefetch(run, supers), supers, x,
                                         x + tile_offset, table, parts[l] + r);
          });
}

// False (nothing done) when the leaves' rows together are longer than kKDecodeMaxSteps steps.
inline HWY_NOINLINE bool KMlxDecodeLeafRows(const MatrixView& w, int64_t leaves, int64_t row_begin,
                                            int64_t row_end, const std::byte* xa, int64_t xa_stride,
                                            int64_t prefetch_rows, float* const* parts) {
  const int64_t width = w.cols / leaves;
  const int64_t steps = (width + internal::kKTileGroupValues - 1) / internal::kKTileGroupValues;
  if (leaves > kMaxKLeaves || leaves * steps > kKDecodeMaxSteps) return false;
  MatrixView views[kMaxKLeaves];
  KMlxQuad quads[kMaxKLeaves];
  KDecodeActs acts[kMaxKLeaves];
  alignas(64) std::byte nibbles[128 * kKDecodeMaxSteps];
  for (int64_t l = 0; l < leaves; ++l) {
    views[l] = w.ColRange(l * width, width);
    quads[l].w = &views[l];
    KMlxPrepare(views[l], &quads[l]);
    acts[l].tiles = xa + l * xa_stride + internal::KActTileOffset(width);
    if (quads[l].bits == 4) {
      KNibbleOrderActs(acts[l].tiles, steps, nibbles + 128 * steps * l);
      acts[l].nibbles = nibbles + 128 * steps * l;
    }
  }
  const int64_t bits = quads[0].bits;
  const int64_t leaf_bytes = width / 32 * 4 * bits;
  alignas(64) float table[32 * kKDecodeMaxSteps];
  LeafQuads(
      w, leaves, leaves * leaf_bytes, row_begin, row_end, prefetch_rows,
      [&](int64_t r, int rows_valid, int64_t l, const std::byte* const* /*rows*/, PrefetchRun run)
          __attribute__((always_inline)) {
            if (l == 0) {  // the scales and biases of the quad ahead, whole
              const int64_t at = (r + prefetch_rows) * w.scale_row_stride;
              PrefetchRegion(reinterpret_cast<uintptr_t>(w.scales) + static_cast<uintptr_t>(at),
                             4 * w.scale_row_stride);
              PrefetchRegion(reinterpret_cast<uintptr_t>(w.biases) + static_cast<uintptr_t>(at),
                             4 * w.scale_row_stride);
            }
            KMlxDecodeQuadAnyBits(quads[l], acts[l], 0, table, r, rows_valid, parts[l] + r, run);
          });
  return true;
}

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
