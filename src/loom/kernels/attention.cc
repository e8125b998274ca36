// AttendMany (attention.h), Highway SIMD with dynamic dispatch.  Per block of kAttendKeyBlock
// positions and per query: scores (dot products over head_dim, 8-bit rows dequantized in the
// product), the online-softmax update of the running max and sum, then the weighted values added
// into the query's accumulator with the correction exp(old max - new max).  The block's rows stay
// in cache while the queries of the call take their turns, so memory sees each row once.
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
HWY_INLINE hn::Vec<DF> ClampedExp(DF df, hn::Vec<DF> x) {
  return hn::CallExp(df, hn::Min(hn::Max(x, hn::Set(df, -104.0f)), hn::Set(df, 88.0f)));
}

// Values [i, i + lanes) of position p as floats; for Q8_0 they lie in one scale block.
template <KvType T>
HWY_INLINE hn::Vec<DF> LoadRow(DF df, const KvHeadRows& r, int64_t p, int64_t i) {
  if constexpr (T == KvType::kF32) {
    return hn::LoadU(df, r.f32 + p * r.stride + i);
  } else {
    const hn::Rebind<int8_t, DF> d8;
    const hn::Rebind<int32_t, DF> d32;
    const auto v = hn::ConvertTo(df, hn::PromoteTo(d32, hn::LoadU(d8, r.q + p * r.stride + i)));
    return hn::Mul(v, hn::Set(df, r.d[p * r.d_stride + i / r.block]));
  }
}

template <KvType T>
HWY_INLINE float RowValue(const KvHeadRows& r, int64_t p, int64_t i) {
  if constexpr (T == KvType::kF32) {
    return r.f32[p * r.stride + i];
  } else {
    return static_cast<float>(r.q[p * r.stride + i]) * r.d[p * r.d_stride + i / r.block];
  }
}

// q . row p over head_dim values: vectors up to vend, then scalars.
template <KvType T>
HWY_INLINE float DotRow(DF df, const float* q, const KvHeadRows& k, int64_t p, int64_t head_dim,
                        int64_t vend) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  auto a0 = hn::Zero(df), a1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * lanes <= vend; i += 2 * lanes) {
    a0 = hn::MulAdd(hn::LoadU(df, q + i), LoadRow<T>(df, k, p, i), a0);
    a1 = hn::MulAdd(hn::LoadU(df, q + i + lanes), LoadRow<T>(df, k, p, i + lanes), a1);
  }
  for (; i + lanes <= vend; i += lanes)
    a0 = hn::MulAdd(hn::LoadU(df, q + i), LoadRow<T>(df, k, p, i), a0);
  float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0, a1)));
  for (; i < head_dim; ++i) sum += q[i] * RowValue<T>(k, p, i);
  return sum;
}

// acc(head_dim) = c * acc + sum_{p in [p0, p1)} w[p - p0] * row p.
template <KvType T>
HWY_INLINE void AccumulateRows(DF df, const KvHeadRows& v, int64_t p0, int64_t p1, const float* w,
                               float c, int64_t head_dim, int64_t vend, float* acc) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto vc = hn::Set(df, c);
  int64_t i = 0;
  for (; i + 4 * lanes <= vend; i += 4 * lanes) {
    auto a0 = hn::Mul(vc, hn::LoadU(df, acc + i));
    auto a1 = hn::Mul(vc, hn::LoadU(df, acc + i + lanes));
    auto a2 = hn::Mul(vc, hn::LoadU(df, acc + i + 2 * lanes));
    auto a3 = hn::Mul(vc, hn::LoadU(df, acc + i + 3 * lanes));
    for (int64_t p = p0; p < p1; ++p) {
      const auto s = hn::Set(df, w[p - p0]);
      a0 = hn::MulAdd(s, LoadRow<T>(df, v, p, i), a0);
      a1 = hn::MulAdd(s, LoadRow<T>(df, v, p, i + lanes), a1);
      a2 = hn::MulAdd(s, LoadRow<T>(df, v, p, i + 2 * lanes), a2);
      a3 = hn::MulAdd(s, LoadRow<T>(df, v, p, i + 3 * lanes), a3);
    }
    hn::StoreU(a0, df, acc + i);
    hn::StoreU(a1, df, acc + i + lanes);
    hn::StoreU(a2, df, acc + i + 2 * lanes);
    hn::StoreU(a3, df, acc + i + 3 * lanes);
  }
  for (; i + lanes <= vend; i += lanes) {
    auto a = hn::Mul(vc, hn::LoadU(df, acc + i));
    for (int64_t p = p0; p < p1; ++p) {
      a = hn::MulAdd(hn::Set(df, w[p - p0]), LoadRow<T>(df, v, p, i), a);
    }
    hn::StoreU(a, df, acc + i);
  }
  for (; i < head_dim; ++i) {
    float a = c * acc[i];
    for (int64_t p = p0; p < p1; ++p) a += w[p - p0] * RowValue<T>(v, p, i);
    acc[i] = a;
  }
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

template <KvType T>
void AttendManyT(const AttendQuery* queries, int64_t n_queries, const KvHeadRows& keys,
                 const KvHeadRows& values, int64_t head_dim, float scale, float* scratch) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  // Q8_0 vectors must not straddle two scale blocks; otherwise those rows go scalar.
  const bool vec_ok = T == KvType::kF32 || (keys.block % lanes == 0 && values.block % lanes == 0);
  const int64_t vend = vec_ok ? head_dim / lanes * lanes : 0;
  float* w = scratch;                      // (kAttendKeyBlock) one query's block weights
  float* acc = w + kAttendKeyBlock;        // (n_queries, head_dim) unnormalized outputs
  float* mx = acc + n_queries * head_dim;  // (n_queries) running max of the scores
  float* sum = mx + n_queries;             // (n_queries) running sum of exp(score - max)
  int64_t max_len = 0;
  for (int64_t m = 0; m < n_queries; ++m) {
    max_len = std::max(max_len, queries[m].len);
    std::fill_n(acc + m * head_dim, head_dim, 0.0f);
    mx[m] = -std::numeric_limits<float>::infinity();
    sum[m] = 0.0f;
  }
  for (int64_t p0 = 0; p0 < max_len; p0 += kAttendKeyBlock) {
    for (int64_t m = 0; m < n_queries; ++m) {
      const AttendQuery& qm = queries[m];
      if (qm.len <= p0) continue;
      const int64_t p1 = std::min(qm.len, p0 + kAttendKeyBlock);
      const int64_t n = p1 - p0;
      float block_max = -std::numeric_limits<float>::infinity();
      for (int64_t p = p0; p < p1; ++p) {
        const float s = DotRow<T>(df, qm.q, keys, p, head_dim, vend) * scale;
        w[p - p0] = s;
        block_max = std::max(block_max, s);
      }
      const float new_max = std::max(mx[m], block_max);
      const float c = std::exp(mx[m] - new_max);  // 0 on the first block (max was -inf)
      sum[m] = sum[m] * c + ExpShifted(df, w, n, new_max);
      mx[m] = new_max;
      AccumulateRows<T>(df, values, p0, p1, w, c, head_dim, vend, acc + m * head_dim);
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
