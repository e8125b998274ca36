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
// On AVX3_DL, Q4_K, Q5_K, Q6_K and MLX (groups 32/64/128) use the register-tiled vpdpbusd
// kernels of matmul_kquant_tile-inl.h instead, and on AVX2 and AVX3 the same tiles on 256-bit
// vectors (matmul_kquant_tile_avx2-inl.h), which give the same bits; their row loop, KTileRows, is
// below.  Other types and targets use the portable path.

#if defined(LOOM_KERNELS_MATMUL_KQUANT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LOOM_KERNELS_MATMUL_KQUANT_INL_H_
#undef LOOM_KERNELS_MATMUL_KQUANT_INL_H_
#else
#define LOOM_KERNELS_MATMUL_KQUANT_INL_H_
#endif

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "loom/kernels/block_formats.h"
#include "loom/kernels/kernels_internal.h"
#include "loom/kernels/matmul_kquant_decode_avx2-inl.h"
#include "loom/kernels/matmul_kquant_tile-inl.h"
#include "loom/kernels/matmul_kquant_tile_avx2-inl.h"
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
      const uint8_t* chunk = qs + 32 * c;
      uint8_t file[32];  // WeightLayout::kPairedNibbles (matrix.h) back to the file's pairs
      if (w.layout == WeightLayout::kPairedNibbles) {
        SwapNibblePairs(reinterpret_cast<const std::byte*>(chunk),
                        reinterpret_cast<std::byte*>(file));
        chunk = file;
      }
      for (int l = 0; l < 32; ++l) {
        q[64 * c + l] = chunk[l] & 0x0F;
        q[64 * c + 32 + l] = chunk[l] >> 4;
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

// Activation rows multiplied with one unpacked chunk while it is in L1.
inline constexpr int kTileActs = 8;

#if HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

// One quad of rows with kActs activation rows, in the target's tiles (kPaired: Q4_K/Q5_K quants
// in WeightLayout::kPairedNibbles, AVX2 and AVX3 only).
template <DType kType, int kActs, bool kPaired>
HWY_INLINE LOOM_KERNELS_QUAD_ATTR void KQuadTile(const KMlxQuad& quad, const std::byte* const* rows,
                                                 int rows_valid, int64_t prefetch_rows,
                                                 const KFactorCache& cache, const std::byte* x,
                                                 int64_t x_stride, float* y, int64_t y_stride) {
  const MatrixView& w = *quad.w;
  const int64_t supers = w.cols / internal::kQK;
  if constexpr (kType == DType::kQ4_K || kType == DType::kQ5_K) {
#if HWY_TARGET == HWY_AVX3_DL
    static_assert(!kPaired);
    KQ45QuadTile<kType, kActs>(rows, rows_valid, prefetch_rows * w.row_stride, supers, cache, x,
                               x_stride, y, y_stride);
#else
    KQ45QuadTile<kType, kActs, kPaired>(rows, rows_valid, prefetch_rows * w.row_stride, supers,
                                        cache, x, x_stride, y, y_stride);
#endif
  } else if constexpr (kType == DType::kQ6_K) {
    KQ6QuadTile<kActs>(rows, rows_valid, prefetch_rows * w.row_stride, supers, cache, x, x_stride,
                       y, y_stride);
  } else if (w.type == DType::kMlx4) {
    KMlxQuadTile<4, kActs>(quad, rows_valid, prefetch_rows, cache, x, x_stride, y, y_stride);
  } else if (w.type == DType::kMlx8) {
    KMlxQuadTile<8, kActs>(quad, rows_valid, prefetch_rows, cache, x, x_stride, y, y_stride);
  } else {
    KMlxQuadTile<0, kActs>(quad, rows_valid, prefetch_rows, cache, x, x_stride, y, y_stride);
  }
}

// f(std::bool_constant<kPaired>{}): kPaired when w's quants are in WeightLayout::kPairedNibbles
// (matrix.h), which only Q4_K and Q5_K have and only the AVX2 and AVX3 tiles read (KTileSupports
// sends it to the portable path elsewhere).
template <DType kType, class F>
HWY_INLINE void WithKLayout(const MatrixView& w, const F& f) {
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
  if constexpr (kType == DType::kQ4_K || kType == DType::kQ5_K) {
    if (w.layout == WeightLayout::kPairedNibbles) {
      f(std::true_type{});
      return;
    }
  }
#else
  (void)w;
#endif
  f(std::false_type{});
}

// How many rows ahead of a quad its tiles prefetch (QuadPrefetchRows).
template <DType kType>
HWY_INLINE int64_t KPrefetchRows(const MatrixView& w) {
  // The weight type's bytes per 32 values, in eighths (K-quant super-blocks hold 8 x 32).
  const int64_t block_bytes8 =
      kType == DType::kMlx4 ? Traits(w.type).block_bytes * 8 : Traits(kType).block_bytes;
  return QuadPrefetchRows(w.cols / 32 * block_bytes8 / 8);
}

// The products of rows [row_begin, row_end) with n kact rows: 4 weight rows at a time, in tiles of
// kKTileActs activation rows (then half as many, then 1; the tiles and kKTileActs are the target's:
// matmul_kquant_tile-inl.h, matmul_kquant_tile_avx2-inl.h), activation rows in chunks whose tile
// groups stay in L2 (512 KiB of its 1 MiB) while every quad of this thread's rows passes over them.
template <DType kType, bool kPaired>
LOOM_KERNELS_QUAD_ATTR void KTileRows(const MatrixView& w, int64_t row_begin, int64_t row_end,
                                      const std::byte* xa, int64_t n, float* y, int64_t y_stride) {
  const int64_t x_stride = internal::KActRowBytes(w.cols);
  const std::byte* tiles = xa + internal::KActTileOffset(w.cols);
  // The bytes of an activation row's tile groups that the kernel reads (Q6_K: values, scales and
  // corrections; the others: values, scales and sums), whole 128-byte line pairs.
  const int64_t tile_bytes = (w.cols + internal::kKTileGroupValues - 1) /
                             internal::kKTileGroupValues * (kType == DType::kQ6_K ? 384 : 256);
  const int64_t prefetch_rows = KPrefetchRows<kType>(w);
  const int64_t chunk =
      std::max<int64_t>(kKTileActs, (int64_t{512} << 10) / tile_bytes / kKTileActs * kKTileActs);
  KMlxQuad quad;
  quad.w = &w;
  if constexpr (kType == DType::kMlx4) KMlxPrepare(w, &quad);
  // With several tiles, rows of up to kKMaxCachedSteps * 128 values (16384) keep their factors
  // across them (16 KiB).
  constexpr int64_t kKMaxCachedSteps = 128;
  alignas(64) float factor_lanes[32 * kKMaxCachedSteps];
  const int64_t steps = (w.cols + internal::kKTileGroupValues - 1) / internal::kKTileGroupValues;
  KFactorCache cache;
  cache.lanes = steps <= kKMaxCachedSteps && n > 1 ? factor_lanes : nullptr;
  // Decoded weights of rows up to kKMaxDecodedSteps * 128 values (2048: 8 KiB).
  constexpr int64_t kKMaxDecodedSteps = 16;
  alignas(64) std::byte decoded[512 * kKMaxDecodedSteps];
  cache.steps = steps <= kKMaxDecodedSteps && n > 1 ? decoded : nullptr;
  for (int64_t i0 = 0; i0 < n; i0 += chunk) {
    const int64_t i1 = std::min(n, i0 + chunk);
    for (int64_t r = row_begin; r < row_end; r += 4) {
      const int rows_valid = static_cast<int>(std::min<int64_t>(4, row_end - r));
      const std::byte* rows[4];
      for (int k = 0; k < 4; ++k) {
        quad.row_ids[k] = r + std::min(k, rows_valid - 1);
        rows[k] = w.data + quad.row_ids[k] * w.row_stride;
      }
      // Only the first pass over a quad reads it from memory; later ones hit the L1.
      int64_t prefetch = prefetch_rows;
      cache.ready = false;
      int64_t i = i0;
      for (; i + kKTileActs <= i1; i += kKTileActs) {
        KQuadTile<kType, kKTileActs, kPaired>(quad, rows, rows_valid, prefetch, cache,
                                              tiles + i * x_stride, x_stride, y + i * y_stride + r,
                                              y_stride);
        prefetch = 0;
        cache.ready = cache.lanes != nullptr;
      }
      if (i + kKTileActs / 2 <= i1) {
        KQuadTile<kType, kKTileActs / 2, kPaired>(quad, rows, rows_valid, prefetch, cache,
                                                  tiles + i * x_stride, x_stride,
                                                  y + i * y_stride + r, y_stride);
        prefetch = 0;
        cache.ready = cache.lanes != nullptr;
        i += kKTileActs / 2;
      }
      for (; i < i1; ++i) {
        KQuadTile<kType, 1, kPaired>(quad, rows, rows_valid, prefetch, cache, tiles + i * x_stride,
                                     x_stride, y + i * y_stride + r, y_stride);
        prefetch = 0;
        cache.ready = cache.lanes != nullptr;
      }
    }
  }
}

#endif  // x86 tiles

template <DType kType>
void KQuantRows(const MatrixView& w, int64_t row_begin, int64_t row_end, const std::byte* xa,
                int64_t n, float* y, int64_t y_stride) {
#if HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
  if (KTileSupports<kType>(w)) {
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
    // Decode: the cheaper n = 1 forms of the tiles (matmul_kquant_decode_avx2-inl.h), called from
    // here rather than from KTileRows, whose batched loops then compile as they did without them
    // (with the call inside, GCC allocated their general registers differently: a fifth more
    // stack accesses in the Q4_K tile loop).
    if (n == 1) {
      if constexpr (kType == DType::kMlx4) {
        if (KMlxDecodeRows(w, row_begin, row_end, xa, KPrefetchRows<kType>(w), y)) return;
      } else {
        WithKLayout<kType>(w, [&](auto paired) {
          KQDecodeRows<kType, paired>(w, row_begin, row_end, xa, KPrefetchRows<kType>(w), y);
        });
        return;
      }
    }
#endif
    WithKLayout<kType>(w, [&](auto paired) {
      KTileRows<kType, paired>(w, row_begin, row_end, xa, n, y, y_stride);
    });
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

// Decode of a product split into column leaves (internal::MatVecLeavesQ4_K, ...): each quad of
// rows once, its leaves in turn, as the leaves' ColRange views' decode would run them (the same
// bits).  AVX2 and AVX3 only; false elsewhere, or where the decode path does not take the leaves.
template <DType kType>
bool KQuantLeafRows(const MatrixView& w, int64_t leaves, int64_t row_begin, int64_t row_end,
                    const std::byte* xa, int64_t xa_stride, float* const* parts) {
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
  if (!KTileSupports<kType>(w.ColRange(0, w.cols / leaves))) return false;
  if constexpr (kType == DType::kMlx4) {
    return KMlxDecodeLeafRows(w, leaves, row_begin, row_end, xa, xa_stride, KPrefetchRows<kType>(w),
                              parts);
  } else {
    WithKLayout<kType>(w, [&](auto paired) {
      KQDecodeLeafRows<kType, paired>(w, leaves, row_begin, row_end, xa, xa_stride,
                                      KPrefetchRows<kType>(w), parts);
    });
    return true;
  }
#else
  (void)w, (void)leaves, (void)row_begin, (void)row_end, (void)xa, (void)xa_stride, (void)parts;
  return false;
#endif
}

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
