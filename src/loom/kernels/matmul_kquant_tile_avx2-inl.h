// Register-tiled K-quant (Q4_K, Q5_K, Q6_K) and MLX affine (2..8 bits) products for AVX2 and
// AVX-512 without VNNI/VBMI (the AVX3 target), included by matmul_kquant-inl.h once per SIMD
// target; empty for other targets.  The row loop, KTileRows, is shared with AVX3_DL
// (matmul_kquant-inl.h), as are KTileSupports and the K-quant header unpacking
// (matmul_kquant_tile-inl.h).
//
// The AVX3_DL tiles (matmul_kquant_tile-inl.h) on 256-bit vectors: a step of 4 weight rows (128
// values, 4 blocks) is taken in two halves, blocks (0, 1) and (2, 3); half hh of a kact tile group
// is its bytes [32hh, 32hh + 32) of lo, hi, scales, sums and corrections, and it meets the half's
// quants decoded as unsigned bytes in the same order (KHalf).  AVX2 has no vpdpbusd: vpmaddubsw
// (unsigned x signed bytes, adjacent pairs summed into int16) and vpmaddwd with ones give the same
// 4-value int32 lanes exactly, as long as no int16 saturates:
//  - q <= 63 (Q4_K, Q5_K, Q6_K, MLX up to 6 bits) times |x| <= 127: a pair is at most 16002, and
//    the lo and hi pairs of a lane are added in int16 (at most 32004) before one vpmaddwd;
//  - Q6_K keeps values 0..15 and 16..31 apart (each half-block has its own scale) and adds 4 times
//    its correction lanes after summing the block lanes (AVX3_DL starts vpdpbusd from them);
//  - MLX 8-bit q (up to 255) would saturate: it multiplies |q - 128| by x with the sign of q - 128
//    (at most 2 * 128 * 127 per pair, as Q8_0 does) and adds back 128 * sum(x), which is -16 times
//    the block's two correction lanes.
// In-lane unpacks gather the 4 rows' lanes into one vector with a lane per (block, row), whose f32
// part is lane for lane the AVX3_DL one: the same factor lanes (convert, multiply), the weight
// factor times the activation scale, the same fused multiply-adds in the same order over the
// steps, and a row's 4 block lanes added as (b0 + b2) + (b1 + b3) at the end.  So these tiles give
// the AVX3_DL bits, and a position decoded alone the bits it has inside a batched prompt.
//
// Both halves of a step are taken before the next step, so the rows stream in order (decode, one
// activation row) and batches read their activations once.
// Nothing past a row is read: an MLX row's last chunk is read from a zero-padded copy when it is
// partial, or when the 16-byte loads of the widths other than 4 and 8 bits would pass its end.

#if defined(LOOM_KERNELS_MATMUL_KQUANT_TILE_AVX2_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LOOM_KERNELS_MATMUL_KQUANT_TILE_AVX2_INL_H_
#undef LOOM_KERNELS_MATMUL_KQUANT_TILE_AVX2_INL_H_
#else
#define LOOM_KERNELS_MATMUL_KQUANT_TILE_AVX2_INL_H_
#endif

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "loom/kernels/block_formats.h"
#include "loom/kernels/kernels_internal.h"
#include "loom/kernels/matmul_kquant_tile-inl.h"
#include "loom/kernels/stream_avx3-inl.h"

HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

// Activation rows per register tile (measured: 4 and 8 alike, 2 slower by 5-15% in batches).
inline constexpr int kKTileActs = 4;

// Half hh of a step of 4 rows: row r's block 2hh + L, values 0..15 in 128-bit lane L of lo[r],
// 16..31 in hi[r]; unsigned (MLX 8-bit: q - 128, signed).
struct KHalf {
  __m256i lo[4], hi[4];
};

// The f32 factor lanes of a step, per half hh (lane 4s' + r: block 2hh + s' of row r):
// value = a * q + c (Q6_K: a for values 0..15, c the a of values 16..31).
struct KFactors {
  __m256 a[2], c[2];
};

// ---- The products of a half step.

enum class KDot {
  kAffine,  // unsigned q <= 63, value = a * q + c
  kHalves,  // Q6_K: q - 32 with a per half-block
  kSigned,  // MLX 8-bit: q - 128, value = a * q + c
};

// acc[t][kH] += half kH of the products of the step w with activation row t (its tile group at
// x + t * x_stride).
template <KDot kDot, int kActs, int kH>
HWY_INLINE void KHalfStep(__m256 (&acc)[kActs][2], const KHalf& w, __m256 a, __m256 c,
                          const std::byte* x, int64_t x_stride) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int t = 0; t < kActs; ++t) {
    const std::byte* xt = x + t * x_stride + 32 * kH;
    const auto load = [&](int64_t offset) __attribute__((always_inline)) {
      return _mm256_load_si256(reinterpret_cast<const __m256i*>(xt + offset));
    };
    const __m256i x_lo = load(internal::kKTileLo);
    const __m256i x_hi = load(internal::kKTileHi);
    const __m256 dx = _mm256_load_ps(reinterpret_cast<const float*>(xt + internal::kKTileScale));
    __m256 sum = acc[t][kH];
    if constexpr (kDot == KDot::kHalves) {
      __m256i lo[4], hi[4];
      for (int r = 0; r < 4; ++r) {
        lo[r] = _mm256_madd_epi16(_mm256_maddubs_epi16(w.lo[r], x_lo), ones);
        hi[r] = _mm256_madd_epi16(_mm256_maddubs_epi16(w.hi[r], x_hi), ones);
      }
      // 4 lanes of a correction, -8 * sum(x) each, remove the offset of 32 from 16 values.
      const __m256i i_lo = _mm256_add_epi32(SumBlockLanes256<kI32>(lo),
                                            _mm256_slli_epi32(load(internal::kKTileCorrLo), 2));
      const __m256i i_hi = _mm256_add_epi32(SumBlockLanes256<kI32>(hi),
                                            _mm256_slli_epi32(load(internal::kKTileCorrHi), 2));
      sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i_lo), _mm256_mul_ps(a, dx), sum);
      sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i_hi), _mm256_mul_ps(c, dx), sum);
    } else {
      __m256i sums[4];
      for (int r = 0; r < 4; ++r) {
        if constexpr (kDot == KDot::kAffine) {
          sums[r] = _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(w.lo[r], x_lo),
                                                       _mm256_maddubs_epi16(w.hi[r], x_hi)),
                                      ones);
        } else {
          const __m256i p_lo =
              _mm256_maddubs_epi16(_mm256_abs_epi8(w.lo[r]), _mm256_sign_epi8(x_lo, w.lo[r]));
          const __m256i p_hi =
              _mm256_maddubs_epi16(_mm256_abs_epi8(w.hi[r]), _mm256_sign_epi8(x_hi, w.hi[r]));
          sums[r] = _mm256_add_epi32(_mm256_madd_epi16(p_lo, ones), _mm256_madd_epi16(p_hi, ones));
        }
      }
      __m256i isum = SumBlockLanes256<kI32>(sums);
      if constexpr (kDot == KDot::kSigned) {
        // + 128 * sum(x) of the block = -16 * (its correction lanes, -8 * sum of 16 values each).
        isum = _mm256_sub_epi32(
            isum,
            _mm256_slli_epi32(
                _mm256_add_epi32(load(internal::kKTileCorrLo), load(internal::kKTileCorrHi)), 4));
      }
      sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(a, dx), sum);
      sum = _mm256_fmadd_ps(
          c, _mm256_load_ps(reinterpret_cast<const float*>(xt + internal::kKTileSum)), sum);
    }
    acc[t][kH] = sum;
  }
}

// acc[t][h] += the products of step k + kI's halves h = 0, 1 with activation row t, with the
// step's factors f.
template <int kI, int kActs, class Rows>
HWY_INLINE void KStep(const Rows& rows, int64_t k, const KFactors& f, const KFactorCache& cache,
                      const std::byte* x, int64_t x_stride, __m256 (&acc)[kActs][2]) {
  const int64_t step = k + kI;
  const std::byte* xs = x + step * internal::kKTileGroupBytes;
  // Single activation rows decode the weights in place (decode streams them; the last tiles of a
  // batch find them in L1): no branches in the loop, whose accumulators then stay in registers.
  const auto weights = [&](int h) __attribute__((always_inline)) {
    if constexpr (kActs == 1) return rows.Decode(step, h);
    return cache.Weights(
        step, h, [&]() __attribute__((always_inline)) { return rows.Decode(step, h); });
  };
  KHalfStep<Rows::kDot, kActs, 0>(acc, weights(0), f.a[0], f.c[0], xs, x_stride);
  KHalfStep<Rows::kDot, kActs, 1>(acc, weights(1), f.a[1], f.c[1], xs, x_stride);
}

// y[t * y_stride + r] = dot(row r, activation row t) for r < rows_valid, t < kActs: the steps of
// `rows` (a format below: its steps' factors, decoded halves and prefetches) with the activation
// rows' tile groups at x + t * x_stride.  Half 1 of a step follows half 0 with the same activation
// rows (measured 20% faster in batches than all steps of half 0, then of half 1, although only
// one half's weights fit the registers beside the accumulators: the accumulators spill either
// way, and one pass reads the activations once).
template <int kActs, class Rows>
HWY_INLINE void KHalfTile(const Rows& rows, int64_t steps, const KFactorCache& cache,
                          const std::byte* x, int64_t x_stride, int rows_valid, float* y,
                          int64_t y_stride) {
  constexpr int kGroup = Rows::kFactorSteps;
  __m256 acc[kActs][2];
  for (int t = 0; t < kActs; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < steps; k += kGroup) {
    rows.Prefetch(k);
    // The factors of the quad's first tile are kept for the next ones.
    KFactors f[kGroup];
    if (cache.ready) {
      for (int i = 0; i < kGroup; ++i) {
        cache.Load(k + i, &f[i].a[0], &f[i].a[1], &f[i].c[0], &f[i].c[1]);
      }
    } else {
      rows.Factors(k, f);
      for (int i = 0; i < kGroup; ++i) {
        cache.Store(k + i, f[i].a[0], f[i].a[1], f[i].c[0], f[i].c[1]);
      }
    }
    KStep<0>(rows, k, f[0], cache, x, x_stride, acc);
    if constexpr (kGroup == 2) KStep<1>(rows, k, f[1], cache, x, x_stride, acc);
  }
  for (int t = 0; t < kActs; ++t) {
    StoreQuadRows256(acc[t][0], acc[t][1], rows_valid, y + t * y_stride);
  }
}

// ---- Q4_K and Q5_K: steps 2k and 2k + 1 are the halves of super-block k (rows[r] + k * kBytes).
// kPaired: the quants in WeightLayout::kPairedNibbles (matrix.h), the layout this path prefers.

template <DType kType, bool kPaired = false>
struct KQ45Rows {
  static constexpr KDot kDot = KDot::kAffine;
  static constexpr int kFactorSteps = 2;
  static constexpr int64_t kBytes =
      kType == DType::kQ4_K ? internal::kQ4KBlockBytes : internal::kQ5KBlockBytes;
  const std::byte* const* rows;
  mutable RegionPrefetcher prefetcher;  // the quad ahead, a part per super-block

  HWY_INLINE void Prefetch(int64_t /*step*/) const { prefetcher.Next(); }

  // The tiles' factors: KQ45HeaderOf's transposed bytes, widened.  (DecodeFactors gives the same
  // lanes in fewer instructions, but the tiles compute factors once per quad and keep them for the
  // next tiles, so it gains them nothing, and with it their batches measured up to 5% slower, in
  // noisy runs: this code sits on a cold path of their hot loop and changes its registers.)
  HWY_INLINE void Factors(int64_t step, KFactors (&f)[2]) const {
    const KQ45Header h = KQ45HeaderOf(rows, step / 2 * kBytes);
    const __m256 dd = _mm256_cvtph_ps(h.dd);  // lanes 2r, 2r + 1
    const __m256 d = _mm256_permutevar8x32_ps(dd, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6));
    const __m256 neg_dmin =
        _mm256_xor_ps(_mm256_permutevar8x32_ps(dd, _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7)),
                      _mm256_set1_ps(-0.0f));
    const auto to_f32 = [](__m128i b, int hh) __attribute__((always_inline)) {
      return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hh == 0 ? b : _mm_srli_si128(b, 8)));
    };
    for (int k = 0; k < 2; ++k) {
      for (int hh = 0; hh < 2; ++hh) {
        f[k].a[hh] = _mm256_mul_ps(to_f32(h.sc[k], hh), d);
        f[k].c[hh] = _mm256_mul_ps(to_f32(h.m[k], hh), neg_dmin);
      }
    }
  }

  // Decode's factors (matmul_kquant_decode_avx2-inl.h): KScaleMin of the 4 rows (KQ45HeaderOf's
  // values) on 256-bit vectors with the 16 header bytes of each row in both 128-bit lanes, left in
  // row order (byte 4r + j: sub-block j or 4 + j of row r): one vpshufb per factor vector then
  // takes its lanes 4s' + r straight to 32-bit lanes, where the tiles' header transposes its bytes
  // and widens them with vpmovzxbd (two uops on Zen 3's shuffle pipes) after byte shifts.
  HWY_INLINE void DecodeFactors(int64_t step, KFactors (&f)[2]) const {
    const int64_t offset = step / 2 * kBytes;
    __m256i v[4];
    for (int r = 0; r < 4; ++r) {
      v[r] = _mm256_broadcastsi128_si256(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[r] + offset)));
    }
    const __m256i lo01 = _mm256_unpacklo_epi32(v[0], v[1]);
    const __m256i lo23 = _mm256_unpacklo_epi32(v[2], v[3]);
    const __m256i hi01 = _mm256_unpackhi_epi32(v[0], v[1]);
    const __m256i hi23 = _mm256_unpackhi_epi32(v[2], v[3]);
    const __m256i w0 = _mm256_unpackhi_epi64(lo01, lo23);  // scale bytes 0..3 of row r at 4r
    const __m256i w1 = _mm256_unpacklo_epi64(hi01, hi23);  // 4..7
    const __m256i w2 = _mm256_unpackhi_epi64(hi01, hi23);  // 8..11
    const __m256i k6 = _mm256_set1_epi8(0x3F), k4 = _mm256_set1_epi8(0x0F);
    const __m256i top = _mm256_set1_epi8(0x30);  // bits 6, 7 of a byte at 4, 5 (>> 2)
    const __m256i sc[2] = {
        _mm256_and_si256(w0, k6),
        _mm256_or_si256(_mm256_and_si256(w2, k4), _mm256_and_si256(_mm256_srli_epi32(w0, 2), top))};
    const __m256i m[2] = {_mm256_and_si256(w1, k6),
                          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), k4),
                                          _mm256_and_si256(_mm256_srli_epi32(w1, 2), top))};
    // f16 d and dmin of row r in 16-bit lanes 2r, 2r + 1 of dd; d of rows 0..3 twice, then dmin.
    const __m128i dd = _mm256_castsi256_si128(_mm256_unpacklo_epi64(lo01, lo23));
    const __m256 d = _mm256_cvtph_ps(
        _mm_shuffle_epi8(dd, _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 0, 1, 4, 5, 8, 9, 12, 13)));
    const __m256 neg_dmin = _mm256_xor_ps(
        _mm256_cvtph_ps(_mm_shuffle_epi8(
            dd, _mm_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, 2, 3, 6, 7, 10, 11, 14, 15))),
        _mm256_set1_ps(-0.0f));
    for (int hh = 0; hh < 2; ++hh) {
      // Lane 4s' + r <- byte 4r + 2hh + s' (a zero-extended byte: indices with bit 7 give 0).
      const char j0 = static_cast<char>(2 * hh), j1 = static_cast<char>(2 * hh + 1);
      const char z = static_cast<char>(0x80);
      const __m256i lanes =
          _mm256_setr_epi8(j0, z, z, z, j0 + 4, z, z, z, j0 + 8, z, z, z, j0 + 12, z, z, z,  //
                           j1, z, z, z, j1 + 4, z, z, z, j1 + 8, z, z, z, j1 + 12, z, z, z);
      const auto to_f32 = [&](__m256i bytes) __attribute__((always_inline)) {
        return _mm256_cvtepi32_ps(_mm256_shuffle_epi8(bytes, lanes));
      };
      for (int k = 0; k < 2; ++k) {
        f[k].a[hh] = _mm256_mul_ps(to_f32(sc[k]), d);
        f[k].c[hh] = _mm256_mul_ps(to_f32(m[k]), neg_dmin);
      }
    }
  }

  // The 32 quant bytes of half hh of step h hold sub-block 4h + 2hh in their low nibbles and
  // 4h + 2hh + 1 in their high nibbles (kPaired: sub-block 4h + 2hh in the first 16 bytes, values
  // 0..15 low, 16..31 high, 4h + 2hh + 1 in the next 16); Q5_K's fifth bit of value l of sub-block
  // j is bit j of qh byte l.
  HWY_INLINE KHalf Decode(int64_t step, int hh) const {
    return DecodeOf(step / 2, static_cast<int>(step % 2), hh);
  }
  // Half hh of half h of super-block `super` (constant h and hh fold the shifts and offsets).
  HWY_INLINE KHalf DecodeOf(int64_t super, int h, int hh) const {
    constexpr int64_t kQs = kType == DType::kQ4_K ? internal::kQ4KQs : internal::kQ5KQs;
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    const __m256i lanes = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);  // low, high nibbles
    const auto broadcast = [](const std::byte* p) __attribute__((always_inline)) {
      return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    };
    KHalf w;
    for (int r = 0; r < 4; ++r) {
      const std::byte* blk = rows[r] + super * kBytes;
      const std::byte* qs = blk + kQs + 64 * h + 32 * hh;
      if constexpr (kPaired) {
        // One shift per 64 values where the file's pairing takes two variable shifts (the
        // shuffle/shift pipes bound this decode on Zen 3).
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
        w.lo[r] = _mm256_and_si256(q, nibble);
        w.hi[r] = _mm256_and_si256(_mm256_srli_epi16(q, 4), nibble);
      } else {
        w.lo[r] = _mm256_and_si256(_mm256_srlv_epi32(broadcast(qs), lanes), nibble);
        w.hi[r] = _mm256_and_si256(_mm256_srlv_epi32(broadcast(qs + 16), lanes), nibble);
      }
      if constexpr (kType == DType::kQ5_K) {
        // Bit 4h + 2hh + L of each byte as 16 (0x10): a compare with the bit's mask instead of
        // two shifts, which take the shuffle/shift pipes (two of Zen 3's four) as the nibble
        // shifts do.
        const int bit = 4 * h + 2 * hh;
        const __m256i mask = _mm256_set_m128i(_mm_set1_epi8(static_cast<char>(2 << bit)),
                                              _mm_set1_epi8(static_cast<char>(1 << bit)));
        const __m256i sixteen = _mm256_set1_epi8(0x10);
        const auto high = [&](const std::byte* qh) __attribute__((always_inline)) {
          return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(broadcast(qh), mask), mask),
                                  sixteen);
        };
        w.lo[r] = _mm256_or_si256(w.lo[r], high(blk + internal::kQ5KQh));
        w.hi[r] = _mm256_or_si256(w.hi[r], high(blk + internal::kQ5KQh + 16));
      }
    }
    return w;
  }
};

// ---- Q6_K: steps 2k and 2k + 1 are the halves n of super-block k.  ql's 64 bytes of half n hold
// values 0..63 in their low nibbles and 64..127 in their high nibbles, in order; qh byte l holds
// the top 2 bits of values l, l + 32, l + 64, l + 96 (bit pairs 0..3).

struct KQ6Rows {
  static constexpr KDot kDot = KDot::kHalves;
  static constexpr int kFactorSteps = 2;
  static constexpr int64_t kBytes = internal::kQ6KBlockBytes;
  const std::byte* const* rows;
  mutable RegionPrefetcher prefetcher;  // the quad ahead, a part per super-block

  HWY_INLINE void Prefetch(int64_t /*step*/) const { prefetcher.Next(); }

  // a of step n's half-block p of block s, row r = d of row r * scale 8n + 2s + p of row r.  The
  // int8 scales are taken in row order (byte 4r + j of w[i]: scale 4i + j of row r) by one vpshufb
  // per factor vector into the top bytes of its 32-bit lanes, as sc * 2^24, and multiplied by
  // d * 2^-24: the same real product, so the same rounded f32 as sc * d (both scalings are exact:
  // |sc * 2^24| <= 2^31, an f16 d times 2^-24 stays a normal f32), without vpmovsxbd (two uops on
  // Zen 3's shuffle pipes) and the byte transposes.
  HWY_INLINE void Factors(int64_t step, KFactors (&f)[2]) const {
    const int64_t offset = step / 2 * kBytes;
    __m256i v[4];
    for (int r = 0; r < 4; ++r) {
      v[r] = _mm256_broadcastsi128_si256(_mm_loadu_si128(
          reinterpret_cast<const __m128i*>(rows[r] + offset + internal::kQ6KScales)));
    }
    const __m256i lo01 = _mm256_unpacklo_epi32(v[0], v[1]),
                  hi01 = _mm256_unpackhi_epi32(v[0], v[1]);
    const __m256i lo23 = _mm256_unpacklo_epi32(v[2], v[3]),
                  hi23 = _mm256_unpackhi_epi32(v[2], v[3]);
    const __m256i w[4] = {_mm256_unpacklo_epi64(lo01, lo23), _mm256_unpackhi_epi64(lo01, lo23),
                          _mm256_unpacklo_epi64(hi01, hi23), _mm256_unpackhi_epi64(hi01, hi23)};
    const __m128 d4 = _mm_mul_ps(KQ6RowScales(rows, offset), _mm_set1_ps(0x1p-24f));
    const __m256 d = _mm256_insertf128_ps(_mm256_castps128_ps256(d4), d4, 1);
    // Lane 4s' + r <- byte 4r + 2s' + p, in the top byte of the lane (indices with bit 7 give 0).
    const auto table = [](int p) {
      const char z = static_cast<char>(0x80);
      const auto b = [](int i) { return static_cast<char>(i); };
      return _mm256_setr_epi8(z, z, z, b(p), z, z, z, b(4 + p), z, z, z, b(8 + p), z, z, z,
                              b(12 + p), z, z, z, b(2 + p), z, z, z, b(6 + p), z, z, z, b(10 + p),
                              z, z, z, b(14 + p));
    };
    const __m256i lanes_a = table(0), lanes_c = table(1);
    for (int n = 0; n < 2; ++n) {
      for (int hh = 0; hh < 2; ++hh) {
        const __m256i bytes = w[2 * n + hh];
        f[n].a[hh] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_shuffle_epi8(bytes, lanes_a)), d);
        f[n].c[hh] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_shuffle_epi8(bytes, lanes_c)), d);
      }
    }
  }

  HWY_INLINE void DecodeFactors(int64_t step, KFactors (&f)[2]) const { Factors(step, f); }

  // Half hh of step n: values 64hh + 32L + j of lane L; j < 16 (lo) from ql bytes [0, 16) and
  // [32, 48) and qh bytes [0, 16), j >= 16 (hi) from the next 16 of each.  hh = 0: low nibbles,
  // qh bit pairs 0 (L = 0) and 1 (L = 1) moved to bits 4-5; hh = 1: high nibbles, pairs 2 and 3.
  HWY_INLINE KHalf Decode(int64_t step, int hh) const {
    const int64_t offset = step / 2 * kBytes;
    const int n = static_cast<int>(step % 2);
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    const __m256i top = _mm256_set1_epi8(0x30);
    const __m256i shift_lo = _mm256_setr_epi32(4, 4, 4, 4, 2, 2, 2, 2);  // pairs 0, 1: left
    const __m256i shift_hi = _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2);  // pairs 2, 3: right
    KHalf w;
    for (int r = 0; r < 4; ++r) {
      const std::byte* ql = rows[r] + offset + 64 * n;
      const std::byte* qh = rows[r] + offset + internal::kQ6KQh + 32 * n;
      const auto values = [&](int j) __attribute__((always_inline)) {  // j = 0 (lo) or 16 (hi)
        const __m256i q = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(ql + 32 + j),
                                              reinterpret_cast<const __m128i*>(ql + j));
        const __m256i h =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qh + j)));
        if (hh == 0) {
          return _mm256_or_si256(_mm256_and_si256(q, nibble),
                                 _mm256_and_si256(_mm256_sllv_epi32(h, shift_lo), top));
        }
        return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), nibble),
                               _mm256_and_si256(_mm256_srlv_epi32(h, shift_hi), top));
      };
      w.lo[r] = values(0);
      w.hi[r] = values(16);
    }
    return w;
  }
};

// ---- MLX (every width; 4 and 8 bits decoded specially): 128-value chunks of a row are steps (4
// blocks; a last partial chunk has fewer, and zeros for the others).

// A quad of rows and the MLX lane tables.
struct KMlxQuad : KQuadRows {
  // vpermps index of half hh's factor lanes: lane 4s' + r <- 4 (r % 2) + the group of block
  // 2hh + s' in the chunk, from rows (0, 1) or (2, 3).
  __m256i group_lanes[2]{};
  // Other widths than 4 and 8 (KMlxRows::Unpack): vpshufb indices gathering the 2 bytes that hold
  // each of values 0..7 (gather[0]) and 8..15 (gather[1]) of a 16-value run into a word, at a bit
  // offset of 1..8 (none of 0: a value starting a byte takes it as the high byte under a zero),
  // vpmulhuw factors 2^(16 - offset) shifting it down, the value mask.
  __m256i gather[2]{};
  __m256i shifts{};
  __m256i mask{};
  int group_shift = 0;  // log2(group_size)
};

// The MLX layout of w in quad (everything but the rows).
HWY_INLINE void KMlxPrepare(const MatrixView& w, KMlxQuad* quad) {
  quad->bits = MlxBitsOf(w.type);
  quad->scale_bytes = Traits(w.scale_type).block_bytes;
  quad->group_shift = std::countr_zero(static_cast<uint64_t>(w.group_size));
  alignas(32) int32_t lanes[2][8];
  for (int hh = 0; hh < 2; ++hh) {
    for (int l = 0; l < 8; ++l) {
      const int block = 2 * hh + l / 4;
      lanes[hh][l] = 4 * (l % 2) + static_cast<int32_t>(block * 32 / w.group_size);
    }
    quad->group_lanes[hh] = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes[hh]));
  }
  const int bits = quad->bits;
  alignas(32) uint8_t gather[2][32];
  alignas(32) uint16_t shifts[16];
  for (int v = 0; v < 8; ++v) {
    const int bit = bits * v;
    int offset = bit % 8, low = bit / 8, high = bit / 8 + 1;
    if (offset == 0) {
      offset = 8, low = 0x80, high = bit / 8;  // vpshufb gives 0 for an index with bit 7 set
    } else if (offset + bits <= 8) {
      high = 0x80;
    }
    for (int lane = 0; lane < 2; ++lane) {
      for (int k = 0; k < 2; ++k) {  // values 8k + v start bits * 8k = bits bytes later
        const int add = k * bits;
        gather[k][16 * lane + 2 * v] = static_cast<uint8_t>(low == 0x80 ? low : low + add);
        gather[k][16 * lane + 2 * v + 1] = static_cast<uint8_t>(high == 0x80 ? high : high + add);
      }
      shifts[8 * lane + v] = static_cast<uint16_t>(1u << (16 - offset));
    }
  }
  for (int k = 0; k < 2; ++k) {
    quad->gather[k] = _mm256_load_si256(reinterpret_cast<const __m256i*>(gather[k]));
  }
  quad->shifts = _mm256_load_si256(reinterpret_cast<const __m256i*>(shifts));
  quad->mask = _mm256_set1_epi16(static_cast<int16_t>((1 << bits) - 1));
}

// The first `bytes` (even, under 16) bytes at p, zeros after; reads only those.  In registers,
// from the last piece to the first: a copy through the stack (a memcpy call of a size known at run
// time, then a 16-byte load of what it stored in pieces) was a fifth of the MLX decode leaves'
// time, whose rows end in a partial load of factors per quad.  A constant size folds to its loads.
HWY_INLINE __m128i KLoadHead16(const std::byte* p, int64_t bytes) {
  __m128i v = _mm_setzero_si128();
  int64_t at = bytes;
  if (bytes & 2) {
    at -= 2;
    v = _mm_cvtsi32_si128(internal::LoadU16(p + at));
  }
  if (bytes & 4) {
    at -= 4;
    int32_t w;
    std::memcpy(&w, p + at, sizeof(w));
    v = _mm_or_si128(_mm_slli_si128(v, 4), _mm_cvtsi32_si128(w));
  }
  if (bytes & 8) {
    at -= 8;
    v = _mm_or_si128(_mm_slli_si128(v, 8),
                     _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + at)));
  }
  return v;
}

// The first kBytes bytes at p (kBytes == 0: `bytes`, even and under 16), zeros after; reads only
// those.
template <int kBytes>
HWY_INLINE __m128i KLoadBytes16(const std::byte* p, int64_t bytes) {
  if constexpr (kBytes == 16) return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return KLoadHead16(p, kBytes == 0 ? bytes : kBytes);
}

template <int kBits>  // 4, 8, or 0: any other width (2, 3, 5, 6)
struct KMlxRows {
  static constexpr KDot kDot = kBits == 8 ? KDot::kSigned : KDot::kAffine;
  static constexpr int kFactorSteps = 1;
  const KMlxQuad& quad;
  const std::byte* data[4];    // row r's first chunk
  const std::byte* scales[4];  // row r's first scale
  const std::byte* biases[4];
  int64_t chunk_bytes;      // 16 * bits
  int64_t prefetch_data;    // bytes ahead; 0: none
  int64_t prefetch_scales;  // the same rows ahead in the scales and biases
  int64_t copied = -1;      // the step read from tail instead of the rows (-1: none)
  const std::byte* tail{};  // (4, 128): row r's chunk `copied`, zero-padded

  HWY_INLINE const std::byte* Chunk(int r, int64_t step) const {
    return step == copied ? tail + 128 * r : data[r] + step * chunk_bytes;
  }

  HWY_INLINE void Prefetch(int64_t step) const {
    if (prefetch_data == 0 || step == copied) return;
    // kBits == 0: prefetches cover the widest chunk (6 bits: 96 bytes).
    constexpr int64_t kChunkBytes = kBits == 0 ? 96 : 16 * kBits;
    const int64_t scale_offset = (step * 128 >> quad.group_shift) * quad.scale_bytes;
    for (int r = 0; r < 4; ++r) {
      PrefetchAhead<kChunkBytes>(data[r] + step * chunk_bytes, prefetch_data);
      PrefetchAhead<1>(scales[r] + scale_offset, prefetch_scales);
      PrefetchAhead<1>(biases[r] + scale_offset, prefetch_scales);
    }
  }

  // Lane 4s + r: scale (a) and bias (c) of block s's group in row r; the groups of a partial chunk
  // past its last are zero (AVX3_DL's masked loads).
  HWY_INLINE void Factors(int64_t step, KFactors (&f)[1]) const {
    const MatrixView& w = *quad.w;
    const int64_t valid = std::min<int64_t>(4, w.cols / 32 - 4 * step);
    const int64_t groups = (32 * valid + (int64_t{1} << quad.group_shift) - 1) >> quad.group_shift;
    const int64_t offset = (step * 128 >> quad.group_shift) * quad.scale_bytes;
    const int64_t bytes = groups * quad.scale_bytes;
    switch (bytes) {  // a row's scalars of the chunk, in one load of their size
      case 16:
        return FactorsOf<16>(offset, bytes, f[0]);
      case 8:
        return FactorsOf<8>(offset, bytes, f[0]);
      case 4:
        return FactorsOf<4>(offset, bytes, f[0]);
      case 2:
        return FactorsOf<2>(offset, bytes, f[0]);
      default:
        return FactorsOf<0>(offset, bytes, f[0]);
    }
  }

  template <int kBytes>
  HWY_INLINE void FactorsOf(int64_t offset, int64_t bytes, KFactors& f) const {
    const DType type = quad.w->scale_type;
    // Rows (r0, r0 + 1): row r's groups as f32 in lanes 4 (r % 2) + g.
    const auto rows_f32 = [&](const std::byte* const* base, int r0) __attribute__((always_inline)) {
      const __m128i g0 = KLoadBytes16<kBytes>(base[r0] + offset, bytes);
      const __m128i g1 = KLoadBytes16<kBytes>(base[r0 + 1] + offset, bytes);
      if (type == DType::kF32) return _mm256_castsi256_ps(_mm256_set_m128i(g1, g0));
      const __m128i words = _mm_unpacklo_epi64(g0, g1);
      if (type == DType::kF16) return _mm256_cvtph_ps(words);
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(words), 16));
    };
    const auto lanes = [&](const std::byte* const* base, __m256(&out)[2])
        __attribute__((always_inline)) {
      const __m256 v01 = rows_f32(base, 0), v23 = rows_f32(base, 2);
      for (int hh = 0; hh < 2; ++hh) {
        out[hh] = _mm256_blend_ps(_mm256_permutevar8x32_ps(v01, quad.group_lanes[hh]),
                                  _mm256_permutevar8x32_ps(v23, quad.group_lanes[hh]), 0xCC);
      }
    };
    lanes(scales, f.a);
    lanes(biases, f.c);
  }

  HWY_INLINE KHalf Decode(int64_t step, int hh) const {
    KHalf w;
    for (int r = 0; r < 4; ++r) {
      const std::byte* p = Chunk(r, step);
      const auto load2 =
          [](const std::byte* hi, const std::byte* lo) __attribute__((always_inline)) {
        return _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(hi),
                                   reinterpret_cast<const __m128i*>(lo));
      };
      if constexpr (kBits == 4) {
        // Byte j of a block's 16 holds values 2j and 2j + 1 in its low and high nibble.
        const __m256i nibble = _mm256_set1_epi8(0x0F);
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * hh));
        const __m256i lo = _mm256_and_si256(q, nibble);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), nibble);
        w.lo[r] = _mm256_unpacklo_epi8(lo, hi);
        w.hi[r] = _mm256_unpackhi_epi8(lo, hi);
      } else if constexpr (kBits == 8) {
        const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));  // q -> q - 128
        const std::byte* b = p + 64 * hh;
        w.lo[r] = _mm256_xor_si256(load2(b + 32, b), flip);
        w.hi[r] = _mm256_xor_si256(load2(b + 48, b + 16), flip);
      } else {
        // Values 0..15 of a block take its first 2 * bits bytes, 16..31 the next.
        const int64_t block = chunk_bytes / 4;
        const std::byte* b = p + 2 * hh * block;
        w.lo[r] = Unpack(load2(b + block, b));
        w.hi[r] = Unpack(load2(b + block + block / 2, b + block / 2));
      }
    }
    return w;
  }

  // 16 values at quad.bits bits from the start of each 128-bit lane of src, as bytes.
  HWY_INLINE __m256i Unpack(__m256i src) const {
    const auto values = [&](__m256i gather) __attribute__((always_inline)) {
      return _mm256_and_si256(_mm256_mulhi_epu16(_mm256_shuffle_epi8(src, gather), quad.shifts),
                              quad.mask);
    };
    return _mm256_packus_epi16(values(quad.gather[0]), values(quad.gather[1]));
  }
};

template <int kBits, int kActs>
HWY_INLINE void KMlxQuadTile(const KMlxQuad& quad, int rows_valid, int64_t prefetch_rows,
                             const KFactorCache& cache, const std::byte* x, int64_t x_stride,
                             float* y, int64_t y_stride) {
  const MatrixView& w = *quad.w;
  const int64_t blocks = w.cols / 32;
  const int64_t steps = (blocks + 3) / 4;
  KMlxRows<kBits> rows{quad};
  rows.chunk_bytes = 16 * quad.bits;
  rows.prefetch_data = prefetch_rows * w.row_stride;
  rows.prefetch_scales = prefetch_rows * w.scale_row_stride;
  for (int r = 0; r < 4; ++r) {
    rows.data[r] = w.data + quad.row_ids[r] * w.row_stride;
    rows.scales[r] = w.scales + quad.row_ids[r] * w.scale_row_stride;
    rows.biases[r] = w.biases + quad.row_ids[r] * w.scale_row_stride;
  }
  // The last chunk is copied when it is partial, or when the 16-byte loads of other widths than 4
  // and 8 bits would pass its end.
  alignas(32) std::byte tail[4 * 128];
  if (kBits == 0 || blocks % 4 != 0) {
    rows.copied = steps - 1;
    rows.tail = tail;
    std::memset(tail, 0, sizeof(tail));
    for (int r = 0; r < 4; ++r) {
      std::memcpy(tail + 128 * r, rows.data[r] + rows.copied * rows.chunk_bytes,
                  static_cast<size_t>((blocks - 4 * rows.copied) * 4 * quad.bits));
    }
  }
  KHalfTile<kActs>(rows, steps, cache, x, x_stride, rows_valid, y, y_stride);
}

// ---- The tiles of a quad of rows with kActs activation rows, as the AVX3_DL ones (KQuadTile).

template <DType kType, int kActs, bool kPaired>
HWY_INLINE void KQ45QuadTile(const std::byte* const* rows, int rows_valid, int64_t prefetch_offset,
                             int64_t supers, const KFactorCache& cache, const std::byte* x,
                             int64_t x_stride, float* y, int64_t y_stride) {
  using Rows = KQ45Rows<kType, kPaired>;
  const RegionPrefetcher prefetcher(rows[0], prefetch_offset,
                                    rows[3] - rows[0] + supers * Rows::kBytes, supers);
  KHalfTile<kActs>(Rows{rows, prefetcher}, 2 * supers, cache, x, x_stride, rows_valid, y, y_stride);
}

template <int kActs>
HWY_INLINE void KQ6QuadTile(const std::byte* const* rows, int rows_valid, int64_t prefetch_offset,
                            int64_t supers, const KFactorCache& cache, const std::byte* x,
                            int64_t x_stride, float* y, int64_t y_stride) {
  const RegionPrefetcher prefetcher(rows[0], prefetch_offset,
                                    rows[3] - rows[0] + supers * KQ6Rows::kBytes, supers);
  KHalfTile<kActs>(KQ6Rows{rows, prefetcher}, 2 * supers, cache, x, x_stride, rows_valid, y,
                   y_stride);
}

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
