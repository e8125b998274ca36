// Matrix products for K-quant (Q4_K, Q5_K, Q6_K) and MLX affine weights with 8-bit activations
// (the "kact" layout of kernels_internal.h): included once per SIMD target by matmul_q4_k.cc,
// matmul_q5_k.cc, matmul_q6_k.cc and matmul_mlx.cc, each instantiating its types.
//
// Every supported layout is a sum over 16-value half-blocks h of a_h * q + c_h with unsigned
// integer q (Q4_K: a = d * sc, c = -dmin * m; Q6_K: a = d * sc, c = -32 a; MLX: a = scale,
// c = bias).  So for a 32-value block b with activation scale d_x and quantized activations x_q:
//   sum(w * x) = d_x * (sum_h a_h * integer dot(q_h, x_q_h) + c_h * sum(x_q_h))
// where d_x * sum(x_q_h) is precomputed once per activation row (kact hs).  A row is read in
// chunks of up to 256 values (a K-quant super-block): the chunk's quants are unpacked to bytes
// in a 256-byte stack buffer (MLX 8-bit quants are used in place) with its a/c per half, then
// multiplied with up to kTileActs activation rows while it is in L1; integer dots are int16
// widening multiply-adds, accumulated per block in f32 lanes, reduced once per output.
// On AVX3_DL, Q4_K, Q6_K and MLX 4/8-bit (groups 32/64/128) use a vpdpbusd path on the packed
// weights instead (see the AVX3_DL section); other types and targets use the portable path.

#if defined(LOOM_KERNELS_MATMUL_KQUANT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LOOM_KERNELS_MATMUL_KQUANT_INL_H_
#undef LOOM_KERNELS_MATMUL_KQUANT_INL_H_
#else
#define LOOM_KERNELS_MATMUL_KQUANT_INL_H_
#endif

#include <algorithm>
#include <cstring>

#include "hwy/highway.h"
#include "loom/kernels/block_formats.h"
#include "loom/kernels/kernels_internal.h"
#include "loom/kernels/stream_avx3-inl.h"

HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One unpacked chunk of a weight row: up to 8 blocks of 32 values.
struct Chunk {
  alignas(64) uint8_t buffer[256];
  const uint8_t* q = nullptr;  // (blocks * 32) quants: buffer, or the row itself (MLX 8-bit)
  float a[16];                 // per 16-value half: value = a * q + c
  float c[16];
  int64_t blocks = 0;
};

inline constexpr int64_t kChunkValues = 256;

// Super-block sizes as constants (Traits() is a call into another translation unit, too slow for
// the inner loops).
constexpr int64_t KBlockBytes(DType type) {
  return type == DType::kQ4_K   ? internal::kQ4KBlockBytes
         : type == DType::kQ5_K ? internal::kQ5KBlockBytes
                                : internal::kQ6KBlockBytes;
}

template <DType kType>
HWY_INLINE void UnpackChunk(const MatrixView& w, const std::byte* row, int64_t r, int64_t chunk,
                            Chunk* out) {
  using namespace internal;  // NOLINT: the layout constants
  uint8_t* q = out->buffer;
  out->q = q;
  if constexpr (kType == DType::kQ4_K || kType == DType::kQ5_K) {
    const std::byte* blk = row + chunk * KBlockBytes(kType);
    out->blocks = 8;
    const float d = LoadF16(blk);
    const float dmin = LoadF16(blk + 2);
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      KScaleMin(j, blk + kQ4KScales, &sc, &m);
      out->a[2 * j] = out->a[2 * j + 1] = d * static_cast<float>(sc);
      out->c[2 * j] = out->c[2 * j + 1] = -dmin * static_cast<float>(m);
    }
    const auto* qs =
        reinterpret_cast<const uint8_t*>(blk + (kType == DType::kQ4_K ? kQ4KQs : kQ5KQs));
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        q[64 * c + l] = qs[32 * c + l] & 0x0F;
        q[64 * c + 32 + l] = qs[32 * c + l] >> 4;
      }
    }
    if constexpr (kType == DType::kQ5_K) {
      const auto* qh = reinterpret_cast<const uint8_t*>(blk + kQ5KQh);
      for (int c = 0; c < 4; ++c) {
        for (int l = 0; l < 32; ++l) {
          q[64 * c + l] |= static_cast<uint8_t>(((qh[l] >> (2 * c)) & 1) << 4);
          q[64 * c + 32 + l] |= static_cast<uint8_t>(((qh[l] >> (2 * c + 1)) & 1) << 4);
        }
      }
    }
  } else if constexpr (kType == DType::kQ6_K) {
    const std::byte* blk = row + chunk * KBlockBytes(kType);
    out->blocks = 8;
    const float d = LoadF16(blk + kQ6KD);
    const auto* sc = reinterpret_cast<const int8_t*>(blk + kQ6KScales);
    for (int h = 0; h < 16; ++h) {
      out->a[h] = d * static_cast<float>(sc[h]);
      out->c[h] = -32.0f * out->a[h];
    }
    for (int n = 0; n < 2; ++n) {
      const auto* ql = reinterpret_cast<const uint8_t*>(blk) + 64 * n;
      const auto* qh = reinterpret_cast<const uint8_t*>(blk + kQ6KQh) + 32 * n;
      uint8_t* qn = q + 128 * n;
      for (int l = 0; l < 32; ++l) {
        qn[l] = static_cast<uint8_t>((ql[l] & 0x0F) | ((qh[l] & 3) << 4));
        qn[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4));
        qn[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
        qn[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
      }
    }
  } else {  // MLX: kType stands for every width; the bits come from w.type
    const int bits = MlxBitsOf(w.type);
    const int64_t first = chunk * 8;  // first 32-value block
    out->blocks = std::min<int64_t>(8, w.cols / 32 - first);
    const std::byte* packed = row + first * 4 * bits;
    const int64_t scale_bytes = Traits(w.scale_type).block_bytes;
    const std::byte* s = w.scales + r * w.scale_row_stride;
    const std::byte* b = w.biases + r * w.scale_row_stride;
    for (int64_t k = 0; k < out->blocks; ++k) {
      const int64_t g = (first + k) * 32 / w.group_size;
      out->a[2 * k] = out->a[2 * k + 1] = LoadScalar(w.scale_type, s + g * scale_bytes);
      out->c[2 * k] = out->c[2 * k + 1] = LoadScalar(w.scale_type, b + g * scale_bytes);
    }
    const int64_t values = out->blocks * 32;
    const auto* p = reinterpret_cast<const uint8_t*>(packed);
    if (bits == 8) {
      out->q = p;
    } else if (bits == 4) {
      for (int64_t j = 0; j < values / 2; ++j) {
        q[2 * j] = p[j] & 0x0F;
        q[2 * j + 1] = p[j] >> 4;
      }
    } else if (bits == 2) {
      for (int64_t j = 0; j < values / 4; ++j) {
        for (int k = 0; k < 4; ++k) q[4 * j + k] = (p[j] >> (2 * k)) & 3;
      }
    } else {  // 3, 5, 6 bits: 8 values in `bits` bytes, read as one little-endian integer
      const uint32_t mask = (1u << bits) - 1u;
      for (int64_t j = 0; j < values / 8; ++j) {
        uint64_t v = 0;
        for (int k = 0; k < bits; ++k) v |= static_cast<uint64_t>(p[j * bits + k]) << (8 * k);
        for (int k = 0; k < 8; ++k) q[8 * j + k] = static_cast<uint8_t>((v >> (bits * k)) & mask);
      }
    }
  }
}

using D16 = hn::CappedTag<int16_t, 16>;
using D32 = hn::Repartition<int32_t, D16>;
using DF = hn::Rebind<float, D32>;
using VF = hn::Vec<DF>;

// Integer dot of 16 unsigned quants with 16 int8 activations, in int32 lanes.
HWY_INLINE hn::Vec<D32> HalfDot(const uint8_t* q, const int8_t* x, hn::Vec<D32>& sum1) {
  const D16 d16;
  const D32 d32;
  const hn::Rebind<uint8_t, D16> du8;
  const hn::Rebind<int8_t, D16> di8;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d16));
  auto sum0 = hn::Zero(d32);
  for (int64_t c = 0; c < 16; c += lanes) {
    const auto w16 =
        hn::BitCast(d16, hn::PromoteTo(hn::Rebind<uint16_t, D16>(), hn::LoadU(du8, q + c)));
    const auto x16 = hn::PromoteTo(d16, hn::LoadU(di8, x + c));
    sum0 = hn::ReorderWidenMulAccumulate(d32, w16, x16, sum0, sum1);
  }
  return sum0;
}

// acc += the chunk's products with one activation row (its q, d and hs from the chunk's start).
// kSameHalves: both halves of a block share a and c (Q4_K, Q5_K, MLX), so one conversion serves
// 32 values.
template <bool kSameHalves>
HWY_INLINE void ChunkDot(const Chunk& ch, const int8_t* xq, const float* xd, const float* hs,
                         VF& acc, float& c_acc) {
  const D32 d32;
  const DF df;
  for (int64_t b = 0; b < ch.blocks; ++b) {
    const uint8_t* q = ch.q + 32 * b;
    const int8_t* x = xq + 32 * b;
    auto sum1 = hn::Zero(d32);
    if constexpr (kSameHalves) {
      auto sum = hn::Add(HalfDot(q, x, sum1), HalfDot(q + 16, x + 16, sum1));
      sum = hn::Add(sum, sum1);
      acc = hn::MulAdd(hn::ConvertTo(df, sum), hn::Set(df, ch.a[2 * b] * xd[b]), acc);
      c_acc += ch.c[2 * b] * (hs[2 * b] + hs[2 * b + 1]);
    } else {
      auto sum_lo = hn::Add(HalfDot(q, x, sum1), sum1);
      sum1 = hn::Zero(d32);
      auto sum_hi = hn::Add(HalfDot(q + 16, x + 16, sum1), sum1);
      acc = hn::MulAdd(hn::ConvertTo(df, sum_lo), hn::Set(df, ch.a[2 * b] * xd[b]), acc);
      acc = hn::MulAdd(hn::ConvertTo(df, sum_hi), hn::Set(df, ch.a[2 * b + 1] * xd[b]), acc);
      c_acc += ch.c[2 * b] * hs[2 * b] + ch.c[2 * b + 1] * hs[2 * b + 1];
    }
  }
}

#if HWY_TARGET == HWY_AVX3_DL

// ---- AVX3_DL (AVX-512 with VNNI and VBMI): Q4_K and MLX 4-bit products straight from the packed
// weights.  Nibbles are split with AND/shift into unsigned bytes in registers, vpdpbusd multiplies
// them with the signed kact activations (rearranged once per chunk to the weights' order and
// shared by 4 rows), and the int32 lanes are scaled per lane in f32: lane scales come from the
// 6-bit packed scales (Q4_K) or the group scales (MLX), the offsets (Q4_K mins, MLX biases) from
// the activation half sums hs.  4 rows at a time, each with its own f32 accumulator, weights
// prefetched whole rows ahead (as the Q4_0/Q8_0 products of matmul_quant-inl.h).

// Sum of the 8 lanes of v.
HWY_INLINE float KReduce256(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// _mm512_permutexvar_ps index vectors: lane i <- element idx(i).
HWY_INLINE __m512i KLaneIndex(int (*idx)(int)) {
  alignas(64) int32_t v[16];
  for (int i = 0; i < 16; ++i) v[i] = idx(i);
  return _mm512_load_si512(v);
}

// The 12 packed bytes of Q4_K scales as 8 six-bit scales and 8 six-bit mins, one byte each
// (KScaleMin for all j at once, on 32-bit words: bytes j of w0/w1 are sub-block j < 4's scale/min
// in their low 6 bits, whose top 2 bits are sub-block j + 4's; w2 holds j + 4's low 4 bits).
HWY_INLINE void KUnpackScales(const std::byte* s, uint64_t* scales, uint64_t* mins) {
  uint32_t w[3];
  std::memcpy(w, s, sizeof(w));
  constexpr uint32_t k6 = 0x3F3F3F3Fu, k4 = 0x0F0F0F0Fu, k2 = 0x03030303u;
  const uint32_t sc_hi = (w[2] & k4) | (((w[0] >> 6) & k2) << 4);
  const uint32_t m_hi = ((w[2] >> 4) & k4) | (((w[1] >> 6) & k2) << 4);
  *scales = (w[0] & k6) | (static_cast<uint64_t>(sc_hi) << 32);
  *mins = (w[1] & k6) | (static_cast<uint64_t>(m_hi) << 32);
}

// 8 bytes as 8 floats.
HWY_INLINE __m256 KBytesToF32(uint64_t bytes) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(bytes))));
}

// Q4_K, n = 1: y[r] = dot(row r, x) for r < rows_valid (<= 4); rows past rows_valid repeat a
// valid row.  x is one kact row.  A super-block's 64-byte halves hold sub-blocks (0, 2) in their
// low nibbles and (1, 3) in their high nibbles (4..7 likewise), so the activations are paired
// the same way: 256-bit halves of 64-byte loads.
HWY_INLINE LOOM_KERNELS_VNNI_ATTR void Q4KRowTile(const std::byte* const* rows, int rows_valid,
                                                  int64_t prefetch_offset, int64_t supers,
                                                  const std::byte* x, int64_t q_bytes, float* y) {
  using namespace internal;                                      // NOLINT: the layout constants
  const auto* xd = reinterpret_cast<const float*>(x + q_bytes);  // f32 (supers * 8)
  const float* hs = xd + supers * 8;                             // f32 (supers * 16)
  // Lane scale selectors: lanes 0..7 <- sub-block a, 8..15 <- sub-block b.
  const __m512i sel02 = KLaneIndex([](int i) { return i < 8 ? 0 : 2; });
  const __m512i sel13 = KLaneIndex([](int i) { return i < 8 ? 1 : 3; });
  const __m512i sel46 = KLaneIndex([](int i) { return i < 8 ? 4 : 6; });
  const __m512i sel57 = KLaneIndex([](int i) { return i < 8 ? 5 : 7; });
  const __m512i even = KLaneIndex([](int i) { return 2 * (i % 8); });
  const __m512i odd = KLaneIndex([](int i) { return 2 * (i % 8) + 1; });
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  __m512 acc[4];
  __m256 min_acc[4];
  for (int r = 0; r < 4; ++r) {
    acc[r] = _mm512_setzero_ps();
    min_acc[r] = _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < supers; ++k) {
    const std::byte* xq = x + k * kQK;
    const __m512i a = _mm512_loadu_si512(xq);
    const __m512i b = _mm512_loadu_si512(xq + 64);
    const __m512i c = _mm512_loadu_si512(xq + 128);
    const __m512i e = _mm512_loadu_si512(xq + 192);
    const __m512i x02 = _mm512_shuffle_i64x2(a, b, 0x44);  // values 0..31, 64..95
    const __m512i x13 = _mm512_shuffle_i64x2(a, b, 0xEE);  // 32..63, 96..127
    const __m512i x46 = _mm512_shuffle_i64x2(c, e, 0x44);
    const __m512i x57 = _mm512_shuffle_i64x2(c, e, 0xEE);
    const __m256 dx = _mm256_loadu_ps(xd + 8 * k);  // per sub-block
    const __m512 h = _mm512_loadu_ps(hs + 16 * k);
    // Activation sums of the 8 sub-blocks.
    const __m256 hsum = _mm512_castps512_ps256(
        _mm512_add_ps(_mm512_permutexvar_ps(even, h), _mm512_permutexvar_ps(odd, h)));
    for (int r = 0; r < 4; ++r) {
      const std::byte* blk = rows[r] + k * internal::kQ4KBlockBytes;
      PrefetchAhead<144>(blk, prefetch_offset);
      uint32_t dd_bits;
      std::memcpy(&dd_bits, blk, sizeof(dd_bits));
      const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dd_bits)));  // d, dmin
      uint64_t scales, mins;
      KUnpackScales(blk + kQ4KScales, &scales, &mins);
      const __m256 sub_scale =
          _mm256_mul_ps(_mm256_mul_ps(KBytesToF32(scales), _mm256_broadcastss_ps(dd)), dx);
      min_acc[r] = _mm256_fmadd_ps(
          _mm256_mul_ps(KBytesToF32(mins), _mm256_broadcastss_ps(_mm_movehdup_ps(dd))), hsum,
          min_acc[r]);
      const __m512 s = _mm512_castps256_ps512(sub_scale);
      const __m512i q0 = _mm512_loadu_si512(blk + kQ4KQs);
      const __m512i q1 = _mm512_loadu_si512(blk + kQ4KQs + 64);
      const __m512i zero = _mm512_setzero_si512();
      const __m512i d02 = _mm512_dpbusd_epi32(zero, _mm512_and_si512(q0, nibble), x02);
      const __m512i d13 =
          _mm512_dpbusd_epi32(zero, _mm512_and_si512(_mm512_srli_epi16(q0, 4), nibble), x13);
      const __m512i d46 = _mm512_dpbusd_epi32(zero, _mm512_and_si512(q1, nibble), x46);
      const __m512i d57 =
          _mm512_dpbusd_epi32(zero, _mm512_and_si512(_mm512_srli_epi16(q1, 4), nibble), x57);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d02), _mm512_permutexvar_ps(sel02, s), acc[r]);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d13), _mm512_permutexvar_ps(sel13, s), acc[r]);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d46), _mm512_permutexvar_ps(sel46, s), acc[r]);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d57), _mm512_permutexvar_ps(sel57, s), acc[r]);
    }
  }
  for (int r = 0; r < rows_valid; ++r) {
    y[r] = _mm512_reduce_add_ps(acc[r]) - KReduce256(min_acc[r]);
  }
}

// Q6_K, n = 1, as Q4KRowTile.  Each 128-value half n of a super-block: ql's 64 bytes hold values
// 0..63 in their low nibbles and 64..127 in their high nibbles, in order; qh byte l holds the top 2
// bits of values l, l + 32, l + 64, l + 96 (bit pairs 0..3), so the activations need no
// rearranging.  Lane i of a 64-value vpdpbusd sum covers values 4i..4i+3 (16-value sub-block
// i / 4); q = 6-bit value + 32, removed with the activation half sums.
HWY_INLINE LOOM_KERNELS_VNNI_ATTR void Q6KRowTile(const std::byte* const* rows, int rows_valid,
                                                  int64_t prefetch_offset, int64_t supers,
                                                  const std::byte* x, int64_t q_bytes, float* y) {
  using namespace internal;                                      // NOLINT: the layout constants
  const auto* xd = reinterpret_cast<const float*>(x + q_bytes);  // f32 (supers * 8)
  const float* hs = xd + supers * 8;                             // f32 (supers * 16)
  const __m512i block_of_half = KLaneIndex([](int i) { return i / 2; });
  const __m512i half_sel[4] = {
      KLaneIndex([](int i) { return i / 4; }), KLaneIndex([](int i) { return 4 + i / 4; }),
      KLaneIndex([](int i) { return 8 + i / 4; }), KLaneIndex([](int i) { return 12 + i / 4; })};
  // qh bit pair of each 64-value vector's 16-bit lanes: (0 | 2) for low nibbles, (4 | 6) high.
  const __m512i shift_lo = KLaneIndex([](int i) { return i < 8 ? 0 : 0x00020002; });
  const __m512i shift_hi = _mm512_add_epi16(shift_lo, _mm512_set1_epi16(4));
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const __m512i pair = _mm512_set1_epi8(0x03);
  __m512 acc[4];
  __m512 off_acc[4];
  for (int r = 0; r < 4; ++r) {
    acc[r] = _mm512_setzero_ps();
    off_acc[r] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < supers; ++k) {
    const std::byte* xq = x + k * kQK;
    // Scale of each half-block's activation block.
    const __m512 dx =
        _mm512_permutexvar_ps(block_of_half, _mm512_castps256_ps512(_mm256_loadu_ps(xd + 8 * k)));
    const __m512 h = _mm512_loadu_ps(hs + 16 * k);
    __m512i xv[4];
    for (int v = 0; v < 4; ++v) xv[v] = _mm512_loadu_si512(xq + 64 * v);
    for (int r = 0; r < 4; ++r) {
      const std::byte* blk = rows[r] + k * internal::kQ6KBlockBytes;
      PrefetchAhead<256>(blk, prefetch_offset);
      uint16_t d_bits;
      std::memcpy(&d_bits, blk + kQ6KD, sizeof(d_bits));
      const __m128 d = _mm_cvtph_ps(_mm_cvtsi32_si128(d_bits));
      const __m128i sc_bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQ6KScales));
      const __m512 a = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc_bytes)),
                                     _mm512_broadcastss_ps(d));  // per half-block: d * sc
      off_acc[r] = _mm512_fmadd_ps(a, h, off_acc[r]);
      const __m512 s = _mm512_mul_ps(a, dx);
      const __m512i qh_all = _mm512_loadu_si512(blk + kQ6KQh);
      for (int half = 0; half < 2; ++half) {
        const __m512i ql = _mm512_loadu_si512(blk + 64 * half);
        const __m512i qh = half == 0 ? _mm512_shuffle_i64x2(qh_all, qh_all, 0x44)
                                     : _mm512_shuffle_i64x2(qh_all, qh_all, 0xEE);
        const __m512i q_lo = _mm512_or_si512(
            _mm512_and_si512(ql, nibble),
            _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shift_lo), pair), 4));
        const __m512i q_hi = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi16(ql, 4), nibble),
            _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shift_hi), pair), 4));
        const __m512i zero = _mm512_setzero_si512();
        const __m512i d_lo = _mm512_dpbusd_epi32(zero, q_lo, xv[2 * half]);
        const __m512i d_hi = _mm512_dpbusd_epi32(zero, q_hi, xv[2 * half + 1]);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d_lo),
                                 _mm512_permutexvar_ps(half_sel[2 * half], s), acc[r]);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d_hi),
                                 _mm512_permutexvar_ps(half_sel[2 * half + 1], s), acc[r]);
      }
    }
  }
  for (int r = 0; r < rows_valid; ++r) {
    y[r] = _mm512_reduce_add_ps(acc[r]) - 32.0f * _mm512_reduce_add_ps(off_acc[r]);
  }
}

// MLX scale (or bias) words of `count` groups at p as f32 lanes 0..count-1 (zeros after).
HWY_INLINE __m512 KLoadGroupScalars(DType type, const std::byte* p, int64_t count) {
  const uint64_t mask = FirstLanes(count);
  if (type == DType::kF32) return _mm512_maskz_loadu_ps(static_cast<__mmask16>(mask), p);
  const __m128i words = _mm_maskz_loadu_epi16(static_cast<__mmask8>(mask), p);
  if (type == DType::kF16) return _mm512_cvtph_ps(_mm256_zextsi128_si256(words));
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_zextsi128_si256(words)), 16));
}

// Lane vectors of an MLX row tile that depend only on the group size: for each of the chunk's
// vpdpbusd sums, the block (0..3 in the chunk) and the group (from the chunk's first) of each lane.
struct MlxLanes {
  __m512i block[2];
  __m512i group[2];
  __m512i block_quarter;     // i / 4: the block of lane i when 4 lanes cover a block
  __m512i group_of_quarter;  // the group of block i / 4
};

// MLX 4-bit or 8-bit, n = 1: as Q4KRowTile for a row of `cols` values (a multiple of 32) in chunks
// of 128 values (4 blocks), groups of w.group_size (32, 64 or 128) values.
//  - 4 bits: 64 bytes, byte j holds values 2j and 2j + 1 in its low and high nibble; lane i of the
//    vpdpbusd sum covers values 8i..8i+7 (block i / 4), so the activations are split into even and
//    odd values with vpermt2b.
//  - 8 bits: 128 bytes of values in order, two sums: lane i covers values 4i..4i+3 of 64 (block
//    i / 8, and 2 + i / 8 for the second).
// The biases meet a quarter of each block's activation sum in each of 4 lanes.
template <int kBits, bool kTail>
HWY_INLINE LOOM_KERNELS_VNNI_ATTR void MlxChunk(const MatrixView& w, const int64_t* row_ids,
                                                int64_t chunk, int64_t valid_blocks,
                                                int64_t prefetch_rows, const std::byte* x,
                                                int64_t q_bytes, int64_t blocks,
                                                const MlxLanes& lanes, __m512 (&acc)[4]) {
  constexpr int kSums = kBits == 4 ? 1 : 2;
  constexpr int64_t kChunkBytes = 16 * kBits;
  const std::byte* xq = x + chunk * 128;
  const auto* xd = reinterpret_cast<const float*>(x + q_bytes);  // f32 (blocks)
  const float* hs = xd + blocks;                                 // f32 (2 * blocks)
  __m512i a, b;
  __m512 dx, h;
  if constexpr (kTail) {
    a = _mm512_maskz_loadu_epi8(FirstLanes(32 * valid_blocks), xq);
    b = _mm512_maskz_loadu_epi8(FirstLanes(32 * valid_blocks - 64), xq + 64);
    dx = _mm512_maskz_loadu_ps(static_cast<__mmask16>(FirstLanes(valid_blocks)), xd + 4 * chunk);
    h = _mm512_maskz_loadu_ps(static_cast<__mmask16>(FirstLanes(2 * valid_blocks)), hs + 8 * chunk);
  } else {
    a = _mm512_loadu_si512(xq);
    b = _mm512_loadu_si512(xq + 64);
    dx = _mm512_castps128_ps512(_mm_loadu_ps(xd + 4 * chunk));
    h = _mm512_castps256_ps512(_mm256_loadu_ps(hs + 8 * chunk));
  }
  __m512i xv[2];
  if constexpr (kBits == 4) {
    alignas(64) static constexpr uint8_t kEven[64] = {
        0,  2,  4,   6,   8,   10,  12,  14,  16,  18,  20,  22,  24,  26,  28,  30,
        32, 34, 36,  38,  40,  42,  44,  46,  48,  50,  52,  54,  56,  58,  60,  62,
        64, 66, 68,  70,  72,  74,  76,  78,  80,  82,  84,  86,  88,  90,  92,  94,
        96, 98, 100, 102, 104, 106, 108, 110, 112, 114, 116, 118, 120, 122, 124, 126};
    const __m512i even_idx = _mm512_load_si512(kEven);
    xv[0] = _mm512_permutex2var_epi8(a, even_idx, b);
    xv[1] = _mm512_permutex2var_epi8(a, _mm512_add_epi8(even_idx, _mm512_set1_epi8(1)), b);
  } else {
    xv[0] = a;
    xv[1] = b;
  }
  __m512 dx_lanes[kSums];
  for (int k = 0; k < kSums; ++k) dx_lanes[k] = _mm512_permutexvar_ps(lanes.block[k], dx);
  const __m512i half0 = _mm512_slli_epi32(lanes.block_quarter, 1);
  const __m512 h_lanes = _mm512_mul_ps(
      _mm512_add_ps(_mm512_permutexvar_ps(half0, h),
                    _mm512_permutexvar_ps(_mm512_add_epi32(half0, _mm512_set1_epi32(1)), h)),
      _mm512_set1_ps(0.25f));
  const int64_t scale_bytes = Traits(w.scale_type).block_bytes;
  const int64_t group0 = chunk * 128 / w.group_size;
  const int64_t groups = (32 * valid_blocks + w.group_size - 1) / w.group_size;
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  for (int r = 0; r < 4; ++r) {
    const std::byte* p = w.data + row_ids[r] * w.row_stride + chunk * kChunkBytes;
    const int64_t scale_offset = row_ids[r] * w.scale_row_stride + group0 * scale_bytes;
    PrefetchAhead<kChunkBytes>(p, prefetch_rows * w.row_stride);
    PrefetchAhead<1>(w.scales + scale_offset, prefetch_rows * w.scale_row_stride);
    PrefetchAhead<1>(w.biases + scale_offset, prefetch_rows * w.scale_row_stride);
    const __m512 scale = KLoadGroupScalars(w.scale_type, w.scales + scale_offset, groups);
    const __m512 bias = KLoadGroupScalars(w.scale_type, w.biases + scale_offset, groups);
    const __m512i zero = _mm512_setzero_si512();
    if constexpr (kBits == 4) {
      const __m512i q =
          kTail ? _mm512_maskz_loadu_epi8(FirstLanes(16 * valid_blocks), p) : _mm512_loadu_si512(p);
      __m512i sum = _mm512_dpbusd_epi32(zero, _mm512_and_si512(q, nibble), xv[0]);
      sum = _mm512_dpbusd_epi32(sum, _mm512_and_si512(_mm512_srli_epi16(q, 4), nibble), xv[1]);
      acc[r] = _mm512_fmadd_ps(
          _mm512_cvtepi32_ps(sum),
          _mm512_mul_ps(_mm512_permutexvar_ps(lanes.group[0], scale), dx_lanes[0]), acc[r]);
    } else {
      for (int k = 0; k < 2; ++k) {
        const __m512i q =
            kTail ? _mm512_maskz_loadu_epi8(FirstLanes(32 * valid_blocks - 64 * k), p + 64 * k)
                  : _mm512_loadu_si512(p + 64 * k);
        const __m512i sum = _mm512_dpbusd_epi32(zero, q, xv[k]);
        acc[r] = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(sum),
            _mm512_mul_ps(_mm512_permutexvar_ps(lanes.group[k], scale), dx_lanes[k]), acc[r]);
      }
    }
    acc[r] = _mm512_fmadd_ps(_mm512_permutexvar_ps(lanes.group_of_quarter, bias), h_lanes, acc[r]);
  }
}

template <int kBits>
HWY_INLINE LOOM_KERNELS_VNNI_ATTR void MlxRowTile(const MatrixView& w, const int64_t* row_ids,
                                                  int rows_valid, int64_t prefetch_rows,
                                                  const std::byte* x, int64_t q_bytes, float* y) {
  const int64_t blocks = w.cols / 32;
  const int64_t full = blocks / 4;
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i group_shift =
      _mm512_set1_epi32(w.group_size == 32 ? 0 : (w.group_size == 64 ? 1 : 2));
  MlxLanes lanes;
  lanes.block_quarter = _mm512_srli_epi32(lane, 2);
  if constexpr (kBits == 4) {
    lanes.block[0] = lanes.block[1] = lanes.block_quarter;
  } else {
    lanes.block[0] = _mm512_srli_epi32(lane, 3);
    lanes.block[1] = _mm512_add_epi32(lanes.block[0], _mm512_set1_epi32(2));
  }
  for (int k = 0; k < 2; ++k) lanes.group[k] = _mm512_srlv_epi32(lanes.block[k], group_shift);
  lanes.group_of_quarter = _mm512_srlv_epi32(lanes.block_quarter, group_shift);
  __m512 acc[4];
  for (int r = 0; r < 4; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t c = 0; c < full; ++c) {
    MlxChunk<kBits, false>(w, row_ids, c, 4, prefetch_rows, x, q_bytes, blocks, lanes, acc);
  }
  if (blocks % 4 != 0) {
    MlxChunk<kBits, true>(w, row_ids, full, blocks % 4, prefetch_rows, x, q_bytes, blocks, lanes,
                          acc);
  }
  for (int r = 0; r < rows_valid; ++r) y[r] = _mm512_reduce_add_ps(acc[r]);
}

// Whether the AVX3_DL path handles this product.
template <DType kType>
bool KVnniSupports(const MatrixView& w) {
  if constexpr (kType == DType::kQ4_K || kType == DType::kQ6_K) {
    return w.cols % internal::kQK == 0;
  } else if constexpr (kType == DType::kMlx4) {
    return (w.type == DType::kMlx4 || w.type == DType::kMlx8) && w.cols % 32 == 0 &&
           (w.group_size == 32 || w.group_size == 64 || w.group_size == 128) &&
           (w.scale_type == DType::kF32 || w.scale_type == DType::kF16 ||
            w.scale_type == DType::kBF16);
  } else {
    return false;
  }
}

// The products of rows [row_begin, row_end) with n kact rows, 4 weight rows at a time; for
// n > 1 each activation row reuses the 4 rows from L1 (only the first prefetches), activation rows
// in chunks that stay in L2.  Each activation row runs the same row tile whatever n is, so an
// output has the same bits decoded alone (n = 1) or inside a batch (as the portable path below).
template <DType kType>
LOOM_KERNELS_VNNI_ATTR void KVnniRows(const MatrixView& w, int64_t row_begin, int64_t row_end,
                                      const std::byte* xa, int64_t n, float* y, int64_t y_stride) {
  const int64_t x_stride = internal::KActRowBytes(w.cols);
  const int64_t q_bytes = internal::KActQBytes(w.cols);
  // The weight type's bytes per 32 values, in eighths (K-quant super-blocks hold 8 x 32).
  const int64_t block_bytes8 =
      kType == DType::kMlx4 ? Traits(w.type).block_bytes * 8 : Traits(kType).block_bytes;
  const int64_t row_bytes = std::max<int64_t>(1, w.cols / 32 * block_bytes8 / 8);
  const int64_t prefetch_rows = (kPrefetchBytes + row_bytes - 1) / row_bytes;
  const int64_t act_chunk = std::max<int64_t>(1, (int64_t{256} << 10) / x_stride);
  for (int64_t i0 = 0; i0 < n; i0 += act_chunk) {
    const int64_t i1 = std::min(n, i0 + act_chunk);
    for (int64_t r = row_begin; r < row_end; r += 4) {
      const int rows_valid = static_cast<int>(std::min<int64_t>(4, row_end - r));
      int64_t row_ids[4];
      const std::byte* rows[4];
      for (int k = 0; k < 4; ++k) {
        row_ids[k] = r + std::min(k, rows_valid - 1);
        rows[k] = w.data + row_ids[k] * w.row_stride;
      }
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t ahead = i == i0 ? prefetch_rows : 0;
        const std::byte* x = xa + i * x_stride;
        float* out = y + i * y_stride + r;
        if constexpr (kType == DType::kQ4_K) {
          Q4KRowTile(rows, rows_valid, ahead * w.row_stride, w.cols / internal::kQK, x, q_bytes,
                     out);
        } else if constexpr (kType == DType::kQ6_K) {
          Q6KRowTile(rows, rows_valid, ahead * w.row_stride, w.cols / internal::kQK, x, q_bytes,
                     out);
        } else {
          if (w.type == DType::kMlx4) {
            MlxRowTile<4>(w, row_ids, rows_valid, ahead, x, q_bytes, out);
          } else {
            MlxRowTile<8>(w, row_ids, rows_valid, ahead, x, q_bytes, out);
          }
        }
      }
    }
  }
}

#endif  // HWY_TARGET == HWY_AVX3_DL

// Activation rows multiplied with one unpacked chunk while it is in L1.
inline constexpr int kTileActs = 8;

template <DType kType>
void KQuantRows(const MatrixView& w, int64_t row_begin, int64_t row_end, const std::byte* xa,
                int64_t n, float* y, int64_t y_stride) {
#if HWY_TARGET == HWY_AVX3_DL
  if (KVnniSupports<kType>(w)) {
    KVnniRows<kType>(w, row_begin, row_end, xa, n, y, y_stride);
    return;
  }
#endif
  constexpr bool kSameHalves = kType != DType::kQ6_K;
  const DF df;
  const int64_t blocks = w.cols / 32;
  const int64_t chunks = (w.cols + kChunkValues - 1) / kChunkValues;
  const int64_t x_stride = internal::KActRowBytes(w.cols);
  const int64_t q_bytes = internal::KActQBytes(w.cols);
  Chunk ch;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const std::byte* row = w.data + r * w.row_stride;
    for (int64_t i0 = 0; i0 < n; i0 += kTileActs) {
      const int64_t acts = std::min<int64_t>(kTileActs, n - i0);
      VF acc[kTileActs];
      float c_acc[kTileActs];
      for (int t = 0; t < kTileActs; ++t) {
        acc[t] = hn::Zero(df);
        c_acc[t] = 0.0f;
      }
      for (int64_t k = 0; k < chunks; ++k) {
        UnpackChunk<kType>(w, row, r, k, &ch);
        for (int64_t t = 0; t < acts; ++t) {
          const std::byte* x = xa + (i0 + t) * x_stride;
          const auto* xq = reinterpret_cast<const int8_t*>(x) + k * kChunkValues;
          const auto* xd = reinterpret_cast<const float*>(x + q_bytes) + k * 8;
          const float* hs = reinterpret_cast<const float*>(x + q_bytes) + blocks + k * 16;
          ChunkDot<kSameHalves>(ch, xq, xd, hs, acc[t], c_acc[t]);
        }
      }
      for (int64_t t = 0; t < acts; ++t) {
        y[(i0 + t) * y_stride + r] = hn::GetLane(hn::SumOfLanes(df, acc[t])) + c_acc[t];
      }
    }
  }
}

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
