// Register-tiled AVX3_DL (AVX-512 with VNNI and VBMI) products for K-quant (Q4_K, Q5_K, Q6_K) and
// MLX affine weights (every width 2..8 bits) with kact activations: included once per SIMD target
// by matmul_kquant-inl.h (through matmul_kquant_tile_avx2-inl.h, the same tiles on 256-bit
// vectors, with the same bits), which also holds their row loop KTileRows.  What the x86 targets
// share comes first (the types the tiles take, the scale unpacking of the K-quant headers); the
// AVX3_DL kernels follow.  The scheme of Q4_0's quad tiles (matmul_quant-inl.h):
//  - activations are read as the kact tile groups (kernels_internal.h): 128 values in two 64-byte
//    vectors, values 0..15 of block s in 128-bit lane s of the first, 16..31 in the second, next to
//    per-lane block scales, block sums (for Q4_K/Q5_K mins and MLX biases) and the corrections that
//    remove Q6_K's offset of 32;
//  - a step of 4 weight rows (128 values each: half a K-quant super-block, an MLX 128-value chunk)
//    is decoded once into that order as unsigned bytes and reused by up to kKTileActs activation
//    rows; vpdpbusd sums each 32-value block (Q6_K: each 16-value half, with its own scale) of a
//    row in 4 int32 lanes, and in-lane unpacks and adds gather the 4 rows' sums into one vector
//    with a lane per (block, row), so the f32 part (convert, scale by the weight and activation
//    scales, the min or bias term) runs once per 4 rows instead of once per row.
// Weights are prefetched a few rows ahead by the first pass over a quad of rows.
//
// Every output is summed the same way whatever the number of activation rows: decode (n = 1) is
// the tile with one activation row, each step adds its (block, row) lanes into the row's f32
// accumulator in the same order, and a row's 16 lanes are added in one fixed tree at the end.  So
// a position has the same bits decoded alone or inside a batched prompt.

#if defined(LOOM_KERNELS_MATMUL_KQUANT_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LOOM_KERNELS_MATMUL_KQUANT_TILE_INL_H_
#undef LOOM_KERNELS_MATMUL_KQUANT_TILE_INL_H_
#else
#define LOOM_KERNELS_MATMUL_KQUANT_TILE_INL_H_
#endif

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "hwy/highway.h"
#include "loom/kernels/block_formats.h"
#include "loom/kernels/kernels_internal.h"
#include "loom/kernels/stream_avx3-inl.h"

HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX2

// ---- Shared by the x86 tiles (lane l = 4s + r: block s of the step, row r of the quad).

// Whether the tiled path handles this product (WeightLayout::kPairedNibbles: AVX2 and AVX3 only;
// other targets read it in the portable path).
template <DType kType>
bool KTileSupports(const MatrixView& w) {
  if (w.layout != WeightLayout::kFile &&
      (HWY_TARGET == HWY_AVX3_DL || (kType != DType::kQ4_K && kType != DType::kQ5_K))) {
    return false;
  }
  if constexpr (kType == DType::kQ4_K || kType == DType::kQ5_K || kType == DType::kQ6_K) {
    return w.cols % internal::kQK == 0;
  } else if constexpr (kType == DType::kMlx4) {  // every width
    return IsMlx(w.type) && MlxBitsOf(w.type) >= 2 && MlxBitsOf(w.type) <= 8 && w.cols % 32 == 0 &&
           (w.group_size == 32 || w.group_size == 64 || w.group_size == 128) &&
           w.cols % w.group_size == 0 &&
           (w.scale_type == DType::kF32 || w.scale_type == DType::kF16 ||
            w.scale_type == DType::kBF16);
  } else {
    return false;
  }
}

// The weight rows of a quad (rows past the matrix's last repeat a valid one) and, for MLX, their
// layout; each target's KMlxQuad adds its lane tables.
struct KQuadRows {
  const MatrixView* w = nullptr;
  int bits = 0;             // MLX: bits per value
  int64_t scale_bytes = 0;  // MLX: bytes per scale or bias
  int64_t row_ids[4] = {};
};

constexpr std::array<uint8_t, 16> KTransposeBytes() {  // byte 4s + r <- byte 4r + s
  std::array<uint8_t, 16> idx{};
  for (int s = 0; s < 4; ++s) {
    for (int r = 0; r < 4; ++r) idx[4 * s + r] = static_cast<uint8_t>(4 * r + s);
  }
  return idx;
}
alignas(16) inline constexpr std::array<uint8_t, 16> kKTranspose = KTransposeBytes();

// The headers of the 4 rows' Q4_K/Q5_K super-blocks (at rows[r] + offset), unpacked.
struct KQ45Header {
  __m128i dd;     // f16 d and dmin of row r in 16-bit lanes 2r, 2r + 1
  __m128i sc[2];  // byte 4s + r: the 6-bit scale of sub-block 4h + s of row r, in sc[h]
  __m128i m[2];   // the 6-bit mins
};

// KScaleMin for all 4 rows at once: the 16 header bytes of each row, transposed so that 32-bit lane
// r holds row r's word, then the bytes in the lane order.
HWY_INLINE KQ45Header KQ45HeaderOf(const std::byte* const* rows, int64_t offset) {
  __m128i v[4];
  for (int r = 0; r < 4; ++r) {
    v[r] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[r] + offset));
  }
  const __m128i lo01 = _mm_unpacklo_epi32(v[0], v[1]);
  const __m128i lo23 = _mm_unpacklo_epi32(v[2], v[3]);
  const __m128i hi01 = _mm_unpackhi_epi32(v[0], v[1]);
  const __m128i hi23 = _mm_unpackhi_epi32(v[2], v[3]);
  const __m128i w0 = _mm_unpackhi_epi64(lo01, lo23);  // scale bytes 0..3
  const __m128i w1 = _mm_unpacklo_epi64(hi01, hi23);  // 4..7
  const __m128i w2 = _mm_unpackhi_epi64(hi01, hi23);  // 8..11
  const __m128i k6 = _mm_set1_epi8(0x3F), k4 = _mm_set1_epi8(0x0F), k2 = _mm_set1_epi8(0x03);
  const __m128i transpose = _mm_load_si128(reinterpret_cast<const __m128i*>(kKTranspose.data()));
  const auto lanes = [&](__m128i bytes) __attribute__((always_inline)) {
    return _mm_shuffle_epi8(bytes, transpose);
  };
  KQ45Header h;
  h.dd = _mm_unpacklo_epi64(lo01, lo23);
  h.sc[0] = lanes(_mm_and_si128(w0, k6));
  h.m[0] = lanes(_mm_and_si128(w1, k6));
  h.sc[1] = lanes(_mm_or_si128(_mm_and_si128(w2, k4),
                               _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(w0, 6), k2), 4)));
  h.m[1] = lanes(_mm_or_si128(_mm_and_si128(_mm_srli_epi32(w2, 4), k4),
                              _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(w1, 6), k2), 4)));
  return h;
}

// Q6_K: f32 lane r = the super-block scale d of row r (at rows[r] + offset).
HWY_INLINE __m128 KQ6RowScales(const std::byte* const* rows, int64_t offset) {
  uint64_t d_bits = 0;
  for (int r = 0; r < 4; ++r) {
    d_bits |= static_cast<uint64_t>(internal::LoadU16(rows[r] + offset + internal::kQ6KD))
              << (16 * r);
  }
  return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<int64_t>(d_bits)));
}

// The f32 factor vectors and the decoded weights of each step of a quad, kept from its first tile
// of activation rows for the next ones: they depend on the weights only.  Each target keeps its own
// vectors there (AVX3_DL: a and c of a step, its KStep; AVX2: the halves' factors, KHalf h at byte
// 256h).  A null pointer: a row has too many steps for them (then every tile computes them).
struct KFactorCache {
  float* lanes = nullptr;      // (steps, 32), 64-byte aligned
  std::byte* steps = nullptr;  // (steps, 512), 64-byte aligned; with n > 1 and short rows only
  bool ready = false;          // whether they hold this quad's

  template <class... V>
  HWY_INLINE void Store(int64_t step, V... v) const {
    static_assert((sizeof(V) + ...) == 32 * sizeof(float));
    if (lanes == nullptr) return;
    auto* p = reinterpret_cast<std::byte*>(lanes + 32 * step);
    ((*reinterpret_cast<V*>(p) = v, p += sizeof(V)), ...);
  }
  template <class... V>
  HWY_INLINE void Load(int64_t step, V*... v) const {
    const auto* p = reinterpret_cast<const std::byte*>(lanes + 32 * step);
    ((*v = *reinterpret_cast<const V*>(p), p += sizeof(V)), ...);
  }
  // The decoded weights (lo[4], hi[4]) of part `part` of a step, or decode(), kept for the next
  // tiles when `steps` is not null (rows short enough for them to stay in L1 beside the
  // activations).
  template <class Decode>
  HWY_INLINE auto Weights(int64_t step, int part, const Decode& decode) const
      -> decltype(decode()) {
    using W = decltype(decode());
    using V = std::remove_reference_t<decltype(std::declval<W&>().lo[0])>;
    static_assert(sizeof(W) == 8 * sizeof(V) && sizeof(W) <= 512);
    if (steps == nullptr) return decode();
    auto* p = reinterpret_cast<V*>(steps + 512 * step + sizeof(W) * part);
    W w;
    if (ready) {
      for (int r = 0; r < 4; ++r) {
        w.lo[r] = p[r];
        w.hi[r] = p[4 + r];
      }
      return w;
    }
    w = decode();
    for (int r = 0; r < 4; ++r) {
      p[r] = w.lo[r];
      p[4 + r] = w.hi[r];
    }
    return w;
  }
  template <class Decode>
  HWY_INLINE auto Weights(int64_t step, const Decode& decode) const -> decltype(decode()) {
    return Weights(step, 0, decode);
  }
};

#endif  // x86 tiles

#if HWY_TARGET == HWY_AVX3_DL

// Activation rows per register tile: 8 accumulators, the decoded step of 4 rows (8 vectors) and
// temporaries fit the 32 vector registers (as Q4_0's kTileActs).
inline constexpr int kKTileActs = 8;

// ---- Lane tables.
// Q6_K: the 4 rows' 16 int8 scales in 128-bit lanes r; byte 16 * (2n + p) + 4s + r <- scale
// 8n + 2s + p of row r (half-block p of block s in the super-block's half n).
constexpr std::array<uint8_t, 64> KQ6ScaleBytes() {
  std::array<uint8_t, 64> idx{};
  for (int n = 0; n < 2; ++n) {
    for (int p = 0; p < 2; ++p) {
      for (int s = 0; s < 4; ++s) {
        for (int r = 0; r < 4; ++r) {
          idx[16 * (2 * n + p) + 4 * s + r] = static_cast<uint8_t>(16 * r + 8 * n + 2 * s + p);
        }
      }
    }
  }
  return idx;
}
constexpr std::array<int32_t, 16> KRowLanes(int offset) {  // lane l <- 2 (l % 4) + offset
  std::array<int32_t, 16> idx{};
  for (int l = 0; l < 16; ++l) idx[l] = 2 * (l % 4) + offset;
  return idx;
}
// Q6_K: 16-bit shift counts for bytes 0..31 (`first`) and 32..63 (`second`) of a 64-byte vector.
constexpr std::array<uint16_t, 32> KQ6Shifts(int first, int second) {
  std::array<uint16_t, 32> v{};
  for (int i = 0; i < 32; ++i) v[i] = static_cast<uint16_t>(i < 16 ? first : second);
  return v;
}
constexpr std::array<uint16_t, 32> KQ5HighShift(int h) {  // 16-bit lanes of 128-bit lane s: 4h + s
  std::array<uint16_t, 32> v{};
  for (int i = 0; i < 32; ++i) v[i] = static_cast<uint16_t>(4 * h + i / 8);
  return v;
}

alignas(64) inline constexpr std::array<uint8_t, 64> kKQ6Scales = KQ6ScaleBytes();
alignas(64) inline constexpr std::array<int32_t, 16> kKRowD = KRowLanes(0);
alignas(64) inline constexpr std::array<int32_t, 16> kKRowDmin = KRowLanes(1);
// Bit pairs 0 and 1 of qh moved left to bits 4-5 (values 0..63), pairs 2 and 3 right (64..127).
alignas(64) inline constexpr std::array<uint16_t, 32> kKQ6ShiftLo = KQ6Shifts(4, 2);
alignas(64) inline constexpr std::array<uint16_t, 32> kKQ6ShiftHi = KQ6Shifts(0, 2);
alignas(64) inline constexpr std::array<uint16_t, 32> kKQ5Shift0 = KQ5HighShift(0);
alignas(64) inline constexpr std::array<uint16_t, 32> kKQ5Shift1 = KQ5HighShift(1);
// vpermt2q: 128-bit lanes [lo.0, hi.0, lo.2, hi.2] and [lo.1, hi.1, lo.3, hi.3].
alignas(64) inline constexpr std::array<int64_t, 8> kKNibbleSel0 = {0, 1, 8, 9, 4, 5, 12, 13};
alignas(64) inline constexpr std::array<int64_t, 8> kKNibbleSel1 = {2, 3, 10, 11, 6, 7, 14, 15};

template <typename T, size_t kN>
HWY_INLINE __m512i KLoadTable(const std::array<T, kN>& t) {
  static_assert(sizeof(T) * kN == 64);
  return _mm512_load_si512(t.data());
}

// Lane 4s+r of the result = the sum of lanes 4s..4s+3 of v[r], with in-lane unpacks (cheaper than
// cross-lane permutes; as matmul_quant-inl.h's SumBlockLanes).
HWY_INLINE __m512i KSumBlockLanes(const __m512i (&v)[4]) {
  const __m512i s01 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(v[0], v[1]), _mm512_unpackhi_epi32(v[0], v[1]));
  const __m512i s23 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(v[2], v[3]), _mm512_unpackhi_epi32(v[2], v[3]));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
}

// One step of 4 rows in the tile order: row r's block s values 0..15 in 128-bit lane s of lo[r],
// 16..31 in hi[r] (Q6_K: its two half-blocks), unsigned.
struct KStep {
  __m512i lo[4], hi[4];
};

// acc[t] += the step's products with activation row t (its tile group at x + t * x_stride):
// value = a * q + c per (block, row) lane.
template <int kActs>
HWY_INLINE LOOM_KERNELS_VNNI_ATTR void KAffineStep(__m512 (&acc)[kActs], const KStep& w, __m512 a,
                                                   __m512 c, const std::byte* x, int64_t x_stride) {
  for (int t = 0; t < kActs; ++t) {
    const std::byte* xt = x + t * x_stride;
    const __m512i x_lo = _mm512_load_si512(xt + internal::kKTileLo);
    const __m512i x_hi = _mm512_load_si512(xt + internal::kKTileHi);
    __m512i sums[4];
    for (int r = 0; r < 4; ++r) {
      sums[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.lo[r], x_lo);
      sums[r] = _mm512_dpbusd_epi32(sums[r], w.hi[r], x_hi);
    }
    const __m512 scale = _mm512_mul_ps(a, _mm512_load_ps(xt + internal::kKTileScale));
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(KSumBlockLanes(sums)), scale, acc[t]);
    acc[t] = _mm512_fmadd_ps(c, _mm512_load_ps(xt + internal::kKTileSum), acc[t]);
  }
}

// Q6_K: each half-block has its own scale (a_lo for values 0..15, a_hi for 16..31) and the
// offset of 32 is removed in the integer sums (the tile group's corrections start them).
template <int kActs>
HWY_INLINE LOOM_KERNELS_VNNI_ATTR void KHalvesStep(__m512 (&acc)[kActs], const KStep& w,
                                                   __m512 a_lo, __m512 a_hi, const std::byte* x,
                                                   int64_t x_stride) {
  for (int t = 0; t < kActs; ++t) {
    const std::byte* xt = x + t * x_stride;
    const __m512i x_lo = _mm512_load_si512(xt + internal::kKTileLo);
    const __m512i x_hi = _mm512_load_si512(xt + internal::kKTileHi);
    const __m512i corr_lo = _mm512_load_si512(xt + internal::kKTileCorrLo);
    const __m512i corr_hi = _mm512_load_si512(xt + internal::kKTileCorrHi);
    __m512i sums_lo[4], sums_hi[4];
    for (int r = 0; r < 4; ++r) {
      sums_lo[r] = _mm512_dpbusd_epi32(corr_lo, w.lo[r], x_lo);
      sums_hi[r] = _mm512_dpbusd_epi32(corr_hi, w.hi[r], x_hi);
    }
    const __m512 dx = _mm512_load_ps(xt + internal::kKTileScale);
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(KSumBlockLanes(sums_lo)), _mm512_mul_ps(a_lo, dx),
                             acc[t]);
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(KSumBlockLanes(sums_hi)), _mm512_mul_ps(a_hi, dx),
                             acc[t]);
  }
}

// y[t * y_stride + r] = row r's sum (lane r of the 4 blocks' 128-bit lanes) for r < rows_valid.
template <int kActs>
HWY_INLINE void KStoreRows(const __m512 (&acc)[kActs], int rows_valid, float* y, int64_t y_stride) {
  for (int t = 0; t < kActs; ++t) {
    __m512 s = _mm512_add_ps(acc[t], _mm512_shuffle_f32x4(acc[t], acc[t], _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm512_add_ps(s, _mm512_shuffle_f32x4(s, s, _MM_SHUFFLE(2, 3, 0, 1)));
    alignas(16) float rows_sum[4];
    _mm_store_ps(rows_sum, _mm512_castps512_ps128(s));
    for (int r = 0; r < rows_valid; ++r) y[t * y_stride + r] = rows_sum[r];
  }
}

// 16 unsigned bytes as f32 lanes.
HWY_INLINE __m512 KBytesToF32(__m128i bytes) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes));
}

// ---- Q4_K and Q5_K: super-block k of each row at rows[r] + offset; its halves h = 0, 1 are steps.

struct KQ45Scales {
  __m512 a[2];  // half h, lane 4s+r: d * scale of sub-block 4h + s of row r
  __m512 c[2];  // -dmin * min
};

// The scales and mins of the 4 rows' super-blocks as factor lanes.
HWY_INLINE KQ45Scales KQ45ScalesOf(const std::byte* const* rows, int64_t offset) {
  const KQ45Header h = KQ45HeaderOf(rows, offset);
  const __m512 ddf = _mm512_castps256_ps512(_mm256_cvtph_ps(h.dd));  // lanes 2r, 2r + 1
  const __m512 d = _mm512_permutexvar_ps(KLoadTable(kKRowD), ddf);
  const __m512 neg_dmin =
      _mm512_xor_ps(_mm512_permutexvar_ps(KLoadTable(kKRowDmin), ddf), _mm512_set1_ps(-0.0f));
  KQ45Scales s;
  for (int k = 0; k < 2; ++k) {
    s.a[k] = _mm512_mul_ps(KBytesToF32(h.sc[k]), d);
    s.c[k] = _mm512_mul_ps(KBytesToF32(h.m[k]), neg_dmin);
  }
  return s;
}

// Half h of the super-blocks: its 64 quant bytes hold sub-blocks 4h and 4h + 2 in their low
// nibbles and 4h + 1, 4h + 3 in their high nibbles (32 bytes each); Q5_K's fifth bits are bit
// 4h + s of qh byte l for value l of sub-block 4h + s.
template <DType kType>
HWY_INLINE KStep KQ45Decode(const std::byte* const* rows, int64_t offset, int h) {
  constexpr int64_t kQs = kType == DType::kQ4_K ? internal::kQ4KQs : internal::kQ5KQs;
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const __m512i sel0 = KLoadTable(kKNibbleSel0);
  const __m512i sel1 = KLoadTable(kKNibbleSel1);
  KStep w;
  for (int r = 0; r < 4; ++r) {
    const std::byte* blk = rows[r] + offset;
    const __m512i q = _mm512_loadu_si512(blk + kQs + 64 * h);
    const __m512i lo = _mm512_and_si512(q, nibble);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), nibble);
    w.lo[r] = _mm512_permutex2var_epi64(lo, sel0, hi);
    w.hi[r] = _mm512_permutex2var_epi64(lo, sel1, hi);
    if constexpr (kType == DType::kQ5_K) {
      const __m512i shift = KLoadTable(h == 0 ? kKQ5Shift0 : kKQ5Shift1);
      const __m512i one = _mm512_set1_epi8(1);
      const __m512i qh_lo = _mm512_broadcast_i32x4(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + internal::kQ5KQh)));
      const __m512i qh_hi = _mm512_broadcast_i32x4(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + internal::kQ5KQh + 16)));
      w.lo[r] = _mm512_or_si512(
          w.lo[r], _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh_lo, shift), one), 4));
      w.hi[r] = _mm512_or_si512(
          w.hi[r], _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh_hi, shift), one), 4));
    }
  }
  return w;
}

template <DType kType, int kActs>
HWY_INLINE LOOM_KERNELS_VNNI_ATTR void KQ45QuadTile(const std::byte* const* rows, int rows_valid,
                                                    int64_t prefetch_offset, int64_t supers,
                                                    const KFactorCache& cache, const std::byte* x,
                                                    int64_t x_stride, float* y, int64_t y_stride) {
  constexpr int64_t kBlockBytes =
      kType == DType::kQ4_K ? internal::kQ4KBlockBytes : internal::kQ5KBlockBytes;
  __m512 acc[kActs];
  for (int t = 0; t < kActs; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t k = 0; k < supers; ++k) {
    if (prefetch_offset != 0) {
      for (int r = 0; r < 4; ++r)
        PrefetchAhead<kBlockBytes>(rows[r] + k * kBlockBytes, prefetch_offset);
    }
    KQ45Scales s;
    if (cache.ready) {
      for (int h = 0; h < 2; ++h) cache.Load(2 * k + h, &s.a[h], &s.c[h]);
    } else {
      s = KQ45ScalesOf(rows, k * kBlockBytes);
      for (int h = 0; h < 2; ++h) cache.Store(2 * k + h, s.a[h], s.c[h]);
    }
    for (int h = 0; h < 2; ++h) {
      const KStep w =
          cache.Weights(2 * k + h, [&] { return KQ45Decode<kType>(rows, k * kBlockBytes, h); });
      KAffineStep<kActs>(acc, w, s.a[h], s.c[h], x + (2 * k + h) * internal::kKTileGroupBytes,
                         x_stride);
    }
  }
  KStoreRows<kActs>(acc, rows_valid, y, y_stride);
}

// ---- Q6_K: halves n = 0, 1 of a super-block are steps.  ql's 64 bytes of half n hold values
// 0..63 in their low nibbles and 64..127 in their high nibbles, in order; qh byte l holds the top 2
// bits of values l, l + 32, l + 64, l + 96 (bit pairs 0..3).

struct KQ6Scales {
  __m512 a_lo[2];  // half n, lane 4s+r: d * scale of half-block 2s of row r's block s
  __m512 a_hi[2];  // half-block 2s + 1
};

HWY_INLINE KQ6Scales KQ6ScalesOf(const std::byte* const* rows, int64_t offset) {
  __m128i v[4];
  for (int r = 0; r < 4; ++r) {
    v[r] =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[r] + offset + internal::kQ6KScales));
  }
  __m512i all = _mm512_castsi128_si512(v[0]);
  all = _mm512_inserti32x4(all, v[1], 1);
  all = _mm512_inserti32x4(all, v[2], 2);
  all = _mm512_inserti32x4(all, v[3], 3);
  const __m512i bytes = _mm512_permutexvar_epi8(KLoadTable(kKQ6Scales), all);
  const __m512 d = _mm512_broadcast_f32x4(KQ6RowScales(rows, offset));  // lane 4s+r: d of row r
  const auto lanes = [&](__m128i b) {
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), d);
  };
  KQ6Scales s;
  s.a_lo[0] = lanes(_mm512_castsi512_si128(bytes));
  s.a_hi[0] = lanes(_mm512_extracti32x4_epi32(bytes, 1));
  s.a_lo[1] = lanes(_mm512_extracti32x4_epi32(bytes, 2));
  s.a_hi[1] = lanes(_mm512_extracti32x4_epi32(bytes, 3));
  return s;
}

HWY_INLINE KStep KQ6Decode(const std::byte* const* rows, int64_t offset, int n) {
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const __m512i top = _mm512_set1_epi8(0x30);
  const __m512i shift_lo = KLoadTable(kKQ6ShiftLo);
  const __m512i shift_hi = KLoadTable(kKQ6ShiftHi);
  KStep w;
  for (int r = 0; r < 4; ++r) {
    const std::byte* blk = rows[r] + offset;
    const __m512i ql = _mm512_loadu_si512(blk + 64 * n);
    const __m512i qh = _mm512_broadcast_i64x4(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + internal::kQ6KQh + 32 * n)));
    // Values 0..63 and 64..127 of the half, in order.
    const __m512i q0 = _mm512_or_si512(_mm512_and_si512(ql, nibble),
                                       _mm512_and_si512(_mm512_sllv_epi16(qh, shift_lo), top));
    const __m512i q1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), nibble),
                                       _mm512_and_si512(_mm512_srlv_epi16(qh, shift_hi), top));
    // Blocks s = 0..3 of the half: values 32s..32s+15 and 32s+16..32s+31.
    w.lo[r] = _mm512_shuffle_i64x2(q0, q1, _MM_SHUFFLE(2, 0, 2, 0));
    w.hi[r] = _mm512_shuffle_i64x2(q0, q1, _MM_SHUFFLE(3, 1, 3, 1));
  }
  return w;
}

template <int kActs>
HWY_INLINE LOOM_KERNELS_VNNI_ATTR void KQ6QuadTile(const std::byte* const* rows, int rows_valid,
                                                   int64_t prefetch_offset, int64_t supers,
                                                   const KFactorCache& cache, const std::byte* x,
                                                   int64_t x_stride, float* y, int64_t y_stride) {
  constexpr int64_t kBlockBytes = internal::kQ6KBlockBytes;
  __m512 acc[kActs];
  for (int t = 0; t < kActs; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t k = 0; k < supers; ++k) {
    if (prefetch_offset != 0) {
      for (int r = 0; r < 4; ++r)
        PrefetchAhead<kBlockBytes>(rows[r] + k * kBlockBytes, prefetch_offset);
    }
    KQ6Scales s;
    if (cache.ready) {
      for (int n = 0; n < 2; ++n) cache.Load(2 * k + n, &s.a_lo[n], &s.a_hi[n]);
    } else {
      s = KQ6ScalesOf(rows, k * kBlockBytes);
      for (int n = 0; n < 2; ++n) cache.Store(2 * k + n, s.a_lo[n], s.a_hi[n]);
    }
    for (int n = 0; n < 2; ++n) {
      const KStep w = cache.Weights(2 * k + n, [&] { return KQ6Decode(rows, k * kBlockBytes, n); });
      KHalvesStep<kActs>(acc, w, s.a_lo[n], s.a_hi[n], x + (2 * k + n) * internal::kKTileGroupBytes,
                         x_stride);
    }
  }
  KStoreRows<kActs>(acc, rows_valid, y, y_stride);
}

// ---- MLX (every width; 4 and 8 bits decoded specially): 128-value chunks c of a row are steps (4
// blocks; a last partial chunk has `valid` < 4 blocks, read with masked loads so that nothing past
// the row is touched).

// Up to 4 scalars (f32, f16 or bf16) at p as f32 lanes, zeros after `count`.
HWY_INLINE __m128 KLoadScalars4(DType type, const std::byte* p, int64_t count) {
  const auto mask = static_cast<__mmask8>(FirstLanes(count));
  if (type == DType::kF32) return _mm_maskz_loadu_ps(mask, p);
  const __m128i words = _mm_maskz_loadu_epi16(mask, p);
  if (type == DType::kF16) return _mm_cvtph_ps(words);
  return _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(words), 16));
}

// A quad of rows and, for MLX, the lane index of the groups.
struct KMlxQuad : KQuadRows {
  __m512i group_lanes{};  // lane 4s+r <- 4r + (group of block s in the chunk)
  // Other widths than 4 and 8 (KMlxDecodeBits): the bytes of each 8 values gathered into a qword
  // (vpermt2b indices for values 0..15 and 16..31 of the 4 blocks), vpmultishiftqb offsets of the
  // 8 values in a qword, the value mask.
  __m512i gather[2]{};
  __m512i shifts{};
  __m512i mask{};
};

// The lanes of KMlxQuad for `bits`-bit values.
HWY_INLINE void KMlxBitTables(int bits, KMlxQuad* quad) {
  alignas(64) uint8_t gather[2][64];
  alignas(64) uint8_t shifts[64];
  for (int half = 0; half < 2; ++half) {
    for (int j = 0; j < 64; ++j) {
      // Byte j of the output: value 32s + 16 half + 8 (q % 2) + t with s = j / 16, q = j / 8.
      const int s = j / 16, q = j / 8, t = j % 8;
      const int first = 32 * s + 16 * half + 8 * (q % 2);  // multiple of 8: starts a byte
      gather[half][j] = static_cast<uint8_t>(first / 8 * bits + std::min(t, bits - 1));
    }
  }
  for (int j = 0; j < 64; ++j) shifts[j] = static_cast<uint8_t>(bits * (j % 8));
  quad->gather[0] = _mm512_load_si512(gather[0]);
  quad->gather[1] = _mm512_load_si512(gather[1]);
  quad->shifts = _mm512_load_si512(shifts);
  quad->mask = _mm512_set1_epi8(static_cast<char>((1 << bits) - 1));
}

// The MLX layout of w in quad (everything but the rows).
HWY_INLINE void KMlxPrepare(const MatrixView& w, KMlxQuad* quad) {
  alignas(64) int32_t lanes[16];
  for (int l = 0; l < 16; ++l) {
    lanes[l] = 4 * (l % 4) + static_cast<int32_t>(l / 4 * 32 / w.group_size);
  }
  quad->group_lanes = _mm512_load_si512(lanes);
  quad->bits = MlxBitsOf(w.type);
  quad->scale_bytes = Traits(w.scale_type).block_bytes;
  KMlxBitTables(quad->bits, quad);
}

// lane 4s + r: scale (a) and bias (c) of block s's group in row r.
HWY_INLINE void KMlxScales(const KMlxQuad& quad, int64_t chunk, int64_t valid, __m512* a,
                           __m512* c) {
  const MatrixView& w = *quad.w;
  const int64_t scale_bytes = quad.scale_bytes;
  const int64_t group0 = chunk * 128 / w.group_size;
  const int64_t groups = (32 * valid + w.group_size - 1) / w.group_size;
  __m128 sv[4], bv[4];
  for (int r = 0; r < 4; ++r) {
    const int64_t off = quad.row_ids[r] * w.scale_row_stride + group0 * scale_bytes;
    sv[r] = KLoadScalars4(w.scale_type, w.scales + off, groups);
    bv[r] = KLoadScalars4(w.scale_type, w.biases + off, groups);
  }
  const auto combine = [](const __m128(&v)[4]) {
    __m512 all = _mm512_castps128_ps512(v[0]);
    all = _mm512_insertf32x4(all, v[1], 1);
    all = _mm512_insertf32x4(all, v[2], 2);
    return _mm512_insertf32x4(all, v[3], 3);
  };
  *a = _mm512_permutexvar_ps(quad.group_lanes, combine(sv));
  *c = _mm512_permutexvar_ps(quad.group_lanes, combine(bv));
}

// 4-bit: byte j of a block's 16 holds values 2j and 2j + 1 in its low and high nibble, so
// interleaving the nibbles of a 128-bit lane gives values 0..15 (bytes 0..7) and 16..31.
// 8-bit: 64-byte halves of the chunk hold blocks (0, 1) and (2, 3) in order.
// Any width (2, 3, 5, 6 bits): 8 values take `bits` whole bytes, so vpermt2b gathers each 8
// values' bytes into a qword (the chunk's 16 * bits <= 96 bytes fit its two tables) and
// vpmultishiftqb picks the values' bits out of it.
HWY_INLINE KStep KMlxDecodeBits(const KMlxQuad& quad, int64_t chunk, int64_t valid) {
  const MatrixView& w = *quad.w;
  const int bits = quad.bits;
  const int64_t bytes = 4 * bits * valid;
  KStep s;
  for (int r = 0; r < 4; ++r) {
    const std::byte* p = w.data + quad.row_ids[r] * w.row_stride + chunk * 16 * bits;
    const __m512i a = _mm512_maskz_loadu_epi8(FirstLanes(bytes), p);
    const __m512i b = _mm512_maskz_loadu_epi8(FirstLanes(bytes - 64), p + 64);
    const auto values = [&](__m512i gather) {
      return _mm512_and_si512(
          _mm512_multishift_epi64_epi8(quad.shifts, _mm512_permutex2var_epi8(a, gather, b)),
          quad.mask);
    };
    s.lo[r] = values(quad.gather[0]);
    s.hi[r] = values(quad.gather[1]);
  }
  return s;
}

template <int kBits, bool kTail>
HWY_INLINE KStep KMlxDecode(const KMlxQuad& quad, int64_t chunk, int64_t valid) {
  if constexpr (kBits != 4 && kBits != 8) return KMlxDecodeBits(quad, chunk, valid);
  const MatrixView& w = *quad.w;
  KStep s;
  for (int r = 0; r < 4; ++r) {
    const std::byte* p = w.data + quad.row_ids[r] * w.row_stride + chunk * 16 * kBits;
    if constexpr (kBits == 4) {
      const __m512i nibble = _mm512_set1_epi8(0x0F);
      const __m512i q =
          kTail ? _mm512_maskz_loadu_epi8(FirstLanes(16 * valid), p) : _mm512_loadu_si512(p);
      const __m512i lo = _mm512_and_si512(q, nibble);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), nibble);
      s.lo[r] = _mm512_unpacklo_epi8(lo, hi);
      s.hi[r] = _mm512_unpackhi_epi8(lo, hi);
    } else {
      const __m512i q0 =
          kTail ? _mm512_maskz_loadu_epi8(FirstLanes(32 * valid), p) : _mm512_loadu_si512(p);
      const __m512i q1 = kTail ? _mm512_maskz_loadu_epi8(FirstLanes(32 * valid - 64), p + 64)
                               : _mm512_loadu_si512(p + 64);
      s.lo[r] = _mm512_shuffle_i64x2(q0, q1, _MM_SHUFFLE(2, 0, 2, 0));
      s.hi[r] = _mm512_shuffle_i64x2(q0, q1, _MM_SHUFFLE(3, 1, 3, 1));
    }
  }
  return s;
}

template <int kBits, int kActs>
HWY_INLINE LOOM_KERNELS_VNNI_ATTR void KMlxQuadTile(const KMlxQuad& quad, int rows_valid,
                                                    int64_t prefetch_rows,
                                                    const KFactorCache& cache, const std::byte* x,
                                                    int64_t x_stride, float* y, int64_t y_stride) {
  const MatrixView& w = *quad.w;
  // kBits == 0: any width (KMlxDecodeBits); prefetches cover 64 bytes per row and chunk.
  constexpr int64_t kChunkBytes = kBits == 0 ? 96 : 16 * kBits;
  const int64_t chunk_bytes = kBits == 0 ? 16 * quad.bits : kChunkBytes;
  const int64_t blocks = w.cols / 32;
  const int64_t full = blocks / 4;
  const int64_t scale_bytes = quad.scale_bytes;
  __m512 acc[kActs];
  for (int t = 0; t < kActs; ++t) acc[t] = _mm512_setzero_ps();
  __m512 a, c;
  for (int64_t ch = 0; ch < full; ++ch) {
    if (prefetch_rows != 0) {
      for (int r = 0; r < 4; ++r) {
        PrefetchAhead<kChunkBytes>(w.data + quad.row_ids[r] * w.row_stride + ch * chunk_bytes,
                                   prefetch_rows * w.row_stride);
        const int64_t off =
            quad.row_ids[r] * w.scale_row_stride + ch * 128 / w.group_size * scale_bytes;
        PrefetchAhead<1>(w.scales + off, prefetch_rows * w.scale_row_stride);
        PrefetchAhead<1>(w.biases + off, prefetch_rows * w.scale_row_stride);
      }
    }
    if (cache.ready) {
      cache.Load(ch, &a, &c);
    } else {
      KMlxScales(quad, ch, 4, &a, &c);
      cache.Store(ch, a, c);
    }
    KAffineStep<kActs>(acc,
                       cache.Weights(ch, [&] { return KMlxDecode<kBits, false>(quad, ch, 4); }), a,
                       c, x + ch * internal::kKTileGroupBytes, x_stride);
  }
  if (blocks % 4 != 0) {
    if (cache.ready) {
      cache.Load(full, &a, &c);
    } else {
      KMlxScales(quad, full, blocks % 4, &a, &c);
      cache.Store(full, a, c);
    }
    KAffineStep<kActs>(
        acc, cache.Weights(full, [&] { return KMlxDecode<kBits, true>(quad, full, blocks % 4); }),
        a, c, x + full * internal::kKTileGroupBytes, x_stride);
  }
  KStoreRows<kActs>(acc, rows_valid, y, y_stride);
}

#endif  // HWY_TARGET == HWY_AVX3_DL

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
