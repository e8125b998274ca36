// AttendMany (attention.h), Highway SIMD with dynamic dispatch.  Per block of kAttendKeyBlock
// positions the keys are transposed to (head_dim, block) floats and the values made contiguous
// float rows (Q8_0 dequantized, f32 copied), once for all the queries of the call; then per tile of
// kAttendTileQueries queries (each load of a key or value row serving the tile), or per query: the
// block's scores as vectors over positions (no horizontal sums), the online-softmax update of the
// running max and sum, and the weighted values added into the query's accumulator with the
// correction exp(old max - new max).  Memory sees each row once per call.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "loom/kernels/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cmath>
#include <limits>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "loom/kernels/attention.h"

HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;

// exp(x) clamped to Highway's valid range (as ops.cc).
static_assert(kAttendKeyBlock % (4 * HWY_LANES(float)) == 0, "BlockScores: 4 vectors a step");

HWY_INLINE hn::Vec<DF> ClampedExp(DF df, hn::Vec<DF> x) {
  return hn::CallExp(df, hn::Min(hn::Max(x, hn::Set(df, -104.0f)), hn::Set(df, 88.0f)));
}

// Value i of position p as a float.
template <KvType T>
HWY_INLINE float RowValue(const KvHeadRows& r, int64_t p, int64_t i) {
  if constexpr (T == KvType::kF32) {
    return r.f32[p * r.stride + i];
  } else {
    // A scale block is 32 values of a head, or the whole head when it is narrower (i < 32).
    return static_cast<float>(r.q[p * r.stride + i]) * r.d[p * r.d_stride + (i >> 5)];
  }
}

// The keys of positions [p0, p0 + n) as a (head_dim, kAttendKeyBlock) float tile: kt[i *
// kAttendKeyBlock + j] is value i of position p0 + j (p0 a multiple of the block).  Columns from n
// on hold zeros or later positions (never used).  Tiled f32 keys are used in place; otherwise the
// tile is built in `scratch`.
template <KvType T>
HWY_INLINE const float* KeyTile(DF df, const KvHeadRows& k, int64_t p0, int64_t n, int64_t head_dim,
                                float* scratch) {
  constexpr int64_t kB = kAttendKeyBlock;
  const int64_t t = p0 / kB;
  if (k.tiled) {
    if constexpr (T == KvType::kF32) {
      return k.f32 + t * k.stride;
    } else {
      const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
      const hn::Rebind<int8_t, DF> d8;
      const hn::Rebind<int32_t, DF> d32;
      const int8_t* q = k.q + t * k.stride;
      const float* d = k.d + t * k.d_stride;
      for (int64_t i = 0; i < head_dim; ++i) {
        const float* di = d + (i >> 5) * kB;  // the head's scale block of value i
        for (int64_t j = 0; j < kB; j += lanes) {
          const auto v = hn::ConvertTo(df, hn::PromoteTo(d32, hn::LoadU(d8, q + i * kB + j)));
          hn::StoreU(hn::Mul(v, hn::LoadU(df, di + j)), df, scratch + i * kB + j);
        }
      }
      return scratch;
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < head_dim; ++i) scratch[i * kB + j] = RowValue<T>(k, p0 + j, i);
  }
  for (int64_t i = 0; i < head_dim; ++i) {
    std::fill(scratch + i * kB + n, scratch + (i + 1) * kB, 0.0f);
  }
  return scratch;
}

// vb(n, head_dim) = the Q8_0 value rows of positions [p0, p0 + n) as floats.
HWY_INLINE void DequantizeValues(DF df, const KvHeadRows& v, int64_t p0, int64_t n,
                                 int64_t head_dim, float* vb) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const hn::Rebind<int8_t, DF> d8;
  const hn::Rebind<int32_t, DF> d32;
  // Vectors must not straddle two scale blocks (a head under 32 values is one block).
  const int64_t vend = v.block % lanes == 0 ? head_dim : 0;
  for (int64_t j = 0; j < n; ++j) {
    const int8_t* q = v.q + (p0 + j) * v.stride;
    const float* d = v.d + (p0 + j) * v.d_stride;
    float* out = vb + j * head_dim;
    int64_t i = 0;
    for (; i + lanes <= vend; i += lanes) {
      const auto x = hn::ConvertTo(df, hn::PromoteTo(d32, hn::LoadU(d8, q + i)));
      hn::StoreU(hn::Mul(x, hn::Set(df, d[i >> 5])), df, out + i);
    }
    for (; i < head_dim; ++i) out[i] = static_cast<float>(q[i]) * d[i >> 5];
  }
}

// w[j] = scale * (q . key p0 + j) for j in [0, n) from the transposed block, 4 vectors of
// positions at a time (kAttendKeyBlock is a multiple of 4 vectors); each position's sum runs over
// i in a fixed order (even and odd i apart, then added), whatever n is.  Entries from n up to the
// next 4 vectors are written too (from the zero or later columns) and are not used.
HWY_INLINE void BlockScores(DF df, const float* q, const float* kt, int64_t n, int64_t head_dim,
                            float scale, float* w) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto vscale = hn::Set(df, scale);
  for (int64_t j0 = 0; j0 < n; j0 += 4 * lanes) {
    const float* c = kt + j0;
    auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
    auto b0 = hn::Zero(df), b1 = hn::Zero(df), b2 = hn::Zero(df), b3 = hn::Zero(df);
    int64_t i = 0;
    for (; i + 2 <= head_dim; i += 2) {
      const float* r0 = c + i * kAttendKeyBlock;
      const float* r1 = r0 + kAttendKeyBlock;
      const auto q0 = hn::Set(df, q[i]), q1 = hn::Set(df, q[i + 1]);
      a0 = hn::MulAdd(q0, hn::LoadU(df, r0), a0);
      a1 = hn::MulAdd(q0, hn::LoadU(df, r0 + lanes), a1);
      a2 = hn::MulAdd(q0, hn::LoadU(df, r0 + 2 * lanes), a2);
      a3 = hn::MulAdd(q0, hn::LoadU(df, r0 + 3 * lanes), a3);
      b0 = hn::MulAdd(q1, hn::LoadU(df, r1), b0);
      b1 = hn::MulAdd(q1, hn::LoadU(df, r1 + lanes), b1);
      b2 = hn::MulAdd(q1, hn::LoadU(df, r1 + 2 * lanes), b2);
      b3 = hn::MulAdd(q1, hn::LoadU(df, r1 + 3 * lanes), b3);
    }
    if (i < head_dim) {
      const float* r0 = c + i * kAttendKeyBlock;
      const auto q0 = hn::Set(df, q[i]);
      a0 = hn::MulAdd(q0, hn::LoadU(df, r0), a0);
      a1 = hn::MulAdd(q0, hn::LoadU(df, r0 + lanes), a1);
      a2 = hn::MulAdd(q0, hn::LoadU(df, r0 + 2 * lanes), a2);
      a3 = hn::MulAdd(q0, hn::LoadU(df, r0 + 3 * lanes), a3);
    }
    hn::StoreU(hn::Mul(hn::Add(a0, b0), vscale), df, w + j0);
    hn::StoreU(hn::Mul(hn::Add(a1, b1), vscale), df, w + j0 + lanes);
    hn::StoreU(hn::Mul(hn::Add(a2, b2), vscale), df, w + j0 + 2 * lanes);
    hn::StoreU(hn::Mul(hn::Add(a3, b3), vscale), df, w + j0 + 3 * lanes);
  }
}

// w[m * kAttendKeyBlock + j] = scale * (q[m] . key j) for the tile's queries and all the block's
// positions, in BlockScores' order (per query and position: even and odd i in two chains, then
// added), a vector of positions at a time.  head_dim even.
HWY_INLINE void TileScores(DF df, const float* const* q, const float* kt, int64_t head_dim,
                           float scale, float* w) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  constexpr int64_t kT = kAttendTileQueries;
  for (int64_t j0 = 0; j0 < kAttendKeyBlock; j0 += lanes) {
    hn::Vec<DF> a[kT], b[kT];
    for (int64_t m = 0; m < kT; ++m) a[m] = b[m] = hn::Zero(df);
    for (int64_t i = 0; i < head_dim; i += 2) {
      const float* r0 = kt + i * kAttendKeyBlock + j0;
      const auto k0 = hn::LoadU(df, r0), k1 = hn::LoadU(df, r0 + kAttendKeyBlock);
      for (int64_t m = 0; m < kT; ++m) {
        a[m] = hn::MulAdd(hn::Set(df, q[m][i]), k0, a[m]);
        b[m] = hn::MulAdd(hn::Set(df, q[m][i + 1]), k1, b[m]);
      }
    }
    for (int64_t m = 0; m < kT; ++m) {
      hn::StoreU(hn::Mul(hn::Add(a[m], b[m]), hn::Set(df, scale)), df,
                 w + m * kAttendKeyBlock + j0);
    }
  }
}

// For each query m of the tile: acc[m](head_dim) = c[m] * acc[m] + sum_{j in [0, n)}
// w[m * kAttendKeyBlock + j] * row j (rows(n, head_dim)), in AccumulateRows' order (per value, j in
// order).  head_dim a multiple of 2 vectors.
HWY_INLINE void TileAccumulate(DF df, const float* rows, int64_t n, const float* w, const float* c,
                               int64_t head_dim, float* const* acc) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t i = 0; i < head_dim; i += 2 * lanes) {
    hn::Vec<DF> a[kAttendTileQueries][2];
    for (int64_t m = 0; m < kAttendTileQueries; ++m) {
      const auto cm = hn::Set(df, c[m]);
      a[m][0] = hn::Mul(cm, hn::LoadU(df, acc[m] + i));
      a[m][1] = hn::Mul(cm, hn::LoadU(df, acc[m] + i + lanes));
    }
    for (int64_t j = 0; j < n; ++j) {
      const float* v = rows + j * head_dim + i;
      const auto v0 = hn::LoadU(df, v), v1 = hn::LoadU(df, v + lanes);
      for (int64_t m = 0; m < kAttendTileQueries; ++m) {
        const auto s = hn::Set(df, w[m * kAttendKeyBlock + j]);
        a[m][0] = hn::MulAdd(s, v0, a[m][0]);
        a[m][1] = hn::MulAdd(s, v1, a[m][1]);
      }
    }
    for (int64_t m = 0; m < kAttendTileQueries; ++m) {
      hn::StoreU(a[m][0], df, acc[m] + i);
      hn::StoreU(a[m][1], df, acc[m] + i + lanes);
    }
  }
}

// acc(head_dim) = c * acc + sum_{j in [0, n)} w[j] * row j of rows(n, head_dim); per value the
// sum runs over j in order (TileAccumulate keeps it).
HWY_INLINE void AccumulateRows(DF df, const float* rows, int64_t n, const float* w, float c,
                               int64_t head_dim, float* acc) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto vc = hn::Set(df, c);
  int64_t i = 0;
  for (; i + 4 * lanes <= head_dim; i += 4 * lanes) {
    auto a0 = hn::Mul(vc, hn::LoadU(df, acc + i));
    auto a1 = hn::Mul(vc, hn::LoadU(df, acc + i + lanes));
    auto a2 = hn::Mul(vc, hn::LoadU(df, acc + i + 2 * lanes));
    auto a3 = hn::Mul(vc, hn::LoadU(df, acc + i + 3 * lanes));
    for (int64_t j = 0; j < n; ++j) {
      const auto s = hn::Set(df, w[j]);
      const float* v = rows + j * head_dim + i;
      a0 = hn::MulAdd(s, hn::LoadU(df, v), a0);
      a1 = hn::MulAdd(s, hn::LoadU(df, v + lanes), a1);
      a2 = hn::MulAdd(s, hn::LoadU(df, v + 2 * lanes), a2);
      a3 = hn::MulAdd(s, hn::LoadU(df, v + 3 * lanes), a3);
    }
    hn::StoreU(a0, df, acc + i);
    hn::StoreU(a1, df, acc + i + lanes);
    hn::StoreU(a2, df, acc + i + 2 * lanes);
    hn::StoreU(a3, df, acc + i + 3 * lanes);
  }
  for (; i + lanes <= head_dim; i += lanes) {
    auto a = hn::Mul(vc, hn::LoadU(df, acc + i));
    for (int64_t j = 0; j < n; ++j) {
      a = hn::MulAdd(hn::Set(df, w[j]), hn::LoadU(df, rows + j * head_dim + i), a);
    }
    hn::StoreU(a, df, acc + i);
  }
  for (; i < head_dim; ++i) {
    float a = c * acc[i];
    for (int64_t j = 0; j < n; ++j) a += w[j] * rows[j * head_dim + i];
    acc[i] = a;
  }
}

// max(w(n)), n >= 1 (exact in any order).
HWY_INLINE float MaxOf(DF df, const float* w, int64_t n) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  float mx = w[0];
  int64_t j = 0;
  if (n >= lanes) {
    auto v = hn::LoadU(df, w);
    for (j = lanes; j + lanes <= n; j += lanes) v = hn::Max(v, hn::LoadU(df, w + j));
    mx = hn::GetLane(hn::MaxOfLanes(df, v));
  }
  for (; j < n; ++j) mx = std::max(mx, w[j]);
  return mx;
}

// w(n) = exp(w - mx); returns their sum.
HWY_INLINE float ExpShifted(DF df, float* w, int64_t n, float mx) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto vmx = hn::Set(df, mx);
  auto vsum = hn::Zero(df);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto e = ClampedExp(df, hn::Sub(hn::LoadU(df, w + i), vmx));
    vsum = hn::Add(vsum, e);
    hn::StoreU(e, df, w + i);
  }
  float sum = hn::GetLane(hn::SumOfLanes(df, vsum));
  for (; i < n; ++i) {
    w[i] = std::exp(w[i] - mx);
    sum += w[i];
  }
  return sum;
}

// The online-softmax step of one query over a block: w(n) (scores) becomes exp(w - new max), the
// running max and sum move to the block; returns the factor exp(old max - new max) for the
// accumulated values (0 on the first block, whose old max is -inf).
HWY_INLINE float SoftmaxStep(DF df, float* w, int64_t n, float& mx, float& sum) {
  const float new_max = std::max(mx, MaxOf(df, w, n));
  const float c = std::exp(mx - new_max);
  sum = sum * c + ExpShifted(df, w, n, new_max);
  mx = new_max;
  return c;
}

// Per block of positions: the keys transposed and the values made contiguous floats once for all
// the queries, then per tile of kAttendTileQueries queries that see the same positions of the
// block (else per query) the scores, the online-softmax update and the weighted values.
template <KvType T>
void AttendManyT(const AttendQuery* queries, int64_t n_queries, const KvHeadRows& keys,
                 const KvHeadRows& values, int64_t head_dim, float scale, float* scratch) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  constexpr int64_t kB = kAttendKeyBlock;
  float* w = scratch;                       // (kAttendTileQueries, kB) scores, then weights
  float* kt = w + kAttendTileQueries * kB;  // (head_dim, kB) the block's keys as a float tile
  float* vb = kt + head_dim * kB;           // (kB, head_dim) the block's values as floats
  float* acc = vb + kB * head_dim;          // (n_queries, head_dim) unnormalized outputs
  float* mx = acc + n_queries * head_dim;   // (n_queries) running max of the scores
  float* sum = mx + n_queries;              // (n_queries) running sum of exp(score - max)
  // Tiles of queries where a tile's values are whole pairs of vectors.
  const bool tiles = head_dim % (2 * lanes) == 0;
  int64_t max_len = 0;
  for (int64_t m = 0; m < n_queries; ++m) {
    max_len = std::max(max_len, queries[m].len);
    std::fill_n(acc + m * head_dim, head_dim, 0.0f);
    mx[m] = -std::numeric_limits<float>::infinity();
    sum[m] = 0.0f;
  }
  for (int64_t p0 = 0; p0 < max_len; p0 += kB) {
    const int64_t nb = std::min(kB, max_len - p0);
    const float* tile = KeyTile<T>(df, keys, p0, nb, head_dim, kt);
    // The block's values as rows of floats (f32 rows copied: in L1 for all the queries, where
    // the cache's rows lie a row of all kv heads apart).
    if constexpr (T == KvType::kF32) {
      for (int64_t j = 0; j < nb; ++j) {
        std::copy_n(values.f32 + (p0 + j) * values.stride, head_dim, vb + j * head_dim);
      }
    } else {
      DequantizeValues(df, values, p0, nb, head_dim, vb);
    }
    int64_t m = 0;
    while (m < n_queries) {
      const AttendQuery& qm = queries[m];
      if (qm.len <= p0) {
        ++m;
        continue;
      }
      const int64_t n = std::min(qm.len - p0, kB);
      if (tiles && m + kAttendTileQueries <= n_queries &&
          std::all_of(queries + m, queries + m + kAttendTileQueries,
                      [&](const AttendQuery& o) { return std::min(o.len - p0, kB) == n; })) {
        const float* q[kAttendTileQueries];
        float* a[kAttendTileQueries];
        float c[kAttendTileQueries];
        for (int64_t t = 0; t < kAttendTileQueries; ++t) {
          q[t] = queries[m + t].q;
          a[t] = acc + (m + t) * head_dim;
        }
        TileScores(df, q, tile, head_dim, scale, w);
        for (int64_t t = 0; t < kAttendTileQueries; ++t) {
          c[t] = SoftmaxStep(df, w + t * kB, n, mx[m + t], sum[m + t]);
        }
        TileAccumulate(df, vb, n, w, c, head_dim, a);
        m += kAttendTileQueries;
        continue;
      }
      BlockScores(df, qm.q, tile, n, head_dim, scale, w);
      const float c = SoftmaxStep(df, w, n, mx[m], sum[m]);
      AccumulateRows(df, vb, n, w, c, head_dim, acc + m * head_dim);
      ++m;
    }
  }
  for (int64_t m = 0; m < n_queries; ++m) {
    const AttendQuery& qm = queries[m];
    const float inv = sum[m] > 0 ? 1.0f / sum[m] : 0.0f;
    const float* a = acc + m * head_dim;
    int64_t i = 0;
    for (; i + lanes <= head_dim; i += lanes) {
      hn::StoreU(hn::Mul(hn::LoadU(df, a + i), hn::Set(df, inv)), df, qm.out + i);
    }
    for (; i < head_dim; ++i) qm.out[i] = a[i] * inv;
  }
}

void AttendManyImpl(const AttendQuery* queries, int64_t n_queries, const KvHeadRows& keys,
                    const KvHeadRows& values, int64_t head_dim, float scale, float* scratch) {
  if (keys.type == KvType::kQ8_0) {
    AttendManyT<KvType::kQ8_0>(queries, n_queries, keys, values, head_dim, scale, scratch);
  } else {
    AttendManyT<KvType::kF32>(queries, n_queries, keys, values, head_dim, scale, scratch);
  }
}

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::kernels {
HWY_EXPORT(AttendManyImpl);

std::string_view KvTypeName(KvType type) {
  switch (type) {
    case KvType::kF32:
      return "f32";
    case KvType::kQ8_0:
      return "q8_0";
  }
  return "?";
}

void QuantizeKvRow(const float* x, int64_t n, int64_t block, int8_t* q, float* d) {
  for (int64_t b = 0; b * block < n; ++b) {
    const float* xb = x + b * block;
    float amax = 0.0f;
    for (int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float scale = amax / 127.0f;
    const float inv = scale > 0 ? 1.0f / scale : 0.0f;
    d[b] = scale;
    for (int64_t i = 0; i < block; ++i) {
      const float r = std::nearbyint(xb[i] * inv);
      q[b * block + i] = static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
    }
  }
}

void AttendMany(const AttendQuery* queries, int64_t n_queries, const KvHeadRows& keys,
                const KvHeadRows& values, int64_t head_dim, float scale, float* scratch) {
  HWY_DYNAMIC_DISPATCH(AttendManyImpl)(queries, n_queries, keys, values, head_dim, scale, scratch);
}

}  // namespace loom::kernels
#endif  // HWY_ONCE
