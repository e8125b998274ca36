// Matrix products for quantized weights (Q8_0, Q4_0) with quantized activations (the "qact" layout
// of kernels_internal.h): included once per SIMD target by matmul_q8_0.cc and matmul_q4_0.cc.
// Weights are read where they lie: in the file's layout (a memory-mapped file), or, copied on a CPU
// whose kernels run AVX2, in WeightLayout::kScalePairs (matrix.h), which every path reads.
//
// AVX3_DL (AVX-512 with VNNI and VBMI): a row's group of 4 blocks (128 values) is decoded into two
// 64-byte vectors of unsigned bytes in the qact order (vpermt2b gathers the quant bytes past the
// f16 scales; Q4_0 nibbles need no reordering), and vpdpbusd multiplies them with the signed
// activations, giving 16 int32 lanes, 4 per block; the lanes start from the qact correction that
// removes the unsigned offset.
// Quads of 4 rows x up to kTileActs activation rows: the int32 lanes of the 4 rows are first
// summed into one vector with a lane per (block, row) using in-lane unpacks and adds, which run on
// the many cheap pipes, so the f32 part (convert, scale by d_w * d_x, fused multiply-add) runs once
// per quad instead of once per row: it, vpdpbusd and the cross-lane permutes compete for the same
// two execution pipes on Zen 4/5.  Weights are prefetched a few rows ahead by the first pass over
// a quad.
//
// Every output is summed the same way whatever the number n of activation rows (decode, n = 1,
// is the quad tile with one activation row): each block's exact integer sum, one f32 multiply-add
// per block into the lane of its (block in the group, row), and the 4 block lanes added as
// (b0 + b2) + (b1 + b3) at the end.  So a position gives the same bits decoded alone or inside a
// batched prompt, and a continuation that prefills streamed tokens goes on with the same text.
// (An n = 1 path with one f32 accumulator per row and per-lane multiply-adds rounded differently
// and was measured no faster: docs/benchmarks.md.)
// AVX2 (and AVX3 without VNNI): the same quad tiles on 256-bit halves, with the same bits
// (matmul_quant_avx2-inl.h).  Other targets: a portable Highway path, one block at a time with
// int16 multiply-adds, each output one dot product computed the same way for every n.

#if defined(LOOM_KERNELS_MATMUL_QUANT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LOOM_KERNELS_MATMUL_QUANT_INL_H_
#undef LOOM_KERNELS_MATMUL_QUANT_INL_H_
#else
#define LOOM_KERNELS_MATMUL_QUANT_INL_H_
#endif

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "loom/base/half.h"
#include "loom/kernels/block_formats.h"
#include "loom/kernels/kernels_internal.h"
#include "loom/kernels/matmul_quant_avx2-inl.h"
#include "loom/kernels/stream_avx3-inl.h"

HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using internal::QuantBlockBytes;

HWY_INLINE float LoadF16AsF32(const std::byte* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof(bits));
  return base::F16ToF32(bits);
}

#if HWY_TARGET == HWY_AVX3_DL

// vpermt2b index tables.  Q4_0 group (72 bytes): block s has its f16 scale at 18s and quant bytes
// at 18s+2..18s+17; tables a = bytes [0, 64), b = [8, 72).
constexpr std::array<uint8_t, 64> Q4QuantIndex() {
  std::array<uint8_t, 64> idx{};
  for (int s = 0; s < 4; ++s) {
    for (int j = 0; j < 16; ++j) {
      const int off = 18 * s + 2 + j;
      idx[16 * s + j] = static_cast<uint8_t>(off < 64 ? off : 64 + off - 8);
    }
  }
  return idx;
}
// Q8_0 group (136 bytes): block s has its scale at 34s, values 0..15 at 34s+2.., 16..31 at
// 34s+18..; lo from tables a = [0, 64) and b = [64, 128), hi from [8, 72) and [72, 136).
constexpr std::array<uint8_t, 64> Q8LoIndex() {
  std::array<uint8_t, 64> idx{};
  for (int s = 0; s < 4; ++s) {
    for (int j = 0; j < 16; ++j) idx[16 * s + j] = static_cast<uint8_t>(34 * s + 2 + j);
  }
  return idx;
}
constexpr std::array<uint8_t, 64> Q8HiIndex() {
  std::array<uint8_t, 64> idx{};
  for (int s = 0; s < 4; ++s) {
    for (int j = 0; j < 16; ++j) {
      const int off = 34 * s + 18 + j;
      idx[16 * s + j] = static_cast<uint8_t>(off < 72 ? off - 8 : 64 + off - 72);
    }
  }
  return idx;
}
// vpermt2w index of 16-bit lane l <- the scale word of block l / 4 (tables a, b as above; a Q4_0
// group's scales all lie in a).  Lane 4s+r is block s of row r in a quad, or part r of block s in
// one row.
constexpr std::array<uint16_t, 32> ScaleIndex(DType type) {
  std::array<uint16_t, 32> idx{};
  for (int l = 0; l < 16; ++l) idx[l] = static_cast<uint16_t>(QuantBlockBytes(type) * (l / 4) / 2);
  return idx;
}

alignas(64) inline constexpr std::array<uint8_t, 64> kQ4Quant = Q4QuantIndex();
alignas(64) inline constexpr std::array<uint8_t, 64> kQ8Lo = Q8LoIndex();
alignas(64) inline constexpr std::array<uint8_t, 64> kQ8Hi = Q8HiIndex();
alignas(64) inline constexpr std::array<uint16_t, 32> kQ4Scale = ScaleIndex(DType::kQ4_0);
alignas(64) inline constexpr std::array<uint16_t, 32> kQ8Scale = ScaleIndex(DType::kQ8_0);

template <bool kTail>
HWY_INLINE __m512i LoadBytes(const std::byte* p, int64_t valid) {
  if constexpr (kTail) {
    return _mm512_maskz_loadu_epi8(FirstLanes(valid), p);
  } else {
    return _mm512_loadu_si512(p);
  }
}

// The quants of one row's group of 4 blocks as unsigned bytes in the qact order, and the two
// tables that hold its f16 scales (see ScaleIndex).
struct GroupBytes {
  __m512i lo;  // values 0..15 of block s at bytes 16s.. (Q4_0: q + 8; Q8_0: q + 128)
  __m512i hi;  // values 16..31
  __m512i a, b;
};

// Loads the group at p; with kTail only the first `valid` bytes exist (missing blocks read as
// zero bytes: zero scales and, for Q8_0, quants of 128 that meet zero activations).
template <DType kType, bool kTail>
HWY_INLINE GroupBytes LoadGroup(const std::byte* p, int64_t valid) {
  GroupBytes g;
  if constexpr (kType == DType::kQ4_0) {
    g.a = LoadBytes<kTail>(p, valid);
    g.b = LoadBytes<kTail>(p + 8, valid - 8);
    const __m512i bytes = _mm512_permutex2var_epi8(g.a, _mm512_load_si512(kQ4Quant.data()), g.b);
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    g.lo = _mm512_and_si512(bytes, nibble);
    g.hi = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibble);
  } else {
    g.a = LoadBytes<kTail>(p, valid);
    g.b = LoadBytes<kTail>(p + 64, valid - 64);
    const __m512i c = LoadBytes<kTail>(p + 8, valid - 8);
    const __m512i e = LoadBytes<kTail>(p + 72, valid - 72);
    const __m512i offset = _mm512_set1_epi8(static_cast<char>(0x80));  // signed q -> q + 128
    g.lo = _mm512_xor_si512(_mm512_permutex2var_epi8(g.a, _mm512_load_si512(kQ8Lo.data()), g.b),
                            offset);
    g.hi =
        _mm512_xor_si512(_mm512_permutex2var_epi8(c, _mm512_load_si512(kQ8Hi.data()), e), offset);
  }
  return g;
}

// The scale words of the group selected by ScaleIndex.  Q4_0 needs only table a: the one-table
// permute is measurably cheaper.
template <DType kType>
HWY_INLINE __m512i ScaleWords(const GroupBytes& g) {
  const __m512i idx = _mm512_load_si512(kType == DType::kQ4_0 ? kQ4Scale.data() : kQ8Scale.data());
  if constexpr (kType == DType::kQ4_0) {
    return _mm512_permutexvar_epi16(idx, g.a);
  } else {
    return _mm512_permutex2var_epi16(g.a, idx, g.b);
  }
}

// One group of 4 weight rows, decoded.
struct Quad {
  __m512i lo[4], hi[4];  // per row r, as GroupBytes
  __m512 d;              // f32: scale of row r, block s in lane 4s+r
};

template <DType kType, bool kTail>
HWY_INLINE Quad DecodeQuad(const std::byte* const* rows, int64_t g, int64_t valid) {
  constexpr int64_t kGroupBytes = 4 * QuantBlockBytes(kType);
  Quad q;
  __m512i row_scales[4];
  for (int r = 0; r < 4; ++r) {
    const GroupBytes bytes = LoadGroup<kType, kTail>(rows[r] + g * kGroupBytes, valid);
    q.lo[r] = bytes.lo;
    q.hi[r] = bytes.hi;
    row_scales[r] = ScaleWords<kType>(bytes);
  }
  // Lane 4s+r from row r: independent unmasked permutes merged with blends (measured 1-2% faster
  // in decode than zero-masked permutes merged with ORs; a chain of merge-masked permutes is
  // slower still).
  const __m512i s01 = _mm512_mask_blend_epi16(0x2222, row_scales[0], row_scales[1]);
  const __m512i s23 = _mm512_mask_blend_epi16(0x8888, row_scales[2], row_scales[3]);
  const __m512i scales = _mm512_mask_blend_epi16(0xCCCC, s01, s23);
  q.d = _mm512_cvtph_ps(_mm512_castsi512_si256(scales));
  return q;
}

// Lane 4s+r of the result = the sum of the 4 lanes of block s (lanes 4s..4s+3) of v[r], with
// in-lane unpacks (cheaper than cross-lane permutes).
HWY_INLINE __m512i SumBlockLanes(const __m512i (&v)[4]) {
  // Per 128-bit chunk: [v0 0+2, v1 0+2, v0 1+3, v1 1+3], the same for v2, v3.
  const __m512i s01 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(v[0], v[1]), _mm512_unpackhi_epi32(v[0], v[1]));
  const __m512i s23 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(v[2], v[3]), _mm512_unpackhi_epi32(v[2], v[3]));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
}

// acc[a] (lane 4s+r) += the products of quad w with the group of activation row a (its qact group
// starts at x + a * xq_stride).
template <int kActs>
HWY_INLINE LOOM_KERNELS_VNNI_ATTR void QuadStep(__m512 (&acc)[kActs], const Quad& w,
                                                const std::byte* x, int64_t xq_stride) {
  for (int a = 0; a < kActs; ++a) {
    const std::byte* xa = x + a * xq_stride;
    const __m512i x_lo = _mm512_load_si512(xa + internal::kQActLo);
    const __m512i x_hi = _mm512_load_si512(xa + internal::kQActHi);
    const __m512i corr = _mm512_load_si512(xa + internal::kQActCorr);
    __m512i sums[4];
    for (int r = 0; r < 4; ++r) {
      sums[r] = _mm512_dpbusd_epi32(corr, w.lo[r], x_lo);
      sums[r] = _mm512_dpbusd_epi32(sums[r], w.hi[r], x_hi);
    }
    const __m512 scale = _mm512_mul_ps(w.d, _mm512_load_ps(xa + internal::kQActScale));
    acc[a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(SumBlockLanes(sums)), scale, acc[a]);
  }
}

// y[a * y_stride + r] = dot(row r, activation row a) for r < rows_valid (<= 4), a < kActs; rows
// past rows_valid repeat a valid row and are not stored.  With prefetch_offset != 0, also
// prefetches the weights that far ahead of each row: rows of quantized weights are short (~1-3
// KiB), too short for the hardware prefetchers to ramp up.  kPairs: the rows in
// WeightLayout::kScalePairs, which this target does not prefer (PreferredLayout): each group is
// converted back to the file's layout first, for the same bits.
template <DType kType, bool kPairs, int kActs>
HWY_INLINE LOOM_KERNELS_VNNI_ATTR void QuadTile(const std::byte* const* rows, int rows_valid,
                                                int64_t prefetch_offset, int64_t blocks,
                                                const std::byte* xq, int64_t xq_stride, float* y,
                                                int64_t y_stride) {
  constexpr int64_t kGroupBytes = 4 * QuantBlockBytes(kType);
  __m512 acc[kActs];
  for (int a = 0; a < kActs; ++a) acc[a] = _mm512_setzero_ps();
  // Group g of the quad's rows converted back to the file's layout (kPairs; blocks: how many it
  // holds), read as group 0.
  alignas(64) std::byte file[4][kGroupBytes];
  const std::byte* const file_rows[4] = {file[0], file[1], file[2], file[3]};
  const auto file_group = [&](int64_t g, int64_t blocks_in_group) {
    for (int r = 0; r < 4; ++r) {
      std::memcpy(file[r], rows[r] + g * kGroupBytes,
                  static_cast<size_t>(blocks_in_group * QuantBlockBytes(kType)));
      internal::ConvertScalePairs(kType, /*to_pairs=*/false, file[r], blocks_in_group);
    }
    return file_rows;
  };
  const int64_t full = blocks / 4;
  for (int64_t g = 0; g < full; ++g) {
    if (prefetch_offset != 0) {
      for (int r = 0; r < 4; ++r) {
        PrefetchAhead<kGroupBytes>(rows[r] + g * kGroupBytes, prefetch_offset);
      }
    }
    const Quad w = kPairs ? DecodeQuad<kType, false>(file_group(g, 4), 0, 0)
                          : DecodeQuad<kType, false>(rows, g, 0);
    QuadStep<kActs>(acc, w, xq + g * internal::kQActGroupBytes, xq_stride);
  }
  if (blocks % 4 != 0) {
    const int64_t valid = blocks % 4 * QuantBlockBytes(kType);
    const Quad w = kPairs ? DecodeQuad<kType, true>(file_group(full, blocks % 4), 0, valid)
                          : DecodeQuad<kType, true>(rows, full, valid);
    QuadStep<kActs>(acc, w, xq + full * internal::kQActGroupBytes, xq_stride);
  }
  for (int a = 0; a < kActs; ++a) {
    // Row r = the sum of lane r of the 4 blocks' 128-bit chunks.
    __m512 t = _mm512_add_ps(acc[a], _mm512_shuffle_f32x4(acc[a], acc[a], _MM_SHUFFLE(1, 0, 3, 2)));
    t = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, _MM_SHUFFLE(2, 3, 0, 1)));
    alignas(16) float rows_sum[4];
    _mm_store_ps(rows_sum, _mm512_castps512_ps128(t));
    for (int r = 0; r < rows_valid; ++r) y[a * y_stride + r] = rows_sum[r];
  }
}

// Activation rows per register tile of the batched product: 8 accumulators + the decoded quad +
// temporaries fit the 32 vector registers (measured: 8 beats 2, 4, 6, 10, 12 and 16).
inline constexpr int kTileActs = 8;

#endif  // HWY_TARGET == HWY_AVX3_DL

#if HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

template <DType kType, bool kPairs>
LOOM_KERNELS_QUAD_ATTR void QuantRowsIn(const MatrixView& w, int64_t row_begin, int64_t row_end,
                                        const std::byte* xq, int64_t n, float* y,
                                        int64_t y_stride) {
  const int64_t blocks = w.cols / 32;
  const int64_t xq_stride = internal::QActRowBytes(w.cols);
  const int64_t prefetch_offset = QuadPrefetchRows(blocks * QuantBlockBytes(kType)) * w.row_stride;
  // Activation rows are processed in chunks that stay in L2 (~256 KiB) while every quad of this
  // thread's weights passes over them.
  const int64_t chunk =
      std::max<int64_t>(kTileActs, (int64_t{256} << 10) / xq_stride / kTileActs * kTileActs);
  for (int64_t i0 = 0; i0 < n; i0 += chunk) {
    const int64_t i1 = std::min(n, i0 + chunk);
    for (int64_t r = row_begin; r < row_end; r += 4) {
      const int rows_valid = static_cast<int>(std::min<int64_t>(4, row_end - r));
      const std::byte* rows[4];
      for (int k = 0; k < 4; ++k)
        rows[k] = w.data + (r + std::min(k, rows_valid - 1)) * w.row_stride;
      // Only the first pass over a quad reads it from memory; later ones hit the L1.
      int64_t prefetch = prefetch_offset;
      int64_t i = i0;
      for (; i + kTileActs <= i1; i += kTileActs) {
        QuadTile<kType, kPairs, kTileActs>(rows, rows_valid, prefetch, blocks, xq + i * xq_stride,
                                           xq_stride, y + i * y_stride + r, y_stride);
        prefetch = 0;
      }
      if (i + kTileActs / 2 <= i1) {
        QuadTile<kType, kPairs, kTileActs / 2>(rows, rows_valid, prefetch, blocks,
                                               xq + i * xq_stride, xq_stride, y + i * y_stride + r,
                                               y_stride);
        prefetch = 0;
        i += kTileActs / 2;
      }
      for (; i < i1; ++i) {
        QuadTile<kType, kPairs, 1>(rows, rows_valid, prefetch, blocks, xq + i * xq_stride,
                                   xq_stride, y + i * y_stride + r, y_stride);
        prefetch = 0;
      }
    }
  }
}

// f(std::bool_constant<kPairs>{}): kPairs when w is in WeightLayout::kScalePairs.
template <class F>
HWY_INLINE void WithScalePairs(const MatrixView& w, const F& f) {
  if (w.layout == WeightLayout::kScalePairs) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

template <DType kType>
void QuantRows(const MatrixView& w, int64_t row_begin, int64_t row_end, const std::byte* xq,
               int64_t n, float* y, int64_t y_stride) {
  WithScalePairs(
      w, [&](auto pairs) { QuantRowsIn<kType, pairs>(w, row_begin, row_end, xq, n, y, y_stride); });
}

#endif  // x86 quad tiles

// Decode of a product split into column leaves (internal::MatVecLeavesQ4_0): each quad of rows
// once, its leaves in turn, with the quad tiles a leaf's ColRange view would run (the same bits).
// AVX2 and AVX3 only; false elsewhere (AVX3_DL: not yet measured on an AVX-512 machine).
template <DType kType>
bool QuantLeafRows(const MatrixView& w, int64_t leaves, int64_t row_begin, int64_t row_end,
                   const std::byte* xq, int64_t xq_stride, float* const* parts) {
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
  const int64_t blocks = w.cols / leaves / 32;  // per leaf
  const int64_t leaf_bytes = blocks * QuantBlockBytes(kType);
  const int64_t row_bytes = leaves * leaf_bytes;
  if (w.layout == WeightLayout::kScalePairs && blocks % 2 != 0) return false;  // cuts a pair
  WithScalePairs(w, [&](auto pairs) {
    LeafQuads(
        w, leaves, row_bytes, row_begin, row_end, QuadPrefetchRows(row_bytes),
        [&](int64_t r, int rows_valid, int64_t l, const std::byte* const* rows, PrefetchRun run)
            __attribute__((always_inline)) {
              const int64_t offset =
                  static_cast<int64_t>(run.begin - reinterpret_cast<uintptr_t>(rows[0]));
              QuadTile<kType, pairs, 1>(rows, rows_valid, run.bytes > 0 ? offset : 0, blocks,
                                        xq + l * xq_stride, 0, parts[l] + r, 0, run.bytes);
            });
  });
  return true;
#else
  (void)w, (void)leaves, (void)row_begin, (void)row_end, (void)xq, (void)xq_stride, (void)parts;
  return false;
#endif
}

#if !(HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3)
// portable Highway path

// dot(weight row, activation row) block by block: exact integer sums per lane, scaled by
// d_w * d_x in f32 lanes; one horizontal sum per row.
template <DType kType>
HWY_INLINE float QuantDotPortable(const std::byte* row, WeightLayout layout, int64_t blocks,
                                  const std::byte* xq) {
  const hn::CappedTag<int16_t, 16> d16;
  const hn::Repartition<int32_t, decltype(d16)> d32;
  const hn::Rebind<float, decltype(d32)> df;
  const hn::Rebind<uint16_t, decltype(d16)> du16;
  const hn::Rebind<uint8_t, decltype(d16)> du8;
  const hn::Rebind<int8_t, decltype(d16)> di8;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d16));
  auto acc = hn::Zero(df);
  internal::FileBlockReader reader(kType, layout, row, blocks);
  for (int64_t b = 0; b < blocks; ++b) {
    const std::byte* x = xq + b / 4 * internal::kQActGroupBytes;
    const int64_t s = b % 4;
    const int8_t* x_lo = reinterpret_cast<const int8_t*>(x + internal::kQActLo + 16 * s);
    const int8_t* x_hi = reinterpret_cast<const int8_t*>(x + internal::kQActHi + 16 * s);
    float dx;
    std::memcpy(&dx, x + internal::kQActScale + 16 * s, sizeof(dx));
    const std::byte* blk = reader.Block(b);
    auto sum0 = hn::Zero(d32);
    auto sum1 = hn::Zero(d32);
    for (int64_t c = 0; c < 16; c += lanes) {
      hn::Vec<decltype(d16)> w_lo, w_hi;
      if constexpr (kType == DType::kQ4_0) {
        const auto q = hn::BitCast(
            d16,
            hn::PromoteTo(du16, hn::LoadU(du8, reinterpret_cast<const uint8_t*>(blk + 2 + c))));
        const auto eight = hn::Set(d16, 8);
        w_lo = hn::Sub(hn::And(q, hn::Set(d16, 0x0F)), eight);
        w_hi = hn::Sub(hn::ShiftRight<4>(q), eight);
      } else {
        w_lo = hn::PromoteTo(d16, hn::LoadU(di8, reinterpret_cast<const int8_t*>(blk + 2 + c)));
        w_hi = hn::PromoteTo(d16, hn::LoadU(di8, reinterpret_cast<const int8_t*>(blk + 18 + c)));
      }
      sum0 = hn::ReorderWidenMulAccumulate(d32, w_lo, hn::PromoteTo(d16, hn::LoadU(di8, x_lo + c)),
                                           sum0, sum1);
      sum0 = hn::ReorderWidenMulAccumulate(d32, w_hi, hn::PromoteTo(d16, hn::LoadU(di8, x_hi + c)),
                                           sum0, sum1);
    }
    acc = hn::MulAdd(hn::ConvertTo(df, hn::Add(sum0, sum1)), hn::Set(df, LoadF16AsF32(blk) * dx),
                     acc);
  }
  return hn::GetLane(hn::SumOfLanes(df, acc));
}

template <DType kType>
void QuantRows(const MatrixView& w, int64_t row_begin, int64_t row_end, const std::byte* xq,
               int64_t n, float* y, int64_t y_stride) {
  const int64_t blocks = w.cols / 32;
  const int64_t xq_stride = internal::QActRowBytes(w.cols);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const std::byte* row = w.data + r * w.row_stride;
    for (int64_t i = 0; i < n; ++i) {
      y[i * y_stride + r] = QuantDotPortable<kType>(row, w.layout, blocks, xq + i * xq_stride);
    }
  }
}

#endif  // portable Highway path

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
