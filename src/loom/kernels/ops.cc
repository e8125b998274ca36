// Vector operations of the transformer block, Highway SIMD with dynamic dispatch.  Each has a
// scalar reference in reference.cc; ops_test.cc compares them on ragged sizes and every target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "loom/kernels/ops.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cmath>
#include <cstring>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "loom/kernels/ops.h"

HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;

// exp(x) on [-104, 88]: below, exp is 0 in f32 anyway; above, it overflows.  Clamping keeps -inf
// (masked scores) and large arguments inside Highway's valid range.
HWY_INLINE hn::Vec<DF> ClampedExp(DF df, hn::Vec<DF> x) {
  return hn::CallExp(df, hn::Min(hn::Max(x, hn::Set(df, -104.0f)), hn::Set(df, 88.0f)));
}

float DotImpl(const float* a, const float* b, int64_t n) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  auto acc0 = hn::Zero(df);
  auto acc1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    acc0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), acc0);
    acc1 = hn::MulAdd(hn::LoadU(df, a + i + lanes), hn::LoadU(df, b + i + lanes), acc1);
  }
  for (; i + lanes <= n; i += lanes)
    acc0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), acc0);
  float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1)));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void RmsNormImpl(const float* x, const float* weight, int64_t n, float eps, float* out) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const float ss = DotImpl(x, x, n);
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  const auto vinv = hn::Set(df, inv);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::Mul(hn::LoadU(df, weight + i), hn::Mul(vinv, hn::LoadU(df, x + i))), df,
               out + i);
  }
  for (; i < n; ++i) out[i] = weight[i] * (inv * x[i]);
}

void RopeImpl(float* x, int64_t n_heads, int64_t head_dim, const float* cos_sin, RopeStyle style) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* xh = x + h * head_dim;
    int64_t i = 0;
    for (; i + lanes <= half; i += lanes) {
      hn::Vec<DF> c, s, v0, v1;
      hn::LoadInterleaved2(df, cos_sin + 2 * i, c, s);
      if (style == RopeStyle::kInterleaved) {
        hn::LoadInterleaved2(df, xh + 2 * i, v0, v1);
      } else {
        v0 = hn::LoadU(df, xh + i);
        v1 = hn::LoadU(df, xh + half + i);
      }
      const auto r0 = hn::Sub(hn::Mul(v0, c), hn::Mul(v1, s));
      const auto r1 = hn::Add(hn::Mul(v0, s), hn::Mul(v1, c));
      if (style == RopeStyle::kInterleaved) {
        hn::StoreInterleaved2(r0, r1, df, xh + 2 * i);
      } else {
        hn::StoreU(r0, df, xh + i);
        hn::StoreU(r1, df, xh + half + i);
      }
    }
    for (; i < half; ++i) {
      const int64_t i0 = style == RopeStyle::kInterleaved ? 2 * i : i;
      const int64_t i1 = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
      const float c = cos_sin[2 * i];
      const float s = cos_sin[2 * i + 1];
      const float v0 = xh[i0];
      const float v1 = xh[i1];
      xh[i0] = v0 * c - v1 * s;
      xh[i1] = v0 * s + v1 * c;
    }
  }
}

void SoftmaxImpl(float* x, int64_t n) {
  if (n <= 0) return;
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  float mx = x[0];
  int64_t i = 0;
  if (n >= lanes) {
    auto vmax = hn::LoadU(df, x);
    for (i = lanes; i + lanes <= n; i += lanes) vmax = hn::Max(vmax, hn::LoadU(df, x + i));
    mx = hn::GetLane(hn::MaxOfLanes(df, vmax));
  }
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  const auto vmx = hn::Set(df, mx);
  auto vsum = hn::Zero(df);
  for (i = 0; i + lanes <= n; i += lanes) {
    const auto e = ClampedExp(df, hn::Sub(hn::LoadU(df, x + i), vmx));
    vsum = hn::Add(vsum, e);
    hn::StoreU(e, df, x + i);
  }
  float sum = hn::GetLane(hn::SumOfLanes(df, vsum));
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  const auto vinv = hn::Set(df, inv);
  for (i = 0; i + lanes <= n; i += lanes)
    hn::StoreU(hn::Mul(hn::LoadU(df, x + i), vinv), df, x + i);
  for (; i < n; ++i) x[i] *= inv;
}

void SwiGluImpl(const float* gate, const float* up, int64_t n, float* out) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto one = hn::Set(df, 1.0f);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto g = hn::LoadU(df, gate + i);
    const auto silu = hn::Div(g, hn::Add(one, ClampedExp(df, hn::Neg(g))));
    hn::StoreU(hn::Mul(silu, hn::LoadU(df, up + i)), df, out + i);
  }
  // The tail in a vector with the same arithmetic: an element's bits must not depend on
  // where it falls in the array (a scalar std::exp tail gave the rows of a tensor or expert
  // parallel part, whose length is not a multiple of the lanes, other bits than one process).
  // (Copied through zero-padded buffers: this Highway's MaskedLoad reads whole aligned vectors.)
  if (i < n) {
    const size_t rest = static_cast<size_t>(n - i);
    HWY_ALIGN float g_buf[hn::MaxLanes(df)] = {}, u_buf[hn::MaxLanes(df)] = {};
    std::memcpy(g_buf, gate + i, rest * sizeof(float));
    std::memcpy(u_buf, up + i, rest * sizeof(float));
    const auto g = hn::Load(df, g_buf);
    const auto silu = hn::Div(g, hn::Add(one, ClampedExp(df, hn::Neg(g))));
    hn::Store(hn::Mul(silu, hn::Load(df, u_buf)), df, g_buf);
    std::memcpy(out + i, g_buf, rest * sizeof(float));
  }
}

void AddImpl(const float* x, int64_t n, float* y) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::Add(hn::LoadU(df, y + i), hn::LoadU(df, x + i)), df, y + i);
  }
  for (; i < n; ++i) y[i] += x[i];
}

void AxpyImpl(float alpha, const float* x, int64_t n, float* y) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto va = hn::Set(df, alpha);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::MulAdd(va, hn::LoadU(df, x + i), hn::LoadU(df, y + i)), df, y + i);
  }
  if (i < n) {  // the same fused multiply-add on the padded tail (see SwiGluImpl)
    const size_t rest = static_cast<size_t>(n - i);
    HWY_ALIGN float x_buf[hn::MaxLanes(df)] = {}, y_buf[hn::MaxLanes(df)] = {};
    std::memcpy(x_buf, x + i, rest * sizeof(float));
    std::memcpy(y_buf, y + i, rest * sizeof(float));
    hn::Store(hn::MulAdd(va, hn::Load(df, x_buf), hn::Load(df, y_buf)), df, y_buf);
    std::memcpy(y + i, y_buf, rest * sizeof(float));
  }
}

void ScaleImpl(float alpha, int64_t n, float* x) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto va = hn::Set(df, alpha);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::Mul(va, hn::LoadU(df, x + i)), df, x + i);
  for (; i < n; ++i) x[i] *= alpha;
}

void AttendImpl(const float* q, const float* keys, const float* values, int64_t len, int64_t stride,
                int64_t head_dim, float scale, float* scores, float* out) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t p = 0; p < len; ++p) scores[p] = DotImpl(q, keys + p * stride, head_dim) * scale;
  SoftmaxImpl(scores, len);
  // out = sum_p scores[p] * value p, kept in registers a few vectors at a time: the same fused
  // multiply-adds in the same order as Axpy into out, without a store and reload per position.
  int64_t i = 0;
  for (; i + 4 * lanes <= head_dim; i += 4 * lanes) {
    auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
    for (int64_t p = 0; p < len; ++p) {
      const float* v = values + p * stride + i;
      const auto s = hn::Set(df, scores[p]);
      a0 = hn::MulAdd(s, hn::LoadU(df, v), a0);
      a1 = hn::MulAdd(s, hn::LoadU(df, v + lanes), a1);
      a2 = hn::MulAdd(s, hn::LoadU(df, v + 2 * lanes), a2);
      a3 = hn::MulAdd(s, hn::LoadU(df, v + 3 * lanes), a3);
    }
    hn::StoreU(a0, df, out + i);
    hn::StoreU(a1, df, out + i + lanes);
    hn::StoreU(a2, df, out + i + 2 * lanes);
    hn::StoreU(a3, df, out + i + 3 * lanes);
  }
  for (; i + lanes <= head_dim; i += lanes) {
    auto a = hn::Zero(df);
    for (int64_t p = 0; p < len; ++p) {
      a = hn::MulAdd(hn::Set(df, scores[p]), hn::LoadU(df, values + p * stride + i), a);
    }
    hn::StoreU(a, df, out + i);
  }
  for (; i < head_dim; ++i) {
    float a = 0.0f;
    for (int64_t p = 0; p < len; ++p) a += scores[p] * values[p * stride + i];
    out[i] = a;
  }
}

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::kernels {
HWY_EXPORT(RmsNormImpl);
HWY_EXPORT(RopeImpl);
HWY_EXPORT(SoftmaxImpl);
HWY_EXPORT(SwiGluImpl);
HWY_EXPORT(AddImpl);
HWY_EXPORT(DotImpl);
HWY_EXPORT(AxpyImpl);
HWY_EXPORT(ScaleImpl);
HWY_EXPORT(AttendImpl);

void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  HWY_DYNAMIC_DISPATCH(RmsNormImpl)(x, weight, n, eps, out);
}
void Rope(float* x, int64_t n_heads, int64_t head_dim, const float* cos_sin, RopeStyle style) {
  HWY_DYNAMIC_DISPATCH(RopeImpl)(x, n_heads, head_dim, cos_sin, style);
}
void Softmax(float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(SoftmaxImpl)(x, n); }
void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(SwiGluImpl)(gate, up, n, out);
}
void Add(const float* x, int64_t n, float* y) { HWY_DYNAMIC_DISPATCH(AddImpl)(x, n, y); }
void SumTree(float* const* parts, int64_t num_parts, int64_t n) {
  for (int64_t step = 1; step < num_parts; step *= 2) {
    for (int64_t i = 0; i + step < num_parts; i += 2 * step) Add(parts[i + step], n, parts[i]);
  }
}
float Dot(const float* a, const float* b, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotImpl)(a, b, n);
}
void Axpy(float alpha, const float* x, int64_t n, float* y) {
  HWY_DYNAMIC_DISPATCH(AxpyImpl)(alpha, x, n, y);
}
void Scale(float alpha, int64_t n, float* x) { HWY_DYNAMIC_DISPATCH(ScaleImpl)(alpha, n, x); }
void Attend(const float* q, const float* keys, const float* values, int64_t len, int64_t stride,
            int64_t head_dim, float scale, float* scores, float* out) {
  HWY_DYNAMIC_DISPATCH(AttendImpl)(q, keys, values, len, stride, head_dim, scale, scores, out);
}

}  // namespace loom::kernels
#endif  // HWY_ONCE
